"""How much a link may have on its way to the target at once: a few seconds of what the target acknowledged lately
(pure; issue #44).

Why: librdkafka gives a request `socket.timeout.ms` (mirror.settings.WAN_DEFAULTS: 10 s, so that a dead connection
is given up soon after a network partition) and builds a produce request of up to `batch.size` from what waits in its
queue. Over a slow link a queue filled by a fast source makes requests that cannot cross in that time: each times
out, is sent again, times out again (a timeout storm; measured at 100 kbit/s: the link carried nothing for 20 s).
Holding what is in the producer to `HORIZON_S` of the acknowledged byte rate keeps every request small enough to
cross a slow link well within its timeout, and lets a fast link's window grow to the ceiling within a second (each
round trip acknowledges a window, and the window is seconds of that rate): TCP's idea, one level up.

The engine asks `limit_records()` before it reads more and treats a producer holding more as full (back-pressure:
it reads nothing more, and pauses the source if that lasts). `note()` is fed the cumulative acknowledged bytes."""

from __future__ import annotations

import logging
from collections import deque

from mirror.stats import LinkStats

__all__ = [
    "BURST_S",
    "FLOOR_BYTES",
    "HORIZON_S",
    "SILENT_AFTER_S",
    "Budget",
    "FlowWindow",
    "Silence",
    "worker_budget",
]

HORIZON_S = 2.0  # the window: this long at the rate the target acknowledged over the last RATE_SPAN_S
RATE_SPAN_S = 1.0
# Never below this (64 KB crosses 100 kbit/s in about 5 s, half the request timeout): a link that was idle or cut
# off starts from here, and grows with every acknowledgement.
FLOOR_BYTES = 64 * 1024
RECORD_OVERHEAD_BYTES = 100  # a record's provenance header, framing and batch share, beyond its key and value


class FlowWindow:
    def __init__(self, ceiling_bytes: int, *, floor_bytes: int = FLOOR_BYTES, horizon_s: float = HORIZON_S) -> None:
        """`ceiling_bytes`: never above this (the producer's own queue bound)."""
        self.floor = min(floor_bytes, ceiling_bytes)
        self.ceiling = ceiling_bytes
        self.horizon_s = horizon_s
        self._acked: deque[tuple[float, int]] = deque()  # (when, cumulative acknowledged bytes), RATE_SPAN_S of them
        self.limit_bytes = 0  # the rate's part (the floor applies in limit_records)

    def note(self, now_s: float, acked_bytes_total: int) -> None:
        """The cumulative bytes the target has acknowledged, as of `now_s` (a monotonic clock)."""
        samples = self._acked
        samples.append((now_s, acked_bytes_total))
        while len(samples) > 2 and now_s - samples[1][0] >= RATE_SPAN_S:
            samples.popleft()
        then, acked_then = samples[0]
        span = max(now_s - then, RATE_SPAN_S)  # a young sample does not make a burst look like a rate
        rate = (acked_bytes_total - acked_then) / span
        self.limit_bytes = int(min(self.ceiling, rate * self.horizon_s))

    def room(self, now_s: float, stats: LinkStats, waiting: int) -> int:
        """How many more records the producer may be given now, holding `waiting` (negative: none)."""
        self.note(now_s, stats.bytes_out_total)
        return self.limit_records(stats.average_record_bytes()) - waiting

    def limit_records(self, average_record_bytes: float) -> int:
        """The window in records of the link's average size (keys and values, as `note` counts): the rate's part
        in those units, the floor in what a record takes on the wire (RECORD_OVERHEAD_BYTES more: headers,
        provenance, framing), at least one (a record larger than the window still goes, alone)."""
        size = max(average_record_bytes, 1.0)
        floor = self.floor / (size + RECORD_OVERHEAD_BYTES)
        return max(1, int(max(floor, self.limit_bytes / size)))


BURST_S = 0.1  # a budget's bucket holds this long of its rate (at least MIN_BURST_BYTES): a second never carries more
MIN_BURST_BYTES = 16 * 1024


