"""A mirror link measured (pure): per partition, the best position known, the moment it describes, and its lag.

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
  link has live workers, at the moment of their newest status: one of them may have been given it since; or, when it
  was caught up, when the high-watermark was read: records the source took since wait for nobody) from the
  best position known: the acknowledged position of any worker that owned it, live or gone (every record below it is on
  the target), or the group's committed offset, whichever is higher; its lag keeps growing with the source. "Not
  known" stays None, never 0, and says why (`reason`): not measured yet, or a source the monitor cannot read (whose
  last high-watermark is only a floor: a partition caught up by it may not be now).

Figures are served for the moment they are read (`served_link`): between two rounds, a partition whose position has
not moved since its round (by the workers' statuses read again when it is served) is the oldest record it waits for
aged to now (or to its owner's newest status), growing a second per second through an outage; one that moved is
measured at the fresh status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kernel.config import LinkConfig
from kernel.worker_status import Gap, PartitionPosition, WorkerStatus, records_by_partition
from monitor.dating import RecordTimes, age_seconds, appeared, interpolated_high, record_time
from monitor.evaluator import OffsetSample
from monitor.moments import REPORTED_AFTER_READ, stale_high, unowned_high, unowned_moment
from monitor.snapshot import ClusterSnapshot

__all__ = [
    "LinkPartitionView",
    "LinkView",
    "SafePosition",
    "WorkerSighting",
    "link_view",
    "safe_positions",
    "served_link",
]


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
    # gone or frozen), "committed" (the group's committed offset), "log_start" (none of them: where the link begins).
    position_from: str | None = None
    safe_offset: int | None = None  # every record below it is on the target
    waiting_since_ms: int | None = None  # when the oldest record not on the target was written (None: none, unknown)
    reason: str | None = None  # why a figure is missing, or is only a floor
    records_lost: int = 0  # records the link will never copy (its gaps, see WorkerStatus.gaps), each counted once
    failed: str | None = None  # why its worker stopped mirroring it alone (a gap under `on_gap: stop`)
    paused: str | None = None  # why it is paused (`mirrorwatch link pause`): its lag grows, and that is no stall


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
    reason: str | None = None  # why the link has no figure yet (no partition known), or why some figures are missing
    gaps: tuple[Gap, ...] = ()  # records the link will never copy, from every worker's status (each once)
    config_synced: tuple[Mapping[str, Any], ...] = ()  # the workers' last config syncs (WorkerStatus.config_synced)
    drift_report: Mapping[str, Any] = field(default_factory=dict)  # the newest of the workers' (any refresh round)
    # The earliest moment since which a live worker's target has acknowledged nothing while records wait for it
    # (WorkerStatus.target_silent_since_ms): the link cannot reach its target, or the target is down or frozen.
    target_silent_since_ms: int | None = None

    @property
    def state(self) -> str:
        """ "running" (a live worker reports), "paused" (and every partition it reports is paused: `mirrorwatch link
        pause`), "workers gone" (none live, but some were), or "not running"."""
        if self.engine_running:
            live = [p for p in self.partitions if p.position_from == "worker"]
            return "paused" if live and all(p.paused for p in live) else "running"
        return "workers gone" if self.workers_gone else "not running"

    def unpaused(self) -> LinkView:
        """The view without the partitions an operator paused (what the lag alerts judge)."""
        if not any(p.paused for p in self.partitions):
            return self
        return replace(self, partitions=tuple(p for p in self.partitions if p.paused is None))

    @property
    def replication_lag_records(self) -> int | None:
        """Summed over the partitions; None while one of them is not known (never a 0 that leaves it out)."""
        if not self.partitions or any(p.replication_lag_records is None for p in self.partitions):
            return None
        return sum(p.replication_lag_records or 0 for p in self.partitions)

    @property
    def replication_lag_seconds(self) -> float | None:
        """The largest partition's; None while a partition that is behind (or may be) has no known age, or none is
        known: never 0 while records wait."""
        if not self.partitions or any(
            p.replication_lag_seconds is None and p.replication_lag_records != 0 for p in self.partitions
        ):
            return None
        return max((p.replication_lag_seconds or 0.0 for p in self.partitions), default=0.0)


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
    # Why the high-watermark is only a floor (the last one read before the source stopped answering, or one older
    # than the status of a worker that has not fetched): caught up by it is not known, behind by it is at least.
    high_floor: str | None = None

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
    *,
    unseen_source: str | None = None,
    high_stale_after_ms: int = 3_000,
) -> dict[tuple[str, int], SafePosition]:
    """Per partition of the link, the best position known and the moment it describes (see the module docstring).
    `previous` is the source snapshot before `source`: a status that falls between the two is compared with the
    high-watermark interpolated between them (the worker's own stops moving while it cannot fetch).
    `unseen_source`: why the source is not answering now, when `source` is the last snapshot it answered (its
    high-watermarks and commits are then floors for partitions no live worker measures). A live worker that has not
    fetched since its assignment (no high-watermark of its own) is measured against the snapshot's only while that is
    at most `high_stale_after_ms` older than its status (the round's usual distance): beyond, the high-watermark is a
    floor, said so like an unseen source."""
    unseen = f"cannot see the source ({unseen_source})" if unseen_source is not None else None
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
    # the first status that said so, when, and the high-watermark its worker saw then (None for a released one)
    proof: dict[tuple[str, int], tuple[int, int | None]] = {}
    target_topics: dict[tuple[str, int], str] = {}

    def note(key: tuple[str, int], offset: int, at_ms: int, high: int | None) -> None:
        if key not in acked or offset > acked[key]:
            acked[key], proof[key] = offset, (at_ms, high)

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
                note(key, position.acked, sighting.status.observed_ms, position.high_watermark)
            if sighting.is_live:
                live[key] = (sighting.status, position)
        for position in sighting.status.released:  # durable on the target; not owned by this worker
            key = (position.topic, position.partition)
            target_topics.setdefault(key, position.target_topic)
            # acknowledged before the release, which may be long ago: above a high-watermark read now, it is of a
            # topic since created again (the last one a source answered before it went quiet may be older)
            now_high = hwm[key].latest if key in hwm else None
            if position.acked is not None and (
                unseen_source is not None or now_high is None or position.acked <= now_high
            ):
                note(key, position.acked, sighting.status.observed_ms, None)
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
        from_start = safe is None and link.start_from == "earliest" and key in hwm
        if from_start:
            # nothing acknowledged and no commit: the link begins at the log start, so that is where it stands (an
            # empty partition is caught up, not unknown)
            safe = hwm[key].earliest
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
                between = interpolated_high(previous, key, status.observed_ms, observed_hwm_ms, now_high)
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
                # what the worker's consumer last saw is no fresher proof: it may not have fetched since either
                unseen or stale_high(position, status, observed_hwm_ms, high_stale_after_ms),
            )
        else:
            from_worker = best_acked is not None and best_acked >= (group_committed or 0)
            proven = proof.get(key) if from_worker else None
            moment, floor = unowned_moment(
                safe, high := unowned_high(now_high, observed_hwm_ms, proven), observed_hwm_ms, unowned_ms, proven
            )
            out[key] = SafePosition(
                key[0],
                key[1],
                safe,
                moment,
                high,
                "worker_gone" if from_worker else ("log_start" if from_start else "committed"),
                None,
                best_acked,
                group_committed,
                target_topics.get(key),
                unseen or floor,
            )
    return out


def _instance(status: WorkerStatus) -> str:
    return status.instance or f"#{status.worker}"  # a status of an older version: its number alone


def _highest(*offsets: int | None) -> int | None:
    """The highest of the known offsets (None: none known)."""
    return max((o for o in offsets if o is not None), default=None)


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
    synced: dict[tuple[Any, Any, Any], Mapping[str, Any]] = {}
    clients: list[Mapping[str, Any]] = []
    live = [s.status for s in sightings if s.is_live]
    for status in sorted((s.status for s in sightings), key=lambda s: s.observed_ms):
        failure = status.failure or failure
    for status in live:
        for role, client in sorted(status.clients.items()):
            clients.append({**client, "role": role, "worker": str(status.worker)})
        for d in status.config_drift:
            drift[(d["source_topic"], d["config"])] = d
        for d in status.config_synced:
            synced[(d.get("target_topic"), d.get("config"), d.get("at_ms"))] = d
        for key, value in status.stats.items():
            if isinstance(value, int | float):
                stats[key] = stats.get(key, 0) + value
            elif isinstance(value, Mapping) and "counts" in value:  # a histogram: add bucket by bucket
                total = stats.setdefault(
                    key, {"buckets": value["buckets"], "counts": [0] * len(value["counts"]), "sum": 0.0}
                )
                total["counts"] = [a + b for a, b in zip(total["counts"], value["counts"], strict=True)]
                total["sum"] += value["sum"]
    gaps: dict[tuple[str, int, int, int], Gap] = {}
    for s in sorted(sightings, key=lambda s: s.status.observed_ms):  # a later status wins, a growing gap its largest
        for g in s.status.gaps:
            known = gaps.get(g.key)
            gaps[g.key] = g if known is None or g.end_offset >= known.end_offset else known
    lost: dict[tuple[str, int], int] = {}
    for (topic, partition, _reason), count in records_by_partition(gaps.values()).items():
        lost[(topic, partition)] = lost.get((topic, partition), 0) + count
    partitions = [
        replace(
            _partition_view(position, link.source, record_times, history(position.topic, position.partition)),
            records_lost=lost.get((position.topic, position.partition), 0),
            failed=position.live.failed if position.live is not None else None,
            paused=position.live.paused if position.live is not None else None,
        )
        for position in positions.values()
    ]
    for d in _partition_count_drift(partitions, snapshot, target):
        drift[(d["source_topic"], d["config"])] = d
    reasons = sorted({p.reason for p in partitions if p.reason is not None})
    reason = reasons[0] if reasons else None
    if not partitions:
        reason = (
            f"not measured yet: no worker of the link has reported a position and the group {link.consumer_group!r} "
            "has no committed offset on the topics it mirrors"
        )
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
        # A worker whose instance a live worker carries again was restarted: not gone.
        workers_gone=len({_instance(s.status) for s in sightings if not s.is_live} - {_instance(s) for s in live}),
        observed_ms=now_ms,
        reason=reason,
        gaps=tuple(sorted(gaps.values(), key=lambda g: (g.at_ms, g.key))),
        config_synced=tuple(sorted(synced.values(), key=lambda d: (d.get("at_ms") or 0, str(d.get("config"))))),
        drift_report=max(
            (r for s in sightings if isinstance((r := s.status.drift_report).get("at_ms"), int)),
            key=lambda r: int(r["at_ms"]),
            default={},
        ),
        target_silent_since_ms=min(
            (since for s in live if (since := s.target_silent_since_ms) is not None), default=None
        ),
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
    written: int | None = None
    reason: str | None = None
    if lag == 0 and position.high_floor is not None:
        # caught up as far as the last high-watermark read goes; the source may have grown since
        lag, reason = None, f"{position.high_floor}: whether records wait is not known"
    elif lag == 0:
        seconds = 0.0
    elif lag is not None and position.safe is not None:
        key = (source, position.topic, position.partition, position.safe)
        written, method = record_time(key, record_times, history)
        if written is not None and written > position.observed_ms:
            lag, seconds, method, written = 0, 0.0, None, None  # the first record not on the target came later
        else:
            seconds = age_seconds(position.observed_ms, written)
            if seconds is None:
                reason = "the time of the oldest record not on the target is not read yet"
        if position.high_floor is not None:
            reason = f"{position.high_floor}: records at least this many"
    elif position.safe is None:
        reason = "not measured yet: no worker has acknowledged a record of it and the group has no commit on it"
    elif position.high_floor is not None:
        reason = position.high_floor
    else:
        reason = "the source's high-watermark is not known"
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
        safe_offset=position.safe,
        waiting_since_ms=written if seconds else None,
        reason=reason,
    )


def served_link(
    view: LinkView,
    now_ms: int,
    fresh: Mapping[tuple[str, int], SafePosition] | None,
    history: Callable[[str, int], Sequence[OffsetSample]] = lambda _topic, _partition: (),
) -> LinkView:
    """The round's view as it stands at `now_ms`, the moment it is served: `fresh` are the link's positions from its
    workers' statuses read again now (`safe_positions` against the round's source snapshot); None keeps the round's
    figures. Per partition whose figures are known:
    - its position has not moved since the round and records wait: the oldest of them, written at
      `waiting_since_ms`, is still not on the target, so the lag is the fresh moment minus that — `now_ms` when no
      live worker owns the partition (nobody can move it), else its owner's newest status, at most a status interval
      (0.5 s) old: exact through an outage at any moment between rounds, growing with every status;
    - it moved: measured at the fresh status, the oldest waiting record dated between the high-watermarks observed
      (the group's window, the round's and the fresh one) and the round's dated record: "interpolated" until the
      next round reads its time;
    - caught up at the round and still at the same position: caught up at the fresh moment unless the source grew,
      and then dated the same way — provided its live worker states the high-watermark it saw (else the round's read
      is the only proof, and the round's figure stands at its own moment).
    A figure not known at the round for want of its record's time is dated the same way; one not known for want of
    the source stays unknown until a round sees it; one caught up by the round is unknown once the source stopped
    answering since (the fresh positions say so: `SafePosition.high_floor`), and stands at the round's moment when
    the partition was only released since (`monitor.moments.REPORTED_AFTER_READ`)."""
    if fresh is None:
        return view
    partitions = tuple(
        _served_partition(p, now_ms, fresh.get((p.topic, p.partition)), history(p.topic, p.partition))
        for p in view.partitions
    )
    return replace(view, partitions=partitions, observed_ms=max(now_ms, view.observed_ms))


def _served_partition(
    p: LinkPartitionView, now_ms: int, fresh: SafePosition | None, history: Sequence[OffsetSample]
) -> LinkPartitionView:
    if (
        fresh is not None
        and fresh.high_floor is not None
        and fresh.lag_records == 0
        and (p.high_watermark is None or (fresh.safe or 0) >= p.high_watermark)  # the round knew no more
    ):
        if fresh.high_floor == REPORTED_AFTER_READ and p.replication_lag_records is not None:
            # released since the round (a rebalance) while the source answers: nothing new is known of now, and the
            # round's figure stands at its own moment until a round reads the source again (a fleet worker thawed
            # from a SIGSTOP rejoined its group: three samples served no figure, issue #45)
            return p
        # caught up by the last high-watermark read, but that proves nothing now (see `high_floor`)
        return replace(
            p,
            replication_lag_records=None,
            replication_lag_seconds=None,
            replication_lag_seconds_method=None,
            observed_ms=max(now_ms, p.observed_ms or 0),
            reason=f"{fresh.high_floor}: whether records wait is not known",
        )
    if (
        fresh is None
        or fresh.safe is None
        or p.safe_offset is None
        or p.replication_lag_records is None  # not known (a source not seen): stays so until a round knows
        or p.observed_ms is None
        or fresh.safe < p.safe_offset  # an older worker's word than the round's: nothing new
    ):
        return p
    live = fresh.live
    records = fresh.lag_records if fresh.lag_records is not None else p.replication_lag_records
    now = replace(
        p,
        high_watermark=_highest(fresh.high_watermark, p.high_watermark),
        consumed=live.consumed if live is not None else p.consumed,
        acked=fresh.acked if fresh.acked is not None else p.acked,
        in_flight_records=live.in_flight_records if live is not None else p.in_flight_records,
        position_from=fresh.position_from,
    )
    moved = fresh.safe > p.safe_offset
    if not moved and p.waiting_since_ms is not None and p.replication_lag_records > 0:  # the same record waits
        # as of the fresh word: now when nobody mirrors it, else the owner's newest status (a stuck owner may get
        # its acknowledgements the next instant: "now" would be a claim nobody made)
        moment = max(fresh.observed_ms, p.observed_ms)
        return replace(
            now,
            replication_lag_records=max(records, p.replication_lag_records),
            replication_lag_seconds=max(0.0, (moment - p.waiting_since_ms) / 1000),
            observed_ms=moment,
        )
    if fresh.observed_ms <= p.observed_ms and p.replication_lag_seconds is not None:
        return p
    waiting, method = None, None
    if records == 0:
        if live is not None and live.high_watermark is None:
            # caught up only by the round's read of the source, seconds older than the fresh status: records the
            # source took since wait unseen (seen: 13 records 2 s behind read as 0 at the statuses of a worker whose
            # consumer had lost the source's broker and stated none). The round's figure stands, at its moment.
            return p
        seconds: float | None = 0.0
    else:  # dated between the high-watermarks observed (the group's window, the round's, the fresh one) and the
        # round's dated record: the high-watermark stood at it when it was written (an outage longer than the window:
        # else a drain's first seconds served the round's figure, 43 s while the truth read 23, issue #41)
        dated = [(p.waiting_since_ms, p.safe_offset)] if p.waiting_since_ms is not None else []
        points = sorted(
            [(s.observed_ms, s.high_watermark) for s in history]
            + [(p.observed_ms, p.high_watermark), (fresh.observed_ms, fresh.high_watermark), *dated],
            key=lambda point: point[0],
        )
        waiting = appeared(points, fresh.safe)
        if waiting is None:
            return p
        seconds, method = max(0.0, (fresh.observed_ms - waiting) / 1000), "interpolated"
    return replace(
        now,
        replication_lag_records=records,
        replication_lag_seconds=seconds,
        replication_lag_seconds_method=method,
        observed_ms=max(fresh.observed_ms, p.observed_ms),
        safe_offset=fresh.safe,
        waiting_since_ms=waiting,
        reason=None,
    )
