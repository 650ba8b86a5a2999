"""From snapshots to what the monitor reports (pure): windows fed, groups evaluated, mirror links measured.

A mirror link's partition, in records:
- committed lag   = source high-watermark - committed offset (what Burrow and kafka_exporter see);
- replication lag = source high-watermark - acknowledged offset (what is really not yet safe on the target);
- in flight       = consumed - acknowledged (read, not yet acknowledged).
and in seconds: the age of the oldest record not yet acknowledged (0 when caught up; None when not known).

Every figure of a link describes one moment, stated with it (`observed_ms`):
- a partition a live worker owns is measured at the moment of that worker's status, against the high-watermark of
  that moment (the one the worker saw, or one the monitor read no later): a busy healthy link reads as caught up,
  not a second behind;
- a partition no live worker owns (crashed, frozen, rebalancing, not yet assigned) is measured *now* (or, when the
  link has live workers, at the moment of their newest status: one of them may have been given it since) from the
  best position known: the acknowledged position of any worker that owned it, live or gone (every record below it is on
  the target), or the group's committed offset, whichever is higher; its lag keeps growing with the source. "Not
  known" stays None, never 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

from mirrorwatch.config import LinkConfig
from mirrorwatch.worker_status import PartitionPosition, WorkerStatus
from monitor.evaluator import (
    EvaluatorConfig,
    GroupEvaluation,
    OffsetSample,
    PartitionEvaluation,
    evaluate_group,
    evaluate_partition,
)
from monitor.snapshot import ClusterSnapshot
from monitor.windows import OffsetWindows

__all__ = [
    "GroupView",
    "LinkPartitionView",
    "LinkView",
    "MonitorState",
    "RecordTimes",
    "SafePosition",
    "WorkerSighting",
    "append_bounds",
    "date_record",
    "evaluate_groups",
    "interpolate_record_time",
    "lag_age",
    "link_view",
    "observe_snapshot",
    "record_time",
    "safe_positions",
]

# (cluster alias, topic, partition, offset) -> when the record was written, in ms: its timestamp, dated by the monitor
# where its observations contradict it (`date_record`); None: the record is gone
RecordTimes = Mapping[tuple[str, str, int, int], int | None]


@dataclass(frozen=True)
class GroupView:
    cluster: str
    group: str
    state: str
    members: int
    evaluation: GroupEvaluation
    # The offset window each partition was evaluated on, as it was then (Burrow's consumer detail).
    windows: Mapping[tuple[str, int], tuple[OffsetSample, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class LinkPartitionView:
    topic: str
    partition: int
    target_topic: str
    high_watermark: int | None
    consumed: int | None
    acked: int | None
    committed: int | None
    replication_lag_records: int | None
    committed_lag_records: int | None
    in_flight_records: int
    replication_lag_seconds: float | None
    replication_lag_seconds_method: str | None = None  # "record", "interpolated" or "at_least" (see lag_age)
    observed_ms: int | None = None  # the moment these figures describe
    # Where the position comes from: "worker" (a live worker), "worker_gone" (the last status of a worker that is
    # gone or frozen), "committed" (the group's committed offset).
    position_from: str | None = None


@dataclass(frozen=True)
class LinkView:
    link: str
    source: str
    target: str
    consumer_group: str
    engine_running: bool  # at least one live worker reports (in memory or through a fresh status file)
    partitions: tuple[LinkPartitionView, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)  # the workers' counters, summed
    failure: str | None = None
    config_drift: tuple[Mapping[str, Any], ...] = ()  # source/target topic config differences the workers found
    workers: int = 0  # how many live workers reported
    clients: tuple[Mapping[str, Any], ...] = ()  # librdkafka statistics per worker and role (see ClientStats)
    workers_gone: int = 0  # workers that are dead, frozen or failed (and not restarted): their last status stands
    observed_ms: int = 0  # when the view was made

    @property
    def state(self) -> str:
        """ "running" (a live worker reports), "workers gone" (none live, but some were), or "not running"."""
        if self.engine_running:
            return "running"
        return "workers gone" if self.workers_gone else "not running"

    @property
    def replication_lag_records(self) -> int:
        return sum(p.replication_lag_records or 0 for p in self.partitions)

    @property
    def replication_lag_seconds(self) -> float | None:
        """The largest partition's; None while a partition that is behind (or may be) has no known age: never 0
        while records wait."""
        if any(p.replication_lag_seconds is None and p.replication_lag_records != 0 for p in self.partitions):
            return None
        return max((p.replication_lag_seconds or 0.0 for p in self.partitions), default=0.0)


@dataclass(frozen=True)
class MonitorState:
    """One collection round, published whole: every reader (HTTP routes, /metrics) answers from one of these, never
    from the service's live windows, so no answer mixes two rounds."""

    observed_ms: int
    clusters: Mapping[str, ClusterSnapshot]
    groups: Mapping[tuple[str, str], GroupView]
    links: Mapping[str, LinkView]
    last_success_ms: Mapping[str, int] = field(default_factory=dict)  # per cluster: its last good collection
    round_seconds: float = 0.0  # how long the round that made this state took


