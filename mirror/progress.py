"""Per-partition progress of a mirror link: consumed, acknowledged and committed positions (pure, no I/O).

The invariant that makes the mirror lossless: the offset committed to the source group is never above the first
record the target has not acknowledged. Records are dispatched in offset order but acknowledged in any order (a
handler may fan one record out to several topics, hash partitioning spreads a partition over several target
partitions), so `acked` is a *contiguous* watermark: every record below it is durable on the target.

A dispatched record may produce zero records (filtered as a loop, dropped by a handler): it is done at once, but
still waits its turn behind earlier records that are in flight.

A link in sparse-report mode (see `mirror.engine`) dispatches one entry per run of records handed to the producer
together (`dispatch` of the run's first offset, `extend` to its last) and learns of acknowledgements through
`ack_through`: one report from the target proves every record written before it to the same target partition.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from typing import TypeVar

__all__ = [
    "CATCHING_UP_AFTER_MS",
    "STATUS_REST_S",
    "PartitionProgress",
    "catching_up",
    "status_rest_s",
    "vouched_highs",
]

K = TypeVar("K", bound=Hashable)


def vouched_highs(cached: Mapping[K, int], stale: Mapping[K, int]) -> dict[K, int]:
    """The high-watermarks a worker's status may state as of its own moment: what its consumer's fetch responses
    said (`cached`), less those not fetched since the consumer last lost the source (`stale`: the cached values at
    the loss; one still equal to it has not been fetched since, and the source may have taken records after it).
    Without them the monitor measures the partition against its own read of the source, at that read's moment."""
    return {key: high for key, high in cached.items() if stale.get(key) != high}


# A record read this long after it was written has waited: the worker is catching up (`catching_up`).
CATCHING_UP_AFTER_MS = 1_000


def catching_up(
    acked_before: Mapping[K, int | None],
    acked_now: Mapping[K, int | None],
    newest_read_ms: Mapping[K, int | None],
    now_ms: int,
) -> bool:
    """Whether the target is acknowledging records that waited: a partition's acknowledged position moved since the
    last status while the newest record the worker read of it is more than CATCHING_UP_AFTER_MS old (after a freeze,
    a crash or an outage, the backlog drains in a second or two: the truth falls many seconds per second, and a
    status half a second old reads seconds too high, issue #41). An idle partition does not move; one in steady flow
    reads fresh records."""
    for key, acked in acked_now.items():
        before, read_ms = acked_before.get(key), newest_read_ms.get(key)
        if acked is None or before is None or acked <= before or read_ms is None:
            continue
        if now_ms - read_ms > CATCHING_UP_AFTER_MS:
            return True
    return False


# A status asked for at once (the target acknowledged records that waited, a transaction committed) comes at most this
# often after the last, and the thread that publishes spends at most STATUS_BUSY_SHARE of its time on it (a big
# worker's status takes longer to write). A backlog drains at tens of seconds of lag per second: a status even 0.1 s
# old reads seconds too high while it does, and the target's first acknowledgements after an outage move it at once.
STATUS_REST_S = 0.02
STATUS_BUSY_SHARE = 0.1


def status_rest_s(took_s: float, beat_s: float) -> float:
    """How long the status thread rests after a status that took `took_s` to publish before it publishes another
    one asked for at once; never longer than the beat (`beat_s`), the interval the status promises the monitor's
    liveness check: the busy share spaces the statuses asked for at once, never the beat (uncapped, a status that
    took 0.5 s to publish, the GIL shared with a busy loop on a loaded machine, rested 4.5 s: longer than two beats
    and a second, and the monitor read the worker as gone)."""
    return min(beat_s, max(STATUS_REST_S, took_s * (1 / STATUS_BUSY_SHARE - 1)))


