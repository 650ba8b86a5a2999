"""`mirrorwatch failover plan`: for each consumer group of a link's source, where it must start on the target.

Reads the groups' committed offsets on the source (one OffsetFetch per group, all in flight at once), the target
partitions they map to (by the link's rename policy and partitioning), scans those partitions once (`scan`), and
translates every group from the same scan (`translate`). Read-only on both clusters. `apply` and `verify` start
from a plan.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from failover.by_time import read_record_at, translate_by_time
from failover.mm2 import read_checkpoints
from failover.mm2_format import Checkpoint
from failover.scan import TargetScans, Watermarks, echo_offsets, read_partitions, scan_target, watermarks
from failover.translate import (
    Lost,
    SourcePartition,
    SourceProgress,
    TargetLog,
    Translation,
    lost_unread,
    source_progress,
    translate,
)
from kernel.config import ClusterConfig, LinkConfig, MirrorwatchConfig
from kernel.control_store import published_facts
from kernel.errors import MirrorwatchError
from kernel.gap_ledger import GapLedger, newer
from kernel.group_offsets import FetchError, GroupOffsetsUnknown, described_groups
from kernel.group_offsets import committed_offsets as fetch_committed
from kernel.kafka import COORDINATOR_NOT_READY_NAMES, kafka_error, new_admin
from kernel.patterns import PatternError, compile_pattern
from kernel.rename import rename_policy
from kernel.topic_notes import PartitionNote, TopicLedger, topic_ids
from kernel.worker_status import Gap

__all__ = ["FailoverPlan", "FailoverUsageError", "GroupPlan", "TargetGroup", "make_plan"]

log = logging.getLogger("mirrorwatch.failover")

TIMEOUT_S = 30.0
COORDINATOR_WAIT_S = 120.0  # how long a group's coordinator may take to answer a description (loading, moving)


class FailoverUsageError(MirrorwatchError):
    """A failover command asked for something that is not there (unknown group, no commits, an unmirrored topic):
    nothing was committed."""

    exit_code = 2


@dataclass(frozen=True)
class TargetGroup:
    """The group a source group becomes on the target, as it is there now."""

    group: str
    state: str  # Kafka's group state; "Dead" when the group does not exist
    members: int
    committed: dict[tuple[str, int], int]


@dataclass(frozen=True)
class GroupPlan:
    group: str
    target: TargetGroup
    commits: dict[SourcePartition, int]
    translations: list[Translation]
    sources: list[SourceProgress]
    unmirrored: list[str] = field(default_factory=list)  # committed source topics with nothing on the target
    # committed source topics deleted and created again since the link copied them (`on_recreate: stop`): their
    # copies on the target are the old topic's records, under the same offsets; not translated
    recreated: list[str] = field(default_factory=list)
    lost: list[Lost] = field(default_factory=list)  # unread records the link never copied (`lost_unread`)

    @property
    def records_lost(self) -> int:
        return sum(lost.records for lost in self.lost)

    @property
    def read_twice(self) -> int | None:
        counts = [t.read_twice for t in self.translations]
        return None if None in counts else sum(c for c in counts if c is not None)

    @property
    def not_mirrored(self) -> int:
        return sum(s.not_mirrored for s in self.sources)

    @property
    def read_not_mirrored(self) -> int:
        """Records the group has read on the source whose copies the mirror has not written yet: a consumer
        starting on the target now would read them again when they arrive."""
        return sum(s.read_not_mirrored for s in self.sources)


@dataclass(frozen=True)
class FailoverPlan:
    link: str
    source: str
    target: str
    groups: list[GroupPlan]
    scanned_partitions: int
    scanned_records: int
    seconds: float
    logs: dict[tuple[str, int], TargetLog] = field(repr=False, compare=False, default_factory=dict)
    source_id: str = ""  # the source's cluster id (what provenance names)

    def to_json(self) -> dict[str, Any]:
        def group_json(g: GroupPlan) -> dict[str, Any]:
            return {
                "group": g.group,
                "target_group": g.target.group,
                "target_state": g.target.state,
                "target_members": g.target.members,
                "target_committed": [
                    {"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(g.target.committed.items())
                ],
                "partitions": [asdict(t) for t in g.translations],
                "sources": [asdict(s) for s in g.sources],
                "unmirrored_topics": g.unmirrored,
                "recreated_topics": g.recreated,
                "read_twice": g.read_twice,
                "not_mirrored": g.not_mirrored,
                "read_not_mirrored": g.read_not_mirrored,
                "lost": [{**asdict(lost), "records": lost.records} for lost in g.lost],
                "records_lost": g.records_lost,
            }

        return {
            "link": self.link,
            "source": self.source,
            "target": self.target,
            "scanned_partitions": self.scanned_partitions,
            "scanned_records": self.scanned_records,
            "seconds": round(self.seconds, 3),
            "groups": [group_json(g) for g in self.groups],
        }


def find_link(config: MirrorwatchConfig, name: str) -> LinkConfig:
    for link in config.links:
        if link.name == name:
            return link
    known = ", ".join(link.name for link in config.links) or "none"
    raise FailoverUsageError(f"no link {name!r} in the config (links: {known})")


def cluster_id_of(admin: AdminClient, alias: str) -> str:
    try:
        cluster_id = admin.list_topics(timeout=TIMEOUT_S).cluster_id
    except (KafkaException, TimeoutError) as exc:
        raise kafka_error(exc, f"reaching {alias}") from None
    return str(cluster_id)


def select_groups(
    admin: AdminClient,
    alias: str,
    names: Iterable[str],
    pattern: str | None,
    exclude: set[str],
    *,
    select: Callable[[str], bool] | None = None,
) -> list[str]:
    """The groups to translate: those named (each must exist), those matching `pattern` or `select`, or every group
    but the mirror's own."""
    try:
        listing = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    except (KafkaException, TimeoutError) as exc:
        raise kafka_error(exc, f"listing consumer groups on {alias}") from None
    existing = {g.group_id for g in listing.valid}
    named = list(dict.fromkeys(names))
    unknown = [g for g in named if g not in existing]
    if unknown:
        raise FailoverUsageError(f"no consumer group {', '.join(map(repr, unknown))} on {alias}")
    if named:
        return named
    if select is not None:
        return sorted(g for g in existing if select(g) and g not in exclude)
    if pattern is not None:
        try:
            regex = compile_pattern(pattern)
        except PatternError as exc:
            raise FailoverUsageError(f"--groups {pattern!r} is refused: {exc}") from None
        return sorted(g for g in existing if regex.fullmatch(g) and g not in exclude)
    return sorted(g for g in existing if g not in exclude)


