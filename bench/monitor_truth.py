"""The monitor's replication lag against the truth, in the moments operators look (B5).

    .venv/bin/python -m bench.monitor_truth [--rate 1500] [--partitions 6] [--fault-seconds 30] [--clusters DIR]
                                            [--engine-run | --engine spark] [--faults LIST] [--json FILE]

Steady traffic into a fresh topic; `mirrorwatch mirror` and `mirrorwatch monitor` (monitor.interval_seconds 2) as
separate processes, as an operator runs them (or, with --engine-run, both in one `mirrorwatch run`; with --engine
spark, the link on the spark engine: local Spark, the real Kafka connector, a 0.5 s trigger). Then, one after
another, each with a recovery after it: the mirror SIGKILLed and restarted 3 s later, the mirror frozen (SIGSTOP,
its whole process group: Spark's JVM with its driver), the target broker SIGKILLed and restarted, the target broker
frozen (--faults picks some of them).

The truth is taken outside mirrorwatch: the producer's own acknowledgement time of every record, and a consumer
following the target that notes when each record arrives there. At a moment t, the true replication lag of a
partition is t minus the acknowledgement time of its oldest record acknowledged by t and not on the target by t (0
when there is none), in records the acknowledged records from that one on. Every figure the monitor serves states the
moment it describes (`observed_ms`); it is compared with the truth at that moment. Printed per phase: the median and
largest error in seconds (and records), samples that read 0 while the truth was above 2 s, samples without a figure,
and how old the served figure was when read (what a scrape sees), and the link group's Burrow-style status at the
phase's end with how long after the fault's removal it read OK for good (each recovery waits up to 60 s for it: a
windowed judgement of commits, measured, not timed). At the end every acknowledged record must be on the target.
Every process it starts is stopped.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from bench.common import exit_on_sigterm, stop_process
from mirrorwatch.config import load_config
from mirrorwatch.kafka import create_topics, new_admin
from mirrorwatch.local import LocalClusters
from mirrorwatch.processes import free_port
from mirrorwatch.wait import WaitTimeout, wait_until

__all__ = ["Phase", "TruthRun", "main", "run_truth"]

INTERVAL_S = 2.0  # monitor.interval_seconds, as in the incident report this benchmark answers
POLL_S = 0.25
LINK = "truth"
FOLLOWER_LATENCY_MS = 200  # the follower's fetch wait (20 ms), consume timeout (50 ms) and its own work, with margin
QUIET = {"log_level": 0}  # the harness's own clients: their complaints while a broker is down are expected
FAULTS = ("mirror-kill", "mirror-stop", "target-kill", "target-stop")
SPARK_TRIGGER_S = 0.5
# The spark driver reads its checkpoint's commit log every 0.25 s (mirror.spark_engine.CHECKPOINT_POLL_S) and then
# publishes: until then a committed batch is still the running one for what the engine can know.
SPARK_REPORT_MS = 500
STEADY_SPAN_S = 5.0  # caught up this long before the steady phase starts
# "Caught up" for the steady phase: every record acknowledged this long ago is on the target. A healthy python
# engine is within tens of ms; a micro-batch engine is behind by its trigger and a batch's duration (1.5 s seen
# alone, more beside the suite's other worker: CI never saw it caught up within 1 s for 5 s running, issue #40).
STEADY_WITHIN_S = {"python": 1.0, "spark": SPARK_TRIGGER_S + 2.0}
# From the engine's start to the steady phase, at most (the time it took is reported: `TruthRun.steady_after_s`)
START_WAIT_S = {"python": 120.0, "spark": 240.0}
# After a recovery, how long to wait for the link group's Burrow-style status to read OK again before the next
# phase (the time it took is measured and reported, never asserted: it is a windowed judgement of commits)
GROUP_OK_WAIT_S = 60.0
# A fault is removed only once the truth says it held the mirror back this far (and its hold time has passed): a
# 3 s mirror restart on a loaded machine may otherwise be over before a second of lag builds up, and the phase
# would judge nothing (issue #40). HELD_WAIT_S: how long the harness waits for that before it gives up.
HELD_S = 2.5
HELD_WAIT_S = 60.0
PEAK_STEP_MS = 50  # the truth's peak in a phase is read off its timeline at this step


@dataclass
class Phase:
    name: str
    started_ms: int
    events_ms: list[int] = field(default_factory=list)  # fault injected, fault removed
    alerts_fired: set[str] = field(default_factory=set)  # every alert seen firing during the phase (with --prometheus)
    alerts_at_end: set[str] = field(default_factory=set)  # those still firing when the phase ended
    group_statuses: list[str] = field(default_factory=list)  # the link group's Burrow status, once a second
    group_status_ms: list[int] = field(default_factory=list)  # when each of them was read
    # its partitions at WARN or worse when it was last read (what the status was judged on), for a failure to show
    group_detail: list[dict[str, Any]] = field(default_factory=list)
    ended_ms: int = 0  # when the next phase started (or the run ended)
    # the largest true lag at any moment of the phase, from the truth's own timeline (not only at the monitor's
    # samples: in one process the monitor is down with the mirror, and may serve again only once it caught up)
    truth_peak_seconds: float = 0.0

    def ok_after_seconds(self) -> float | None:
        """From the fault's removal to the link group's status reading OK for the rest of the phase (None: it did
        not end OK, or there was no fault)."""
        if len(self.events_ms) < 2 or not self.group_statuses or self.group_statuses[-1] != "OK":
            return None
        first_ok = len(self.group_statuses)
        while first_ok > 0 and self.group_statuses[first_ok - 1] == "OK":
            first_ok -= 1
        return max(0.0, (self.group_status_ms[first_ok] - self.events_ms[-1]) / 1000)


@dataclass
class Sample:
    poll_ms: int
    observed_ms: int  # the moment the figure describes (the latest of the partitions')
    seconds: float | None  # the link's lag: the largest of its partitions'
    records: int | None
    parts: list[tuple[int, int]] = field(default_factory=list)  # (partition, the moment its figure describes)
    unknown: list[dict[str, Any]] = field(default_factory=list)  # the partitions without a figure, as served
    truth_seconds: float = 0.0
    truth_records: int = 0
    # The truth's lower bound: records the follower noted within FOLLOWER_LATENCY_MS after the moment may have been
    # on the target at the moment (it notes them when its fetch returns). Figures between the two are exact.
    truth_low_seconds: float = 0.0
    # A micro-batch engine (spark) reports a batch only when it completes, and the batch writes as it goes: while one
    # runs, what it wrote is on the target but not yet reported. The most an honest figure can say then is the truth
    # when that batch started, aged by the time since (the batch's start and end are Spark's own write-ahead log:
    # the mtimes of `offsets/N` and `commits/N` in its checkpoint). None when no batch was running.
    running_batch_bound_seconds: float | None = None

    def error_s(self) -> float | None:
        """How far the served figure is from the truth, 0 within [truth_low_seconds, truth_seconds]."""
        if self.seconds is None:
            return None
        if self.seconds > self.truth_seconds:
            return self.seconds - self.truth_seconds
        return min(0.0, self.seconds - self.truth_low_seconds)


@dataclass
class TruthRun:
    phases: list[Phase]
    samples: list[Sample]
    acked: int
    missing_on_target: int
    steady_after_s: float = 0.0  # from the engine's start to the target caught up for STEADY_SPAN_S

    def phase_of(self, at_ms: int) -> Phase:
        starts = [p.started_ms for p in self.phases]
        return self.phases[max(0, bisect.bisect_right(starts, at_ms) - 1)]

    def judged(self) -> list[Sample]:
        """The samples describing a moment of a phase (not the start-up before the steady phase: there the engine
        may still be catching up with what was produced while it started)."""
        return [s for s in self.samples if self.phases and s.observed_ms >= self.phases[0].started_ms]

    def tolerance_s(self, sample: Sample) -> float:
        """1 s, and one collection interval more (plus the worker's status interval) just after a phase change."""
        near = any(0 <= sample.observed_ms - e <= (INTERVAL_S + 1.0) * 1000 for p in self.phases for e in p.events_ms)
        return 1.0 + (INTERVAL_S + 1.0 if near else 0.0)

    def is_outside(self, sample: Sample) -> bool:
        """Off the truth by more than the tolerance (see `tolerance_s`); above it, a micro-batch engine's figure is
        also within the tolerance of the bound its running batch sets (`Sample.running_batch_bound_seconds`)."""
        if sample.seconds is None:
            return False
        error = sample.error_s() or 0.0
        if abs(error) <= self.tolerance_s(sample):
            return False
        return not (self.is_held_by_running_batch(sample) and error > 0)

    def is_held_by_running_batch(self, sample: Sample) -> bool:
        bound = sample.running_batch_bound_seconds
        return (
            sample.seconds is not None
            and bound is not None
            and sample.seconds - sample.truth_seconds > self.tolerance_s(sample)
            and sample.seconds <= bound + self.tolerance_s(sample)
        )

    def report(self) -> list[dict[str, Any]]:
        rows = []
        for phase in self.phases:
            mine = [s for s in self.judged() if self.phase_of(s.observed_ms) is phase]
            known = [s for s in mine if s.seconds is not None]
            errors = [abs(e) for s in known if (e := s.error_s()) is not None]
            record_errors = [abs(s.records - s.truth_records) for s in known if s.records is not None]
            rows.append(
                {
                    "phase": phase.name,
                    "samples": len(mine),
                    "truth_max_seconds": max((s.truth_seconds for s in mine), default=0.0),
                    "truth_peak_seconds": phase.truth_peak_seconds,
                    "error_median_seconds": statistics.median(errors) if errors else None,
                    "error_max_seconds": max(errors, default=None),
                    "error_median_records": statistics.median(record_errors) if record_errors else None,
                    "error_max_records": max(record_errors, default=None),
                    "outside_tolerance": sum(1 for s in known if self.is_outside(s)),
                    "held_by_running_batch": sum(1 for s in known if self.is_held_by_running_batch(s)),
                    "zero_while_behind": sum(
                        1 for s in mine if s.truth_low_seconds > 2 and (s.seconds == 0 or s.records == 0)
                    ),
                    "no_figure": len(mine) - len(known),
                    "served_age_max_seconds": max(((s.poll_ms - s.observed_ms) / 1000 for s in mine), default=None),
                    # the longest the monitor went without a new figure (a round held up shows here)
                    "figure_gap_max_seconds": max(
                        ((b.observed_ms - a.observed_ms) / 1000 for a, b in itertools.pairwise(mine)), default=None
                    ),
                    "alerts_fired": sorted(phase.alerts_fired),
                    "alerts_at_end": sorted(phase.alerts_at_end),
                    "events_ms": list(phase.events_ms),
                    "group_statuses": sorted(set(phase.group_statuses)),
                    "group_status_at_end": phase.group_statuses[-1] if phase.group_statuses else None,
                    "group_ok_after_seconds": phase.ok_after_seconds(),
                    "group_detail_at_end": phase.group_detail,
                }
            )
        return rows


class _Truth:
    """Acknowledgement times at the source and arrival times at the target, per partition and sequence number."""

    def __init__(self, partitions: int) -> None:
        self.acked_ms: list[list[int]] = [[] for _ in range(partitions)]  # by sequence: the producer acks in order
        self.arrived_ms: list[dict[int, int]] = [{} for _ in range(partitions)]
        self.lock = threading.Lock()
        self._prefix: list[list[int]] = []
        self._arrived_prefix = [0] * partitions  # sequences below are all on the target

    def arrived_prefix(self, partition: int) -> int:
        arrived, n = self.arrived_ms[partition], self._arrived_prefix[partition]
        while n in arrived:
            n += 1
        self._arrived_prefix[partition] = n
        return n

    def freeze(self) -> None:
        """For each partition, when every record up to a sequence had arrived (non-decreasing in the sequence)."""
        self._prefix = []
        for p, acked in enumerate(self.acked_ms):
            running, prefix = 0, []
            for seq in range(len(acked)):
                running = max(running, self.arrived_ms[p].get(seq, 2**62))
                prefix.append(running)
            self._prefix.append(prefix)

    def at(self, partition: int, t_ms: int, noted_late_ms: int = 0) -> tuple[float, int]:
        """The true lag of a partition at t: seconds and records. The follower notes a record's arrival a moment after
        it is on the target; with `noted_late_ms`, records noted up to that long after t count as there by t (the
        lower bound of the truth)."""
        acked, prefix = self.acked_ms[partition], self._prefix[partition]
        first_missing = bisect.bisect_right(prefix, t_ms + noted_late_ms)  # the first sequence not on the target by t
        acked_by_t = bisect.bisect_right(acked, t_ms)
        if first_missing >= acked_by_t:
            return 0.0, 0
        return (t_ms - acked[first_missing]) / 1000, acked_by_t - first_missing

    def behind_s(self, now_ms: int) -> float:
        """The true lag now, while the run goes on: the oldest acknowledged record not yet on the target."""
        oldest = [
            acked[first]
            for p, acked in enumerate(self.acked_ms)
            if (first := self.arrived_prefix(p)) < len(acked) and acked[first] <= now_ms
        ]
        return (now_ms - min(oldest)) / 1000 if oldest else 0.0

    def peak(self, from_ms: int, to_ms: int) -> float:
        """The largest true lag between two moments (after `freeze`), read every PEAK_STEP_MS."""
        return max(
            (self.at(p, t)[0] for t in range(from_ms, to_ms + 1, PEAK_STEP_MS) for p in range(len(self.acked_ms))),
            default=0.0,
        )

    def missing(self) -> int:
        return sum(
            1 for p, acked in enumerate(self.acked_ms) for seq in range(len(acked)) if seq not in self.arrived_ms[p]
        )


def spark_batches(checkpoint: Path) -> list[tuple[int, int]]:
    """Each micro-batch of a Spark query as (started, ended) in ms, from its checkpoint's write-ahead log: `offsets/N`
    is written when batch N is planned, `commits/N` when it completed (a batch still running ends at 2**62)."""

    def mtimes(folder: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for path in (checkpoint / folder).glob("[0-9]*"):
            if path.name.isdigit():
                out[int(path.name)] = path.stat().st_mtime_ns // 1_000_000
        return out

    started, ended = mtimes("offsets"), mtimes("commits")
    return [(at, ended.get(n, 2**62)) for n, at in sorted(started.items())]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _poll_monitor(url: str, topic: str, samples: list[Sample], stop: threading.Event) -> None:
    last_observed = None
    while not stop.wait(POLL_S):
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                link = json.load(response)
        except (OSError, ValueError):
            continue
        mine = [p for p in link["partitions"] if p["topic"] == topic]
        if not mine or any(p.get("observed_ms") is None for p in mine):
            continue
        observed = max(p["observed_ms"] for p in mine)
        key = tuple((p["partition"], p["observed_ms"]) for p in mine)
        if key == last_observed:
            continue
        last_observed = key
        seconds = [p["replication_lag_seconds"] for p in mine]
        records = [p["replication_lag_records"] for p in mine]
        samples.append(
            Sample(
                _now_ms(),
                observed,
                None if any(s is None for s in seconds) else max(seconds),
                None if any(r is None for r in records) else sum(records),
                [(p["partition"], p["observed_ms"]) for p in mine],  # the truth is taken at each one's moment
                [p for p in mine if p["replication_lag_seconds"] is None or p["replication_lag_records"] is None],
            )
        )


@contextlib.contextmanager
def _process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The process runs in the log's directory (the run's own): a Spark driver writes artifacts/ where it runs."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=log.parent
        )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGCONT)
        stop_process(process, timeout_s=60)


