"""One latency histogram for the whole project (pure): the buckets, and a value type the canary, the mirror's
statistics and both exporters share. Dashboards put the mirror's replication latency and the canary's end-to-end
latency side by side, so they have the same buckets."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LATENCY_BUCKETS_SECONDS", "Histogram"]

# 1 ms to 10 min: a healthy local mirror is in the milliseconds, a mirror catching up after an outage in the minutes.
LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


@dataclass(frozen=True)
class Histogram:
    """Counts per bucket (the last one is +Inf), not cumulative; `sum` in seconds. A value equal to a bound belongs to
    that bucket (Prometheus' `le`). Hot paths that count millions of values keep a mutable list of counts with
    `bucket_of` and turn it into a Histogram when asked (`from_counts`)."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS_SECONDS
    counts: tuple[int, ...] = (0,) * (len(LATENCY_BUCKETS_SECONDS) + 1)
    sum: float = 0.0

    @staticmethod
    def bucket_of(seconds: float, bounds: tuple[float, ...] = LATENCY_BUCKETS_SECONDS) -> int:
        return bisect.bisect_left(bounds, seconds)

    @classmethod
    def from_counts(cls, counts: Sequence[int] | None, total: float = 0.0) -> Histogram:
        """From per-bucket counts as a worker's statistics carry them (None or empty: no observation yet)."""
        if not counts:
            return cls()
        if len(counts) != len(LATENCY_BUCKETS_SECONDS) + 1:
            raise ValueError(f"{len(counts)} bucket counts for {len(LATENCY_BUCKETS_SECONDS) + 1} buckets")
        return cls(LATENCY_BUCKETS_SECONDS, tuple(int(c) for c in counts), float(total))

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, seconds: float) -> Histogram:
        counts = list(self.counts)
        counts[self.bucket_of(seconds, self.bounds)] += 1
        return Histogram(self.bounds, tuple(counts), self.sum + seconds)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, count at or below) as Prometheus wants; the last bound is +Inf."""
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out

    def prometheus_buckets(self) -> list[tuple[str, float]]:
        """`cumulative()` as prometheus_client's HistogramMetricFamily takes it: ("0.001", n) ... ("+Inf", total)."""
        return [("+Inf" if bound == float("inf") else repr(bound), float(count)) for bound, count in self.cumulative()]

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the q-quantile (an upper estimate, like histogram_quantile's
        bucket), None without observations."""
        total = self.count
        if total == 0:
            return None
        rank = q * total
        for bound, running in self.cumulative():
            if running >= rank:
                return bound if bound != float("inf") else self.bounds[-1]
        return self.bounds[-1]
