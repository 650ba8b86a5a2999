"""B10: a link's bandwidth budget, measured against the target (issue #44).

    .venv/bin/python -m bench.budget [--rate 1MB] [--seconds 60] [--clusters DIR] [--json FILE]

Starts two local clusters (or uses running ones), loads the source with more than the link can copy in the run
(1 KB records over 6 partitions), then runs `mirrorwatch mirror` with `max_bytes_per_second: RATE` and `mirrorwatch
monitor` as separate processes. The truth is a consumer tailing the target topic in this process: the key and value
bytes it receives (what a budget counts) and when. Measured:

- the rate over `--seconds` once the link runs (from its tenth second): bytes received / span, and its ratio to the
  budget (the target: 1.00 +- 0.10);
- a change at run time (`mirrorwatch link budget --max-bytes-per-second RATE/2`, the stopwatch started before the
  command, whose own start-up counts): in which second after it the target's rate settled within 10 % of the new one
  for good (1-second bins from the change), and the rate over the `--seconds / 2` after it;
- the monitor's metrics at the end: the budget in force and the seconds it held the link back (the throttle metric).

Every process it starts is stopped; the clusters too when it started them.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from bench.common import clusters_for, exit_on_sigterm, markdown_table, stop_all
from kernel.byte_rate import format_byte_rate, parse_byte_rate
from kernel.config import MirrorwatchConfig
from kernel.kafka import new_admin, new_consumer, new_producer
from kernel.processes import free_port

PARTITIONS = 6
VALUE = b"x" * 1_000
WARM_S = 10.0  # the link's start-up and its first seconds, left out of the rate


class TargetTail:
    """A consumer reading the target topic from its start on a thread: (monotonic seconds, bytes) per record."""

    def __init__(self, config: MirrorwatchConfig, topic: str) -> None:
        self.received: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._consumer = new_consumer(config.clusters["target"], "target", f"bench-budget-{uuid.uuid4().hex[:8]}")
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TargetTail:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():  # the link creates the target topic
            if self._topic in self._consumer.list_topics(timeout=10).topics:
                break
            time.sleep(0.2)
        self._consumer.assign([TopicPartition(self._topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        while not self._stop.is_set():
            for msg in self._consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is None:
                    self.received.append((time.monotonic(), len(msg.key() or b"") + len(msg.value() or b"")))

    def snapshot(self) -> Received:
        return Received(list(self.received))


class Received:
    """What the tail received by a moment, for spans' byte counts (cumulative sums: a span costs two bisections)."""

    def __init__(self, received: list[tuple[float, int]]) -> None:
        self.moments = [at for at, _ in received]
        self.cumulative = [0]
        for _, size in received:
            self.cumulative.append(self.cumulative[-1] + size)

    def bytes_between(self, start: float, end: float) -> int:
        return (
            self.cumulative[bisect.bisect_left(self.moments, end)]
            - self.cumulative[bisect.bisect_left(self.moments, start)]
        )


def metric(port: int, name: str, link: str = "bench") -> float | None:
    """A link's series of the monitor's /metrics at `port` (None: not there)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        found = re.search(rf'^{name}{{link="{re.escape(link)}"}} (\S+)$', response.read().decode(), re.MULTILINE)
    return float(found.group(1)) if found else None


def load(config: MirrorwatchConfig, topic: str, total_bytes: int) -> int:
    """Produce `total_bytes` of 1 KB records into the source topic; how many records."""
    admin = new_admin(config.clusters["source"], "source")
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = new_producer(config.clusters["source"], "source", {"linger.ms": 20, "acks": "all"})
    count = total_bytes // (len(VALUE) + 8)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=f"{i:08d}".encode(), value=VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the source did not take the load")
    return count


def settle_moment(tail: Received, changed: float, rate: int, until: float) -> int | None:
    """In whole seconds after `changed`: the first k from which the target received within 10 % of `rate` over every
    span of whole seconds that starts at k (None: never). Spans from k, not each second alone: the tail's fetches
    arrive in bunches (up to fetch.wait.max.ms apart), and one bunch across a second's edge moves a tenth of a
    second's bytes between two seconds, which says nothing of the budget."""
    seconds = int(until - changed)
    for k in range(seconds):
        spans = [tail.bytes_between(changed + k, changed + j) / (j - k) for j in range(k + 1, seconds + 1)]
        if all(abs(r - rate) <= rate * 0.10 for r in spans):
            return k
    return None