def observe_snapshot(windows: OffsetWindows, snapshot: ClusterSnapshot) -> None:
    """Add one observation per committed partition of every group (nothing when the cluster was down)."""
    if not snapshot.up:
        return
    for group in snapshot.groups.values():
        for (topic, partition), offset in group.offsets.items():
            offsets = snapshot.partitions.get((topic, partition))
            if offsets is None or offsets.latest is None:
                continue
            committed = group.commit_ms.get((topic, partition))
            sample = OffsetSample(offset, snapshot.observed_ms, offsets.latest, group.members > 0, commit_ms=committed)
            windows.observe((snapshot.alias, group.group_id, topic, partition), sample)


def _age_seconds(now_ms: int, timestamp_ms: int | None) -> float | None:
    return None if timestamp_ms is None else max(0.0, (now_ms - timestamp_ms) / 1000)


def interpolate_record_time(history: Sequence[OffsetSample], offset: int) -> int | None:
    """When the record at `offset` was written, from the high-watermarks observed over time (for a record that
    retention already removed). Before the oldest observation: that observation's time, so the age is a lower bound."""
    if not history or offset >= history[-1].high_watermark:
        return None
    if offset < history[0].high_watermark:
        return history[0].observed_ms
    for earlier, later in itertools.pairwise(history):
        if earlier.high_watermark <= offset < later.high_watermark:
            share = (offset - earlier.high_watermark) / (later.high_watermark - earlier.high_watermark)
            return earlier.observed_ms + int(share * (later.observed_ms - earlier.observed_ms))
    return None


def date_record(timestamp: int, offset: int, earlier: tuple[int, int] | None, later: tuple[int, int] | None) -> int:
    """When the record at `offset` was written: its timestamp, unless the source's high-watermarks observed either
    side of its arrival say otherwise. `earlier` (observed_ms, high-watermark) is an observation that had not reached
    the offset yet, `later` one that had. A timestamp outside that span (a producer clock ahead; a backfill's event
    times; records a producer held through a source outage) gives way to the point where the offset falls between
    the two high-watermarks; with only one of them, to that observation's time."""
    if _agrees(timestamp, earlier[0] if earlier else None, later[0] if later else None):
        return timestamp
    if earlier is None or later is None:  # not both: a timestamp with no bound at all agrees
        return (earlier or later or (timestamp, 0))[0]
    (after, low), (before, high) = earlier, later
    share = (offset - low) / (high - low) if high > low else 1.0
    return after + max(1, int(share * (before - after)))


def _agrees(timestamp: int, after: int | None, before: int | None) -> bool:
    """Whether a record's timestamp falls where the observations put its arrival: after `after`, by `before`."""
    return (after is None or timestamp > after) and (before is None or timestamp <= before)


def append_bounds(history: Sequence[OffsetSample], offset: int) -> tuple[int | None, int | None]:
    """When the record at `offset` became readable on the source, as the observed high-watermarks bound it: after the
    last observation that had not reached it; no later than the observation after the first that had (an
    observation's time is when its collection began and the high-watermark was read during it; the next began after
    it ended). None: no such observation. Both None when the history contradicts itself (a topic deleted and created
    again)."""
    after = max((s.observed_ms for s in history if s.high_watermark <= offset), default=None)
    reached = [i for i, s in enumerate(history) if s.high_watermark > offset]
    before = history[reached[0] + 1].observed_ms if reached and reached[0] + 1 < len(history) else None
    if after is not None and before is not None and after >= before:
        return None, None
    return after, before