def committed_offsets(
    cluster: ClusterConfig, alias: str, groups: list[str], *, optional: str | None = None
) -> dict[str, dict[tuple[str, int], int]]:
    """Each group's committed offsets (one OffsetFetch per group, as the admin API allows, all in flight at once, in
    the child process of `kernel.group_offsets`: librdkafka's admin OffsetFetch can crash the asking process
    when a coordinator moves, and a standby round runs inside the monitor). The `optional` group is fetched in the
    same round; where its offsets cannot be read (a principal without Describe on it) it is left out."""
    wanted = groups if optional is None or optional in groups else [*groups, optional]
    out: dict[str, dict[tuple[str, int], int]] = {}
    for group, found in fetch_committed(cluster, alias, wanted, TIMEOUT_S).items():
        if isinstance(found, FetchError):
            if group == optional and group not in groups:
                continue
            raise found.exception(f"fetching the offsets of group {group!r} on {alias}")
        out[group] = found
    return out


def _describe_groups(cluster: ClusterConfig, alias: str, groups: list[str]) -> dict[str, tuple[str, int]]:
    """Each group's (state, members), asked again for up to `COORDINATOR_WAIT_S` where its coordinator is moving or
    not loaded yet, or did not answer in time (a brand-new cluster creates `__consumer_offsets` at its first group
    request: fifty partitions, tens of seconds on a loaded machine). Asked in the child of `kernel.group_offsets`: a
    coordinator request can abort the asking process (librdkafka#4605)."""
    out: dict[str, tuple[str, int]] = {}
    todo, deadline, said = list(groups), time.monotonic() + COORDINATOR_WAIT_S, False
    while todo:
        try:
            described, _ = described_groups(cluster, alias, todo, min(TIMEOUT_S, max(1.0, deadline - time.monotonic())))
        except GroupOffsetsUnknown as exc:  # the child crashed or gave no answer (ask again), or the process stops
            described = dict.fromkeys(todo, FetchError(str(exc), exc.code, exc.retriable))
        again: list[str] = []
        for group in todo:
            found = described.get(group, FetchError("no answer", "_TIMED_OUT", True))
            if isinstance(found, FetchError):
                # librdkafka says a request that ran out of time is not retriable (_TIMED_OUT): here it is, within
                # the wait (a brand-new cluster's first group request can outlast one request's timeout)
                answerable = found.code in COORDINATOR_NOT_READY_NAMES or found.retriable or found.code == "_TIMED_OUT"
                if answerable and time.monotonic() < deadline:
                    again.append(group)
                    continue
                raise found.exception(f"describing group {group!r} on {alias}")
            out[group] = (found.state.title(), len(found.members))
        todo = again
        if todo:
            if not said:
                log.info("%s: %d group(s) not described yet (%s); asking again", alias, len(todo), described[todo[0]])
                said = True
            time.sleep(0.5)
    return out


