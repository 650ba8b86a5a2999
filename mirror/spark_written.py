"""What the target shows written while a Spark micro-batch runs (issue #41): the spark engine's acknowledgements.

Spark's Kafka sink tells nothing until a whole batch is written, so the driver reads the target itself: every
`READ_EVERY_S`, for each source partition the running batch is writing, the last record of its target partition
(`partitioning: preserve` maps source partition p to target partition p, written in offset order by one task with
an idempotent producer) and its provenance: a copy from this link's source, of that partition, at offset X says the
batch has written the partition up to X + 1. `spark_plan.acked_during_batch` decides what of it a status states.
A thread of its own: a target that does not answer holds it, not the driver's heartbeat."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import cast

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from kernel.config import ClusterConfig
from kernel.kafka import new_consumer
from kernel.provenance import provenance_source

__all__ = ["READ_EVERY_S", "TargetFront"]

log = logging.getLogger("mirrorwatch.mirror.spark")

READ_EVERY_S = 0.25
TIMEOUT_S = 0.5

Key = tuple[str, int]


class TargetFront:
    """`upto()`: per source partition, the source offset after the last copy its target partition holds."""

    def __init__(self, cluster: ClusterConfig, alias: str, source_id: str, rename: Callable[[str], str]) -> None:
        self._cluster, self._alias = cluster, alias
        self._source_id, self._rename = source_id.encode(), rename
        self._upto: dict[Key, int] = {}
        self._ends: dict[Key, int] = {}  # the target partition's end at the last read of its last record
        self._wanted: list[Key] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, keys: list[Key]) -> None:
        """The source partitions the running batch is writing (none: nothing to read)."""
        with self._lock:
            self._wanted = list(keys)

    def upto(self) -> dict[Key, int]:
        with self._lock:
            return dict(self._upto)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="spark-target-front", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        consumer = new_consumer(
            self._cluster,
            self._alias,
            "mirrorwatch-spark-front",
            {"enable.auto.commit": False, "fetch.wait.max.ms": 50, "socket.timeout.ms": 2000},
        )
        try:
            while not self._stop.wait(READ_EVERY_S):
                with self._lock:
                    wanted = list(self._wanted)
                if wanted:
                    try:
                        self._read(consumer, wanted)
                    except KafkaException as exc:  # a target not answering: the batch's end will tell
                        log.debug("reading the target's last records: %s", exc)
        finally:
            consumer.close()

    def _read(self, consumer: Consumer, wanted: list[Key]) -> None:
        moved: dict[Key, int] = {}
        for topic, partition in wanted:
            target = TopicPartition(self._rename(topic), partition)
            low, high = consumer.get_watermark_offsets(target, timeout=TIMEOUT_S, cached=False)
            if high > low and high > self._ends.get((topic, partition), -1):
                moved[(topic, partition)] = high
        if not moved:
            return
        consumer.assign([TopicPartition(self._rename(t), p, high - 1) for (t, p), high in moved.items()])
        of = {(self._rename(t), p): (t, p) for t, p in moved}
        newest: dict[Key, Message] = {}  # a partition being written yields more than its last record: the newest
        deadline = time.monotonic() + TIMEOUT_S
        while len(newest) < len(moved) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.1):
                key = of.get((msg.topic() or "", msg.partition() or 0))
                if msg.error() is None and key is not None:
                    newest[key] = msg
        for key, msg in newest.items():
            self._ends[key] = moved[key]
            source = provenance_source(cast(list[tuple[str, bytes | None]] | None, msg.headers()))
            if source is not None and source[0] == self._source_id and (source[1], source[2]) == key:
                with self._lock:  # the newest word (a batch run again after a restart writes lower offsets)
                    self._upto[key] = source[3] + 1