def measure(base: MirrorwatchConfig, *, rate: int, seconds: float, work: Path) -> dict[str, Any]:
    port, topic = free_port(), f"bench.budget-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    lowered = rate // 2
    records = load(base, topic, int(rate * (WARM_S + seconds) + lowered * (seconds / 2 + 10)))
    link = {
        "name": "bench",
        "source": "source",
        "target": "target",
        "topics": {"include": [re.escape(topic)]},
        "max_bytes_per_second": rate,
    }
    document = {
        "clusters": {a: {"bootstrap_servers": c.bootstrap_servers} for a, c in base.clusters.items()},
        "links": [link],
        "canary": {"enabled": False},
        "monitor": {"interval_seconds": 2},
        "http": {"host": "127.0.0.1", "port": port},
        "state_dir": str(work / "state"),
    }
    config = work / "bench.yaml"
    config.write_text(yaml.safe_dump(document))
    command = [sys.executable, "-m", "mirrorwatch.cli"]
    started: list[subprocess.Popen[bytes]] = []
    try:
        with TargetTail(base, topic) as tail:
            for name in ("mirror", "monitor"):
                log = (work / f"{name}.log").open("wb")
                started.append(subprocess.Popen([*command, name, "--config", str(config)], stdout=log, stderr=log))
            deadline = time.monotonic() + 120
            while not tail.received:  # the link's first record on the target
                if time.monotonic() > deadline or started[0].poll() is not None:
                    raise SystemExit(f"the link copied nothing; see {work}/mirror.log")
                time.sleep(0.2)
            first = tail.received[0][0]
            time.sleep(max(0.0, first + WARM_S + seconds - time.monotonic()))
            span_start, span_end = first + WARM_S, first + WARM_S + seconds
            measured = tail.snapshot().bytes_between(span_start, span_end) / seconds
            changed = time.monotonic()
            subprocess.run(
                [*command, "link", "budget", "--config", str(config), "--link", "bench",
                 "--max-bytes-per-second", str(lowered), "--wait", "0"],
                check=True, capture_output=True,
            )  # fmt: skip
            time.sleep(seconds / 2 + 2)
            after_end, received = time.monotonic() - 1, tail.snapshot()
            settled = settle_moment(received, changed, lowered, after_end)
            after = received.bytes_between(changed + 2, after_end) / (after_end - changed - 2)
            per_second = [received.bytes_between(changed + k, changed + k + 1) for k in range(-3, 12)]
            budget_metric = metric(port, "mirrorwatch_mirror_budget_bytes_per_second")
            throttled = metric(port, "mirrorwatch_mirror_budget_throttled_seconds_total")
    finally:
        stop_all(started)
    return {
        "budget_bytes_per_second": rate,
        "records_loaded": records,
        "measured_seconds": seconds,
        "measured_bytes_per_second": round(measured),
        "ratio": measured / rate,
        "lowered_to_bytes_per_second": lowered,
        "after_change_bytes_per_second": round(after),
        "after_change_ratio": after / lowered,
        "took_effect_within_seconds": settled,
        "per_second_around_the_change": per_second,
        "metric_budget_bytes_per_second": budget_metric,
        "metric_throttled_seconds_total": throttled,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="1MB", help="the link's max_bytes_per_second [1MB]")
    parser.add_argument("--seconds", type=float, default=60, help="measured span at the budget [60]")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    rate = parse_byte_rate(args.rate)
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp, clusters_for(args.clusters, Path(tmp)) as c:
        r = measure(c, rate=rate, seconds=args.seconds, work=Path(tmp))
    effect = "never" if r["took_effect_within_seconds"] is None else f"{r['took_effect_within_seconds']} s"
    print(
        markdown_table(
            [
                "budget",
                "measured (ratio)",
                "lowered at run time to",
                "after (ratio)",
                "in effect within",
                "metric: budget / held back",
            ],
            [
                [
                    format_byte_rate(rate),
                    f"{format_byte_rate(r['measured_bytes_per_second'])} over {args.seconds:g} s ({r['ratio']:.3f})",
                    format_byte_rate(r["lowered_to_bytes_per_second"]),
                    f"{format_byte_rate(r['after_change_bytes_per_second'])} ({r['after_change_ratio']:.3f})",
                    effect,
                    f"{format_byte_rate(int(r['metric_budget_bytes_per_second'] or 0) or None)} / "
                    f"{r['metric_throttled_seconds_total'] or 0:.1f} s",
                ]
            ],
        )
    )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
