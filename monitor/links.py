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

Figures are served for the moment they are read (`monitor.served.served_link`): between two rounds, a partition whose
position has not moved since its round (by the workers' statuses read again when it is served) is the oldest record
it waits for aged to now (or to its owner's newest status), growing a second per second through an outage; one that
moved is measured at the fresh status. A partition whose oldest waiting record is not dated yet (the source stopped
answering before it was) is at least as old as the time since a high-watermark above it was read (`"at_least"`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kernel.config import LinkConfig
from kernel.worker_status import Gap, PartitionPosition, WorkerStatus, records_by_partition
from monitor.dating import RecordTimes, age_seconds, interpolated_high, on_source_by, record_time
from monitor.evaluator import OffsetSample
from monitor.moments import stale_high, unowned_high, unowned_moment
from monitor.snapshot import ClusterSnapshot

__all__ = [
    "LinkPartitionView",
    "LinkView",
    "SafePosition",
    "WorkerSighting",
    "at_least_reason",
    "highest",
    "link_view",
    "safe_positions",
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
        """The largest partition's; never 0 while records wait. While a partition that is behind (or may be) has no
        known age, the largest known is only a lower bound (`replication_lag_seconds_at_least`), served when above 0
        (a source broker's restart: a link seconds behind read "not known" for a partition caught up by the last
        read, issue #67); None when there is none, or no partition is known."""
        known = [p.replication_lag_seconds for p in self.partitions if p.replication_lag_seconds is not None]
        if self._unknown_partitions:
            return max(known) if known and max(known) > 0 else None
        return max(known, default=0.0) if self.partitions else None

    @property
    def replication_lag_seconds_at_least(self) -> bool:
        """Whether the link's figure is only a lower bound: a partition's is (`"at_least"`: the source stopped answering
        before its oldest waiting record was dated), or a partition that may be behind has none: the link's true
        figure is at least as high."""
        return self.replication_lag_seconds is not None and (
            self._unknown_partitions
            or any(
                p.replication_lag_seconds_method == "at_least" and p.replication_lag_seconds is not None
                for p in self.partitions
            )
        )

    @property
    def _unknown_partitions(self) -> bool:
        return any(p.replication_lag_seconds is None and p.replication_lag_records != 0 for p in self.partitions)


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
    # The earliest moment by which a high-watermark above `safe` had been read (a collection's end, or a live worker's
    # status): the record at `safe` was on the source by then, so its age is at least the time since, while it is not
    # dated (issue #67: the source stopped answering before it was). None: nothing read above `safe`.
    behind_by_ms: int | None = None
    behind_high: int | None = None  # the high-watermark read by then (it proves every offset below it)

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
        safe = highest(best_acked, group_committed)
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
                highest(position.committed, group_committed),
                target_topics.get(key),
                # what the worker's consumer last saw is no fresher proof: it may not have fetched since either
                unseen or stale_high(position, status, observed_hwm_ms, high_stale_after_ms),
                *_behind_by(safe, [(position.high_watermark, status.observed_ms), *_reads(key, source, previous)]),
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
                *_behind_by(safe, _reads(key, source, previous)),
            )
    return out


def _instance(status: WorkerStatus) -> str:
    return status.instance or f"#{status.worker}"  # a status of an older version: its number alone


def _reads(key: tuple[str, int], *snapshots: ClusterSnapshot | None) -> list[tuple[int | None, int | None]]:
    """The partition's high-watermark in each snapshot and by when it had been read: the end of its collection (one
    cut short by a source going down ends late: the one before proves more)."""
    return [
        (s.partitions[key].latest, s.observed_ms + int(s.collect_seconds * 1000))
        for s in snapshots
        if s is not None and s.up and key in s.partitions
    ]


def at_least_reason(high_floor: str | None) -> str:
    """Why a partition's figure in seconds is only a lower bound (`SafePosition.behind_by_ms`)."""
    if high_floor is not None:
        return f"{high_floor}: records and seconds at least this many"
    return "the oldest record not on the target is not dated yet: at least as old as the last read that saw it"


def _behind_by(safe: int | None, proofs: Sequence[tuple[int | None, int | None]]) -> tuple[int | None, int | None]:
    """The earliest of `proofs` (a high-watermark and when it had been read) by which the source held a record at
    `safe` (a high-watermark above it): its moment and its high-watermark. Nones: none proves it."""
    found = [
        (at, high) for high, at in proofs if safe is not None and high is not None and at is not None and high > safe
    ]
    return min(found) if found else (None, None)


def highest(*offsets: int | None) -> int | None:
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
            if seconds is None and (bound := on_source_by(history, position.safe, position.behind_by_ms)) is not None:
                # not dated yet (the source may have stopped answering before it was): on the source by a read of
                # its high-watermark, so at least that old (issue #67: "not known" for 12 s of a source broker's
                # restart while the truth grew from 2 to 12 s)
                written, method = bound, "at_least"
                seconds = age_seconds(position.observed_ms, written) or None  # never a 0 while records wait
                reason = at_least_reason(None)
            if seconds is None:
                written, method = None, None
                reason = "the time of the oldest record not on the target is not read yet"
        if position.high_floor is not None:
            reason = (
                at_least_reason(position.high_floor)
                if method == "at_least"
                else f"{position.high_floor}: records at least this many"
            )
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
