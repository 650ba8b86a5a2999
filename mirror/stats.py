"""Counters and the replication-latency histogram of one link worker, as plain data the monitor can read.

Replication latency = target acknowledgement time - source record timestamp, in the project's one set of buckets
(`kernel.histogram`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kernel.histogram import LATENCY_BUCKETS_SECONDS, Histogram

__all__ = ["LATENCY_BUCKETS_SECONDS", "WAITED_S", "LinkStats"]

# A record acknowledged this long after its source timestamp waited: the worker is draining a backlog
# (`LinkStats.waited_out`).
WAITED_S = 1.0


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
    # A record that waited over WAITED_S was acknowledged since the worker last looked (`Delivery.serve_reports`):
    # a backlog drains, the truth falls many seconds per second and the status must say so at once (issue #41).
    waited_out: bool = False

    def count_out(self, records: int, size: int, timestamp_ms: int, now_s: float) -> None:
        """`records` records (`size` bytes of keys and values) acknowledged by the target at `now_s`; their latency
        is taken from the oldest one's source timestamp (`timestamp_ms`, 0: none), weighted by the records."""
        self.records_out_total += records
        self.bytes_out_total += size
        if timestamp_ms > 0:
            self.observe_latency(now_s - timestamp_ms * 0.001, records)

    def average_record_bytes(self) -> float:
        """The keys and values of a record read, on average (1 before any)."""
        return self.bytes_in_total / self.records_in_total if self.records_in_total else 1.0

    def observe_latency(self, seconds: float, records: int = 1) -> None:
        """`records` records acknowledged `seconds` after their source timestamp (never below 0: a source clock
        ahead of ours reads as 0)."""
        seconds = seconds if seconds > 0.0 else 0.0
        if seconds > WAITED_S:
            self.waited_out = True
        self.latency_bucket_counts[Histogram.bucket_of(seconds)] += records
        self.latency_sum_seconds += seconds * records

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
