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
from confluent_kafka.admin import AdminClient, OffsetSpec

from kernel.config import ClusterConfig
from kernel.kafka import new_admin, new_consumer
from kernel.provenance import provenance_source

__all__ = ["READ_EVERY_S", "TargetFront"]

log = logging.getLogger("mirrorwatch.mirror.spark")

READ_EVERY_S = 0.25
TIMEOUT_S = 0.5
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]

Key = tuple[str, int]


class TargetFront:
    """`upto()`: per source partition, the source offset after the last copy its target partition holds."""

    def __init__(self, cluster: ClusterConfig, alias: str, source_id: str, rename: Callable[[str], str]) -> None:
        self._cluster, self._alias = cluster, alias
        self.on_news: Callable[[], None] | None = None  # called after a read that moved a partition (a status out)
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
        admin = new_admin(self._cluster, self._alias)
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
                        moved = self._read(admin, consumer, wanted)
                    except (KafkaException, TimeoutError) as exc:  # a target not answering: the batch's end tells
                        log.debug("reading the target's last records: %s", exc)
                        continue
                    if moved and self.on_news is not None:
                        self.on_news()
        finally:
            consumer.close()

    def _read(self, admin: AdminClient, consumer: Consumer, wanted: list[Key]) -> bool:
        """One round: the target ends of the wanted partitions in one request, then the last record of each that
        moved since; True when a partition's word changed."""
        futures = admin.list_offsets(
            {TopicPartition(self._rename(t), p): _LATEST for t, p in wanted}, request_timeout=TIMEOUT_S
        )
        of = {(self._rename(t), p): (t, p) for t, p in wanted}
        moved: dict[Key, int] = {}
        for tp, future in futures.items():
            key, high = of[(tp.topic, tp.partition)], int(future.result(timeout=TIMEOUT_S).offset)
            if high > 0 and high > self._ends.get(key, -1):
                moved[key] = high
        if not moved:
            return False
        consumer.assign([TopicPartition(self._rename(t), p, high - 1) for (t, p), high in moved.items()])
        newest: dict[Key, Message] = {}  # a partition being written yields more than its last record: the newest
        deadline = time.monotonic() + TIMEOUT_S
        while len(newest) < len(moved) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.1):
                found = of.get((msg.topic() or "", msg.partition() or 0))
                if msg.error() is None and found is not None:
                    newest[found] = msg
        for key, msg in newest.items():
            self._ends[key] = moved[key]
            source = provenance_source(cast(list[tuple[str, bytes | None]] | None, msg.headers()))
            if source is not None and source[0] == self._source_id and (source[1], source[2]) == key:
                with self._lock:  # the newest word (a batch run again after a restart writes lower offsets)
                    self._upto[key] = source[3] + 1
        return bool(newest)
