"""The collector (the monitor's I/O shell): one immutable snapshot of a cluster's offsets and groups.

Per cluster and collection: the brokers and every partition's leader, replicas and in-sync replicas (the metadata
request), earliest and latest offsets of every partition (two batched ListOffsets requests), every consumer group with
its state, members and their assignments (one DescribeConsumerGroups request for all), and each group's
committed offsets: from the cluster's `__consumer_offsets` follower, or else one OffsetFetch per group, as the admin
API allows, all in flight at once before any is awaited (thousands of groups take seconds, not minutes). The
descriptions and the OffsetFetches are coordinator requests, asked in a child process (`kernel.group_offsets`:
librdkafka's admin client can crash the process that asks them, #5040 and #4605, when a coordinator moves). What
fails is recorded as data: an unreachable cluster is a snapshot with `up = False` and the reason; a partition or
group that errors has None offsets or an `error`. Nothing here raises for a Kafka failure.

Once a cluster's follower has answered, a round it cannot answer (the topic's leaders moving: a broker restarting, a
frozen one thawing) is a snapshot with `up = False` naming the topic, not a round of admin OffsetFetches to the same
moving coordinators (whose NOT_COORDINATOR answers are what crash librdkafka's admin client, confluentinc/librdkafka
#5040: it killed the monitor in a target-thaw incident before either guard). A round whose OffsetFetches got no
answer at all (the child crashed) reads the cluster down the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kernel.config import ClusterConfig
from kernel.group_offsets import FetchError, GroupOffsetsUnknown, described_groups
from kernel.kafka import error_text
from monitor.commit_follower import OFFSETS_TOPIC, CommitFollower
from monitor.snapshot import ClusterSnapshot, GroupInfo, Member, PartitionOffsets, Replicas

__all__ = ["ClusterSnapshot", "GroupInfo", "Member", "PartitionOffsets", "Replicas", "collect_cluster"]

TIMEOUT_S = 30.0
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]


class _CommitsUnreadable(Exception):
    """The cluster's follower answered before and cannot now: the commits are unknown for this round."""


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


def collect_cluster(
    admin: AdminClient,
    alias: str,
    now_ms: int,
    *,
    cluster: ClusterConfig,
    timeout_s: float = TIMEOUT_S,
    follower: CommitFollower | None = None,
    watched: Callable[[str], bool] | None = None,
) -> ClusterSnapshot:
    """Everything the monitor needs from one cluster, now. Never raises for a Kafka failure. With a `follower` that
    reads `__consumer_offsets`, committed offsets come from it (one request per collection instead of one per
    group); without one, or when it cannot answer, from the admin API. `watched`: the groups this monitor (shard)
    watches; default all."""
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
    brokers = {int(b.id): f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    replicas = {
        (name, p.id): Replicas(int(p.leader), tuple(p.replicas), tuple(p.isrs))
        for name, t in metadata.topics.items()
        if t.error is None
        for p in t.partitions.values()
    }
    try:
        groups, commits_from = _collect_groups(admin, cluster, alias, follower, timeout_s, watched)
    except (KafkaException, TimeoutError, _CommitsUnreadable, GroupOffsetsUnknown) as exc:  # e.g. frozen: time-outs
        return ClusterSnapshot(
            alias,
            now_ms,
            up=False,
            error=f"listing consumer groups: {error_text(exc) or 'no answer'}"
            if isinstance(exc, (KafkaException, TimeoutError))
            else str(exc),
            cluster_id=metadata.cluster_id,
            partitions=partitions,
            collect_seconds=time.monotonic() - started,
            brokers=brokers,
            replicas=replicas,
        )
    return ClusterSnapshot(
        alias,
        now_ms,
        up=True,
        cluster_id=metadata.cluster_id,
        partitions=partitions,
        groups=groups,
        collect_seconds=time.monotonic() - started,
        brokers=brokers,
        replicas=replicas,
        commits_from=commits_from,
    )


def _collect_groups(  # noqa: PLR0917 - the collection's context, passed down as it is
    admin: AdminClient,
    cluster: ClusterConfig,
    alias: str,
    follower: CommitFollower | None,
    timeout_s: float,
    watched: Callable[[str], bool] | None,
) -> tuple[dict[str, GroupInfo], str]:
    # Bounded by the collection's own time: a coordinator that has just moved or restarted answers "load in
    # progress" and librdkafka retries until the request times out (30 s seen after a source restart, while the
    # round went without the cluster's high-watermarks): a group not described in time says so for this round.
    deadline = time.monotonic() + timeout_s
    listing = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    listed = {g.group_id: g for g in listing.valid}
    wait_s = min(timeout_s, 5.0)
    table = follower.table(admin, wait_s) if follower is not None else None
    if table is None and follower is not None and follower.failure is None and follower.caught_up:
        raise _CommitsUnreadable(f"{OFFSETS_TOPIC} not read up to its end within {wait_s:g} s (commits unknown)")
    # a group with commits that the listing missed (it raced a coordinator move) is still a group
    ids = sorted(g for g in set(listed) | set(table or ()) if watched is None or watched(g))
    if not ids:
        return {}, "offsets-topic" if table is not None else "admin-api"
    # the descriptions and (without the follower's table) one OffsetFetch per group, the admin API's limit: all
    # coordinator requests, asked at once in the child (`kernel.group_offsets`: they can abort the asking process)
    try:
        described, fetched = described_groups(
            cluster,
            alias,
            ids,
            max(1.0, deadline - time.monotonic()),
            offsets_timeout_s=TIMEOUT_S if table is None else None,
        )
    except GroupOffsetsUnknown as exc:
        if table is None:
            raise  # the commits are unknown too: the cluster reads down for this round
        described, fetched = dict.fromkeys(ids, FetchError(str(exc))), {}  # the commits are the follower's
    groups: dict[str, GroupInfo] = {}
    for group_id in ids:
        entry = listed.get(group_id)
        state = str(getattr(entry.state, "name", entry.state)) if entry is not None else "UNKNOWN"
        simple = bool(entry.is_simple_consumer_group) if entry is not None else False
        members, error = 0, None
        assignments: dict[tuple[str, int], Member] = {}
        description = described.get(group_id, FetchError("no answer"))
        if isinstance(description, FetchError):
            error = f"describing: {description}"
        else:
            state, members = description.state, len(description.members)
            simple = simple or description.simple
            for member in description.members:
                holder = Member(member.host, member.member_id, member.client_id)
                for key in member.partitions:
                    assignments[key] = holder
        offsets: dict[tuple[str, int], int] = {}
        commit_ms: dict[tuple[str, int], int] = {}
        if table is not None:
            commits = {tp: commit for tp, commit in table.get(group_id, {}).items() if commit.offset >= 0}
            offsets = {tp: commit.offset for tp, commit in commits.items()}
            commit_ms = {tp: commit.commit_timestamp_ms for tp, commit in commits.items()}
        else:
            found = fetched.get(group_id, FetchError("no answer"))
            if isinstance(found, FetchError):
                error = f"fetching offsets: {found}"
            else:
                offsets = found
        groups[group_id] = GroupInfo(group_id, state, members, simple, offsets, error, assignments, commit_ms)
    return groups, "offsets-topic" if table is not None else "admin-api"