def record_time(
    key: tuple[str, str, int, int], record_times: RecordTimes, history: Sequence[OffsetSample]
) -> tuple[int | None, str | None]:
    """When the record at `key` was written, and how that was found: "record" (its time as the monitor settled it:
    `date_record`), "interpolated" (from the high-watermark history), "at_least" (older than that history: the time
    is an upper bound, the age a lower one). None: unknown (not read yet).

    A record's timestamp is its producer's word (CreateTime: its clock, or an event time it chose; a backfill writes
    last week's). Where the high-watermarks in the group's window contradict it (the record was not on the source
    yet at a later moment, or already was at an earlier one), the window dates it instead: a producer's clock or
    event times never make a stuck link read as caught up, nor a caught-up one as a week behind."""
    if key not in record_times:
        return None, None  # not read (yet): unknown
    timestamp = record_times[key]
    offset = key[3]
    after = None
    if timestamp is not None:
        after, before = append_bounds(history, offset)
        if _agrees(timestamp, after, before):
            return timestamp, "record"
    interpolated = interpolate_record_time(history, offset)
    if interpolated is None:  # newer than the window: on the source only since its last observation without it
        return (after, "interpolated") if after is not None else (None, None)
    # Older than every high-watermark observed: the time is only an upper bound (the age a lower one).
    method = "at_least" if history and offset < history[0].high_watermark else "interpolated"
    return interpolated, method


def lag_age(
    now_ms: int, key: tuple[str, str, int, int], record_times: RecordTimes, history: Sequence[OffsetSample]
) -> tuple[float | None, str | None]:
    """Age in seconds of the record at `key`'s offset, and how its time was found (`record_time`)."""
    written, method = record_time(key, record_times, history)
    return _age_seconds(now_ms, written), method


def evaluate_groups(
    windows: OffsetWindows,
    snapshot: ClusterSnapshot,
    config: EvaluatorConfig,
    record_times: RecordTimes,
    markers_only: AbstractSet[tuple[str, str, int, int]] = frozenset(),
) -> dict[tuple[str, str], GroupView]:
    """Every group of the cluster evaluated against the high-watermarks of this snapshot. `markers_only`: the
    committed offsets with nothing but transaction markers from them to the end (the group is caught up there)."""
    views: dict[tuple[str, str], GroupView] = {}
    if not snapshot.up:
        return views
    now = snapshot.observed_ms
    for group in snapshot.groups.values():
        evaluations: list[PartitionEvaluation] = []
        evaluated: dict[tuple[str, int], tuple[OffsetSample, ...]] = {}
        for topic, partition in windows.partitions(snapshot.alias, group.group_id):
            offsets = snapshot.partitions.get((topic, partition))
            if offsets is None or offsets.latest is None:
                continue
            samples = evaluated[(topic, partition)] = windows.samples(
                (snapshot.alias, group.group_id, topic, partition)
            )
            committed = samples[-1].offset if samples else None
            lag_seconds, method, caught_up = None, None, False
            if committed is not None and committed < offsets.latest:
                key = (snapshot.alias, topic, partition, committed)
                lag_seconds, method = lag_age(now, key, record_times, samples)
                caught_up = key in markers_only
            # A lower bound proves neither that the lag is allowed (rule 1) nor that the records are fresh (rule 2):
            # the rules see it as unknown; the view still shows it, labelled "at_least".
            evaluation = evaluate_partition(
                topic,
                partition,
                samples,
                high_watermark_now=offsets.latest,
                now_ms=now,
                config=config,
                lag_seconds=None if method == "at_least" else lag_seconds,
                commit_gap_ms=windows.commit_gap_ms((snapshot.alias, group.group_id, topic, partition)),
                nothing_to_read=caught_up,
            )
            if method == "at_least":
                evaluation = replace(evaluation, lag_seconds=lag_seconds)
            if method is not None:  # (a replace per partition costs a second per 60,000 of them)
                evaluation = replace(evaluation, lag_seconds_method=method)
            evaluations.append(evaluation)
        views[(snapshot.alias, group.group_id)] = GroupView(
            snapshot.alias, group.group_id, group.state, group.members, evaluate_group(evaluations), evaluated
        )
    return views


@dataclass(frozen=True)
class WorkerSighting:
    """A worker's status as the monitor found it: `is_live` is false when the status is stale, its process is gone
    or stopped (same host), or the worker failed. A sighting that is not live still proves its acked positions."""

    status: WorkerStatus
    is_live: bool


@dataclass(frozen=True)
class SafePosition:
    """What is known of one partition of a link, and the moment it describes."""

    topic: str
    partition: int
    safe: int | None  # every record below is on the target (None: nothing known)
    observed_ms: int
    high_watermark: int | None  # the source high-watermark at observed_ms, as well as it is known
    position_from: str  # "worker", "worker_gone" or "committed"
    live: PartitionPosition | None = None  # the live worker's figures
    acked: int | None = None  # the best acknowledged position of any worker, live or gone
    committed: int | None = None
    target_topic: str | None = None

    @property
    def lag_records(self) -> int | None:
        if self.safe is None or self.high_watermark is None:
            return None
        return max(0, self.high_watermark - self.safe)


