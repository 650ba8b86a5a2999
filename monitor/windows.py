"""Offset windows: per (cluster, group, topic, partition), the last N observations of a committed offset (pure).

As Burrow's storage module: a ring per partition, `min_distance_ms` (an observation closer than that to the last one
replaces it instead of pushing the oldest out, so a fast poller cannot shrink the time a window covers; an offset
that went backwards and a high-watermark that moved are always kept), and expiry
of partitions and groups that stopped appearing (a deleted group must not stay in ERR for ever). A window starts
again when the partition's log ends below the group's last commit (a topic deleted and created again under its
name, or a truncated log): observations of two logs are never compared.

Beyond the window, each partition keeps its group's commit cadence: the median time between the last few moves of
its offset (`commit_gap_ms`; of two middle ones the lower), or, where commits are followed in `__consumer_offsets`
(samples with `commit_ms`), between its last few commits, a commit of the same offset again included. A 100 s
window cannot hold two 60 s commits, and the evaluator needs to know how long a silence is normal for this group
before it calls one a stop. A silence longer than the evaluator's WARN threshold for the cadence known then (one and
a half gaps) is an incident or an idle spell, not cadence, and is not learned: after a few incidents close together
(a flapping target) the median would otherwise be an incident's length, and the next incident would read OK. Only
when such long gaps come OUTLIERS_TO_RELEARN times in a row has the group's cadence changed, and they become it.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterator
from dataclasses import replace

from monitor.evaluator import OffsetSample

__all__ = ["OffsetWindows", "WindowKey"]

WindowKey = tuple[str, str, str, int]  # cluster alias, group, topic, partition
GAPS_KEPT = 7  # moves whose gaps make a group's cadence
OUTLIERS_TO_RELEARN = 3  # long gaps in a row that make a new cadence


class OffsetWindows:
    def __init__(self, size: int, *, min_distance_ms: int = 0, expire_after_ms: int = 7 * 24 * 3600 * 1000) -> None:
        if size < 1:
            raise ValueError("a window holds at least one observation")
        self.size = size
        self.min_distance_ms = min_distance_ms
        self.expire_after_ms = expire_after_ms
        self._windows: dict[WindowKey, deque[OffsetSample]] = {}
        self._moved_ms: dict[WindowKey, int] = {}  # when the offset last moved (unknown before the first move seen)
        self._committed_ms: dict[WindowKey, int] = {}  # the last commit's own time, where commits are followed
        self._gaps: dict[WindowKey, deque[int]] = {}  # the last times between two moves
        self._outliers: dict[WindowKey, list[int]] = {}  # long gaps in a row, not (yet) the cadence
        # (cluster, group) -> its partitions with a window: a group's partitions without a scan of every window
        self._by_group: dict[tuple[str, str], set[tuple[str, int]]] = {}

    def observe(self, key: WindowKey, sample: OffsetSample) -> None:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = deque(maxlen=self.size)
            self._by_group.setdefault((key[0], key[1]), set()).add((key[2], key[3]))
        if window and sample.observed_ms < window[-1].observed_ms:
            return  # late news: the window is ordered by observation time
        if window and 0 <= sample.high_watermark < min(window[-1].high_watermark, window[-1].offset):
            # The partition's log now ends below where the group stood: another log (the topic deleted and created
            # again: a new topic id, offsets from 0) or one truncated below it. Its observations are of the old one: a
            # commit on the new log would read as a move backwards (REWIND). (A new leader answers no high-watermark
            # below its predecessor's until it has caught up, KIP-207: a group never reads past the log's end.)
            window.clear()
            self._moved_ms.pop(key, None)
        if sample.has_members or (window and window[-1].had_members):
            sample = replace(sample, had_members=True)
        if window and window[-1].offset == sample.offset:  # still there: it was first seen earlier
            previous = window[-1]
            lag_since = None
            if previous.lag > 0 and sample.lag > 0:  # and records have waited behind it since then
                lag_since = previous.observed_ms if previous.lag_since_ms is None else previous.lag_since_ms
            sample = replace(sample, since_ms=previous.first_seen_ms, lag_since_ms=lag_since)
        elif window:  # it moved
            moved = self._moved_ms.get(key)
            if moved is not None and sample.commit_ms is None:
                self._learn_gap(key, sample.observed_ms - moved)
            self._moved_ms[key] = sample.observed_ms
        if sample.commit_ms is not None:  # every commit is known with its time, the same offset again included
            last = self._committed_ms.get(key)
            if last is None or sample.commit_ms > last:
                if last is not None:
                    self._learn_gap(key, sample.commit_ms - last)
                self._committed_ms[key] = sample.commit_ms
        too_close = window and sample.observed_ms - window[-1].observed_ms < self.min_distance_ms
        # A move backwards is news (REWIND), and so is a high-watermark that moved: the replaced observation would be
        # the last one before records arrived, the bound their dating rests on (`monitor.dating.append_bounds`);
        # replaced, a fast poller's chain of close observations would date them back to the first of the chain.
        if too_close and sample.offset >= window[-1].offset and sample.high_watermark == window[-1].high_watermark:
            window[-1] = sample
        else:
            window.append(sample)

    def _learn_gap(self, key: WindowKey, gap_ms: int) -> None:
        gaps = self._gaps.setdefault(key, deque(maxlen=GAPS_KEPT))
        usual = self.commit_gap_ms(key)
        if usual is not None and gap_ms > usual * 3 // 2:  # longer than a silence the evaluator lets pass
            outliers = self._outliers.setdefault(key, [])
            outliers.append(gap_ms)
            if len(outliers) >= OUTLIERS_TO_RELEARN:  # it keeps happening: this is how the group commits now
                gaps.clear()
                gaps.extend(outliers)
                outliers.clear()
            return
        self._outliers.pop(key, None)
        gaps.append(gap_ms)

    def samples(self, key: WindowKey) -> tuple[OffsetSample, ...]:
        window = self._windows.get(key)
        return tuple(window) if window else ()

    def commit_gap_ms(self, key: WindowKey) -> int | None:
        """The usual time between two moves of this partition's offset: the median of the last GAPS_KEPT learned (an
        incident's long silence does not teach the monitor to tolerate the next one). None: fewer than two moves."""
        gaps = self._gaps.get(key)
        return int(statistics.median_low(gaps)) if gaps else None

    def keys(self) -> Iterator[WindowKey]:
        return iter(list(self._windows))

    def groups(self, cluster: str) -> set[str]:
        return {group for c, group in self._by_group if c == cluster}

    def partitions(self, cluster: str, group: str) -> list[tuple[str, int]]:
        return sorted(self._by_group.get((cluster, group), ()))

    def expire(self, now_ms: int) -> list[WindowKey]:
        """Forget windows whose last observation is older than `expire_after_ms`; returns what was forgotten."""
        gone = [k for k, w in self._windows.items() if not w or now_ms - w[-1].observed_ms > self.expire_after_ms]
        for key in gone:
            self._forget(key)
        return gone

    def _forget(self, key: WindowKey) -> None:
        del self._windows[key]
        partitions = self._by_group.get((key[0], key[1]))
        if partitions is not None:
            partitions.discard((key[2], key[3]))
            if not partitions:
                del self._by_group[(key[0], key[1])]
        self._moved_ms.pop(key, None)
        self._committed_ms.pop(key, None)
        self._gaps.pop(key, None)
        self._outliers.pop(key, None)

    def forget_group(self, cluster: str, group: str) -> None:
        for topic, partition in list(self._by_group.get((cluster, group), ())):
            self._forget((cluster, group, topic, partition))
