"""The console's Prometheus reader (`mirrorwatch console --prometheus URL`): a link's lag, throughput and canary
latency over spans longer than the monitor's own history (range queries on the series the monitor exports), and the
alerts Prometheus has firing or pending (its `/api/v1/alerts`, the shipped rules' or any others).

The series come back under the names of the monitor's history (`/mirror/history/links/{link}`), so the console
draws both the same way. Plain urllib, no Streamlit: the queries and the answers' shapes are unit-tested."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

__all__ = ["SPANS", "Prometheus", "PrometheusUnreachable", "link_queries", "series_points", "step_seconds"]

SPANS = {"15 min": 900, "1 h": 3600, "6 h": 21_600, "24 h": 86_400, "7 d": 604_800}  # what the console offers
POINTS = 300  # per chart: the step is the span divided by this


class PrometheusUnreachable(Exception):
    """Prometheus did not answer, or answered with an error."""


def step_seconds(span_s: float) -> int:
    return max(1, math.ceil(span_s / POINTS))


def _label(value: str) -> str:
    """A PromQL string literal."""
    return json.dumps(value)


def link_queries(link: str, step_s: int) -> dict[str, str]:
    """The PromQL for each of a link's history series; rates over at least a minute (four 15 s scrapes)."""
    selector = f"link={_label(link)}"
    window = f"{max(60, 2 * step_s)}s"
    return {
        "replication_lag_records": f"sum(mirrorwatch_mirror_replication_lag_records{{{selector}}})",
        "replication_lag_seconds": f"max(mirrorwatch_mirror_replication_lag_seconds{{{selector}}})",
        "records_in_per_second": (
            f'sum(rate(mirrorwatch_mirror_records_total{{{selector},direction="in"}}[{window}]))'
        ),
        "records_out_per_second": (
            f'sum(rate(mirrorwatch_mirror_records_total{{{selector},direction="out"}}[{window}]))'
        ),
        "canary_e2e_latency_p99_seconds": (
            "histogram_quantile(0.99, sum by (le) "
            f"(rate(mirrorwatch_canary_e2e_latency_seconds_bucket{{{selector}}}[{window}])))"
        ),
    }


def series_points(answer: Mapping[str, Any]) -> list[list[float]]:
    """A range query's answer (one series: the queries aggregate) as [[ms, value], ...]; NaN (no data, or a quantile
    of nothing) left out."""
    if answer.get("status") != "success":
        raise PrometheusUnreachable(f"Prometheus answered {answer.get('errorType')}: {answer.get('error')}")
    result = answer["data"]["result"]
    if not result:
        return []
    points = []
    for at, value in result[0]["values"]:
        number = float(value)
        if not math.isnan(number):
            points.append([float(at) * 1000, number])
    return points


class Prometheus:
    def __init__(self, base: str, timeout_s: float = 10.0) -> None:
        self.base = base.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, params: Mapping[str, str | float] | None = None) -> Any:
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            try:  # Prometheus explains a bad query in the body
                return json.load(exc)
            except ValueError:
                raise PrometheusUnreachable(f"Prometheus at {self.base} answered {exc.code} for {path}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusUnreachable(f"Prometheus unreachable at {self.base} ({reason})") from None

    def link_history(self, link: str, span_s: float, now_s: float) -> dict[str, list[list[float]]]:
        """The link's series over the last `span_s` seconds before `now_s`, by the history's names."""
        step = step_seconds(span_s)
        out = {}
        for name, query in link_queries(link, step).items():
            answer = self._get(
                "/api/v1/query_range", {"query": query, "start": now_s - span_s, "end": now_s, "step": step}
            )
            out[name] = series_points(answer)
        return out

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert Prometheus has pending or firing, as it says them."""
        answer = self._get("/api/v1/alerts")
        if answer.get("status") != "success":
            raise PrometheusUnreachable(f"Prometheus answered {answer.get('errorType')}: {answer.get('error')}")
        return list(answer["data"]["alerts"])