def safe_positions(
    link: LinkConfig,
    sightings: Sequence[WorkerSighting],
    source: ClusterSnapshot | None,
    now_ms: int,
    previous: ClusterSnapshot | None = None,
) -> dict[tuple[str, int], SafePosition]:
    """Per partition of the link, the best position known and the moment it describes (see the module docstring).
    `previous` is the source snapshot before `source`: a status that falls between the two is compared with the
    high-watermark interpolated between them (the worker's own stops moving while it cannot fetch)."""
    hwm = source.partitions if source is not None and source.up else {}
    observed_hwm_ms = source.observed_ms if source is not None and source.up else None
    # The group's commits on the topics the link mirrors: commits on a topic it no longer selects (the whitelist
    # narrowed) stay in the group, but are not the link's lag.
    committed = {
        key: offset
        for key, offset in (
            source.groups[link.consumer_group].offsets
            if source is not None and source.up and (link.consumer_group in source.groups)
            else {}
        ).items()
        if link.topics.matches(key[0])
    }
    live: dict[tuple[str, int], tuple[WorkerStatus, PartitionPosition]] = {}
    acked: dict[tuple[str, int], int] = {}
    target_topics: dict[tuple[str, int], str] = {}
    for sighting in sorted(sightings, key=lambda s: s.status.observed_ms):  # a later status wins a conflict
        for position in sighting.status.partitions:
            key = (position.topic, position.partition)
            target_topics[key] = position.target_topic
            now_high = hwm[key].latest if key in hwm else None
            # A position above a high-watermark read after it is from a topic since deleted and created again.
            recreated = (
                now_high is not None
                and observed_hwm_ms is not None
                and sighting.status.observed_ms <= observed_hwm_ms
                and position.acked is not None
                and position.acked > now_high
            )
            if position.acked is not None and not recreated:
                acked[key] = max(acked.get(key, position.acked), position.acked)
            if sighting.is_live:
                live[key] = (sighting.status, position)
        for position in sighting.status.released:  # durable on the target; not owned by this worker
            key = (position.topic, position.partition)
            target_topics.setdefault(key, position.target_topic)
            now_high = hwm[key].latest if key in hwm else None
            if position.acked is not None and (now_high is None or position.acked <= now_high):
                acked[key] = max(acked.get(key, position.acked), position.acked)
    # A partition no live worker reports was unowned as of the newest live status, not necessarily now: a worker
    # that has just been given it may already be mirroring it. With no live worker at all, nobody mirrors it now.
    live_moments = [s.status.observed_ms for s in sightings if s.is_live]
    unowned_ms = min(now_ms, max(live_moments)) if live_moments else now_ms
    out: dict[tuple[str, int], SafePosition] = {}
    for key in sorted({*live, *acked, *committed}):
        group_committed = committed.get(key)
        best_acked = acked.get(key)
        safe = _highest(best_acked, group_committed)
        now_high = hwm[key].latest if key in hwm else None
        if key in live:
            status, position = live[key]
            highs = [h for h in (position.high_watermark,) if h is not None]
            if (
                now_high is not None
                and observed_hwm_ms is not None
                and (observed_hwm_ms <= status.observed_ms or not highs)
            ):
                highs.append(now_high)  # read no later than the status (or the only one there is)
            elif now_high is not None and observed_hwm_ms is not None:
                between = _interpolated_high(previous, key, status.observed_ms, observed_hwm_ms, now_high)
                if between is not None:
                    highs.append(between)
            out[key] = SafePosition(
                key[0],
                key[1],
                safe,
                status.observed_ms,
                max(highs) if highs else None,
                "worker",
                position,
                best_acked,
                _highest(position.committed, group_committed),
                target_topics.get(key),
            )
        else:
            out[key] = SafePosition(
                key[0],
                key[1],
                safe,
                unowned_ms,
                now_high,
                "worker_gone" if best_acked is not None and best_acked >= (group_committed or 0) else "committed",
                None,
                best_acked,
                group_committed,
                target_topics.get(key),
            )
    return out


def _highest(*offsets: int | None) -> int | None:
    """The highest of the known offsets (None: none known)."""
    return max((o for o in offsets if o is not None), default=None)


def _interpolated_high(
    previous: ClusterSnapshot | None, key: tuple[str, int], at_ms: int, later_ms: int, later_high: int
) -> int | None:
    """The high-watermark at `at_ms`, between the previous snapshot's and the later one (linear, rounded down)."""
    if previous is None or not previous.up or key not in previous.partitions:
        return None
    earlier_high = previous.partitions[key].latest
    if earlier_high is None or not previous.observed_ms <= at_ms < later_ms:
        return None
    share = (at_ms - previous.observed_ms) / (later_ms - previous.observed_ms)
    return earlier_high + int(share * max(0, later_high - earlier_high))


