"""The exposition writer: what it writes is what prometheus_client's own parser (Prometheus' format) reads back,
whatever a group id holds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from monitor.exposition import CounterFamily, GaugeFamily, HistogramFamily, render


def _parsed(text: bytes) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {
        f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text.decode())
    }


@given(st.text(max_size=40))
def test_any_label_value_reads_back(group: str) -> None:
    lag = GaugeFamily(
        "kafka_consumergroup_lag", "lag\\with a backslash\nand a newline", labels=("consumergroup", "partition")
    )
    lag.add_metric([group, "0"], 7)
    [(name, labels, value)] = _parsed(render([lag]))["kafka_consumergroup_lag"]
    assert (name, labels, value) == ("kafka_consumergroup_lag", {"consumergroup": group, "partition": "0"}, 7)


def test_counters_histograms_and_label_free_gauges() -> None:
    records = CounterFamily("mirrorwatch_mirror_records", "records", labels=("link", "direction"))
    records.add_metric(["demo", "in"], 12)
    up = GaugeFamily("mirrorwatch_monitor_round_seconds", "round")
    up.add_metric([], 0.25)
    latency = HistogramFamily("mirrorwatch_mirror_replication_latency_seconds", "latency", labels=("link",))
    latency.add_histogram(["demo"], [("0.1", 3.0), ("1.0", 5.0), ("+Inf", 6.0)], 2.5)
    inf = GaugeFamily("g", "infinite")
    inf.add_metric([], math.inf)
    parsed = _parsed(render([records, up, latency, inf]))
    assert parsed["mirrorwatch_mirror_records"] == [
        ("mirrorwatch_mirror_records_total", {"link": "demo", "direction": "in"}, 12)
    ]
    assert parsed["mirrorwatch_monitor_round_seconds"] == [("mirrorwatch_monitor_round_seconds", {}, 0.25)]
    buckets = parsed["mirrorwatch_mirror_replication_latency_seconds"]
    assert [(s[1].get("le"), s[2]) for s in buckets if s[0].endswith("_bucket")] == [
        ("0.1", 3),
        ("1.0", 5),
        ("+Inf", 6),
    ]
    assert ("mirrorwatch_mirror_replication_latency_seconds_count", {"link": "demo"}, 6) in buckets
    assert ("mirrorwatch_mirror_replication_latency_seconds_sum", {"link": "demo"}, 2.5) in buckets
    assert parsed["g"] == [("g", {}, math.inf)]


def test_a_sample_must_name_every_label() -> None:
    lag = GaugeFamily("kafka_consumergroup_lag", "lag", labels=("consumergroup", "partition"))
    with pytest.raises(ValueError, match="shorter"):  # prometheus_client dropped the extra or missing quietly
        lag.add_metric(["only-the-group"], 1)