@dataclass
class _Traffic:
    """Where the truth harness produces and reads: the topic on both clusters and its partitions."""

    source: str  # bootstrap servers
    target: str
    topic: str
    partitions: int


def _produce(traffic: _Traffic, rate: int, truth: _Truth, stop: threading.Event) -> None:
    producer = Producer(
        {"bootstrap.servers": traffic.source, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    )
    sent = [0] * traffic.partitions

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            raise RuntimeError(f"the source refused a record: {error}")
        partition = message.partition()
        assert partition is not None
        with truth.lock:
            truth.acked_ms[partition].append(_now_ms())

    started, n = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while n < due:
            p = n % traffic.partitions
            producer.produce(traffic.topic, value=f"{p}:{sent[p]}".encode(), partition=p, on_delivery=delivered)
            sent[p] += 1
            n += 1
        producer.poll(0.001)
    producer.flush(60)


def _follow(traffic: _Traffic, truth: _Truth, stop: threading.Event) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": traffic.target,
            "group.id": "mirrorwatch-truth",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(traffic.topic, p, 0) for p in range(traffic.partitions)])
    try:
        while not stop.is_set():
            for message in consumer.consume(num_messages=5000, timeout=0.05):
                if message.error() is not None:
                    continue
                now = _now_ms()
                p, _, seq = (message.value() or b"").decode().partition(":")
                with truth.lock:
                    truth.arrived_ms[int(p)].setdefault(int(seq), now)
    finally:
        consumer.close()


