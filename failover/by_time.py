"""Time-based translation, for target topics another mirror wrote (MirrorMaker 1/2, Replicator: no provenance).

For a group committed at O on a source partition: the source record at O (the first unread one) is read, and the
target offset is the first whose timestamp is at or after that record's (ListOffsets by timestamp, what
`offsetsForTimes` does). MirrorMaker 1/2 and Replicator keep each record's timestamp and the partition's order, so
the first unread record's copy is at or after that offset and nothing unread lies before it: no record is missed.
What a consumer reads twice are the records between that offset and the copy of O: records with the same timestamp
(or later ones, when timestamps go backwards) that the group had read. To count them, the copy of O is looked for
from there on by timestamp, key and value (up to `MATCH_LIMIT` records); when it is not found the count is unknown,
and the answer says so. A mirror's own replays after O (duplicates its crash wrote) are beyond what this can see.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from failover.translate import Translation
from kernel.config import ClusterConfig
from kernel.kafka import kafka_error, new_consumer

__all__ = ["MATCH_LIMIT", "SourceRecord", "read_record_at", "translate_by_time"]

MATCH_LIMIT = 10_000
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SourceRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


def _reader(cluster: ClusterConfig, alias: str) -> Consumer:
    return new_consumer(
        cluster,
        alias,
        "mirrorwatch-failover-reader",  # assigned, never joined nor committed
        {"enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed"},
    )


def _first(consumer: Consumer, what: str) -> Message | None:
    """The next record of the only assigned partition, None at its end."""
    for _ in range(int(TIMEOUT_S / 0.5)):
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return None
            raise kafka_error(err, f"reading {what}")
        return msg
    raise kafka_error(KafkaException(KafkaError(KafkaError._TIMED_OUT)), f"reading {what}")


def read_record_at(cluster: ClusterConfig, alias: str, topic: str, partition: int, offset: int) -> SourceRecord | None:
    """The first record at or after `offset` (a gap — transaction marker, aborted or compacted record — skips to
    the next), None when there is none yet."""
    consumer = _reader(cluster, alias)
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        msg = _first(consumer, f"{alias}:{topic}[{partition}]@{offset}")
        if msg is None:
            return None
        return SourceRecord(msg.offset() or 0, msg.timestamp()[1], msg.key(), msg.value())
    finally:
        consumer.close()


def translate_by_time(
    cluster: ClusterConfig, alias: str, topic: str, partition: int, *, end: int, first_unread: SourceRecord | None
) -> Translation:
    """The target offset for a group whose first unread source record is `first_unread` (None: it has read
    everything the source holds, so it starts at the target's end)."""
    if first_unread is None:
        return Translation(topic, partition, end, "time", "the end: the group has read all the source holds", 0, 0, end)
    consumer = _reader(cluster, alias)
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, partition, first_unread.timestamp_ms)], timeout=TIMEOUT_S
        )
        start = found[0].offset if found and found[0].offset >= 0 else end
        if start >= end:
            how = (
                f"the end: nothing on the target is as recent as the first unread record ({first_unread.timestamp_ms})"
            )
            return Translation(topic, partition, end, "time", how, 0, 0, end)
        consumer.assign([TopicPartition(topic, partition, start)])
        for position in range(start, min(end, start + MATCH_LIMIT)):
            msg = _first(consumer, f"{alias}:{topic}[{partition}]@{position}")
            if msg is None:
                break
            if (msg.timestamp()[1], msg.key(), msg.value()) == (
                first_unread.timestamp_ms,
                first_unread.key,
                first_unread.value,
            ):
                twice = (msg.offset() or 0) - start
                how = (
                    f"the first record at or after the first unread record's timestamp {first_unread.timestamp_ms}; "
                    f"its copy is {twice} record(s) later"
                )
                return Translation(topic, partition, start, "time", how, twice, end - start - twice, end)
        how = (
            f"the first record at or after the first unread record's timestamp {first_unread.timestamp_ms}; its copy "
            f"was not found within {MATCH_LIMIT} records, so what is read twice is unknown"
        )
        return Translation(topic, partition, start, "time", how, None, end - start, end)
    except KafkaException as exc:
        raise kafka_error(exc, f"translating {alias}:{topic}[{partition}] by time") from None
    finally:
        consumer.close()