class PartitionProgress:
    __slots__ = (
        "_in_flight",
        "_order",
        "abandoned",
        "began",
        "committed",
        "consumed",
        "last_timestamp_ms",
        "stopped_at",
    )

    def __init__(self, start_offset: int | None = None, committed: int | None = None) -> None:
        self.consumed: int | None = start_offset  # next offset the engine will read
        self.began: int | None = start_offset  # where this progress began reading (its first record's offset)
        self.committed: int | None = committed  # last offset committed to the source group
        self.last_timestamp_ms: int | None = None  # timestamp of the last record read
        self._order: deque[int] = deque()  # dispatched offsets not yet passed by the watermark, ascending
        self._in_flight: dict[int, int] = {}  # offset -> records still unacknowledged
        # The records in flight went to a target topic deleted under the link: their refusals say nothing (the
        # partition stopped, or reads again into the topic created anew with a progress of its own)
        self.abandoned = False
        # The offset of a record that cannot be mirrored (refused by the target, unreadable): the partition stopped
        # alone there, and nothing at or past it is acknowledged whatever reports come for the records after it
        self.stopped_at: int | None = None

    def stop_at(self, offset: int) -> None:
        """The record at `offset` cannot be mirrored: the acknowledged position never passes it (the lowest such)."""
        if self.stopped_at is None or offset < self.stopped_at:
            self.stopped_at = offset

    def dispatch(self, offset: int, records: int, timestamp_ms: int | None = None) -> None:
        """The record at `offset` was read and turned into `records` records to produce (0: nothing to write)."""
        consumed = self.consumed
        if consumed is None:
            self.began = offset
        elif offset < consumed:
            raise ValueError(f"offset {offset} dispatched after {consumed - 1}: offsets must ascend")
        self.consumed = offset + 1
        if timestamp_ms is not None:
            self.last_timestamp_ms = timestamp_ms
        if records > 0:
            self._in_flight[offset] = records
            self._order.append(offset)
        elif self._order:
            self._order.append(offset)  # done, but behind records still in flight

    def extend(self, last_offset: int, timestamp_ms: int | None = None) -> None:
        """The entry dispatched last also stands for the records read after it, up to `last_offset`."""
        if self.consumed is None or last_offset >= self.consumed:
            self.consumed = last_offset + 1
        if timestamp_ms is not None:
            self.last_timestamp_ms = timestamp_ms

    def pass_to(self, end: int) -> None:
        """The consumer reached `end`, the partition's end, having handed out every record below it: offsets
        between the last one read and `end` hold nothing to write (transaction markers, aborted records) and are done,
        behind the records still in flight."""
        if self.consumed is None or end > self.consumed:
            self.consumed = end

    def ack_through(self, offset: int) -> None:
        """Every entry dispatched at or below `offset` is acknowledged (whatever its record count)."""
        order, in_flight = self._order, self._in_flight
        while order and order[0] <= offset:
            in_flight.pop(order.popleft(), None)
        while order and order[0] not in in_flight:
            order.popleft()

    def ack(self, offset: int) -> None:
        """One record produced for `offset` was acknowledged by the target (or the dead-letter topic)."""
        remaining = self._in_flight[offset] - 1
        if remaining:
            self._in_flight[offset] = remaining
            return
        del self._in_flight[offset]
        order = self._order
        while order and order[0] not in self._in_flight:
            order.popleft()

    @property
    def acked(self) -> int | None:
        """First offset not yet acknowledged: every record below it is durable on the target."""
        acked = self._order[0] if self._order else self.consumed
        if self.stopped_at is not None and (acked is None or acked > self.stopped_at):
            return self.stopped_at
        return acked

    @property
    def in_flight_records(self) -> int:
        """Records read but not yet safe on the target (consumed - acked, in offsets)."""
        if self.consumed is None or self.acked is None:
            return 0
        return self.consumed - self.acked

    def offset_to_commit(self) -> int | None:
        """The offset to commit now, or None when there is nothing new (never ahead of `acked`)."""
        acked = self.acked
        if acked is None or (self.committed is not None and acked <= self.committed):
            return None
        return acked

    def mark_committed(self, offset: int) -> None:
        if self.committed is None or offset > self.committed:
            self.committed = offset