class Budget:
    """A link worker's bandwidth budget (`max_bytes_per_second`), enforced on the bytes it gives its producer (keys
    and values, as the link's byte counters count them): a token bucket, never a sleep per record.

    The loop asks `room()` before it reads: the records of the link's average size the bucket pays for now (None: no
    budget). What it then reads is paid for afterwards, from the cumulative bytes read (`given_bytes_total`): a read
    may overdraw the bucket by its variance in size, and the next reads wait until the rate has paid the debt back, so
    over any second the bytes given stay within the rate and one bucket (BURST_S of it). A turn with no room is spent
    in the back-pressure branch (delivery reports served, nothing read) and counted as throttled (`throttled_s`: the
    metric of the time the budget held the link back). `set_rate()` takes a new rate at once (the operator's
    `mirrorwatch link budget`): the bucket keeps what it holds, capped at the new size."""

    def __init__(self, rate: int | None = None, *, burst_s: float = BURST_S) -> None:
        self.rate = rate
        self.of_link: int | None = None  # the link's budget this rate is a share of (what the operator set)
        self.burst_s = burst_s
        self.throttled_s = 0.0
        self._tokens = 0.0
        self._at: float | None = None  # when the bucket was last filled
        self._given: int | None = None  # the cumulative bytes read at the last `room()`
        self._throttled_at: float | None = None  # the turn that found no room, while the next has not come

    def capacity(self) -> float:
        return max(self.rate * self.burst_s, MIN_BURST_BYTES) if self.rate else 0.0

    def set_rate(self, rate: int | None, now_s: float) -> bool:
        """A new rate (None: no budget) from now on; whether it changed."""
        if rate == self.rate:
            return False
        self._fill(now_s)
        self.rate = rate
        self._tokens = min(self._tokens, self.capacity())
        return True

    def room(self, now_s: float, given_bytes_total: int, average_record_bytes: float | None) -> int | None:
        """Records the budget lets the loop read now (0: none, throttled; None: no budget), having paid for the bytes
        read since the last call (`given_bytes_total`: cumulative). `average_record_bytes`: None before the link has
        read a record, when one is all the room there is (its size is not known: the first read of a link could
        otherwise take thousands)."""
        if self._given is not None:
            self._tokens -= given_bytes_total - self._given
        self._given = given_bytes_total
        self._fill(now_s)
        if not self.rate:  # no budget: no debt either, for when one is set
            self._tokens = 0.0
            self._throttle(now_s, held=False)
            return None
        held = self._tokens <= 0
        self._throttle(now_s, held=held)
        if held:
            return 0
        return 1 if average_record_bytes is None else max(1, int(self._tokens / max(average_record_bytes, 1.0)))

    def _fill(self, now_s: float) -> None:
        if self._at is None:  # a worker starts with a full bucket
            self._tokens = self.capacity()
        elif self.rate:
            self._tokens = min(self.capacity(), self._tokens + (now_s - self._at) * self.rate)
        self._at = now_s

    def _throttle(self, now_s: float, *, held: bool) -> None:
        """From a turn that found no room to the next turn: held back by the budget."""
        if self._throttled_at is not None:
            self.throttled_s += max(0.0, now_s - self._throttled_at)
        self._throttled_at = now_s if held else None


def worker_budget(link_rate: int | None, worker_rate: int | None, *, owned: int, total: int) -> int | None:
    """A worker's budget: its share of the link's (`max_bytes_per_second`), in proportion to the link's source
    partitions it owns (no coordination between workers, on one host or many: the shares add up to the link's once
    every partition is owned), and at most `worker_max_bytes_per_second`. None: no budget."""
    rates = [r for r in (worker_rate,) if r]
    if link_rate:
        rates.append(max(1, link_rate * owned // total) if 0 < owned < total else link_rate)
    return min(rates) if rates else None


log = logging.getLogger("mirrorwatch.mirror")

SILENT_AFTER_S = 5.0  # records on their way and no acknowledgement this long: the target is cut off, down or frozen


class Silence:
    """Since when the target has acknowledged nothing while records wait on their way to it (the worker status'
    `target_silent_since_ms`: "cannot reach the target since T" is said from what the link sees, whatever the cause:
    a partition of the network, a broker down or frozen)."""

    def __init__(self, after_s: float = SILENT_AFTER_S) -> None:
        self.after_s = after_s
        self._acked: int | None = None
        self._heard_s = 0.0  # the last moment an acknowledgement came or nothing waited (monotonic)
        self._heard_ms = 0  # the same moment, wall clock
        self.since_ms: int | None = None  # silent since (the moment last heard), once SILENT_AFTER_S have passed

    def note(self, now_s: float, now_ms: int, acked_total: int, waiting: int, *, name: str = "") -> str | None:
        """Feed the cumulative acknowledged records and how many wait now; returns "silent" when the target has just
        been silent for `after_s`, "heard" when it acknowledges again after that, else None (and says so in the log
        of link `name`, when given)."""
        said = None
        if acked_total != self._acked or waiting == 0:
            self._acked, self._heard_s, self._heard_ms = acked_total, now_s, now_ms
            if self.since_ms is not None:
                self.since_ms, said = None, "heard"
        elif self.since_ms is None and now_s - self._heard_s >= self.after_s:
            self.since_ms, said = self._heard_ms, "silent"
        if name and said == "silent":
            log.warning(
                "link %s: the target has acknowledged nothing for %.0fs with %d records on their way (cut off, down "
                "or frozen?); they are kept and sent again until it answers",
                name,
                self.after_s,
                waiting,
            )
        elif name and said == "heard":
            log.info("link %s: the target acknowledges again", name)
        return said
