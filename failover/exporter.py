"""The standby's Prometheus metrics (`mirrorwatch_failover_*`), rendered from its last published view at scrape
time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from failover.standby import StandbyView

__all__ = ["FAILOVER_METRIC_NAMES", "StandbyCollector"]

FAILOVER_METRIC_NAMES = (
    "mirrorwatch_failover_checkpoint_timestamp_seconds",
    "mirrorwatch_failover_checkpoint_interval_seconds",
    "mirrorwatch_failover_checkpoint_age_seconds",
    "mirrorwatch_failover_checkpoint_round_seconds",
    "mirrorwatch_failover_checkpoint_error",
    "mirrorwatch_failover_group_ready",
    "mirrorwatch_failover_reread_records",
    "mirrorwatch_failover_unmirrored_records",
    "mirrorwatch_failover_translated_offset",
    "mirrorwatch_failover_group_commits_total",
)


class StandbyCollector(Collector):
    def __init__(self, views: Callable[[], Sequence[StandbyView]], now_ms: Callable[[], int]) -> None:
        self._views, self._now_ms = views, now_ms

    def collect(self) -> Iterator[Metric]:
        now_ms = self._now_ms()
        link = ["link"]
        group = ["link", "group"]
        stamp = GaugeMetricFamily(
            FAILOVER_METRIC_NAMES[0],
            "when the source commits of the last good checkpoint round were read (0: never)",
            labels=link,
        )
        interval = GaugeMetricFamily(FAILOVER_METRIC_NAMES[1], "the link's checkpoint.interval_seconds", labels=link)
        age = GaugeMetricFamily(
            FAILOVER_METRIC_NAMES[2],
            "how old the group's translation is: now minus when its commits were read",
            labels=group,
        )
        duration = GaugeMetricFamily(
            FAILOVER_METRIC_NAMES[3], "how long the last good checkpoint round took", labels=link
        )
        error = GaugeMetricFamily(FAILOVER_METRIC_NAMES[4], "1 when the last checkpoint round failed", labels=link)
        ready = GaugeMetricFamily(
            FAILOVER_METRIC_NAMES[5],
            "1 when the group could fail over now (see /mirror/links/{link}/checkpoints)",
            labels=group,
        )
        reread = GaugeMetricFamily(
            FAILOVER_METRIC_NAMES[6],
            "records a consumer failed over now would read twice (absent: unknown)",
            labels=group,
        )
        unmirrored = GaugeMetricFamily(
            FAILOVER_METRIC_NAMES[7],
            "offsets at or after the group's commits the target does not have yet",
            labels=group,
        )
        offset = GaugeMetricFamily(
            FAILOVER_METRIC_NAMES[8],
            "the target offset the group starts at on failover",
            labels=["link", "group", "topic", "partition", "method"],
        )
        commits = CounterMetricFamily(
            "mirrorwatch_failover_group_commits",
            "translations committed to idle target groups (sync_group_offsets)",
            labels=link,
        )
        for view in self._views():
            stamp.add_metric([view.link], (view.updated_ms or 0) / 1000)
            interval.add_metric([view.link], view.interval_s)
            duration.add_metric([view.link], view.round_seconds)
            error.add_metric([view.link], 0.0 if view.error is None else 1.0)
            commits.add_metric([view.link], float(view.synced_total))
            for g in view.groups:
                labels = [view.link, g.group]
                if view.updated_ms is not None:
                    age.add_metric(labels, max(0, now_ms - view.updated_ms) / 1000)
                ready.add_metric(labels, 1.0 if g.ready else 0.0)
                if g.read_twice is not None:
                    reread.add_metric(labels, float(g.read_twice))
                unmirrored.add_metric(labels, float(g.not_mirrored))
                for t in g.translations:
                    offset.add_metric([view.link, g.group, t.topic, str(t.partition), t.method], float(t.offset))
        yield from (stamp, interval, age, duration, error, ready, reread, unmirrored, offset, commits)
