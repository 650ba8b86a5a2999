"""Helpers for integration tests on real clusters: records to produce, and reading a topic back completely."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from kernel.config import ClusterConfig
from kernel.kafka import create_topics, new_admin, new_consumer, new_producer
from kernel.provenance import read_provenance
from kernel.wait import wait_until


@dataclass(frozen=True)
class Record:
    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class ReadRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int

    @classmethod
    def of(cls, msg: Message) -> ReadRecord:
        return cls(
            msg.topic() or "",
            msg.partition() or 0,
            msg.offset() or 0,
            msg.key(),
            msg.value(),
            tuple(cast(list[tuple[str, bytes]], msg.headers() or [])),
            msg.timestamp()[1],
        )


@dataclass
class Delivered:
    positions: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset) per record, in order
    errors: list[str] = field(default_factory=list)


def produce(cluster: ClusterConfig, alias: str, topic: str, records: list[Record]) -> Delivered:
    """Produce with acks=all and wait for every delivery report; the test fails if any record was not written."""
    producer = new_producer(cluster, alias, {"acks": "all", "enable.idempotence": True, "linger.ms": 5})
    delivered = Delivered()
    slots: list[tuple[int, int] | None] = [None] * len(records)

    for i, rec in enumerate(records):

        def report(err: object, msg: object, i: int = i) -> None:
            if err is not None:
                delivered.errors.append(str(err))
            else:
                slots[i] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        kwargs: dict[str, object] = {"value": rec.value, "key": rec.key, "on_delivery": report}
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        if rec.headers:
            kwargs["headers"] = list(rec.headers)
        if rec.timestamp_ms is not None:
            kwargs["timestamp"] = rec.timestamp_ms
        while True:
            try:
                producer.produce(topic, **kwargs)  # type: ignore[arg-type]
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records still undelivered after 60 s"
    assert not delivered.errors, delivered.errors[:5]
    delivered.positions = [s for s in slots if s is not None]
    assert len(delivered.positions) == len(records)
    return delivered


def read_all(
    cluster: ClusterConfig,
    alias: str,
    topic: str,
    expected: int,
    *,
    timeout_s: float = 60.0,
    partitions: int | None = None,
) -> list[ReadRecord]:
    """Read a topic from the beginning (no group offsets) until `expected` records arrived; fail after `timeout_s`."""
    consumer: Consumer = new_consumer(cluster, alias, "mirrorwatch-test-reader", {"enable.auto.commit": False})
    try:
        if partitions is None:  # the topic may not exist yet (a mirror creates it): wait for it

            def partition_count() -> int:
                metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
                return len(metadata.partitions) if metadata is not None and metadata.error is None else 0

            partitions = wait_until(partition_count, timeout_s=timeout_s, description=f"topic {alias}:{topic}")
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[ReadRecord] = []

        def enough() -> bool:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                assert err is None, err
                out.append(ReadRecord.of(msg))
            return len(out) >= expected

        wait_until(enough, timeout_s=timeout_s, interval_s=0, description=f"{expected} records on {alias}:{topic}")
        return out
    finally:
        consumer.close()


def produce_transactions(
    cluster: ClusterConfig,
    alias: str,
    topic: str,
    partitions: int,
    transactional_id: str,
    *,
    transactions: int,
    size: int,
) -> dict[int, list[bytes]]:
    """`transactions` transactions of `size` records each (keys 0..size-1 over the partitions in turn): the second of
    every three aborted, the others committed, so the last one is committed when `transactions` is a multiple of 3.
    Returns the committed values per partition, in order: what a read_committed consumer reads."""
    producer = new_producer(cluster, alias, {"transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(30)
    kept: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for batch in range(transactions):
        producer.begin_transaction()
        values = [f"r{batch}-{i}".encode() for i in range(size)]
        for i, value in enumerate(values):
            producer.produce(topic, value=value, key=str(i).encode(), partition=i % partitions)
        if batch % 3 == 1:
            producer.flush(30)  # in the log before the abort (librdkafka drops what it has not sent yet)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            for i, value in enumerate(values):
                kept[i % partitions].append(value)
    return kept


def end_offsets(cluster: ClusterConfig, alias: str, topic: str, partitions: int) -> list[int]:
    """High-watermark of each partition; 0 for a partition that does not exist yet (a mirror has yet to create it)."""
    return [high for _, high in watermarks(cluster, alias, topic, partitions)]


_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]


def watermarks(
    cluster: ClusterConfig, alias: str, topic: str, partitions: int, admin: AdminClient | None = None
) -> list[tuple[int, int]]:
    """(log start offset, high-watermark) of each partition; (0, 0) for a partition that does not exist yet. The
    high-watermark as a read_committed consumer sees it (the last stable offset), as librdkafka's consumers read.

    Two ListOffsets requests for every partition at once, on `admin` (a wait's own client) or a new admin client:
    tests poll this many times a second while they wait, and a consumer made per poll (six requests) cost the lean
    test broker 14 ms of CPU each time, a new admin client 7 ms, a wait's own client well under 1 ms."""
    admin = admin or new_admin(cluster, alias)
    partitions_of = [TopicPartition(topic, p) for p in range(partitions)]

    def offsets(spec: OffsetSpec) -> list[int]:
        futures = admin.list_offsets(
            dict.fromkeys(partitions_of, spec), isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10
        )
        out = []
        for tp in partitions_of:
            try:
                out.append(futures[tp].result().offset)
            except KafkaException as exc:
                code = exc.args[0].code()
                if code == KafkaError._NOENT and not _exists(admin, topic):  # "no leaders found": no such topic
                    return [0] * partitions
                if code not in (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    raise
                out.append(0)
        return out

    def all_partitions() -> list[tuple[int, int]]:  # a just-created topic may have no leader yet: ask again
        return list(zip(offsets(_EARLIEST), offsets(_LATEST), strict=True))

    return wait_until(all_partitions, timeout_s=30, ignore=(KafkaException,), description=f"watermarks of {topic}")


def _exists(admin: AdminClient, topic: str) -> bool:
    """Whether the topic exists (a leaderless partition of one that does, right after a restart, is asked again)."""
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    return found is not None and (found.error is None or found.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART)


def committed_offsets(cluster: ClusterConfig, alias: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offset of each partition (-1001 when none). A coordinator that is still loading or has
    just moved (right after the cluster started) is asked again. (A consumer's OffsetFetch, not the admin client's:
    librdkafka 2.16's admin ListConsumerGroupOffsets crashed this process (SIGSEGV in rd_kafka_cgrp_op) answering a
    coordinator still loading; the product asks it in a child process, kernel.group_offsets.)"""
    consumer = new_consumer(cluster, alias, group, {"enable.auto.commit": False})
    try:
        return wait_until(
            lambda: _committed(consumer, topic, partitions),
            timeout_s=30,
            ignore=(KafkaException,),
            description=f"{group}'s offsets",
        )
    finally:
        consumer.close()


def _committed(consumer: Consumer, topic: str, partitions: int) -> list[int]:
    result = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    return [tp.offset for tp in sorted(result, key=lambda tp: tp.partition)]


def user_headers(record: ReadRecord) -> tuple[tuple[str, bytes], ...]:
    """The record's headers without mirrorwatch's provenance."""
    return tuple(h for h in record.headers if not h[0].startswith("mirrorwatch."))


def provenance(record: ReadRecord, name: str) -> bytes:
    """One provenance field (`source.offset`, `path`, ...) of a mirrored record, in whichever form it was written."""
    fields = read_provenance(record.headers)
    assert fields is not None, f"no provenance headers on {record}"
    return fields[name]


def by_partition(records: list[ReadRecord]) -> dict[int, list[ReadRecord]]:
    out: dict[int, list[ReadRecord]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out.setdefault(r.partition, []).append(r)
    return out


def read_to_end(
    cluster: ClusterConfig,
    alias: str,
    topic: str,
    partitions: int,
    *,
    timeout_s: float = 60.0,
    starts: list[int] | None = None,
) -> list[ReadRecord]:
    """Every committed record of a topic (read_committed, up to the last stable offset of each partition), from
    the beginning or from each partition's offset in `starts`."""
    consumer = new_consumer(
        cluster,
        alias,
        "mirrorwatch-test-reader",
        {"enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed"},
    )
    out: list[ReadRecord] = []
    at_end: set[int] = set()
    try:
        begin = starts if starts is not None else [OFFSET_BEGINNING] * partitions
        consumer.assign([TopicPartition(topic, p, begin[p]) for p in range(partitions)])

        def done() -> bool:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition() or 0)
                    continue
                assert err is None, err
                at_end.discard(msg.partition() or 0)
                out.append(ReadRecord.of(msg))
            return len(at_end) == partitions

        wait_until(done, timeout_s=timeout_s, interval_s=0, description=f"the end of {alias}:{topic}")
        return out
    finally:
        consumer.close()


def wait_for_commits(
    cluster: ClusterConfig,
    alias: str,
    group: str,
    topic: str,
    partitions: int,
    *,
    upto: list[int] | None = None,
    timeout_s: float = 120,
    description: str = "",
    while_running: Callable[[], bool] = lambda: True,
) -> list[int]:
    """Wait until `group` has committed `upto` on every partition (default: the high-watermarks); returns them.
    `while_running` is asked first each round and may raise (a mirror that exited fails the wait at once)."""
    target = upto if upto is not None else end_offsets(cluster, alias, topic, partitions)
    consumer = new_consumer(cluster, alias, group, {"enable.auto.commit": False})  # the wait's own: see watermarks
    try:
        wait_until(
            lambda: while_running() and _committed(consumer, topic, partitions) == target,
            timeout_s=timeout_s,
            ignore=(KafkaException,),
            description=description or f"{group} to commit {target} on {alias}:{topic}",
        )
    finally:
        consumer.close()
    return target


def wait_for_records(
    cluster: ClusterConfig,
    alias: str,
    topic: str,
    partitions: int,
    at_least: int,
    *,
    timeout_s: float = 120,
    description: str = "",
) -> int:
    """Wait until the topic's high-watermarks add up to at least `at_least` (> 0); returns the sum."""

    admin = new_admin(cluster, alias)  # the wait's own client (see watermarks)

    def enough() -> int:
        total = sum(high for _, high in watermarks(cluster, alias, topic, partitions, admin))
        return total if total >= at_least else 0

    return wait_until(
        enough,
        timeout_s=timeout_s,
        interval_s=0.05,
        description=description or f"{at_least} records on {alias}:{topic}",
    )


def topic_id(cluster: ClusterConfig, topic: str) -> str:
    admin = new_admin(cluster, "source")  # referenced until the answer: a client collected early fails its futures

    def described() -> str:
        (future,) = admin.describe_topics(TopicCollection([topic])).values()
        return str(future.result(timeout=30).topic_id)

    return wait_until(described, timeout_s=30, ignore=(KafkaException,), description=f"{topic}'s id")


def recreate(cluster: ClusterConfig, topic: str, partitions: int) -> None:
    """Delete `topic` and create it again (KRaft deletes asynchronously: the creation is retried until it takes)."""
    admin = new_admin(cluster, "source")
    (deleted,) = admin.delete_topics([topic], operation_timeout=30).values()
    deleted.result(timeout=30)

    def created() -> bool:
        if topic in admin.list_topics(timeout=10).topics:
            return False  # not gone yet
        return create_topics(admin, {topic: partitions}, config={"retention.ms": "-1"}) == [topic]

    wait_until(created, timeout_s=60, ignore=(KafkaException,), description=f"{topic} created again")


def remove_made(clusters: Mapping[str, ClusterConfig], made: re.Pattern[str]) -> list[str]:
    """Delete the topics and consumer groups whose names `made` finds (a test's, see conftest's `unique`) on every
    cluster: what could not be deleted, one line each (a group with a member still in it, a broker that does not
    answer). A worker's shared pair then holds as little for its 500th test as for its first: every monitor a later
    test starts lists and collects every topic and group there (measured: a monitor at a 1 s interval on a pair of 300
    topics and 600 groups cost 18 CPU-s in 40 s, brokers and monitor together, against 6 on an empty pair)."""
    left: list[str] = []
    for alias, cluster in clusters.items():
        admin = new_admin(cluster, alias)
        try:
            topics = [t for t in admin.list_topics(timeout=10).topics if made.search(t)]
            groups = [
                g.group_id
                for g in admin.list_consumer_groups(request_timeout=10).result(timeout=15).valid
                if made.search(g.group_id)
            ]
        except (KafkaException, TimeoutError) as exc:
            left.append(f"{alias}: not listed ({exc})")
            continue
        futures = list((admin.delete_topics(topics, operation_timeout=10) if topics else {}).items())
        futures += (admin.delete_consumer_groups(groups, request_timeout=10) if groups else {}).items()
        for name, future in futures:
            try:
                future.result(timeout=15)
            except (KafkaException, TimeoutError) as exc:
                left.append(f"{alias}: {name} ({exc})")
    return left