class _Harness:
    """The processes, the traffic and the phases of one truth run."""

    def __init__(
        self,
        clusters: LocalClusters,
        work: Path,
        *,
        partitions: int,
        one_process: bool,
        engine: str,
        port: int | None,
    ) -> None:
        self.clusters, self.work, self.one_process, self.engine_name = clusters, work, one_process, engine
        config = load_config(clusters.config_path)
        self.config = config
        topic = f"bench.truth-{os.getpid()}-{time.time_ns() % 10**9}"
        create_topics(
            new_admin(config.clusters["source"], "source"), {topic: partitions}, config={"retention.ms": "-1"}
        )
        self.traffic = _Traffic(
            config.clusters["source"].bootstrap_servers, config.clusters["target"].bootstrap_servers, topic, partitions
        )
        self.port = port or free_port()
        self.group = f"{topic}-mirror"
        link: dict[str, Any] = {
            "name": LINK,
            "source": "source",
            "target": "target",
            "topics": {"include": [topic.replace(".", "\\.")]},
            "group_id": self.group,
        }
        if engine == "spark":
            link["engine"] = "spark"
            link["spark"] = {"trigger_interval_seconds": SPARK_TRIGGER_S, "checkpoint_dir": str(work / "checkpoint")}
        document = {
            "clusters": {a: {"bootstrap_servers": c.bootstrap_servers} for a, c in config.clusters.items()},
            "links": [link],
            "monitor": {"interval_seconds": INTERVAL_S},
            "canary": {"enabled": False, "topic": f"mirrorwatch.canary.bench-{os.getpid()}"},
            "http": {"host": "127.0.0.1", "port": self.port},
            "state_dir": str(work / "state"),
        }
        self.config_path = work / "truth.yaml"
        self.config_path.write_text(yaml.safe_dump(document, sort_keys=False))
        self.truth = _Truth(partitions)
        self.checkpoint = work / "checkpoint" if engine == "spark" else None
        self.samples: list[Sample] = []
        self.phases: list[Phase] = []
        self.stack = contextlib.ExitStack()
        self.engine: subprocess.Popen[bytes] | None = None
        self.monitor: subprocess.Popen[bytes] | None = None  # None when the engine's process monitors too

    def command(self, name: str) -> list[str]:
        return [sys.executable, "-m", "mirrorwatch.cli", name, "--config", str(self.config_path)]

    def start_engine(self) -> None:
        """The process that mirrors: `mirrorwatch mirror`, or `mirrorwatch run` when all runs in one."""
        name = "run" if self.one_process else "mirror"
        command = self.command(name) + (["--link", LINK] if self.engine_name == "spark" else [])
        self.engine = self.stack.enter_context(_process(command, self.work / f"{name}.log"))

    def phase(self, name: str, progress: Callable[[str], None]) -> Phase:
        progress(f"truth: {name}")
        self.end_phase()
        self.phases.append(Phase(name, _now_ms()))
        return self.phases[-1]

    def end_phase(self) -> None:
        if self.phases and not self.phases[-1].ended_ms:
            self.phases[-1].ended_ms = _now_ms()

    def wait_held(self, name: str) -> None:
        """Until the fault has held the mirror back HELD_S by the truth (the precondition its phase judges on)."""

        def held() -> bool:
            with self.truth.lock:
                return self.truth.behind_s(_now_ms()) >= HELD_S

        try:
            wait_until(held, timeout_s=HELD_WAIT_S, interval_s=0.1, description=f"{name} to hold the mirror back")
        except WaitTimeout:
            raise WaitTimeout(
                f"{name}: the mirror was never {HELD_S:g} s behind by the truth ({self.missing_summary()})",
                HELD_WAIT_S,
                False,
            ) from None

    def watch_group(self, stop: threading.Event) -> None:
        """The Burrow-style status of the link's own consumer group, as the monitor's Burrow API serves it."""
        url = f"http://127.0.0.1:{self.port}/v3/kafka/source/consumer/{self.group}/status"
        while not stop.wait(1.0):
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    body = json.load(response)["status"]
                status = str(body["status"])
                detail = [
                    {
                        "partition": p["partition"],
                        "status": p["status"],
                        "complete": p["complete"],
                        "start": p["start"],
                        "end": p["end"],
                        "current_lag": p["current_lag"],
                    }
                    for p in body.get("partitions", [])
                ]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if self.phases:
                self.phases[-1].group_statuses.append(status)
                self.phases[-1].group_status_ms.append(_now_ms())
                self.phases[-1].group_detail = detail

    def watch_alerts(self, firing: Callable[[], set[str]], stop: threading.Event) -> None:
        while not stop.wait(1.0):
            try:
                now = firing()
            except (OSError, ValueError):
                continue
            if self.phases:
                self.phases[-1].alerts_fired |= now
                self.phases[-1].alerts_at_end = now

    def caught_up(self, within_s: float = 1.0) -> bool:
        """Every record the source acknowledged more than `within_s` ago is on the target (traffic goes on, so some
        are always on their way)."""
        cutoff = _now_ms() - int(within_s * 1000)
        with self.truth.lock:
            return all(
                self.truth.arrived_prefix(p) >= bisect.bisect_right(acked, cutoff)
                for p, acked in enumerate(self.truth.acked_ms)
            )

    def wait_steady(self, span_s: float, timeout_s: float) -> None:
        """Until the target has been caught up (`caught_up` within the engine's STEADY_WITHIN_S) at every check for
        `span_s`."""
        since = [time.monotonic()]
        within_s = STEADY_WITHIN_S[self.engine_name]

        def steady() -> bool:
            with self.truth.lock:  # and something arrived: before any record is old enough, all are "on the target"
                started = all(self.truth.arrived_prefix(p) > 0 for p in range(len(self.truth.acked_ms)))
            if not started or not self.caught_up(within_s):
                since[0] = time.monotonic()
            return time.monotonic() - since[0] >= span_s

        description = f"the target caught up within {within_s:g} s for {span_s:g} s"
        try:
            wait_until(steady, timeout_s=timeout_s, interval_s=0.2, description=description)
        except WaitTimeout:  # what is missing when the wait gave up, not when it began
            raise WaitTimeout(f"{description} ({self.missing_summary()})", timeout_s, False) from None

    def recover(self, recover_s: float) -> None:
        try:
            wait_until(self.caught_up, timeout_s=180, interval_s=0.2, description="the target to catch up")
        except WaitTimeout:
            raise WaitTimeout(f"the target to catch up ({self.missing_summary()})", 180, False) from None
        time.sleep(recover_s)
        self.wait_group_ok()
        self.check_alive()

    def wait_group_ok(self) -> None:
        """Until the link group's status, read after now, is OK (at most GROUP_OK_WAIT_S; the report says what it
        was at the phase's end and when it became OK)."""
        if not self.phases:
            return
        phase, since = self.phases[-1], _now_ms()

        def ok() -> bool:
            return bool(phase.group_statuses) and phase.group_status_ms[-1] > since and phase.group_statuses[-1] == "OK"

        with contextlib.suppress(WaitTimeout):
            wait_until(ok, timeout_s=GROUP_OK_WAIT_S, interval_s=0.2, description="the link group to read OK")

    def check_alive(self) -> None:
        check_alive(
            {"monitor": self.monitor, "engine": self.engine}, self.phases[-1].name if self.phases else "the start"
        )

    def missing_summary(self) -> str:
        with self.truth.lock:
            rows = []
            for p, acked in enumerate(self.truth.acked_ms):
                missing = [seq for seq in range(len(acked)) if seq not in self.truth.arrived_ms[p]]
                if missing:
                    rows.append(f"partition {p}: {len(missing)} of {len(acked)} missing, first {missing[:5]}")
            return "; ".join(rows) or "nothing missing"

    def fill_in_truth(self) -> TruthRun:
        truth = self.truth
        with truth.lock:
            truth.freeze()
            for phase in self.phases:
                phase.truth_peak_seconds = truth.peak(phase.started_ms, phase.ended_ms or _now_ms())
            for sample in self.samples:
                at = [truth.at(p, observed) for p, observed in sample.parts]
                sample.truth_seconds = max(s for s, _ in at)
                sample.truth_records = sum(r for _, r in at)
                sample.truth_low_seconds = max(
                    truth.at(p, observed, FOLLOWER_LATENCY_MS)[0] for p, observed in sample.parts
                )
            batches = spark_batches(self.checkpoint) if self.checkpoint is not None else []
            for sample in self.samples:
                started = [start for start, end in batches if start <= sample.observed_ms < end + SPARK_REPORT_MS]
                if started:
                    start = min(started)
                    at_start = max(truth.at(p, start)[0] for p, _ in sample.parts)
                    sample.running_batch_bound_seconds = at_start + (sample.observed_ms - start) / 1000
            return TruthRun(self.phases, self.samples, sum(len(a) for a in truth.acked_ms), truth.missing())

    def drop_topic(self) -> None:
        for alias in ("source", "target"):  # a run leaves no topic behind
            with contextlib.suppress(Exception):
                admin = new_admin(self.config.clusters[alias], alias)
                admin.delete_topics([self.traffic.topic])[self.traffic.topic].result(30)


