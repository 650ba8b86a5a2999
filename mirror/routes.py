"""Where the records of a link worker go: per assigned source partition, the target topic and partition and the
provenance stamp, worked out once per assignment and topic refresh (`Route`); and, for links with a handler, the
records a source record becomes (`Router.records_for`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from confluent_kafka import Message

from kernel.config import LinkConfig
from kernel.kafka import headers_of
from kernel.provenance import ProvenanceStamp, has_visited, provenance_stamp, with_provenance
from mirror.failure import LinkFailure
from mirror.handler import Handler, MirrorRecord, run_handler
from mirror.progress import PartitionProgress
from mirror.stats import LinkStats
from mirror.topic_keeper import TopicKeeper

__all__ = ["Route", "Router"]


@dataclass(slots=True)
class Route:
    """Where the records of one assigned source partition go."""

    source: tuple[str, int]
    progress: PartitionProgress
    target_topic: str
    target_partition: int  # -1: the producer's partitioner (by key)
    topic_bytes: bytes
    partition_bytes: bytes
    stamp: ProvenanceStamp


class Router:
    """The routes of the partitions a worker holds (`progress`, shared with the worker), from its topic keeper's
    last refresh. `routes` is read directly by the per-record loops; `forget` and `clear` when that changes."""

    def __init__(
        self,
        link: LinkConfig,
        keeper: TopicKeeper,
        progress: dict[tuple[str, int], PartitionProgress],
        stats: LinkStats,
        fail: LinkFailure,
    ) -> None:
        self.link, self.keeper, self.progress, self.stats, self.fail = link, keeper, progress, stats, fail
        self.routes: dict[tuple[str, int], Route] = {}
        self.handler: Handler | None = None
        self.source_id = b""
        self.target_id = b""
        self._topic_bytes: dict[str, bytes] = {}
        self._partition_bytes: dict[int, bytes] = {}

    def route(self, tp: tuple[str, int]) -> Route | None:
        """The route of a partition this worker holds (None: not held, e.g. revoked while its records were read)."""
        p = self.progress.get(tp)
        if p is None:
            return None
        topic, partition = tp
        target_partition = self.target_partition(topic, partition)
        topic_bytes, partition_bytes = self.bytes_of_topic(topic), self.bytes_of_partition(partition)
        route = Route(
            source=tp,
            progress=p,
            target_topic=self.keeper.target_topic(topic),
            target_partition=-1 if target_partition is None else target_partition,
            topic_bytes=topic_bytes,
            partition_bytes=partition_bytes,
            stamp=provenance_stamp(self.source_id, topic_bytes, partition_bytes, form=self.link.provenance),
        )
        self.routes[tp] = route
        return route

    def forget(self, tp: tuple[str, int]) -> None:
        self.routes.pop(tp, None)

    def clear(self) -> None:
        """Target topics or partition counts may have changed: work the routes out again."""
        self.routes.clear()

    def target_partition(self, topic: str, partition: int) -> int | None:
        mode = self.link.partitioning
        if mode == "preserve":
            return partition
        if mode == "modulo":
            count = self.keeper.target_partitions.get(self.keeper.target_topic(topic), 0)
            return partition % count if count else partition
        return None  # hash: the producer's murmur2 partitioner, by key

    def bytes_of_topic(self, topic: str) -> bytes:
        cached = self._topic_bytes.get(topic)
        if cached is None:
            cached = self._topic_bytes[topic] = topic.encode()
        return cached

    def bytes_of_partition(self, partition: int) -> bytes:
        cached = self._partition_bytes.get(partition)
        if cached is None:
            cached = self._partition_bytes[partition] = str(partition).encode()
        return cached

    def records_for(self, msg: Message, topic: str, partition: int, offset: int) -> list[MirrorRecord] | None:
        """What to write for one source record: [] when nothing (it came from the target, or the handler dropped
        it); None when the handler failed (the link is failing)."""
        stats = self.stats
        key, value = msg.key(), msg.value()
        try:
            headers = cast(list[tuple[str, bytes | None]] | None, headers_of(msg))  # a list (kernel.kafka)
        except SystemError:  # a header name that is not UTF-8: never call headers() again (Delivery.unreadable)
            self.fail(
                f"{topic}[{partition}]@{offset} cannot be mirrored: a header name is not valid UTF-8, so the handler "
                "cannot be given the record. The link stopped without committing past it"
            )
            return None
        timestamp_ms = msg.timestamp()[1]
        stats.records_in_total += 1
        stats.bytes_in_total += (len(value) if value else 0) + (len(key) if key else 0)
        if headers and has_visited(headers, self.target_id):  # it came from the target: writing it back would loop
            stats.loop_skipped_total += 1
            return []
        record = MirrorRecord(
            topic=self.keeper.target_topic(topic),
            partition=self.target_partition(topic, partition),
            key=key,
            value=value,
            headers=with_provenance(
                headers,
                self.source_id,
                self.bytes_of_topic(topic),
                self.bytes_of_partition(partition),
                offset,
                form=self.link.provenance,
            ),
            timestamp_ms=timestamp_ms if timestamp_ms > 0 else 0,
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
        )
        if self.handler is None:
            return [record]
        try:
            records = run_handler(self.handler, record)
        except Exception as exc:
            self.fail(f"the handler {self.link.handler} failed on {topic}[{partition}]@{offset}: {exc!r}")
            return None
        if not records:
            stats.handler_dropped_total += 1
        for r in records:
            if r.topic not in self.keeper.target_partitions:
                self.keeper.create_like(r.topic, topic)
        return records
