"""A link's figures brought to the moment they are served (pure): the round's view (`monitor.links.link_view`) with
its workers' statuses read again (`monitor.links.safe_positions`); see `served_link`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from monitor.dating import appeared, on_source_by
from monitor.evaluator import OffsetSample
from monitor.links import LinkPartitionView, LinkView, SafePosition, at_least_reason, highest
from monitor.moments import REPORTED_AFTER_READ

__all__ = ["served_link"]


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
        high_watermark=highest(fresh.high_watermark, p.high_watermark),
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
        dated = (  # a lower bound's moment is no date of the record (it was written earlier)
            [(p.waiting_since_ms, p.safe_offset)]
            if p.waiting_since_ms is not None and p.replication_lag_seconds_method != "at_least"
            else []
        )
        points = sorted(
            [(s.observed_ms, s.high_watermark) for s in history]
            + [(p.observed_ms, p.high_watermark), (fresh.observed_ms, fresh.high_watermark), *dated],
            key=lambda point: point[0],
        )
        waiting, method = appeared(points, fresh.safe), "interpolated"
        bound = on_source_by(history, fresh.safe, fresh.behind_by_ms)
        if waiting is None and bound is not None and fresh.observed_ms > bound:
            waiting, method = bound, "at_least"  # not dated: on the source by a read that saw it
        if waiting is None:
            return p
        seconds = max(0.0, (fresh.observed_ms - waiting) / 1000)
    return replace(
        now,
        replication_lag_records=records,
        replication_lag_seconds=seconds,
        replication_lag_seconds_method=method,
        observed_ms=max(fresh.observed_ms, p.observed_ms),
        safe_offset=fresh.safe,
        waiting_since_ms=waiting,
        reason=at_least_reason(fresh.high_floor) if method == "at_least" else None,
    )