def target_groups(cluster: ClusterConfig, alias: str, groups: list[str]) -> dict[str, TargetGroup]:
    if not groups:
        return {}
    described = _describe_groups(cluster, alias, groups)  # first: its retries wait out coordinators still loading
    offsets = committed_offsets(cluster, alias, groups)
    out: dict[str, TargetGroup] = {}
    for group in groups:
        state, members = described[group]
        if state.upper() == "DEAD" or (state.upper() == "UNKNOWN" and not offsets[group]):
            state = "Dead"
        out[group] = TargetGroup(group, state, members, offsets[group])
    return out


def _partitions_of(admin: AdminClient, alias: str, topics: set[str]) -> dict[str, int]:
    try:
        metadata = admin.list_topics(timeout=TIMEOUT_S)
    except (KafkaException, TimeoutError) as exc:
        raise kafka_error(exc, f"reading topics of {alias}") from None
    return {t: len(m.partitions) for t, m in metadata.topics.items() if t in topics and m.error is None}


def make_plan(
    config: MirrorwatchConfig,
    link_name: str,
    *,
    groups: Iterable[str] = (),
    pattern: str | None = None,
    group_map: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    select: Callable[[str], bool] | None = None,
    scans: TargetScans | None = None,
    mm2_checkpoints: str | None = None,
) -> FailoverPlan:
    """The plan for the groups named, matching `pattern` or `select` (default: all but the mirrors' own). With
    `scans` (a standby's), the target partitions are read on from where its last round ended."""
    started = time.monotonic()
    link = find_link(config, link_name)
    source_cluster, target_cluster = config.clusters[link.source], config.clusters[link.target]
    checkpoints = read_checkpoints(target_cluster, link.target, mm2_checkpoints) if mm2_checkpoints else {}
    if mm2_checkpoints and not checkpoints:
        raise FailoverUsageError(f"no MirrorMaker 2 checkpoint in {link.target}:{mm2_checkpoints}")
    clusters = _Clusters(link, source_cluster, target_cluster, checkpoints)
    source_admin = new_admin(source_cluster, link.source)
    target_admin = new_admin(target_cluster, link.target)
    source_id = cluster_id_of(source_admin, link.source)
    own = {ln.consumer_group for ln in config.links}
    selected = select_groups(source_admin, link.source, groups, pattern, own, select=select)
    # the link's own group says how far the mirror has got where the target cannot (see `source_progress`)
    commits = committed_offsets(source_cluster, link.source, selected, optional=link.consumer_group)
    mirror_committed = commits.get(link.consumer_group, {}) if link.consumer_group not in selected else {}
    commits = {g: c for g, c in commits.items() if g in selected}
    named = list(groups)
    empty = [g for g in named if not commits.get(g)]
    if empty:
        raise FailoverUsageError(
            f"group {', '.join(map(repr, empty))} has no committed offsets on {link.source}: nothing to translate"
        )
    # topics the link does not select are not translated (they are named in the plan)
    commits, outside = _without({g: c for g, c in commits.items() if c}, lambda t: not link.topics.matches(t))
    policy = rename_policy(link.rename, link.source)
    target_topic_of = {t: policy.target_topic(t) for c in commits.values() for t, _ in c}
    # the link's ledgers as its workers on every host published them, with this host's
    older, recreated = _generations(
        config, link.name, source_admin, target_topic_of, (published := published_facts(config, link)).notes
    )
    commits, recreated_of = _without(commits, recreated.__contains__)
    target_partitions = _partitions_of(target_admin, link.target, set(target_topic_of.values()))

    wanted = _wanted_partitions(link, commits, target_topic_of, target_partitions)
    floors = _floors(commits)
    ends: dict[tuple[str, int], Watermarks] = watermarks(target_admin, sorted(wanted))
    source_ends = watermarks(source_admin, sorted(floors))
    if scans is not None:  # a standby's round (not failback-aware: see docs/guides/failover.md)
        logs = scans.update(ends, source_id, floors, older)
    else:
        echo = None
        if any(ln.source == link.target and ln.target == link.source for ln in config.links):
            # a link the other way (failback, active-active): records written on the target first, whose copies
            # the groups read on the source, count as those copies
            echo = echo_offsets(source_cluster, link.source, source_ends, cluster_id_of(target_admin, link.target))
        logs = scan_target(
            target_cluster, link.target, ends, source_id, floors, progress=progress, echo=echo, older=older
        )

    mapping = group_map or {}
    targets = target_groups(target_cluster, link.target, sorted({mapping.get(g, g) for g in commits}))
    plans: list[GroupPlan] = []
    for group in sorted(commits):
        target = targets[mapping.get(group, group)]
        plan = _group_plan(
            clusters, group, commits[group], target, target_topic_of, logs, source_ends, mirror_committed
        )
        plan.unmirrored.extend(outside[group])
        plan.recreated.extend(recreated_of[group])
        plans.append(plan)
    plans = _with_losses(config, link, published.gaps, _records_not_mirrored(source_cluster, link.source, plans))
    for g in named:
        plan = next(p for p in plans if p.group == g)
        if not plan.translations:
            topics = ", ".join([*plan.unmirrored, *(f"{t} (deleted and created again since)" for t in plan.recreated)])
            raise FailoverUsageError(
                f"group {g!r} committed only on topics link {link.name} has not mirrored to {link.target}: {topics}"
            )
    return FailoverPlan(
        link.name,
        link.source,
        link.target,
        plans,
        scanned_partitions=len(logs),
        scanned_records=sum(log.records for log in logs.values()),
        seconds=time.monotonic() - started,
        logs=logs,
        source_id=source_id,
    )


