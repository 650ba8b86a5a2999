"""The canary's Prometheus metrics, rendered from the tracker's view at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from canary.tracker import Histogram, LinkView

__all__ = ["CANARY_METRIC_NAMES", "CanaryCollector"]

_COUNTERS = {
    "sent": "probes acknowledged by the source (acks=all)",
    "received": "probes read back at the target for the first time",
    "lost": "probes not read back within canary.sla_seconds",
    "duplicated": "probes read back at the target more than once",
    "reordered": "probes read back after a later probe of the same partition",
    "late": "lost probes that arrived after their SLA (each counted once)",
}
_HISTOGRAMS = {
    "e2e_latency": ("e2e", "probe created at the source until read back at the target (broker + mirror)"),
    "produce_latency": ("produce", "probe created until acknowledged by the source (acks=all)"),
    "source_roundtrip": ("roundtrip", "probe created until read back from the source topic (broker only)"),
}

CANARY_METRIC_NAMES = (
    *(f"mirrorwatch_canary_{name}_seconds" for name in _HISTOGRAMS),
    *(f"mirrorwatch_canary_probes_{name}_total" for name in _COUNTERS),
    "mirrorwatch_canary_produce_errors_total",
    "mirrorwatch_canary_last_received_timestamp_seconds",
    "mirrorwatch_canary_absent",
)


class CanaryCollector(Collector):
    def __init__(self, view: Callable[[], tuple[LinkView, ...]]) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        views = self._view()
        labels = ["link", "partition"]
        histograms = {
            name: HistogramMetricFamily(f"mirrorwatch_canary_{name}_seconds", help_, labels=labels)
            for name, (_attr, help_) in _HISTOGRAMS.items()
        }
        counters = {
            name: CounterMetricFamily(f"mirrorwatch_canary_probes_{name}", help_, labels=labels)
            for name, help_ in _COUNTERS.items()
        }
        errors = CounterMetricFamily(
            "mirrorwatch_canary_produce_errors", "probes the source refused or did not acknowledge", labels=labels
        )
        last = GaugeMetricFamily(
            "mirrorwatch_canary_last_received_timestamp_seconds",
            "when a probe of this partition was last read back at the target (0: never)",
            labels=labels,
        )
        absent = GaugeMetricFamily(
            "mirrorwatch_canary_absent",
            "1 when no probe arrived at the link's target for canary.absent_after_intervals intervals",
            labels=["link"],
        )
        for view in views:
            absent.add_metric([view.link], 1.0 if view.absent else 0.0)
            for p in view.partitions:
                values = [view.link, str(p.partition)]
                for name, (attr, _help) in _HISTOGRAMS.items():
                    h: Histogram = getattr(p, attr)
                    histograms[name].add_metric(values, h.prometheus_buckets(), h.sum)
                for name in _COUNTERS:
                    counters[name].add_metric(values, float(getattr(p, name)))
                errors.add_metric(values, float(p.produce_errors))
                last.add_metric(values, (p.last_received_ns or 0) / 1e9)
        yield from histograms.values()
        yield from counters.values()
        yield errors
        yield last
        yield absent
