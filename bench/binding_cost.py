"""What one Python thread can move through confluent-kafka, with the mirror's per-record work added piece by piece.

    .venv/bin/python -m bench.binding_cost                      # 1,000,000 x 100 B over 12 partitions
    .venv/bin/python -m bench.binding_cost --records 20000 --repeat 1

No engine here: a consumer assigned to every partition of a pre-loaded topic and a producer, both with the engine's
client settings (acks=all, idempotent, linger.ms 20, 1 MB batches, the fetch queue's bounds and backoff) and its
garbage-collector settings, in one loop of `consume(2000)` -> `produce()` per record -> `poll(0)`. Each variant adds
one thing the mirror does per record, so the table says what each costs on this machine and where the ceiling of a
python engine is:

    consume              read only (the floor: librdkafka's fetch and one Message object per record)
    produce              + produce() of key and value to the same partition
    +1 header            + one header (the compact provenance form)
    +6 headers           + six headers (the full form) instead of one
    +1 header, dr/record + a delivery-report callback into Python for every record (how the engine learns what the
                           target acknowledged)
    +1 header, dr/batch  + a callback for the last record of each consumed batch only

Records/s run from the first record read to the producer's flush; CPU is this process's (both librdkafka threads
and Python). Variants are interleaved and repeated (median of --repeat).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, Producer, TopicPartition

from bench.common import clusters_for, exit_on_sigterm, markdown_table, median
from bench.throughput import Case, preload
from kernel.config import MirrorwatchConfig
from kernel.kafka import create_topics, new_admin, new_consumer, new_producer
from mirror.runner import tune_gc
from mirror.settings import CONSUMER_DEFAULTS, CONSUMER_FIXED, PRODUCER_DEFAULTS, PRODUCER_FIXED

VARIANTS = ("consume", "produce", "+1 header", "+6 headers", "+1 header, dr/record", "+1 header, dr/batch")
BATCH = 2000
# The engine's client settings (fetch queue bounds and backoff, batching, acks=all, idempotence), less what needs a
# callback here (statistics) or a group subscription (the assignment strategy), and the partition-end events (this
# loop counts what consume() returns as records).
_UNUSED = {"statistics.interval.ms", "partition.assignment.strategy", "enable.partition.eof"}
CONSUMER_SETTINGS = {k: v for k, v in {**CONSUMER_DEFAULTS, **CONSUMER_FIXED}.items() if k not in _UNUSED}
PRODUCER_SETTINGS = {k: v for k, v in {**PRODUCER_DEFAULTS, **PRODUCER_FIXED}.items() if k not in _UNUSED}


Headers = list[tuple[str, str | bytes | None]]


def _one_header(topic: bytes, msg: Message) -> Headers:
    partition, offset = msg.partition() or 0, msg.offset() or 0
    return [("mirrorwatch.provenance", b"CLUSTERIDCLUSTERIDCLUS;%s;%d;%d" % (topic, partition, offset))]


def _six_headers(topic: bytes, msg: Message) -> Headers:
    partition, offset = msg.partition() or 0, msg.offset() or 0
    return [
        ("mirrorwatch.source.cluster", b"CLUSTERIDCLUSTERIDCLUS"),
        ("mirrorwatch.source.topic", topic),
        ("mirrorwatch.source.partition", b"%d" % partition),
        ("mirrorwatch.source.offset", b"%d" % offset),
        ("mirrorwatch.path", b"CLUSTERIDCLUSTERIDCLUS"),
        ("mirrorwatch.hops", b"1"),
    ]


class _Mover:
    """One variant's per-record work: the headers it writes and the delivery reports it asks for."""

    def __init__(self, variant: str, producer: Producer, source_topic: str, target_topic: str) -> None:
        self.produce, self.poll = producer.produce, producer.poll
        self.target_topic, self.topic_bytes = target_topic, source_topic.encode()
        self.headers_of: Callable[[bytes, Message], Headers] | None = None
        if "header" in variant:
            self.headers_of = _six_headers if "6" in variant else _one_header
        self.per_record, self.per_batch = variant.endswith("dr/record"), variant.endswith("dr/batch")
        self.reports = self.per_record or self.per_batch
        self.acked = 0

    def on_delivery(self, err: KafkaError | None, _msg: Message, count: int = 1) -> None:
        if err is None:
            self.acked += count

    def move(self, messages: list[Message]) -> None:
        last = len(messages) - 1
        for i, msg in enumerate(messages):
            callback: Callable[[KafkaError | None, Message], None] | None = None
            if self.per_record:
                callback = self.on_delivery
            elif self.per_batch and i == last:
                callback = functools.partial(self.on_delivery, count=len(messages))
            headers = self.headers_of(self.topic_bytes, msg) if self.headers_of else None
            while True:
                try:
                    self.produce(
                        self.target_topic,
                        value=msg.value(),
                        key=msg.key(),
                        partition=msg.partition() or 0,
                        timestamp=msg.timestamp()[1],
                        headers=headers,
                        on_delivery=callback,
                    )
                    break
                except BufferError:
                    self.poll(0.01)
        self.poll(0)


