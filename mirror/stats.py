"""Counters and the replication-latency histogram of one link worker, as plain data the monitor can read."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["LATENCY_BUCKETS_SECONDS", "LinkStats"]

# Replication latency = target acknowledgement time - source record timestamp. 1 ms to 10 min: a healthy local
# mirror is in the milliseconds, a mirror catching up after an outage is in the minutes.
LATENCY_BUCKETS_SECONDS = (
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


@dataclass
class LinkStats:
    records_in_total: int = 0
    bytes_in_total: int = 0
    records_out_total: int = 0
    bytes_out_total: int = 0
    send_errors_total: int = 0
    dead_lettered_total: int = 0
    loop_skipped_total: int = 0  # records not written because they came from the target cluster
    handler_dropped_total: int = 0  # records a handler turned into nothing
    latency_bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_SECONDS) + 1))
    latency_sum_seconds: float = 0.0

    def observe_latency(self, seconds: float) -> None:
        self.latency_bucket_counts[bisect.bisect_left(LATENCY_BUCKETS_SECONDS, seconds)] += 1
        self.latency_sum_seconds += seconds

    def as_dict(self) -> dict[str, object]:
        return {
            "records_in_total": self.records_in_total,
            "bytes_in_total": self.bytes_in_total,
            "records_out_total": self.records_out_total,
            "bytes_out_total": self.bytes_out_total,
            "send_errors_total": self.send_errors_total,
            "dead_lettered_total": self.dead_lettered_total,
            "loop_skipped_total": self.loop_skipped_total,
            "handler_dropped_total": self.handler_dropped_total,
            "replication_latency_seconds": {
                "buckets": [*LATENCY_BUCKETS_SECONDS, "+Inf"],
                "counts": list(self.latency_bucket_counts),
                "sum": self.latency_sum_seconds,
            },
        }