def check_alive(processes: dict[str, subprocess.Popen[bytes] | None], phase: str) -> None:
    """Every process outlived the phase: one that died (a native crash says nothing in its own log) would otherwise
    show only as stale figures and statuses."""
    for name, process in processes.items():
        code = None if process is None else process.poll()
        if code is not None:
            how = signal.Signals(-code).name if code < 0 else f"exit code {code}"
            raise RuntimeError(f"the {name} process ended ({how}) during {phase!r}; its log says the rest")


Fault = tuple[str, Callable[[], object], Callable[[], object], float]  # name, inject, remove, how long it holds


def _fault_plan(h: _Harness, faults: tuple[str, ...], fault_s: float, tie_to_parent: bool) -> list[Fault]:
    def signal_engine(signum: int) -> Callable[[], None]:
        def send() -> None:  # to the process group: Spark's JVM is the driver's child
            assert h.engine is not None
            os.killpg(h.engine.pid, signum)
            if signum == signal.SIGKILL:
                h.engine.wait(30)

        return send

    clusters = h.clusters
    every: dict[str, Fault] = {
        "mirror-kill": ("mirror SIGKILL, restarted 3 s later", signal_engine(signal.SIGKILL), h.start_engine, 3),
        "mirror-stop": (
            f"mirror SIGSTOP {fault_s:g} s",
            signal_engine(signal.SIGSTOP),
            signal_engine(signal.SIGCONT),
            fault_s,
        ),
        "target-kill": (
            f"target broker SIGKILL, restarted after {fault_s:g} s",
            lambda: clusters.kill("target"),
            lambda: clusters.up(["target"], tie_to_parent=tie_to_parent),
            fault_s,
        ),
        "target-stop": (
            f"target broker SIGSTOP {fault_s:g} s",
            lambda: clusters.freeze("target"),
            lambda: clusters.thaw("target"),
            fault_s,
        ),
    }
    return [every[name] for name in FAULTS if name in faults]


