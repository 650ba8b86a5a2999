"""The console's Prometheus reader without a Prometheus: the queries it asks and how it reads the answers (the real
Prometheus is in tests/dashboards/test_console_live.py)."""

from __future__ import annotations

import pytest

from dashboards.prometheus import PrometheusUnreachable, link_queries, series_points, step_seconds


def test_a_link_name_is_a_quoted_label_value_in_every_query() -> None:
    queries = link_queries('we"ird\\link', 3)
    assert set(queries) == {
        "replication_lag_records",
        "replication_lag_seconds",
        "records_in_per_second",
        "records_out_per_second",
        "canary_e2e_latency_p99_seconds",
    }
    for query in queries.values():
        assert 'link="we\\"ird\\\\link"' in query


def test_rates_span_at_least_a_minute_and_two_steps() -> None:
    assert "[60s]" in link_queries("l", 3)["records_out_per_second"]
    assert "[576s]" in link_queries("l", 288)["records_out_per_second"]
    assert step_seconds(900) == 3 and step_seconds(604_800) == 2016 and step_seconds(10) == 1


def test_a_range_answer_becomes_the_history_s_points_without_nan() -> None:
    answer = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {}, "values": [[1700000000, "5"], [1700000003.5, "NaN"], [1700000007, "0.25"]]}],
        },
    }
    assert series_points(answer) == [[1_700_000_000_000.0, 5.0], [1_700_000_007_000.0, 0.25]]
    assert series_points({"status": "success", "data": {"resultType": "matrix", "result": []}}) == []


def test_an_error_answer_is_said() -> None:
    with pytest.raises(PrometheusUnreachable, match="bad_data: parse error"):
        series_points({"status": "error", "errorType": "bad_data", "error": "parse error"})