def move(variant: str, clusters: MirrorwatchConfig, source_topic: str, records: int, partitions: int) -> float:
    """Move `records` from `source_topic` to a fresh target topic the way `variant` says; seconds it took."""
    source, target = clusters.clusters["source"], clusters.clusters["target"]
    consumer = new_consumer(source, "source", f"bench-binding-{uuid.uuid4().hex[:6]}", CONSUMER_SETTINGS)
    consumer.assign([TopicPartition(source_topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    producer: Producer | None = None
    mover: _Mover | None = None
    if variant != "consume":
        target_topic = f"{source_topic}.binding.{uuid.uuid4().hex[:6]}"
        create_topics(new_admin(target, "target"), {target_topic: partitions}, config={"retention.ms": "-1"})
        producer = new_producer(target, "target", PRODUCER_SETTINGS)
        producer.list_topics(target_topic, timeout=30)
        mover = _Mover(variant, producer, source_topic, target_topic)
    moved, started = 0, 0.0
    try:
        while moved < records:
            messages = consumer.consume(num_messages=BATCH, timeout=1.0)
            if messages:
                started = started or time.monotonic()
                moved += len(messages)
                if mover is not None:
                    mover.move(messages)
        if producer is not None and producer.flush(120):
            raise SystemExit(f"{variant}: the producer could not deliver every record")
        if mover is not None and mover.reports and mover.acked != records:
            raise SystemExit(f"{variant}: {mover.acked} of {records} records reported delivered")
        return time.monotonic() - started
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per record value [100]")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant, interleaved [3]")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args(argv)
    tune_gc()
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp, clusters_for(args.clusters, Path(tmp)) as c:
        topic = f"bench.binding.{args.records}x{args.size}.{uuid.uuid4().hex[:6]}"
        print(f"pre-loading {args.records:,} records x {args.size} B over {args.partitions} partitions ...", flush=True)
        preload(c.clusters["source"], topic, Case(args.records, args.size), args.partitions)
        seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
        cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for repeat in range(args.repeat):
            for variant in VARIANTS:
                cpu_before = time.process_time()
                took = move(variant, c, topic, args.records, args.partitions)
                seconds[variant].append(took)
                cpu[variant].append(time.process_time() - cpu_before)
                print(f"  run {repeat + 1} {variant}: {args.records / took:,.0f} records/s", flush=True)
    base = args.records / median(seconds["produce"])
    rows = []
    for variant in VARIANTS:
        rate = args.records / median(seconds[variant])
        rows.append(
            [
                variant,
                f"{rate:,.0f}",
                f"{1e6 / rate:.2f}",
                f"{median(cpu[variant]) * 1e6 / args.records:.2f}",
                f"{rate / base:.2f}",
            ]
        )
    head = ["variant", "records/s", "µs per record", "CPU µs per record", "/ produce"]
    print(f"\n### one Python thread, {args.records:,} records x {args.size} B\n\n{markdown_table(head, rows)}\n")
    if args.json:
        runs = [
            {"variant": v, "records": args.records, "seconds": took, "cpu_seconds": used}
            for v in VARIANTS
            for took, used in zip(seconds[v], cpu[v], strict=True)
        ]
        args.json.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