def run_truth(
    clusters: LocalClusters,
    work: Path,
    *,
    rate: int,
    partitions: int,
    steady_s: float,
    fault_s: float,
    recover_s: float,
    one_process: bool = False,
    engine: str = "python",
    faults: tuple[str, ...] = FAULTS,
    tie_to_parent: bool = False,
    progress: Callable[[str], None] = print,
    port: int | None = None,
    firing: Callable[[], set[str]] | None = None,
) -> TruthRun:
    """Run every phase once (see the module docstring) and return the samples with the truth filled in. `port`: the
    monitor's HTTP port (chosen here when None); `firing`: the alerts firing now (a Prometheus scraping that port),
    polled every second and recorded per phase; `engine`: "python" or "spark"; `faults`: which of FAULTS, in that
    order."""
    unknown = set(faults) - set(FAULTS)
    if unknown or (one_process and "mirror-stop" in faults) or (one_process and engine != "python"):
        raise ValueError(
            f"faults {sorted(unknown)} unknown (choose from {FAULTS})"
            if unknown
            else "in one process a mirror freeze freezes the monitor too, and `run` carries python links only"
        )
    h = _Harness(clusters, work, partitions=partitions, one_process=one_process, engine=engine, port=port)
    stop_traffic, stop_reading = threading.Event(), threading.Event()
    url = f"http://127.0.0.1:{h.port}/mirror/links/{LINK}"
    producer = threading.Thread(target=_produce, args=(h.traffic, rate, h.truth, stop_traffic))
    readers = [
        threading.Thread(target=_follow, args=(h.traffic, h.truth, stop_reading)),
        threading.Thread(target=_poll_monitor, args=(url, h.traffic.topic, h.samples, stop_reading)),
    ]
    readers.append(threading.Thread(target=h.watch_group, args=(stop_reading,)))
    if firing is not None:
        readers.append(threading.Thread(target=h.watch_alerts, args=(firing, stop_reading)))
    with h.stack:
        if not one_process:
            h.monitor = h.stack.enter_context(_process(h.command("monitor"), work / "monitor.log"))
        h.start_engine()
        engine_started = time.monotonic()
        for thread in (producer, *readers):
            thread.start()
        try:
            # The target caught up, and for a while: a freshly started engine (Spark's first micro-batches, with its
            # JVM still warming up) is not yet the steady state the steady phase stands for
            h.wait_steady(STEADY_SPAN_S, START_WAIT_S[engine])
            steady_after_s = time.monotonic() - engine_started
            # The steady phase starts once the monitor has a figure for every partition (at start, a partition the
            # worker has not read yet, with no commit, has no known position: unknown, rightly).
            wait_until(
                lambda: bool(h.samples) and not h.samples[-1].unknown and len(h.samples[-1].parts) == partitions,
                timeout_s=60,
                interval_s=0.2,
                description="the monitor's first figures for every partition",
            )
            h.phase("steady", progress)
            time.sleep(steady_s)

            for name, inject, remove, hold_s in _fault_plan(h, faults, fault_s, tie_to_parent):
                current = h.phase(name, progress)
                inject()
                current.events_ms.append(_now_ms())
                try:
                    time.sleep(hold_s)
                    h.wait_held(name)
                finally:
                    remove()
                current.events_ms.append(_now_ms())
                h.recover(recover_s)
        finally:
            h.end_phase()
            stop_traffic.set()
            producer.join(timeout=90)
            with contextlib.suppress(Exception):
                wait_until(
                    lambda: h.caught_up(0.0),
                    timeout_s=120,
                    interval_s=0.2,
                    description="the target to catch up at the end",
                )
            stop_reading.set()
            for thread in readers:
                thread.join(timeout=30)
            h.drop_topic()
    run = h.fill_in_truth()
    run.steady_after_s = steady_after_s
    return run


