"""The collector (the monitor's I/O shell): one immutable snapshot of a cluster's offsets and groups.

Per cluster and collection: earliest and latest offsets of every partition (two batched ListOffsets requests), every
consumer group with its state and member count (one DescribeConsumerGroups request for all), and each group's
committed offsets (one OffsetFetch per group, as the admin API allows, all in flight at once before any is awaited:
thousands of groups take seconds, not minutes). What fails is recorded as data: an unreachable cluster is a snapshot
with `up = False` and the reason; a partition or group that errors has None offsets or an `error`. Nothing here
raises for a Kafka failure.
"""

from __future__ import annotations

import time

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from mirrorwatch.kafka import error_text
from monitor.snapshot import ClusterSnapshot, GroupInfo, PartitionOffsets

__all__ = ["ClusterSnapshot", "GroupInfo", "PartitionOffsets", "collect_cluster"]

TIMEOUT_S = 30.0
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]


def _offsets(admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec) -> dict[tuple[str, int], int | None]:
    if not tps:
        return {}
    futures = admin.list_offsets(dict.fromkeys(tps, spec), request_timeout=TIMEOUT_S)
    out: dict[tuple[str, int], int | None] = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = int(future.result(timeout=TIMEOUT_S).offset)
        except (KafkaException, TimeoutError):
            out[(tp.topic, tp.partition)] = None
    return out


def collect_cluster(admin: AdminClient, alias: str, now_ms: int, *, timeout_s: float = TIMEOUT_S) -> ClusterSnapshot:
    """Everything the monitor needs from one cluster, now. Never raises for a Kafka failure."""
    started = time.monotonic()
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        return ClusterSnapshot(
            alias, now_ms, up=False, error=error_text(exc), collect_seconds=time.monotonic() - started
        )
    tps = [TopicPartition(name, p) for name, t in metadata.topics.items() if t.error is None for p in t.partitions]
    latest = _offsets(admin, tps, LATEST)
    earliest = _offsets(admin, tps, EARLIEST)
    partitions = {key: PartitionOffsets(earliest.get(key), latest.get(key)) for key in latest}
    try:
        groups = _collect_groups(admin)
    except KafkaException as exc:
        return ClusterSnapshot(
            alias,
            now_ms,
            up=False,
            error=f"listing consumer groups: {error_text(exc)}",
            cluster_id=metadata.cluster_id,
            partitions=partitions,
            collect_seconds=time.monotonic() - started,
        )
    return ClusterSnapshot(
        alias,
        now_ms,
        up=True,
        cluster_id=metadata.cluster_id,
        partitions=partitions,
        groups=groups,
        collect_seconds=time.monotonic() - started,
    )


def _collect_groups(admin: AdminClient) -> dict[str, GroupInfo]:
    listing = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    ids = [g.group_id for g in listing.valid]
    if not ids:
        return {}
    described = admin.describe_consumer_groups(ids, request_timeout=TIMEOUT_S)
    # One OffsetFetch per group (the admin API's limit): all submitted before any is awaited.
    fetches = {
        g: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)], request_timeout=TIMEOUT_S)[g]
        for g in ids
    }
    groups: dict[str, GroupInfo] = {}
    for listed in listing.valid:
        group_id = listed.group_id
        state, members, error = str(getattr(listed.state, "name", listed.state)), 0, None
        try:
            description = described[group_id].result(timeout=TIMEOUT_S)
            state, members = str(getattr(description.state, "name", description.state)), len(description.members)
        except KafkaException as exc:
            error = f"describing: {error_text(exc)}"
        offsets: dict[tuple[str, int], int] = {}
        try:
            for tp in fetches[group_id].result(timeout=TIMEOUT_S).topic_partitions or []:
                if tp.error is None and tp.offset >= 0:
                    offsets[(tp.topic, tp.partition)] = tp.offset
        except KafkaException as exc:
            error = f"fetching offsets: {error_text(exc)}"
        groups[group_id] = GroupInfo(group_id, state, members, bool(listed.is_simple_consumer_group), offsets, error)
    return groups