def link_view(
    link: LinkConfig,
    *,
    sightings: Sequence[WorkerSighting],
    snapshot: ClusterSnapshot | None,
    record_times: RecordTimes,
    now_ms: int,
    history: Callable[[str, int], Sequence[OffsetSample]] = lambda _topic, _partition: (),
    target: ClusterSnapshot | None = None,
    positions: Mapping[tuple[str, int], SafePosition] | None = None,
) -> LinkView:
    """A link's per-partition lag from what its workers (live or gone) and its group say (see the module
    docstring). `positions` are `safe_positions(...)` when the caller already made them."""
    if positions is None:
        positions = safe_positions(link, sightings, snapshot, now_ms)
    stats: dict[str, Any] = {}
    failure = None
    drift: dict[tuple[str, str], Mapping[str, Any]] = {}
    clients: list[Mapping[str, Any]] = []
    live = [s.status for s in sightings if s.is_live]
    for status in sorted((s.status for s in sightings), key=lambda s: s.observed_ms):
        failure = status.failure or failure
    for status in live:
        for role, client in sorted(status.clients.items()):
            clients.append({**client, "role": role, "worker": str(status.worker)})
        for d in status.config_drift:
            drift[(d["source_topic"], d["config"])] = d
        for key, value in status.stats.items():
            if isinstance(value, int | float):
                stats[key] = stats.get(key, 0) + value
            elif isinstance(value, Mapping) and "counts" in value:  # a histogram: add bucket by bucket
                total = stats.setdefault(
                    key, {"buckets": value["buckets"], "counts": [0] * len(value["counts"]), "sum": 0.0}
                )
                total["counts"] = [a + b for a, b in zip(total["counts"], value["counts"], strict=True)]
                total["sum"] += value["sum"]
    partitions = [
        _partition_view(position, link.source, record_times, history(position.topic, position.partition))
        for position in positions.values()
    ]
    for d in _partition_count_drift(partitions, snapshot, target):
        drift[(d["source_topic"], d["config"])] = d
    return LinkView(
        link.name,
        link.source,
        link.target,
        link.consumer_group,
        bool(live),
        tuple(partitions),
        stats,
        failure,
        tuple(drift[k] for k in sorted(drift)),
        len(live),
        tuple(clients),
        # A worker whose number a live worker carries again was restarted: not gone.
        workers_gone=len({s.status.worker for s in sightings if not s.is_live} - {s.worker for s in live}),
        observed_ms=now_ms,
    )


def _partition_count_drift(
    partitions: Sequence[LinkPartitionView], source: ClusterSnapshot | None, target: ClusterSnapshot | None
) -> list[dict[str, Any]]:
    """Topics whose partition count differs between source and target (reported like a config difference)."""
    if source is None or target is None or not source.up or not target.up:
        return []
    source_counts, target_counts = source.topics(), target.topics()
    pairs = {(p.topic, p.target_topic) for p in partitions}
    return [
        {
            "source_topic": s,
            "target_topic": t,
            "config": "partition_count",
            "source_value": str(source_counts[s]),
            "target_value": str(target_counts[t]),
        }
        for s, t in sorted(pairs)
        if s in source_counts and t in target_counts and source_counts[s] != target_counts[t]
    ]


def _partition_view(
    position: SafePosition,
    source: str,
    record_times: RecordTimes,
    history: Sequence[OffsetSample],
) -> LinkPartitionView:
    lag = position.lag_records
    seconds: float | None = None
    method: str | None = None
    if lag == 0:
        seconds = 0.0
    elif lag is not None and position.safe is not None:
        key = (source, position.topic, position.partition, position.safe)
        written, method = record_time(key, record_times, history)
        if written is not None and written > position.observed_ms:
            lag, seconds, method = 0, 0.0, None  # the first record not on the target came after that moment
        else:
            seconds = _age_seconds(position.observed_ms, written)
    high = position.high_watermark
    live = position.live
    return LinkPartitionView(
        topic=position.topic,
        partition=position.partition,
        target_topic=position.target_topic or position.topic,  # without a worker's word: as named at the source
        high_watermark=high,
        consumed=live.consumed if live is not None else None,
        acked=position.acked,
        committed=position.committed,
        replication_lag_records=lag,
        committed_lag_records=max(0, high - position.committed)
        if high is not None and position.committed is not None
        else None,
        in_flight_records=live.in_flight_records if live is not None else 0,
        replication_lag_seconds=seconds,
        replication_lag_seconds_method=method,
        observed_ms=position.observed_ms,
        position_from=position.position_from,
    )
