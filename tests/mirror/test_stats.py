"""A link worker's counters and replication-latency histogram, and how the exporter reads them back."""

from __future__ import annotations

import pytest

from kernel.histogram import LATENCY_BUCKETS_SECONDS, Histogram
from mirror.stats import LinkStats

NOW_S = 1_800_000_000.0


def test_a_run_of_records_counts_once_per_record_with_the_oldest_records_latency() -> None:
    stats = LinkStats()
    stats.count_out(100, 10_000, int((NOW_S - 0.02) * 1000), NOW_S)  # a run of 100, oldest written 20 ms ago
    stats.count_out(1, 50, 0, NOW_S)  # no source timestamp: counted, no latency
    stats.count_out(1, 50, int((NOW_S + 5) * 1000), NOW_S)  # the source's clock is ahead: 0 s, not negative
    assert (stats.records_out_total, stats.bytes_out_total) == (102, 10_100)
    h = Histogram.from_counts(stats.latency_bucket_counts, stats.latency_sum_seconds)
    assert h.count == 101
    assert dict(h.cumulative())[0.001] == 1 and dict(h.cumulative())[0.025] == 101
    assert h.sum == pytest.approx(100 * 0.02, rel=1e-3)


def test_a_record_acknowledged_after_it_waited_over_a_second_says_a_backlog_drains() -> None:
    """`waited_out` tells the worker to publish its status at once (`Delivery.serve_reports`, issue #41); a record
    acknowledged within the second, or one without a timestamp, does not."""
    stats = LinkStats()
    stats.count_out(500, 5_000, int((NOW_S - 0.9) * 1000), NOW_S)
    stats.count_out(1, 10, 0, NOW_S)
    assert not stats.waited_out
    stats.count_out(500, 5_000, int((NOW_S - 1.2) * 1000), NOW_S)  # the oldest of a run waited 1.2 s
    assert stats.waited_out
    assert "waited_out" not in stats.as_dict()  # the worker's to clear, not a figure of the status


def test_the_status_document_carries_the_histogram_the_exporter_reads_back() -> None:
    stats = LinkStats()
    stats.count_out(3, 30, int((NOW_S - 0.3) * 1000), NOW_S)
    doc = stats.as_dict()["replication_latency_seconds"]
    assert isinstance(doc, dict)
    h = Histogram.from_counts(doc["counts"], doc["sum"])
    assert h.prometheus_buckets()[-1] == ("+Inf", 3.0)
    assert ("0.5", 3.0) in h.prometheus_buckets() and ("0.25", 0.0) in h.prometheus_buckets()
    assert len(doc["buckets"]) == len(LATENCY_BUCKETS_SECONDS) + 1


def test_counts_for_other_buckets_are_refused_not_misread() -> None:
    with pytest.raises(ValueError, match="bucket counts"):
        Histogram.from_counts([1, 2, 3])
    assert Histogram.from_counts(None) == Histogram()