def print_report(run: TruthRun) -> None:
    print(
        "| phase | samples | truth peak / at samples | error median / max (s) | error median / max (records) "
        "| outside 1 s* | 0 while > 2 s behind | no figure | served figure age max | group status at end (OK after) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    for row in run.report():
        print(
            f"| {row['phase']} | {row['samples']} | {row['truth_peak_seconds']:.1f} / {row['truth_max_seconds']:.1f} s "
            f"| {num(row['error_median_seconds'], '.2f')} / {num(row['error_max_seconds'], '.2f')} "
            f"| {num(row['error_median_records'], '.0f')} / {num(row['error_max_records'], '.0f')} "
            f"| {row['outside_tolerance']} | {row['zero_while_behind']} | {row['no_figure']} "
            f"| {num(row['served_age_max_seconds'], '.1f')} s "
            f"| {row['group_status_at_end']} ({num(row['group_ok_after_seconds'], '.1f')} s) |"
        )
    print(
        f"\n{run.acked} records acknowledged by the source, {run.missing_on_target} missing on the target; the "
        f"engine was steady {run.steady_after_s:.1f} s after its start. "
        f"*outside 1 s, or 1 s + {INTERVAL_S + 1:g} s within {INTERVAL_S + 1:g} s of a phase change."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1500, help="records/s into the source [1500]")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of the topic [6]")
    parser.add_argument("--steady-seconds", type=float, default=30, help="the steady phase [30]")
    parser.add_argument("--fault-seconds", type=float, default=30, help="how long each freeze or outage lasts [30]")
    parser.add_argument("--recover-seconds", type=float, default=10, help="after catching up, before the next [10]")
    parser.add_argument("--engine-run", action="store_true", help="mirror and monitor in one `mirrorwatch run`")
    parser.add_argument("--engine", choices=("python", "spark"), default="python", help="the link's engine [python]")
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"comma-separated, from {','.join(FAULTS)} [all; --engine-run leaves mirror-stop out]",
    )
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--logs", type=Path, help="keep the processes' logs and config in this directory")
    args = parser.parse_args(argv)
    faults = tuple(f for f in FAULTS if f in args.faults.split(","))
    if args.engine_run:
        faults = tuple(f for f in faults if f != "mirror-stop")
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp:
        work = (args.logs or Path(tmp)).resolve()  # absolute: the processes run in it
        work.mkdir(parents=True, exist_ok=True)
        clusters = LocalClusters(args.clusters or Path(tmp) / "clusters", progress=lambda _line: None)
        owned = args.clusters is None
        if owned:
            clusters.up(tie_to_parent=True)
        try:
            run = run_truth(
                clusters,
                work,
                rate=args.rate,
                partitions=args.partitions,
                steady_s=args.steady_seconds,
                fault_s=args.fault_seconds,
                recover_s=args.recover_seconds,
                one_process=args.engine_run,
                engine=args.engine,
                faults=faults,
                tie_to_parent=owned,
            )
        finally:
            if owned:
                clusters.down()
    print_report(run)
    if args.json:
        samples = [
            {
                "phase": run.phase_of(x.observed_ms).name,
                "poll_ms": x.poll_ms,
                "observed_ms": x.observed_ms,
                "seconds": x.seconds,
                "truth_seconds": x.truth_seconds,
                "records": x.records,
                "truth_records": x.truth_records,
                "unknown": x.unknown,
            }
            for x in run.samples
        ]
        args.json.write_text(
            json.dumps(
                {"phases": run.report(), "acked": run.acked, "missing": run.missing_on_target, "samples": samples},
                indent=2,
            )
            + "\n"
        )
    return 0 if run.missing_on_target == 0 else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