def _wanted_partitions(
    link: LinkConfig,
    commits: dict[str, dict[SourcePartition, int]],
    target_topic_of: dict[str, str],
    target_partitions: dict[str, int],
) -> set[tuple[str, int]]:
    """The target partitions that can hold the committed source partitions' records: the same partition when the
    link preserves partitions, every partition of the target topic otherwise."""
    wanted: set[tuple[str, int]] = set()
    for c in commits.values():
        for topic, partition in c:
            tt = target_topic_of[topic]
            count = target_partitions.get(tt)
            if count is None:
                continue
            if link.partitioning == "preserve":
                if partition < count:
                    wanted.add((tt, partition))
            else:
                wanted.update((tt, p) for p in range(count))
    return wanted


def _group_plan(  # noqa: PLR0917 - the plan's parts, each read once
    clusters: _Clusters,
    group: str,
    commits: dict[SourcePartition, int],
    target: TargetGroup,
    target_topic_of: dict[str, str],
    logs: dict[tuple[str, int], TargetLog],
    source_ends: dict[tuple[str, int], Watermarks],
    mirror_committed: dict[SourcePartition, int],
) -> GroupPlan:
    link = clusters.link
    translations: list[Translation] = []
    unmirrored: list[str] = []
    exact: set[str] = set()  # source topics translated by provenance (what this link wrote)
    for source_topic in sorted({t for t, _ in commits}):
        tt = target_topic_of[source_topic]
        mine = {sp: o for sp, o in commits.items() if sp[0] == source_topic}
        topic_logs = [log for (t, _), log in sorted(logs.items()) if t == tt]
        if link.partitioning == "preserve":
            topic_logs = [log for log in topic_logs if (source_topic, log.partition) in mine]
        if any(sp in log.last_seen for log in topic_logs for sp in mine):
            translations.extend(translate(log, mine) for log in topic_logs)
            exact.add(source_topic)
        elif topic_logs and any(log.records for log in topic_logs):
            # another mirror wrote this topic (no provenance of this source): its checkpoint when asked for and
            # there is one, else by timestamp, partition for partition
            for (topic, partition), offset in sorted(mine.items()):
                log = logs.get((tt, partition))
                if log is None or log.end is None:
                    continue
                checkpoint = clusters.checkpoints.get((group, tt, partition)) or clusters.checkpoints.get(
                    (group, topic, partition)
                )
                if checkpoint is not None:
                    translations.append(_from_checkpoint(checkpoint, tt, offset, log.end))
                    continue
                first = read_record_at(clusters.source, link.source, topic, partition, offset)
                translations.append(
                    translate_by_time(clusters.target, link.target, tt, partition, end=log.end, first_unread=first)
                )
        else:
            unmirrored.append(source_topic)
    # what the group read that the link has not copied yet is known where the link wrote the topic (another
    # mirror's progress is not this link's group)
    sources = [
        source_progress(
            sp,
            o,
            source_ends[sp].end,
            logs.values(),
            log_start=source_ends[sp].start if sp[0] in exact else None,
            mirror_committed=mirror_committed.get(sp) if sp[0] in exact else None,
        )
        for sp, o in sorted(commits.items())
        if sp[0] not in unmirrored
    ]
    return GroupPlan(group, target, commits, translations, sources, unmirrored)


