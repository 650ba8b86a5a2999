"""B5's harness: the processes, the traffic, the faults and the phases of one truth run (see bench.monitor_truth)."""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.common import stop_process
from bench.netns import ClientHost, NetHost
from bench.truth_faults import FAULTS, NET_FAULTS, SLOW_KBIT, Fault, check_faults, fault_plan
from bench.truth_judge import INTERVAL_S, Phase, Sample, Truth, TruthRun
from bench.truth_reads import CANNOT_SEE, group_status, poll_monitor
from bench.truth_traffic import Traffic, agent, in_process
from kernel.config import load_config
from kernel.kafka import create_topics, new_admin
from kernel.processes import free_port
from kernel.wait import WaitTimeout, wait_until
from localkafka.local import LocalClusters

__all__ = ["CANNOT_SEE", "FAULTS", "HELD_S", "LINK", "NET_FAULTS", "SLOW_KBIT", "run_truth", "spark_batches"]

LINK = "truth"
SPARK_TRIGGER_S = 0.5
# The spark driver reads its checkpoint's commit log every 0.25 s (mirror.spark_engine.CHECKPOINT_POLL_S) and then
# publishes: until then a committed batch is still the running one for what the engine can know.
SPARK_REPORT_MS = 500
STEADY_SPAN_S = 5.0  # caught up this long before the steady phase starts
# "Caught up" for the steady phase: every record acknowledged this long ago is on the target. A healthy python
# engine is within tens of ms; a micro-batch engine is behind by its trigger and a batch's duration (1.5 s seen
# alone, more beside the suite's other worker: CI never saw it caught up within 1 s for 5 s running, issue #40).
# Exactly-once: a transaction (offset_commit_interval_ms, 5 s by default) is what the target's read_committed readers
# see at once, so a healthy link is up to that far behind them.
STEADY_WITHIN_S = {"python": 1.0, "spark": SPARK_TRIGGER_S + 2.0, "exactly-once": 5.0 + 1.0}
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
LOST = (f"link {LINK}: lost ", f"link {LINK}: revoked ")  # the python engine's log when its group takes partitions
FLEET_HOST = "mirrorwatch-fleet-"  # a fleet worker's host name, then its number
SETTLED_S = 10 * INTERVAL_S  # the monitor's window (10 commits observed, one an interval)


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
        delivery: str = "at-least-once",
    ) -> None:
        self.clusters, self.work, self.one_process, self.engine_name = clusters, work, one_process, engine
        self.delivery = delivery
        config = load_config(clusters.config_path)
        self.config = config
        topic = f"bench.truth-{os.getpid()}-{time.time_ns() % 10**9}"
        create_topics(
            new_admin(config.clusters["source"], "source"), {topic: partitions}, config={"retention.ms": "-1"}
        )
        self.traffic = Traffic(
            config.clusters["source"].bootstrap_servers, config.clusters["target"].bootstrap_servers, topic, partitions
        )
        self.port = port or free_port()
        self.http = f"http://127.0.0.1:{self.port}"  # the monitor's API, as this host reaches it
        self.group = f"{topic}-mirror"
        link: dict[str, Any] = {
            "name": LINK,
            "source": "source",
            "target": "target",
            "topics": {"include": [topic.replace(".", "\\.")]},
            "group_id": self.group,
            "delivery": delivery,
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
        self.truth = Truth(partitions)
        self.checkpoint = work / "checkpoint" if engine == "spark" else None
        self.samples: list[Sample] = []
        self.phases: list[Phase] = []
        self.stack = contextlib.ExitStack()
        self.engine: subprocess.Popen[bytes] | None = None
        self.monitor: subprocess.Popen[bytes] | None = None  # None when the engine's process monitors too
        self.engine_prefix: list[str] = []  # `ip netns exec NAME` when the engine runs on a host of its own
        self.monitor_prefix: list[str] = []  # the same for the monitor
        # A fleet (issue #45): one `mirrorwatch mirror` per host, each with a state directory and a host name of its
        # own; `engine` is the first one's (the one the mirror faults hit), `others` the rest.
        self.fleet: list[ClientHost] = []
        self.others: list[subprocess.Popen[bytes]] = []
        self.lost_before = 0  # the engine's "lost"/"revoked" log lines when the phase started

    def command(self, name: str) -> list[str]:
        return [sys.executable, "-m", "mirrorwatch.cli", name, "--config", str(self.config_path)]

    def start_engine(self) -> None:
        """The process that mirrors: `mirrorwatch mirror`, or `mirrorwatch run` when all runs in one; in a fleet, the
        first worker (restarted alone after its SIGKILL)."""
        if self.fleet:
            self.engine = self.start_worker(0)
            return
        name = "run" if self.one_process else "mirror"
        command = self.command(name) + (["--link", LINK] if self.engine_name == "spark" else [])
        self.engine = self.stack.enter_context(_process([*self.engine_prefix, *command], self.work / f"{name}.log"))

    def place_monitor(self, host: ClientHost) -> None:
        """The monitor on a host of its own: its API on the host's path home (bench.netns.ClientHost.home)."""
        address = host.home()
        document = yaml.safe_load(self.config_path.read_text())
        document["http"]["host"] = address
        self.config_path.write_text(yaml.safe_dump(document, sort_keys=False))
        self.http = f"http://{address}:{self.port}"
        self.monitor_prefix = ["ip", "netns", "exec", host.name]

    def start_worker(self, index: int) -> subprocess.Popen[bytes]:
        """Worker `index` of a fleet on its host (`ip netns exec`, its own UTS namespace and host name: the monitor
        knows it only through the progress topic, as a worker on another machine) with its own state directory."""
        document = yaml.safe_load(self.config_path.read_text())
        document["state_dir"] = str(self.work / f"state-{index}")
        config = self.work / f"truth-worker-{index}.yaml"
        config.write_text(yaml.safe_dump(document, sort_keys=False))
        named = ["unshare", "--uts", "sh", "-c", f'hostname {FLEET_HOST}{index} && exec "$@"', "sh"]
        command = [*named, sys.executable, "-m", "mirrorwatch.cli", "mirror", "--config", str(config)]
        prefix = ["ip", "netns", "exec", self.fleet[index].name]
        return self.stack.enter_context(_process([*prefix, *command], self.work / f"mirror-{index}.log"))

    def phase(self, name: str, progress: Callable[[str], None]) -> Phase:
        progress(f"truth: {name}")
        self.end_phase()
        self.phases.append(Phase(name, _now_ms()))
        return self.phases[-1]

    def end_phase(self) -> None:
        if self.phases and not self.phases[-1].ended_ms:
            self.phases[-1].ended_ms = _now_ms()
            self.phases[-1].engine_lost_partitions = self.engine_log_count(LOST) - self.lost_before
        self.lost_before = self.engine_log_count(LOST)

    def engine_log_count(self, words: tuple[str, ...]) -> int:
        """Lines of the engine's log with any of `words` (its log is the run's own)."""
        name = "run" if self.one_process else "mirror"
        count = 0
        for path in self.work.glob(f"{name}*.log"):  # a fleet's: mirror-0.log, mirror-1.log, ...
            with path.open(encoding="utf-8", errors="replace") as log:
                count += sum(1 for line in log if any(w in line for w in words))
        return count

    def hold(self, seconds: float) -> float:
        """Wait `seconds`; the truth's largest lag meanwhile (in a fleet the group hands a frozen worker's partitions
        to the others after a session timeout: the lag a fault made may be gone again before it is removed)."""
        peak, until = 0.0, time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            with self.truth.lock:
                peak = max(peak, self.truth.behind_s(_now_ms()))
            time.sleep(min(0.1, left))
        return peak

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
        """The Burrow-style status of the link's own consumer group, as the monitor's Burrow API serves it (CANNOT_SEE
        when it answers that it cannot see the source), and whether the monitor sees the target, once a second."""
        url = f"{self.http}/v3/kafka/source/consumer/{self.group}/status"
        while not stop.wait(1.0):
            read = group_status(url)
            if read is None and self.phases:
                self.phases[-1].group_unanswered_ms.append(_now_ms())
            elif read is not None and self.phases:
                self.phases[-1].group_statuses.append(read[0])
                self.phases[-1].group_largest.append(read[2])
                self.phases[-1].group_status_ms.append(_now_ms())
                if read[1] is not None:
                    self.phases[-1].group_detail = read[1]
            self.note_target_up()

    def run_fault(self, fault: Fault, progress: Callable[[str], None], recover_s: float) -> None:
        """Its phase: inject, hold (and until it held the mirror back), remove, recover."""
        current = self.phase(fault.name, progress)
        fault.inject()
        current.events_ms.append(_now_ms())
        try:
            peak = self.hold(fault.hold_s)
            if fault.holds_mirror and not fault.behind_after_removal and peak < HELD_S:
                self.wait_held(fault.name)
        finally:
            fault.remove()
        current.events_ms.append(_now_ms())
        if fault.behind_after_removal:
            self.wait_held(fault.name)
        if not fault.holds_mirror:
            self.wait_target_up()
        self.recover(recover_s)

    def wait_target_up(self) -> None:
        """After a fault of the monitor's own: until it says it sees the target again (at most GROUP_OK_WAIT_S; how
        long it took is in the phase's `target_up` readings)."""
        with contextlib.suppress(WaitTimeout):
            wait_until(
                lambda: bool(self.phases[-1].target_up) and self.phases[-1].target_up[-1][1],
                timeout_s=GROUP_OK_WAIT_S,
                interval_s=0.2,
                description="the monitor to see the target again",
            )

    def note_target_up(self) -> None:
        """Whether the monitor says it sees the target (`mirrorwatch_cluster_up`), with the moment it was read."""
        try:
            with urllib.request.urlopen(f"{self.http}/metrics", timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return
        found = re.search(r'^mirrorwatch_cluster_up\{cluster="target"\} (\S+)$', text, re.MULTILINE)
        if found is not None and self.phases:
            self.phases[-1].target_up.append((_now_ms(), float(found.group(1)) == 1.0))

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
        within_s = STEADY_WITHIN_S["exactly-once" if self.delivery == "exactly-once" else self.engine_name]

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

    def wait_group_settled(self) -> None:
        """A fleet's start: its workers join one after another and the group hands partitions over while they do,
        which the link group's window of commits remembers (Burrow's WARN: a lag that grew across it). The steady
        phase starts once the group has read OK for a whole window since (`SETTLED_S`)."""
        url = f"{self.http}/v3/kafka/source/consumer/{self.group}/status"
        since = [time.monotonic()]

        def settled() -> bool:
            read = group_status(url)
            if read is None or read[0] != "OK":
                since[0] = time.monotonic()
            return time.monotonic() - since[0] >= SETTLED_S

        wait_until(settled, timeout_s=180, interval_s=1.0, description="the fleet's group to settle")

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
        workers = {f"worker {i + 1}": p for i, p in enumerate(self.others, start=1)}
        check_alive(
            {"monitor": self.monitor, "engine": self.engine, **workers},
            self.phases[-1].name if self.phases else "the start",
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
                truth.judge(sample)
            batches = spark_batches(self.checkpoint) if self.checkpoint is not None else []
            for sample in self.samples:
                started = [start for start, end in batches if start <= sample.observed_ms < end + SPARK_REPORT_MS]
                if started:
                    start = min(started)
                    at_start = max(truth.at(p, start)[0] for p, _ in sample.parts)
                    sample.running_batch_bound_seconds = at_start + (sample.observed_ms - start) / 1000
            return TruthRun(
                self.phases, self.samples, sum(len(a) for a in truth.acked_ms), truth.missing(), truth.duplicates
            )

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


def _truth_threads(
    h: _Harness, rate: int, network: Mapping[str, NetHost] | None, stop_traffic: threading.Event, stop: threading.Event
) -> tuple[threading.Thread, threading.Thread]:
    """The truth's producer and reader: in this process, or with clusters apart the producers beside the source and
    the reader beside the target (`truth_traffic.agent`), so that the truth is never cut off with the mirror."""
    if network:
        return (
            threading.Thread(
                target=agent,
                args=(network["source"].name, "produce", h.traffic, h.truth, stop_traffic),
                kwargs={"rate": rate},
            ),
            threading.Thread(target=agent, args=(network["target"].name, "follow", h.traffic, h.truth, stop)),
        )
    return (
        threading.Thread(target=in_process, args=("produce", h.traffic, h.truth, stop_traffic), kwargs={"rate": rate}),
        threading.Thread(target=in_process, args=("follow", h.traffic, h.truth, stop)),
    )


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
    delivery: str = "at-least-once",
    network: Mapping[str, NetHost] | None = None,
    mirror_host: ClientHost | None = None,
    fleet: Sequence[ClientHost] = (),
    monitor_host: ClientHost | None = None,
) -> TruthRun:
    """Run every phase once (see the module docstring) and return the samples with the truth filled in. `port`: the
    monitor's HTTP port (chosen here when None); `firing`: the alerts firing now (a Prometheus scraping that port),
    polled every second and recorded per phase; `engine`: "python" or "spark"; `faults`: which of FAULTS, in that
    order; `network`: the clusters' hosts when they run on hosts of their own (bench.netns), for NET_FAULTS;
    `mirror_host`: a client host with a door into each, where the engine then runs (its network apart from the
    monitor's, which "monitor-target-cut" needs); `fleet`: client hosts, one worker on each (the mirror faults hit
    the first), the monitor with a state directory of its own: it sees them through the progress topic alone;
    `monitor_host`: a client host where the monitor runs (its API reached by a path home)."""
    check_faults(faults, one_process=one_process, engine=engine, network=bool(network), mirror_host=mirror_host)
    if fleet and (one_process or engine != "python" or mirror_host is not None):
        raise ValueError("a fleet is python workers, one per host, each its own process")
    if monitor_host is not None and (one_process or "monitor-target-cut" in faults):
        raise ValueError("a monitor on a host of its own is a process of its own, its paths not this host's")
    h = _Harness(
        clusters, work, partitions=partitions, one_process=one_process, engine=engine, port=port, delivery=delivery
    )
    h.engine_prefix = ["ip", "netns", "exec", mirror_host.name] if mirror_host is not None else []
    h.fleet = list(fleet)
    stop_traffic, stop_reading = threading.Event(), threading.Event()
    if monitor_host is not None:
        h.place_monitor(monitor_host)
    url = f"{h.http}/mirror/links/{LINK}"
    producer, follower = _truth_threads(h, rate, network, stop_traffic, stop_reading)
    readers = [
        follower,
        threading.Thread(target=poll_monitor, args=(url, h.traffic.topic, h.samples, stop_reading)),
    ]
    readers.append(threading.Thread(target=h.watch_group, args=(stop_reading,)))
    if firing is not None:
        readers.append(threading.Thread(target=h.watch_alerts, args=(firing, stop_reading)))
    with h.stack:
        if not one_process:
            monitor = [*h.monitor_prefix, *h.command("monitor")]
            h.monitor = h.stack.enter_context(_process(monitor, work / "monitor.log"))
        h.start_engine()
        h.others = [h.start_worker(i) for i in range(1, len(h.fleet))]
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
            if h.fleet:
                h.wait_group_settled()
            h.phase("steady", progress)
            time.sleep(steady_s)

            for fault in fault_plan(h, faults, fault_s, tie_to_parent, network or {}, mirror_host):
                h.run_fault(fault, progress, recover_s)
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
