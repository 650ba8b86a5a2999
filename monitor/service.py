"""The monitor service: every `monitor.interval_seconds`, collect every cluster, feed the windows, evaluate every
group and every mirror link, and publish one immutable `MonitorState` (the HTTP API and the exporter read it).

Scheduled with APScheduler 3.x: one collection at a time, missed runs coalesced, so a slow cluster delays the next
round instead of piling rounds up. A collection that fails is logged and leaves the last state in place.
"""

from __future__ import annotations

import datetime
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from confluent_kafka.admin import AdminClient

from mirrorwatch.clock import Clock, SystemClock
from mirrorwatch.config import MirrorwatchConfig
from mirrorwatch.kafka import new_admin
from monitor.collector import ClusterSnapshot, collect_cluster
from monitor.evaluator import EvaluatorConfig, OffsetSample
from monitor.record_times import Key, RecordTimeFetcher
from monitor.state import MonitorState, evaluate_groups, link_view, observe_snapshot
from monitor.windows import OffsetWindows

__all__ = ["LinkStatuses", "MonitorService", "evaluator_config"]

log = logging.getLogger("mirrorwatch.monitor")

# link name -> the status() of each of its workers running in this process
LinkStatuses = Callable[[], Mapping[str, Sequence[Mapping[str, Any]]]]


def evaluator_config(config: MirrorwatchConfig) -> EvaluatorConfig:
    m = config.monitor
    return EvaluatorConfig(
        window=m.window,
        min_complete=m.min_complete,
        allowed_lag_records=m.allowed_lag_records,
        allowed_lag_seconds=m.allowed_lag_seconds,
        min_stop_seconds=m.min_stop_seconds,
    )


class MonitorService:
    def __init__(
        self, config: MirrorwatchConfig, *, link_statuses: LinkStatuses | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config
        self._link_statuses = link_statuses or dict
        self._clock = clock or SystemClock()
        self._evaluator = evaluator_config(config)
        interval_ms = int(config.monitor.interval_seconds * 1000)
        self._windows = OffsetWindows(
            config.monitor.window,
            min_distance_ms=interval_ms // 2,
            expire_after_ms=int(config.monitor.expire_group_seconds * 1000),
        )
        self._admins: dict[str, AdminClient] = {}
        self._record_times: RecordTimeFetcher | None = None
        self._lock = threading.Lock()  # one collection at a time, also when called directly
        self._scheduler: BackgroundScheduler | None = None
        self.state: MonitorState | None = None
        self.last_success_ms: dict[str, int] = {}

    @property
    def windows(self) -> OffsetWindows:
        return self._windows

    def collect(self) -> MonitorState:
        """One full round over every cluster; returns (and publishes) the new state."""
        with self._lock:
            now = self._clock.now_ms()
            timeout_s = max(5.0, self.config.monitor.interval_seconds)
            snapshots: dict[str, ClusterSnapshot] = {}
            for alias, cluster in self.config.clusters.items():
                admin = self._admins.get(alias)
                if admin is None:
                    admin = self._admins[alias] = new_admin(
                        cluster, alias, {"client.id": f"mirrorwatch-monitor-{alias}"}
                    )
                snapshot = collect_cluster(admin, alias, now, timeout_s=timeout_s)
                snapshots[alias] = snapshot
                if snapshot.up:
                    self.last_success_ms[alias] = now
                    observe_snapshot(self._windows, snapshot)
                else:
                    log.warning("monitor: cluster %r is not answering: %s", alias, snapshot.error)
            self._windows.expire(now)
            statuses = self._link_statuses()
            record_times = self._times(self._wanted_record_times(snapshots, statuses))
            groups = {}
            for snapshot in snapshots.values():
                groups.update(evaluate_groups(self._windows, snapshot, self._evaluator, record_times))
            links = {
                link.name: link_view(
                    link,
                    worker_statuses=list(statuses.get(link.name, ())),
                    snapshot=snapshots.get(link.source),
                    target=snapshots.get(link.target),
                    record_times=record_times,
                    history=functools.partial(self._history, link.source, link.consumer_group),
                )
                for link in self.config.links
            }
            self.state = MonitorState(now, snapshots, groups, links)
            return self.state

    def _history(self, cluster: str, group: str, topic: str, partition: int) -> tuple[OffsetSample, ...]:
        return self._windows.samples((cluster, group, topic, partition))

    def _wanted_record_times(
        self, snapshots: Mapping[str, ClusterSnapshot], statuses: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> set[Key]:
        """The records whose age is a lag in seconds: at each lagging group's committed offset and each link's
        acknowledged offset."""
        wanted: set[Key] = set()
        for alias, snapshot in snapshots.items():
            if not snapshot.up:
                continue
            for group in snapshot.groups.values():
                for (topic, partition), offset in group.offsets.items():
                    hwm = snapshot.partitions.get((topic, partition))
                    if hwm is not None and hwm.latest is not None and offset < hwm.latest:
                        wanted.add((alias, topic, partition, offset))
        for link in self.config.links:
            source = snapshots.get(link.source)
            if source is None or not source.up:
                continue
            for status in statuses.get(link.name, ()):
                for p in status.get("partitions", []):
                    hwm = source.partitions.get((p["topic"], p["partition"]))
                    acked = p.get("acked")
                    if hwm is not None and hwm.latest is not None and acked is not None and acked < hwm.latest:
                        wanted.add((link.source, p["topic"], p["partition"], acked))
        return wanted

    def _times(self, wanted: set[Key]) -> dict[Key, int | None]:
        if not wanted:
            return {}
        if self._record_times is None:
            self._record_times = RecordTimeFetcher(self.config.clusters)
        return self._record_times.times(wanted)

    def _collect_safely(self) -> None:
        try:
            self.collect()
        except Exception:  # a bug in one round must not stop the monitor; the next round tries again
            log.exception("monitor: collection failed")

    def start(self) -> None:
        """Collect now and then every interval, in a background thread."""
        scheduler = BackgroundScheduler(daemon=True)
        scheduler.add_job(
            self._collect_safely,
            "interval",
            seconds=self.config.monitor.interval_seconds,
            coalesce=True,
            max_instances=1,
            next_run_time=datetime.datetime.now(datetime.UTC),
        )
        scheduler.start()
        self._scheduler = scheduler

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
            self._scheduler = None
        if self._record_times is not None:
            self._record_times.close()
