"""Offset windows: per (cluster, group, topic, partition), the last N observations of a committed offset (pure).

As Burrow's storage module: a ring per partition, `min_distance_ms` (an observation closer than that to the last one
replaces it instead of pushing the oldest out, so a fast poller cannot shrink the time a window covers; an offset
that went backwards is always kept), and expiry
of partitions and groups that stopped appearing (a deleted group must not stay in ERR for ever).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import replace

from monitor.evaluator import OffsetSample

__all__ = ["OffsetWindows", "WindowKey"]

WindowKey = tuple[str, str, str, int]  # cluster alias, group, topic, partition


class OffsetWindows:
    def __init__(self, size: int, *, min_distance_ms: int = 0, expire_after_ms: int = 7 * 24 * 3600 * 1000) -> None:
        if size < 1:
            raise ValueError("a window holds at least one observation")
        self.size = size
        self.min_distance_ms = min_distance_ms
        self.expire_after_ms = expire_after_ms
        self._windows: dict[WindowKey, deque[OffsetSample]] = {}

    def observe(self, key: WindowKey, sample: OffsetSample) -> None:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = deque(maxlen=self.size)
        if window and sample.observed_ms < window[-1].observed_ms:
            return  # late news: the window is ordered by observation time
        if window and window[-1].offset == sample.offset:  # still there: it was first seen earlier
            sample = replace(sample, since_ms=window[-1].first_seen_ms)
        too_close = window and sample.observed_ms - window[-1].observed_ms < self.min_distance_ms
        if too_close and sample.offset >= window[-1].offset:  # a move backwards is news (REWIND): never replaced
            window[-1] = sample
        else:
            window.append(sample)

    def samples(self, key: WindowKey) -> tuple[OffsetSample, ...]:
        window = self._windows.get(key)
        return tuple(window) if window else ()

    def keys(self) -> Iterator[WindowKey]:
        return iter(list(self._windows))

    def groups(self, cluster: str) -> set[str]:
        return {group for c, group, _, _ in self._windows if c == cluster}

    def partitions(self, cluster: str, group: str) -> list[tuple[str, int]]:
        return sorted((t, p) for c, g, t, p in self._windows if c == cluster and g == group)

    def expire(self, now_ms: int) -> list[WindowKey]:
        """Forget windows whose last observation is older than `expire_after_ms`; returns what was forgotten."""
        gone = [k for k, w in self._windows.items() if not w or now_ms - w[-1].observed_ms > self.expire_after_ms]
        for key in gone:
            del self._windows[key]
        return gone

    def forget_group(self, cluster: str, group: str) -> None:
        for key in [k for k in self._windows if k[0] == cluster and k[1] == group]:
            del self._windows[key]
