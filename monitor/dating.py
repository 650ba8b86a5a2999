"""When a record was written, as the monitor settles it (pure): a record's timestamp where the source's observed
high-watermarks agree with it, else the time those observations put its arrival at; interpolated from the
high-watermark history for a record already gone. A lag in seconds is a moment's distance from such a time."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from monitor.evaluator import OffsetSample
from monitor.snapshot import ClusterSnapshot

__all__ = [
    "RecordTimes",
    "age_seconds",
    "appeared",
    "append_bounds",
    "date_record",
    "interpolate_record_time",
    "interpolated_high",
    "lag_age",
    "record_time",
]

# (cluster alias, topic, partition, offset) -> when the record was written, in ms: its timestamp, dated by the monitor
# where its observations contradict it (`date_record`); None: the record is gone
RecordTimes = Mapping[tuple[str, str, int, int], int | None]


def age_seconds(now_ms: int, timestamp_ms: int | None) -> float | None:
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


def on_source_by(history: Sequence[OffsetSample], offset: int, read_by_ms: int | None) -> int | None:
    """The earliest moment known by which the record at `offset` was on the source, for a record not dated: the
    observation after the first of the window whose high-watermark was above it (`append_bounds`), or `read_by_ms`
    (a later read that saw it: `monitor.links.SafePosition.behind_by_ms`). Its age is at least the time since: a lower
    bound that only grows while nothing new is read (issue #67). None: nothing read above it."""
    _, before = append_bounds(history, offset)
    return min((at for at in (before, read_by_ms) if at is not None), default=None)


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
    return age_seconds(now_ms, written), method


def interpolated_high(
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


def appeared(points: Sequence[tuple[int, int | None]], offset: int) -> int | None:
    """When the record at `offset` appeared on the source, interpolated between the last observation whose
    high-watermark had not reached it and the first that had (None: no observation either side of it)."""
    before: tuple[int, int] | None = None
    for at, high in points:
        if high is None:
            continue
        if high > offset:
            if before is None:
                return None  # on the source already at the first observation: only a bound, not a date
            share = (offset - before[1]) / (high - before[1]) if high > before[1] else 1.0
            return before[0] + max(1, int(share * (at - before[0])))
        before = (at, high)
    return None
