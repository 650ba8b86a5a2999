"""The families of a link's partitions and drift (the exporter's, `monitor.exporter`): replication lag as served now,
partitions stopped alone or paused by an operator, the drift report's differences by kind, and the bandwidth budget."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from monitor.exposition import CounterFamily, Family, GaugeFamily
from monitor.links import LinkView
from monitor.state import MonitorState

__all__ = ["drift_differences", "link_budgets", "link_lags", "partition_states"]


def partition_states(state: MonitorState | None) -> tuple[Family, Family]:
    """Link partitions stopped alone (a gap under on_gap: stop, a lost target) and paused by an operator."""
    labels = ("link", "topic", "partition")
    failed = GaugeFamily(
        "mirrorwatch_mirror_partition_failed", "1 for a partition the link stopped alone", labels=labels
    )
    paused = GaugeFamily("mirrorwatch_mirror_partition_paused", "1 for a partition an operator paused", labels=labels)
    for name, view in sorted(state.links.items()) if state is not None else ():
        for p in view.partitions:
            if p.failed is not None:
                failed.add_metric([name, p.topic, str(p.partition)], 1)
            if p.paused is not None:
                paused.add_metric([name, p.topic, str(p.partition)], 1)
    return failed, paused


def drift_differences(state: MonitorState | None) -> Family:
    differences = GaugeFamily(
        "mirrorwatch_link_drift_differences",
        "Differences between the link's source topics and their copies at its last topic refresh, by kind "
        "(missing, partitions, config, extra, acl, problem); synced=true: that round made them the same",
        labels=["link", "kind", "synced"],
    )
    for name, view in sorted(state.links.items()) if state is not None else ():
        for c in view.drift_report.get("counts", ()):
            differences.add_metric([name, str(c["kind"]), str(bool(c["synced"])).lower()], c["count"])
    return differences


def link_lags(views: Mapping[str, LinkView]) -> tuple[GaugeFamily, GaugeFamily, GaugeFamily]:
    """Replication lag per link partition, in records and in seconds (unknown ones left out), and which of the
    seconds are only a lower bound."""
    part_labels = ["link", "topic", "partition"]
    repl = GaugeFamily(
        "mirrorwatch_mirror_replication_lag_records",
        "Source high-watermark minus the offset the target acknowledged",
        labels=part_labels,
    )
    repl_s = GaugeFamily(
        "mirrorwatch_mirror_replication_lag_seconds",
        "Age of the oldest record not yet acknowledged by the target, as of the scrape",
        labels=part_labels,
    )
    at_least = GaugeFamily(
        "mirrorwatch_mirror_replication_lag_seconds_at_least",
        "1 where mirrorwatch_mirror_replication_lag_seconds is only a lower bound: the source stopped answering "
        "before the oldest record not yet acknowledged was dated (it was on the source by the last read; the true "
        "age is at least the figure); absent where the figure is exact or unknown",
        labels=part_labels,
    )
    for name, view in sorted(views.items()):
        for p in view.partitions:
            labels = [name, p.topic, str(p.partition)]
            if p.replication_lag_records is not None:
                repl.add_metric(labels, p.replication_lag_records)
            if p.replication_lag_seconds is not None:
                repl_s.add_metric(labels, p.replication_lag_seconds)
                if p.replication_lag_seconds_method == "at_least":
                    at_least.add_metric(labels, 1)
    return repl, repl_s, at_least


def link_budgets(links: list[str], state: MonitorState | None) -> Iterator[Family]:
    """Each link's bandwidth budget in force and the time it held the link back (issue #44)."""
    budget = GaugeFamily(
        "mirrorwatch_mirror_budget_bytes_per_second",
        "The link's bandwidth budget in force (max_bytes_per_second, or as set by mirrorwatch link budget): its "
        "live workers' shares added up; absent when the link has none",
        labels=["link"],
    )
    throttled = CounterFamily(
        "mirrorwatch_mirror_budget_throttled_seconds",
        "Seconds the link's workers were held back by its bandwidth budget (added up over its live workers)",
        labels=["link"],
    )
    for name in links:
        view = state.links.get(name) if state is not None else None
        stats = view.stats if view is not None else {}
        throttled.add_metric([name], stats.get("budget_throttled_seconds_total", 0))
        if stats.get("budget_bytes_per_second"):
            budget.add_metric([name], stats["budget_bytes_per_second"])
    yield from (budget, throttled)
