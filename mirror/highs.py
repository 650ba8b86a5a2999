"""What a worker's consumer saw of its partitions' high-watermarks, and which of them its status may state as of its
own moment (issue #41): the monitor measures a live worker's partition against the high-watermark it states, and
claims it caught up at the status's moment on it — so a value that may be older than that moment is left out (the
monitor then measures against its own read of the source, at that read's moment).

Left out: a value not fetched since the consumer last lost the source's broker (`vouched_highs`). Kept, though it
may be older than the status: the value of a partition the consumer does not fetch now (paused for back-pressure or
by the operator) and the loop's last note however old: no proof of caught up, but a floor that proves a partition
behind. Tried and measured wrong: leaving out a paused partition's value (a back-pressured worker with records in
flight then read 0 against the monitor's older read of the source while its target was down: a clean clone's run of
the truth test) and values noted over a second ago (a frozen worker's first status after its thaw then stated none).
The monitor does not claim caught up at a fresh status without one (`monitor.links._served_partition`).

Pure: the worker hands in how to read its consumer's cache (`Cache`, no broker request) and the time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from mirror.client_stats import ClientStats
from mirror.progress import vouched_highs

__all__ = ["RX_SILENT_MS", "SeenHighs"]

# A fetching consumer hears from each leader at least every fetch.wait.max.ms (500 ms): three times that without a
# word and the values it cached are no proof of now (the statistics come every 500 ms: mirror.settings).
RX_SILENT_MS = 1_500

Key = tuple[str, int]
Cache = Callable[[Iterable[Key]], Mapping[Key, int]]  # the consumer's cached high-watermarks of these partitions


class SeenHighs:
    """The high-watermarks a worker's consumer saw: noted by the loop (the consumer is the loop's alone: from another
    thread its calls wait for consume()), read by the status."""

    def __init__(self) -> None:
        self.noted: dict[Key, int] = {}  # the loop's, every status interval
        self._stale: dict[Key, int] = {}  # the cached values at the last lost broker (`vouched_highs`)
        self._lost_ms: int | None = None
        self._stats_ms: int | None = None  # when the consumer's last statistics were served
        self._ran_again_ms: int | None = None  # when they came again after a gap: the worker did not run meanwhile

    @property
    def stale_since_ms(self) -> int | None:
        """When the consumer lost the source, while values cached then are still not fetched again."""
        return self._lost_ms if self._stale else None

    def note(self, cache: Cache, partitions: Iterable[Key]) -> None:
        """From the loop, every status interval: what the consumer's last fetch responses said."""
        self.noted = vouched_highs(cache(partitions), self._stale)

    def lost(self, cache: Cache, partitions: Iterable[Key], now_ms: int) -> None:
        """A source broker lost (served in consume()): every value cached now is stale until fetched again."""
        self._lost_ms = now_ms
        self._stale = dict(cache({*self._stale, *partitions, *self.noted}))
        self.noted = vouched_highs(self.noted, self._stale)

    def seen_again(self, summary: ClientStats, now_ms: int) -> None:
        """The consumer's statistics: every broker leading one of its partitions has been up since the loss (it has
        fetched them since, whether records came or not; the producer's statistics say nothing of the source)."""
        up_for, idle = summary.leaders_up_for_ms, summary.leaders_rx_idle_ms
        lost_ms = self._lost_ms
        if summary.role != "consumer" or lost_ms is None:
            return
        heard = idle is not None and idle < RX_SILENT_MS and now_ms - idle > lost_ms
        if (up_for is not None and now_ms - up_for > lost_ms) or heard:
            self._stale = {}  # connected again since, or (a hang that ended without a timeout) heard from since

    def heard(
        self,
        summary: ClientStats,
        now_ms: int,
        fetching_since_ms: int | None,
        cache: Cache | None,
        partitions: Iterable[Key],
    ) -> None:
        """A client's statistics (served in consume(), like the error callback: the consumer is the loop's): a
        fetching consumer silent too long loses its source (`silent_since`), else `seen_again`. A silence counts from
        when the worker ran again at the earliest: statistics that came after a gap follow a freeze of the process
        (a worker SIGSTOPped on another host read "lost sight of the source 15 s ago" as it thawed, issue #45)."""
        if summary.role == "consumer":
            last, self._stats_ms = self._stats_ms, now_ms
            if last is not None and now_ms - last > RX_SILENT_MS:
                # They come every 500 ms while the process runs and the loop serves them: a gap is a process frozen
                # (SIGSTOP, a VM paused) or a loop held up, and librdkafka's own clock of "last heard" went on.
                self._ran_again_ms = now_ms
        if fetching_since_ms is not None and self._ran_again_ms is not None:
            fetching_since_ms = max(fetching_since_ms, self._ran_again_ms)
        silent = self.silent_since(summary, now_ms, fetching_since_ms)
        if silent is not None and self.stale_since_ms is None and cache is not None:
            self.lost(cache, partitions, silent)
        else:
            self.seen_again(summary, now_ms)

    def silent_since(self, summary: ClientStats, now_ms: int, fetching_since_ms: int | None) -> int | None:
        """The moment a fetching consumer last heard from a broker leading its partitions, when that is over
        RX_SILENT_MS ago (a connection hanging in a network partition: no error until librdkafka's request timeout,
        while the values cached are ever older); None otherwise. `fetching_since_ms`: since when the worker reads
        (None: it reads nothing now: paused, or held by back-pressure, when librdkafka's queue fills and it stops
        fetching too). A silence counts from then at the earliest: one that began while the worker read nothing
        says nothing about the source."""
        heard_ago = summary.leaders_rx_idle_ms
        if summary.role != "consumer" or fetching_since_ms is None or heard_ago is None:
            return None
        if min(heard_ago, now_ms - fetching_since_ms) < RX_SILENT_MS:
            return None
        return now_ms - heard_ago

    def stated(self) -> dict[Key, int]:
        """What a status states (see the module docstring)."""
        return dict(self.noted)