def _without(
    commits: dict[str, dict[SourcePartition, int]], dropped: Callable[[str], bool]
) -> tuple[dict[str, dict[SourcePartition, int]], dict[str, list[str]]]:
    """Each group's commits less those on the topics `dropped` says, and those topics per group."""
    kept = {g: {sp: o for sp, o in c.items() if not dropped(sp[0])} for g, c in commits.items()}
    return kept, {g: sorted({t for t, _ in c if dropped(t)}) for g, c in commits.items()}


def _floors(commits: dict[str, dict[SourcePartition, int]]) -> dict[SourcePartition, int]:
    """The lowest commit of any group per source partition: no translation lies before it."""
    floors: dict[SourcePartition, int] = {}
    for c in commits.values():
        for sp, offset in c.items():
            floors[sp] = min(offset, floors.get(sp, offset))
    return floors


def _generations(
    config: MirrorwatchConfig,
    link: str,
    source_admin: AdminClient,
    target_topic_of: dict[str, str],
    published: Iterable[PartitionNote],
) -> tuple[dict[tuple[str, int], dict[SourcePartition, int]], set[str]]:
    """Which copies on the target are of the source topics as they are now, from the notes of the link's workers
    (`kernel.topic_notes`: this host's, and those published on the progress topic from every host, the later of
    two): per target partition, where each source partition restarted after its topic was deleted and created again
    begins (`TargetLog.older`), and the source topics deleted and created again since the link last copied them
    (their copies are the old topic's)."""
    ledger = TopicLedger(config.state_path / "topics", link)
    ledger.read()
    latest = {(n.topic, n.partition): n for n in ledger.notes()}
    for note in published:
        known = latest.get((note.topic, note.partition))
        if known is None or note.noted_ms > known.noted_ms:
            latest[(note.topic, note.partition)] = note
    notes = [n for n in latest.values() if n.topic in target_topic_of and n.topic_id]
    if not notes:
        return {}, set()
    ids = topic_ids(source_admin, {n.topic for n in notes})
    older: dict[tuple[str, int], dict[SourcePartition, int]] = {}
    recreated: set[str] = set()
    for note in notes:
        now = ids.get(note.topic)
        if not now:
            continue
        if now != note.topic_id:
            recreated.add(note.topic)
            continue
        for partition, begins in note.target_from.items():
            older.setdefault((target_topic_of[note.topic], int(partition)), {})[(note.topic, note.partition)] = begins
    return older, recreated


