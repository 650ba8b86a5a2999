"""B3: end-to-end latency at a steady rate, peers side by side in one run.

    .venv/bin/python -m bench.latency                       # 5,000 and 20,000 records/s of 1 KB, 15 s each
    .venv/bin/python -m bench.latency --rates 2000 --seconds 5 --repeat 1 --peers python-1,kcat   # a quick look

For each peer and rate, on a fresh source topic: the peer is started and warmed up (records are produced until one
arrives on the target, so start-up and group joins are not measured), a reader process is started on the target
topic, then a producer sends `rate` records/s of `--size` bytes for `--seconds`, each value carrying its send time
(time.time_ns() just before produce()). The reader, a separate process on the same clock, notes each record's
arrival; latency = arrival - send, so it includes the source producer (acks=all, linger.ms 5), both brokers and the
peer. Reported: p50, p99, p99.9 and max in ms, the rate actually sent, and how many records arrived (all of them, no
duplicates, or the run says so).

Peers: python-1, python-2, kcat, mm2, mm2-tuned (see bench.throughput); the spark engine is a micro-batch engine and
is measured by B1/B2 only.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from bench.common import (
    EventBodies,
    add_run_options,
    chosen_peers,
    exit_on_sigterm,
    markdown_table,
    median,
    percentile,
    stop_peer,
    total_records,
)
from bench.throughput import clusters_placed, peer_command, target_topic_for
from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import create_topics, new_admin, new_consumer, new_producer

PEERS = ("python-1", "python-2", "kcat", "mm2", "mm2-tuned")
WARM_UP_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 60.0
TICK_S = 0.005  # the producer sends what is due every 5 ms


@dataclass
class LatencyRun:
    peer: str
    rate: int  # records/s asked for
    sent_rate: float  # records/s actually sent
    sent: int
    received: int
    duplicates: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float


@functools.cache
def _bodies() -> EventBodies:
    return EventBodies()


def measured_value(seq: int, send_ns: int, size: int) -> bytes:
    """`size` bytes: the sequence and send time, then an event body (compresses like B1/B2's, not like one byte)."""
    head = b"M%012d|%020d|" % (seq, send_ns)
    return head + _bodies().body(seq, max(0, size - len(head)))


def parse_measured(value: bytes) -> tuple[int, int] | None:
    """(sequence, send time ns) of a measured record; None for a warm-up record."""
    if not value.startswith(b"M"):
        return None
    return int(value[1:13]), int(value[14:34])


def read_latencies(target: ClusterConfig, topic: str, partitions: int, expected: int, conn: Connection) -> None:
    """Reader process: say 'ready' once caught up with the warm-up records, then note the latency of every measured
    record until `expected` arrived or nothing came for DRAIN_TIMEOUT_S after the producer said 'done'."""
    consumer = new_consumer(
        target,
        "target",
        f"mirrorwatch-bench-latency-{uuid.uuid4().hex[:6]}",
        {"enable.auto.commit": False, "fetch.wait.max.ms": 10},
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    latencies_ms: list[float] = []
    seen: set[int] = set()
    duplicates = 0
    ready = done = caught_up = False
    last_arrival = time.monotonic()
    try:
        while len(seen) < expected:
            # consume() with a timeout waits for a full batch; poll() returns with the first record that arrives
            messages = consumer.consume(num_messages=10_000, timeout=0)
            if not messages:
                first = consumer.poll(0.05)
                messages = [first] if first is not None else []
            arrived_ns = time.time_ns()
            if not messages and caught_up and not ready:  # the warm-up records are behind us: measure from now
                conn.send("ready")
                ready = True
            if not done and conn.poll():
                done = conn.recv() == "done"
            for msg in messages:
                if msg.error() is not None:
                    continue
                measured = parse_measured(msg.value() or b"")
                if measured is None:
                    caught_up = True
                    continue
                seq, send_ns = measured
                if seq in seen:
                    duplicates += 1
                    continue
                seen.add(seq)
                latencies_ms.append((arrived_ns - send_ns) / 1e6)
            if messages:
                last_arrival = time.monotonic()
            elif done and time.monotonic() - last_arrival > DRAIN_TIMEOUT_S:
                break
    finally:
        consumer.close()
    latencies_ms.sort()
    conn.send(
        {
            "received": len(seen),
            "duplicates": duplicates,
            "p50_ms": percentile(latencies_ms, 50),
            "p99_ms": percentile(latencies_ms, 99),
            "p999_ms": percentile(latencies_ms, 99.9),
            "max_ms": latencies_ms[-1] if latencies_ms else float("nan"),
        }
    )


def _warm_up(producer: Producer, target: ClusterConfig, source_topic: str, target_topic: str, partitions: int) -> None:
    """Produce a warm-up record to every partition each 0.5 s until one of them is on the target (which also gets
    the producer its idempotent producer id and its connections before the clock starts)."""
    deadline = time.monotonic() + WARM_UP_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            for p in range(partitions):
                producer.produce(source_topic, value=b"W", partition=p)
            producer.flush(10)
            if total_records(target, "target", target_topic, partitions) > 0:
                return
            time.sleep(0.5)
    finally:
        producer.flush(10)
    raise SystemExit(f"nothing reached {target_topic} within {WARM_UP_TIMEOUT_S:.0f}s")


def _send_steadily(producer: Producer, topic: str, rate: int, seconds: float, size: int) -> tuple[int, float]:
    """Send `rate` records/s for `seconds`, paced every TICK_S; (records sent, seconds it took)."""
    total = int(rate * seconds)
    started = time.monotonic()
    seq = 0
    while seq < total:
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        while seq < due:
            try:
                producer.produce(topic, value=measured_value(seq, time.time_ns(), size), key=b"k%d" % (seq % 1024))
            except BufferError:
                producer.poll(0.01)
                continue
            seq += 1
        producer.poll(0)
        time.sleep(max(0.0, started + seq / rate - time.monotonic(), TICK_S / 5))
    elapsed = time.monotonic() - started
    if producer.flush(60):
        raise SystemExit("the steady-rate producer could not deliver its records")
    return total, elapsed


def run_latency(
    peer: str, work: Path, clusters: MirrorwatchConfig, *, rate: int, seconds: float, size: int, partitions: int
) -> LatencyRun:
    source, target = clusters.clusters["source"], clusters.clusters["target"]
    source_topic = f"bench.latency.{rate}.{uuid.uuid4().hex[:6]}"
    create_topics(new_admin(source, "source"), {source_topic: partitions}, config={"retention.ms": "-1"})
    target_topic = target_topic_for(peer, clusters, source_topic, partitions)
    log = (work / f"{target_topic}.log").open("wb")
    process = subprocess.Popen(
        peer_command(peer, work, clusters, source_topic, target_topic),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    spawn = multiprocessing.get_context("spawn")  # never fork a process that holds librdkafka threads
    mine, theirs = spawn.Pipe()
    expected = int(rate * seconds)
    reader = spawn.Process(target=read_latencies, args=(target, target_topic, partitions, expected, theirs))
    producer = new_producer(source, "source", {"acks": "all", "enable.idempotence": True, "linger.ms": 5})
    try:
        _warm_up(producer, target, source_topic, target_topic, partitions)
        reader.start()
        if not mine.poll(60) or mine.recv() != "ready":
            raise SystemExit("the latency reader did not start")
        sent, elapsed = _send_steadily(producer, source_topic, rate, seconds, size)
        mine.send("done")
        # Keep a trickle of warm-up records flowing until the reader is done, so that no measured record waits for
        # more traffic in a peer's buffer (a kcat pipe holds the last records of a quiet moment in its stdin buffer).
        deadline, n = time.monotonic() + DRAIN_TIMEOUT_S + 30, 0
        while not mine.poll(0.05):
            if time.monotonic() > deadline:
                raise SystemExit(f"{peer}: the latency reader did not finish; see {log.name}")
            producer.produce(source_topic, value=b"W", partition=n % partitions)
            producer.poll(0)
            n += 1
        result: dict[str, Any] = mine.recv()
    finally:
        if reader.is_alive():
            reader.terminate()
        reader.join(10)
        stop_peer(process)
        log.close()
    return LatencyRun(peer=peer, rate=rate, sent_rate=sent / elapsed, sent=sent, **result)


def summarize(runs: Sequence[LatencyRun], peers: Sequence[str], rates: Sequence[int], size: int) -> str:
    rows = []
    p99: dict[tuple[str, int], float] = {}
    for rate in rates:
        for peer in peers:
            of = [r for r in runs if r.peer == peer and r.rate == rate]
            if not of:
                continue
            p99[(peer, rate)] = median([r.p99_ms for r in of])
            arrived = (
                "all"
                if all(r.received == r.sent and not r.duplicates for r in of)
                else "; ".join(f"{r.received}/{r.sent}, {r.duplicates} dup" for r in of)
            )
            rows.append(
                [
                    f"{rate:,}",
                    peer,
                    f"{median([r.sent_rate for r in of]):,.0f}",
                    f"{median([r.p50_ms for r in of]):.1f}",
                    f"{p99[(peer, rate)]:.1f}",
                    f"{median([r.p999_ms for r in of]):.1f}",
                    f"{median([r.max_ms for r in of]):.1f}",
                    arrived,
                    len(of),
                ]
            )
    table = markdown_table(
        ["records/s", "peer", "sent/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "arrived", "runs"], rows
    )
    ratios = [
        f"{mine} / {peer} at {rate:,}/s = {p99[(mine, rate)] / p99[(peer, rate)]:.2f}"
        for rate in rates
        for mine in ("python-1", "python-2")
        for peer in ("mm2", "mm2-tuned", "kcat")
        if (mine, rate) in p99 and (peer, rate) in p99 and p99[(peer, rate)] > 0
    ]
    title = f"### Steady-rate end-to-end latency, {size} B records (medians)"
    return f"{title}\n\n{table}\n\np99 ratios (lower is better): {'; '.join(ratios) or 'n/a'}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="5000,20000", help="records/s, comma-separated [5000,20000]")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run [15]")
    parser.add_argument("--size", type=int, default=1024, help="bytes per record value [1024]")
    parser.add_argument(
        "--delay-ms",
        type=float,
        help="each cluster on a host of its own (root only) and the source this many ms away, a round trip (as "
        "bench.throughput --delay-ms; cannot go with --clusters)",
    )
    add_run_options(parser, PEERS, repeat_help="runs per peer and rate, interleaved")
    args = parser.parse_args(argv)
    if args.delay_ms and args.clusters:
        parser.error("--delay-ms starts clusters of its own: leave --clusters out")
    rates = [int(r) for r in args.rates.split(",") if r]
    peers = chosen_peers(parser, args, PEERS)
    runs: list[LatencyRun] = []
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp:
        work = Path(tmp)
        with clusters_placed(args.clusters, None, work, args.delay_ms) as clusters:
            for rate in rates:
                for repeat in range(args.repeat):
                    for peer in peers:
                        run = run_latency(
                            peer,
                            work,
                            clusters,
                            rate=rate,
                            seconds=args.seconds,
                            size=args.size,
                            partitions=args.partitions,
                        )
                        print(
                            f"  {rate:,}/s run {repeat + 1} {peer}: p50 {run.p50_ms:.1f} ms, p99 {run.p99_ms:.1f} ms, "
                            f"{run.received}/{run.sent} arrived",
                            flush=True,
                        )
                        runs.append(run)
    print(summarize(runs, peers, rates, args.size), flush=True)
    print(f"machine: {os.cpu_count()} cores; figures are this machine's")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
