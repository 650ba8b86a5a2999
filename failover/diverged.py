"""`mirrorwatch failover diverged`: what a promoted link's old source took that the link never copied (issue #42).

A link promoted (`failover promote`) recorded where each source partition was copied up to: on the target (topic
`mirrorwatch.promotions`, the latest record keyed by the link) and in its control document. Once the old source can
be read again, every record at or after that point was taken by it but never copied — the disaster's tail, or what
producers wrote to it after the cutover. Listed per partition (first and last offset, records; offsets a transaction
marker or an aborted record holds are not records; those retention already removed are counted apart), and exported
so that nothing taken is lost unseen: JSON lines (`--to-file`: topic, partition, offset, timestamp, key, value and
headers, bytes in base64) or copies in a topic of either cluster (`--to-topic ALIAS:TOPIC`, which must be new or
empty: a topic holding other records is refused). Partitions the source has beyond those of the promotion (added
since) are read whole."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO, cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from failover.plan import FailoverUsageError, find_link
from failover.promote import PROMOTIONS_TOPIC, TIMEOUT_S, topics_of
from failover.scan import Watermarks, read_partitions, watermarks
from kernel.config import ClusterConfig, LinkConfig, MirrorwatchConfig
from kernel.control_store import load_control
from kernel.kafka import create_topics, kafka_error, new_admin, new_consumer, new_producer
from kernel.link_control import ControlUnreadable, Promotion
from kernel.provenance import Headers
from kernel.selection import select_topics

__all__ = ["CopyWriter", "Tail", "TopicExport", "diverged", "file_export", "record_json", "topic_export"]

Key = tuple[str, int]
Export = Callable[[Message], None]


@dataclass
class Tail:
    """One source partition after the promotion point."""

    topic: str
    partition: int
    promoted_at: int | None  # the offset the link had copied up to (None: a partition added since)
    end: int  # the source's end now (read_committed)
    records: int = 0  # records read from the promotion point to the end
    first: int | None = None
    last: int | None = None
    gone: int = 0  # offsets after the promotion point that retention already removed

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "promoted_at": self.promoted_at,
            "end": self.end,
            "records": self.records,
            "first_offset": self.first,
            "last_offset": self.last,
            "removed_by_retention": self.gone,
        }


def promotion_of(config: MirrorwatchConfig, link: LinkConfig) -> Promotion | None:
    """The link's promotion: the target's record (it survives the loss of the source's host), else its control's."""
    found = _from_target(config, link)
    if found is not None:
        return found
    try:
        return load_control(config, link).promoted
    except ControlUnreadable:
        return None


def _from_target(config: MirrorwatchConfig, link: LinkConfig) -> Promotion | None:
    consumer = new_consumer(
        config.clusters[link.target], link.target, "mirrorwatch-diverged", {"enable.partition.eof": True}
    )
    try:
        if PROMOTIONS_TOPIC not in consumer.list_topics(timeout=TIMEOUT_S).topics:
            return None
        consumer.assign([TopicPartition(PROMOTIONS_TOPIC, 0, 0)])
        latest = None
        while (msg := consumer.poll(TIMEOUT_S)) is not None:
            error = msg.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                break
            if error is None and msg.key() == link.name.encode():
                latest = msg.value()
        if latest is None:
            return None
        return Promotion.from_json(json.loads(latest))
    except (ValueError, ControlUnreadable):
        return None
    except KafkaException as exc:
        raise kafka_error(exc, f"reading {link.target}:{PROMOTIONS_TOPIC}") from None
    finally:
        consumer.close()


def diverged(
    config: MirrorwatchConfig,
    link_name: str,
    *,
    export: Callable[[int], Export] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Promotion, list[Tail]]:
    """The promotion and, per source partition, what the source holds after it. `export`, told how many partitions
    the records come from (the highest partition number + 1) before any is read, gives what is handed every such
    record, in offset order per partition. FailoverUsageError (exit 2): no such link, or it was never promoted."""
    link = find_link(config, link_name)
    promotion = promotion_of(config, link)
    if promotion is None:
        raise FailoverUsageError(
            f"link {link.name} was never promoted (no record on {link.target}:{PROMOTIONS_TOPIC}, none in its "
            "control): nothing diverged to look for"
        )
    source = config.clusters[link.source]
    admin = new_admin(source, link.source)
    topics = topics_of(admin, link.source)
    promoted = {(t, p): o for t, p, o in promotion.offsets}
    chosen = select_topics(topics, link.topics, exclude_internal=link.exclude_internal_topics)
    keys = sorted({*promoted, *((t, p) for t in chosen for p in topics[t].partitions)})
    keys = [k for k in keys if k[0] in topics and k[1] in topics[k[0]].partitions]  # a topic since deleted: gone
    ends: dict[Key, Watermarks] = watermarks(admin, keys)
    tails = {k: Tail(k[0], k[1], promoted.get(k), ends[k].end) for k in keys}
    for key, tail in tails.items():
        tail.gone = max(0, ends[key].start - (tail.promoted_at or 0))

    sink = export(max((p for _, p in keys), default=-1) + 1) if export is not None else None

    def on_record(key: Key, offset: int, msg: Message) -> None:
        tail = tails[key]
        tail.records += 1
        tail.first = offset if tail.first is None else tail.first
        tail.last = offset
        if sink is not None:
            sink(msg)

    starts = {k: max(ends[k].start, tails[k].promoted_at or 0) for k in keys}  # what retention left of the tail
    read_partitions(source, link.source, ends, starts, on_record=on_record, on_done=lambda _k: None, progress=progress)
    return promotion, [tails[k] for k in keys]


def record_json(msg: Message) -> dict[str, Any]:
    """A record as one JSON line of `--to-file` (bytes in base64; a null key or value stays null)."""

    def b64(data: str | bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data.encode() if isinstance(data, str) else data).decode()

    headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])

    return {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp_ms": msg.timestamp()[1],
        "key": b64(msg.key()),
        "value": b64(msg.value()),
        "headers": [{"key": k, "value": b64(v)} for k, v in headers],
    }


def file_export(out: TextIO) -> Callable[[int], Export]:
    """`--to-file`: one JSON line per record (`record_json`)."""

    def write(msg: Message) -> None:
        out.write(json.dumps(record_json(msg), separators=(",", ":")) + "\n")

    return lambda _partitions: write


class TopicExport:
    """Copies of the records into a topic of either cluster (new or empty: one holding records is refused before
    anything is read), each in its source partition's number (the topic is created with enough of them)."""

    def __init__(self, config: MirrorwatchConfig, alias: str, topic: str, partitions: int) -> None:
        if alias not in config.clusters:
            raise FailoverUsageError(f"--to-topic {alias}:{topic}: no cluster {alias!r} in the config")
        cluster = config.clusters[alias]
        admin = new_admin(cluster, alias)
        existing = admin.list_topics(timeout=TIMEOUT_S).topics.get(topic)
        if existing is not None:
            held = watermarks(admin, [(topic, p) for p in existing.partitions])
            records = sum(w.end - w.start for w in held.values())
            if records:
                raise FailoverUsageError(
                    f"--to-topic {alias}:{topic} exists and holds {records} record(s): export to a new or empty topic"
                )
            if len(existing.partitions) < partitions:
                raise FailoverUsageError(
                    f"--to-topic {alias}:{topic} has {len(existing.partitions)} partition(s); the tail needs "
                    f"{partitions}"
                )
        else:
            create_topics(admin, {topic: partitions})
        self.topic, self.alias = topic, alias
        self._writer = CopyWriter(cluster, alias)

    @property
    def written(self) -> int:
        return self._writer.written

    def __call__(self, msg: Message) -> None:
        self._writer.write(self.topic, msg.partition() or 0, msg, cast(Headers | None, msg.headers()))

    def close(self) -> str | None:
        """Why not every copy was written (None: all were)."""
        return self._writer.close("not every copy was acknowledged within 30 s")


class CopyWriter:
    """Copies of records (key, value, headers, timestamp) through one idempotent producer with acks=all; what the
    target refused is kept for `close` to say."""

    def __init__(self, cluster: ClusterConfig, alias: str) -> None:
        self._producer: Producer = new_producer(cluster, alias, {"acks": "all", "enable.idempotence": True})
        self.failed: list[str] = []
        self.written = 0

    def write(self, topic: str, partition: int, msg: Message, headers: Headers | None) -> None:
        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                self.failed.append(error.str())
            else:
                self.written += 1

        kwargs: dict[str, Any] = {"key": msg.key(), "value": msg.value(), "partition": partition}
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                self._producer.produce(topic, timestamp=msg.timestamp()[1], on_delivery=delivered, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)

    def close(self, unacknowledged: str) -> str | None:
        """Why not every copy was written (`unacknowledged` when some were not answered within 30 s; None: all
        were)."""
        if self._producer.flush(TIMEOUT_S):
            return unacknowledged
        return "; ".join(self.failed[:3]) or None


def topic_export(config: MirrorwatchConfig, target: str, made: list[TopicExport]) -> Callable[[int], Export]:
    """`--to-topic ALIAS:TOPIC`: the export made once the partitions are known (appended to `made`, to be closed)."""
    alias, sep, topic = target.partition(":")
    if not sep or not alias or not topic:
        raise FailoverUsageError(f"--to-topic {target!r}: expected ALIAS:TOPIC (a cluster of the config)")

    def make(partitions: int) -> Export:
        made.append(TopicExport(config, alias, topic, partitions))
        return made[-1]

    return make