def _with_losses(
    config: MirrorwatchConfig, link: LinkConfig, published: Iterable[Gap], plans: list[GroupPlan]
) -> list[GroupPlan]:
    """Each group's unread records the link never copied, from the link's ledger of gaps: this host's, with what the
    link's workers on every host published on its target's progress topic (`kernel.gap_ledger`)."""
    known = {g.key: g for g in GapLedger(config.state_path / "lost", link.name).gaps()}
    for gap in published:
        known[gap.key] = newer(known.get(gap.key), gap)
    gaps = tuple(sorted(known.values(), key=lambda g: g.at_ms))
    for plan in plans:
        plan.lost.extend(lost_unread(plan.commits, gaps))
    return plans


def _records_not_mirrored(cluster: ClusterConfig, alias: str, plans: list[GroupPlan]) -> list[GroupPlan]:
    """Offsets are not records: where a group is ahead of the mirror, the stretch between what the mirror passed and
    the group's commit is read on the source (read_committed, as the mirror reads) and only its records are counted.
    A transaction's marker after the last record the mirror copied is an offset no mirror writes (and commits past
    only once it has seen the partition's end), and a group caught up with a transactional topic has committed past
    it."""
    ranges: dict[SourcePartition, tuple[int, int]] = {}
    for g in plans:
        for s in g.sources:
            if s.read_not_mirrored and s.mirrored_to is not None:
                lo, hi = ranges.get((s.topic, s.partition), (s.mirrored_to, s.committed))
                ranges[(s.topic, s.partition)] = (min(lo, s.mirrored_to), max(hi, s.committed))
    if not ranges:
        return plans
    found: dict[SourcePartition, list[int]] = {sp: [] for sp in ranges}
    read_partitions(
        cluster,
        alias,
        {sp: Watermarks(lo, hi) for sp, (lo, hi) in ranges.items()},
        {sp: lo for sp, (lo, _hi) in ranges.items()},
        on_record=lambda sp, offset, _msg: found[sp].append(offset),
        on_done=lambda _sp: None,
        progress=None,
    )

    def counted(s: SourceProgress) -> SourceProgress:
        if not s.read_not_mirrored or s.mirrored_to is None:
            return s
        offsets = found[(s.topic, s.partition)]
        below = bisect_left(offsets, s.committed)
        count = below - bisect_left(offsets, s.mirrored_to)
        return replace(s, read_not_mirrored=count, mirror_must_reach=offsets[below - 1] + 1 if count else None)

    return [replace(g, sources=[counted(s) for s in g.sources]) for g in plans]


@dataclass(frozen=True)
class _Clusters:
    link: LinkConfig
    source: ClusterConfig
    target: ClusterConfig
    checkpoints: dict[tuple[str, str, int], Checkpoint] = field(default_factory=dict)


def _from_checkpoint(checkpoint: Checkpoint, topic: str, committed: int, end: int) -> Translation:
    how = f"MirrorMaker 2's checkpoint: upstream {checkpoint.upstream} -> downstream {checkpoint.downstream}"
    if checkpoint.upstream != committed:
        how += f" (the group is at {committed} now: the checkpoint is older than its last commit)"
    offset = min(checkpoint.downstream, end)
    return Translation(topic, checkpoint.partition, offset, "mm2-checkpoint", how, None, end - offset, end)
