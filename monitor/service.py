"""The monitor service: every `monitor.interval_seconds`, collect every cluster, feed the windows, evaluate every
group and every mirror link, and publish one immutable `MonitorState` (the HTTP API and the exporter read it).

One collection at a time on a thread of its own: a round that takes longer than the interval stretches it (the next
round starts at once, the log says so once per overrun spell, and the duration is a metric), rounds never overlap
and none is skipped silently. A collection that fails is logged and leaves the last state in place.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka.admin import AdminClient

from kernel.clock import Clock, SystemClock
from kernel.config import ClusterConfig, GroupSelection, LinkConfig, MonitorConfig
from kernel.kafka import QUICK_RECONNECT, new_admin
from kernel.status_board import pids_readable_here
from kernel.worker_status import WorkerStatus
from monitor.collector import ClusterSnapshot, collect_cluster
from monitor.commit_follower import CommitFollower
from monitor.dating import date_record
from monitor.evaluator import EvaluatorConfig, OffsetSample
from monitor.history import CanaryReading, Events, History, canary_transitions, transitions
from monitor.links import LinkView, SafePosition, WorkerSighting, link_view, safe_positions
from monitor.moments import OnSourceBy
from monitor.readiness import READY_WAIT_S, why_not_ready
from monitor.record_times import Key, RecordTimeFetcher
from monitor.served import served_link
from monitor.state import MonitorState, evaluate_clusters, observe_snapshot
from monitor.windows import OffsetWindows

__all__ = ["LinkStatuses", "MonitorService", "evaluator_config", "is_process_running"]

log = logging.getLogger("mirrorwatch.monitor")

# How long a just-started monitor's first round waits for each cluster's first answer (the first collection also
# waits for the commit follower to catch up): until then it publishes nothing (the API answers 503 "no collection
# yet") rather than figures without a source; a cluster still silent after it reads down, "no answer for N s".
FIRST_ANSWER_WAIT_S = 15.0
# How long served_links reuses the workers' statuses it read: at least this long, and four times as long as reading
# them took (a flood of requests reads them at most a fifth of the time). A worker draining a backlog rewrites its
# status every few tens of milliseconds (`mirror.progress.STATUS_REST_S`): the lag then falls tens of seconds per
# second, and statuses read 0.2 s before read seconds too high (issue #41).
SERVED_REUSE_MS = 20
SERVED_REUSE_TIMES = 4
DATES_KEPT = 200_000  # record times settled by `_dated` (as many as the record time fetcher caches)

# link name -> the status of each of its workers: in memory for this process's workers, else from status files
LinkStatuses = Callable[[], Mapping[str, Sequence[WorkerStatus]]]


def _reuse_ms(took_s: float) -> int:
    """How long served_links reuses the statuses it read, when reading them took `took_s` (SERVED_REUSE_MS)."""
    return max(SERVED_REUSE_MS, int(took_s * 1000 * SERVED_REUSE_TIMES))


def _high_watermark(
    snapshot: ClusterSnapshot | None, topic: str, partition: int, *, read_by: bool
) -> tuple[int, int] | None:
    """(when, high-watermark) of a partition in a snapshot that answered; None when it did not say. The
    high-watermark was read during the collection: it held no earlier than the collection's start and, with
    `read_by`, no later than its end."""
    offsets = snapshot.partitions.get((topic, partition)) if snapshot is not None and snapshot.up else None
    if snapshot is None or offsets is None or offsets.latest is None:
        return None
    at = snapshot.observed_ms + (int(snapshot.collect_seconds * 1000) if read_by else 0)
    return at, offsets.latest


def _window(
    windows: Mapping[tuple[str, int], tuple[OffsetSample, ...]], topic: str, partition: int
) -> tuple[OffsetSample, ...]:
    return windows.get((topic, partition), ())


def _overdue(
    running: tuple[int, concurrent.futures.Future[ClusterSnapshot]] | None,
    latest: ClusterSnapshot | None,
    settings: MonitorConfig,
    now_ms: int,
) -> str | None:
    """Whether a cluster's collection now `running` (since when, and its future) is overdue: twice as long as its
    last good one took (at most an interval), and at least a second (a broker that stopped makes librdkafka wait out
    the whole request timeout; the round goes on with the last snapshot for up to an interval, and what it says of a
    caught-up link is no longer known)."""
    if running is None or running[1].done():
        return None
    usual_s = latest.collect_seconds if latest is not None and latest.up else 0.0
    waited_s = (now_ms - running[0]) / 1000
    # (at most an interval: one slow collection, just after a restart say, is not the usual)
    overdue_s = max(1.0, min(2 * usual_s, settings.interval_seconds))
    return f"no answer for {waited_s:.1f}s" if waited_s > overdue_s else None


def _settled_while_unseen(
    links: Sequence[LinkConfig],
    settled: Mapping[Key, int],
    record_times: dict[Key, int | None],
    snapshots: Mapping[str, ClusterSnapshot],
    positions: Mapping[str, Mapping[tuple[str, int], SafePosition]],
) -> None:
    """A source not answering has no record read: the times `settled` while it did still date its records."""
    for link in links:
        source = snapshots.get(link.source)
        if source is None or source.up:
            continue
        for (topic, partition), position in positions[link.name].items():
            key = (link.source, topic, partition, position.safe or 0)
            if key in settled:
                record_times.setdefault(key, settled[key])


def is_process_running(pid: int) -> bool:
    """Whether process `pid` of this host exists and is not stopped (SIGSTOP) or a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: existing is all we can tell
    return state not in ("T", "t", "Z", "X")


def live_sightings(statuses: Sequence[WorkerStatus], now_ms: int) -> list[WorkerSighting]:
    """Which statuses come from a worker that is alive: fresh, not failed, and (on this host, in this PID namespace)
    a process that is there and not stopped. A SIGKILLed or SIGSTOPped worker on this host is known at once,
    elsewhere once its status is overdue (`WorkerStatus.is_stale`)."""
    return [
        WorkerSighting(
            status,
            status.state != "failed"
            and not status.is_stale(now_ms)
            and (not pids_readable_here(status.host, status.pids) or not status.pid or is_process_running(status.pid)),
        )
        for status in statuses
    ]


def evaluator_config(m: MonitorConfig) -> EvaluatorConfig:
    return EvaluatorConfig(
        window=m.window,
        min_complete=m.min_complete,
        allowed_lag_records=m.allowed_lag_records,
        allowed_lag_seconds=m.allowed_lag_seconds,
        min_stop_seconds=m.min_stop_seconds,
        max_commit_interval_seconds=m.max_commit_interval_seconds,
    )


class MonitorService:
    def __init__(
        self,
        settings: MonitorConfig,
        clusters: Mapping[str, ClusterConfig],
        links: Sequence[LinkConfig] = (),
        *,
        link_statuses: LinkStatuses | None = None,
        clock: Clock | None = None,
    ) -> None:
        """`settings`: the monitor's own section; `clusters`: what it collects; `links`: what it measures."""
        shard = settings.shard
        if shard.clusters:  # a shard: its clusters, and the links it can measure on them
            clusters = {alias: c for alias, c in clusters.items() if alias in shard.clusters}
            links = [link for link in links if link.source in clusters and link.target in clusters]
        self.settings, self.clusters, self.links = settings, dict(clusters), tuple(links)
        own = frozenset(link.consumer_group for link in self.links)
        everything = not shard.clusters and shard.groups == GroupSelection()
        self._watched = None if everything else (lambda group: group in own or shard.groups.matches(group))
        self._link_statuses = link_statuses or dict
        self._clock = clock or SystemClock()
        self._evaluator = evaluator_config(settings)
        interval_ms = int(settings.interval_seconds * 1000)
        self._windows = OffsetWindows(
            settings.window,
            min_distance_ms=interval_ms // 2,
            expire_after_ms=int(settings.expire_group_seconds * 1000),
        )
        self._admins: dict[str, AdminClient] = {}
        # One collection thread per cluster; what runs, since when; the newest snapshot of each cluster.
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=len(self.clusters), thread_name_prefix="mirrorwatch-collect"
        )
        self._running: dict[str, tuple[int, concurrent.futures.Future[ClusterSnapshot]]] = {}
        self._latest: dict[str, ClusterSnapshot] = {}
        self._previous: dict[str, ClusterSnapshot] = {}  # the good snapshot before the latest, per cluster
        self._dates: OrderedDict[Key, int] = OrderedDict()  # record times as first settled (_dated)
        self._round_wait_s = settings.interval_seconds / 2
        # a snapshot older than a status by more than a round's usual distance is no measure of a worker that has
        # not fetched since its assignment (monitor.links.safe_positions)
        self._high_stale_ms = interval_ms + 1_000
        self._record_times: RecordTimeFetcher | None = None
        self._lock = threading.Lock()  # one collection at a time, also when called directly
        self._followers: dict[str, CommitFollower | None] = {}  # None: this cluster uses the admin API
        self._loop: threading.Thread | None = None
        self._stop = threading.Event()
        self.state: MonitorState | None = None
        self.last_success_ms: dict[str, int] = {}
        self.on_publish: list[Callable[[MonitorState], None]] = []  # called on the monitor's thread after each round
        self.history = History(int(settings.history_seconds * 1000), int(settings.interval_seconds * 1000))
        self.events = Events(settings.events)
        # Per link, the canary as it reads now (the composition root sets it when a canary publishes).
        self.canary: Callable[[], Mapping[str, CanaryReading]] | None = None
        self._canary_before: Mapping[str, CanaryReading] | None = None
        self._served_lock = threading.Lock()
        self._on_source_by = OnSourceBy()  # when waiting records were on the source, as the rounds proved it
        # served_links' last read of the statuses: the round it was for, when, the positions it found, for how long
        self._served: tuple[MonitorState, int, Mapping[str, Mapping[tuple[str, int], SafePosition]], int] | None = None
        self.publishing = False  # a round of the loop is under way: its state will be rendered (`on_publish`)
        self.rounds_published = 0  # rounds of the loop whose state the `on_publish` listeners have had
        self.published_up: set[str] = set()  # the clusters some published round held answering (for /readyz)
        self._started_ms: int | None = None
        self.round_seconds = 0.0  # how long the last round took
        self.overruns = 0  # rounds that took longer than the interval (the interval stretched)

    @property
    def windows(self) -> OffsetWindows:
        return self._windows

    def collect(self) -> MonitorState:
        """One round: every cluster's newest snapshot, the windows fed, every group and link evaluated; returns (and
        publishes) the new state.

        Clusters are collected side by side, each in its own thread: a cluster that does not answer keeps its own
        collection waiting, not the others'. The round waits at most half an interval for them; a collection still
        running then goes on in the background and its snapshot joins the round after it. A cluster whose collection
        fails, or runs longer than an interval, is reported down with the reason. The first round waits longer
        (`FIRST_ANSWER_WAIT_S`): a cluster not collected yet is not known to be down."""
        with self._lock:
            round_started = time.monotonic()
            # statuses before commits: a stopping worker commits, then withdraws its status (alive as of the read)
            started = self._clock.now_ms()
            sightings = {name: live_sightings(of_link, started) for name, of_link in self._link_statuses().items()}
            for alias in self.clusters:
                if alias not in self._running:
                    self._running[alias] = (started, self._pool.submit(self._collect_cluster, alias, started))
            wait_s = self._round_wait_s if self.state is not None else max(self._round_wait_s, FIRST_ANSWER_WAIT_S)
            concurrent.futures.wait([future for _, future in self._running.values()], timeout=wait_s)
            now = self._clock.now_ms()
            snapshots: dict[str, ClusterSnapshot] = {}
            for alias in self.clusters:
                since, future = self._running[alias]
                if future.done():
                    del self._running[alias]
                    try:
                        snapshot = future.result()
                    except Exception as exc:  # a bug, not a Kafka failure (those are data): the cluster reads down
                        log.exception("monitor: collecting cluster %r failed", alias)
                        snapshot = ClusterSnapshot(alias, since, up=False, error=f"collection failed: {exc}")
                    if alias in self._latest and self._latest[alias].up:
                        self._previous[alias] = self._latest[alias]
                    self._latest[alias] = snapshot
                    if snapshot.up:
                        self.last_success_ms[alias] = snapshot.observed_ms
                        observe_snapshot(self._windows, snapshot)
                    else:
                        log.warning("monitor: cluster %r is not answering: %s", alias, snapshot.error)
                latest = self._latest.get(alias)
                waited_s = (now - since) / 1000
                if alias in self._running and (latest is None or waited_s > self.settings.interval_seconds):
                    latest = ClusterSnapshot(alias, since, up=False, error=f"no answer for {waited_s:.1f}s")
                if latest is not None:
                    snapshots[alias] = latest
            self._windows.expire(now)
            positions = {
                link.name: self._positions(link, sightings.get(link.name, ()), snapshots.get(link.source), now)
                for link in self.links
            }
            self._on_source_by.forget({(name, *key) for name, of_link in positions.items() for key in of_link})
            times, markers_only = self._times(self._wanted_record_times(snapshots, positions))
            record_times = self._dated(times, snapshots)
            _settled_while_unseen(self.links, self._dates, record_times, snapshots, positions)
            groups = evaluate_clusters(
                self._windows, snapshots, self._evaluator, record_times, markers_only, self.links
            )
            links = {
                link.name: link_view(
                    link,
                    sightings=sightings.get(link.name, ()),
                    snapshot=snapshots.get(link.source),
                    target=snapshots.get(link.target),
                    record_times=record_times,
                    now_ms=now,
                    history=functools.partial(self._history, link.source, link.consumer_group),
                    positions=positions[link.name],
                )
                for link in self.links
            }
            previous, self.state = (
                self.state,
                MonitorState(
                    now, snapshots, groups, links, dict(self.last_success_ms), time.monotonic() - round_started
                ),
            )
            self.events.extend(transitions(previous, self.state))
            canary = self._canary()
            if canary is not None:
                self.events.extend(canary_transitions(self._canary_before, canary, now))
                self._canary_before = canary
            if self.settings.history_seconds > 0:
                p99 = None if canary is None else {link: reading.p99_seconds for link, reading in canary.items()}
                self.history.record(self.state, p99)
            return self.state

    def _positions(
        self,
        link: LinkConfig,
        sightings: Sequence[WorkerSighting],
        source: ClusterSnapshot | None,
        now: int,
        unseen: str | None = None,
    ) -> dict[tuple[str, int], SafePosition]:
        """The link's positions against this round's source snapshot, or, while the source is not answering, against
        the last one it answered (a floor, said so: `SafePosition.high_floor`). `unseen`: why the source is not
        answering now although the round's snapshot is good (its collection since is overdue)."""
        previous = self._previous.get(link.source)
        if source is not None and not source.up:  # the last it answered: the latest, unless that one failed too
            latest = self._latest.get(link.source)
            last = latest if latest is not None and latest.up else previous
            if source.partitions:  # its high-watermarks were read this round, its groups were not: theirs are older
                source = dataclasses.replace(source, up=True, groups=last.groups if last is not None else {})
            else:
                unseen, source, previous = source.error or "no answer", last, None
        positions = safe_positions(
            link, sightings, source, now, previous, unseen_source=unseen, high_stale_after_ms=self._high_stale_ms
        )
        return {  # the earliest proof of any round, not only this one's snapshots (OnSourceBy)
            key: dataclasses.replace(
                p,
                behind_by_ms=self._on_source_by.earliest(
                    (link.name, *key), p.safe, p.behind_high, p.behind_by_ms, p.high_watermark
                ),
            )
            if p.behind_by_ms is not None and p.behind_high is not None and p.safe is not None
            else p
            for key, p in positions.items()
        }

    def served_links(self) -> Mapping[str, LinkView]:
        """The published round's link views brought to now (`monitor.served.served_link`): the workers' statuses read
        again (a flood of requests reads them once: SERVED_REUSE_MS), every partition whose position has not moved
        since the round aged to now. The round's views when there is none yet or the statuses cannot be read."""
        state = self.state
        if state is None:
            return {}
        with self._served_lock:
            now = self._clock.now_ms()
            cached = self._served
            if cached is None or cached[0] is not state or not 0 <= now - cached[1] < cached[3]:
                began = self._clock.monotonic_s()
                try:
                    statuses = self._link_statuses()
                except Exception:  # unreadable now: the round's figures, at their own moments
                    log.exception("monitor: reading the workers' statuses to serve the links failed")
                    return state.links
                fresh = {
                    link.name: self._positions(
                        link,
                        live_sightings(statuses.get(link.name, ()), now),
                        state.clusters.get(link.source),
                        now,
                        _overdue(self._running.get(link.source), self._latest.get(link.source), self.settings, now),
                    )
                    for link in self.links
                }
                cached = self._served = (state, now, fresh, _reuse_ms(self._clock.monotonic_s() - began))
        served: dict[str, LinkView] = {}
        for link in self.links:
            view = state.links.get(link.name)
            if view is None:
                continue
            group = state.groups.get((link.source, link.consumer_group))
            windows = group.windows if group is not None else {}
            served[link.name] = served_link(view, now, cached[2].get(link.name), functools.partial(_window, windows))
        return served

    def _canary(self) -> Mapping[str, CanaryReading] | None:
        if self.canary is None:
            return None
        try:
            return self.canary()
        except Exception:  # a canary's status unreadable: its latency missing from this round, the round goes on
            log.exception("monitor: reading the canary's latency failed")
            return None

    def _collect_cluster(self, alias: str, now_ms: int) -> ClusterSnapshot:
        admin = self._admins.get(alias)
        if admin is None:
            admin = self._admins[alias] = new_admin(
                self.clusters[alias], alias, {"client.id": f"mirrorwatch-monitor-{alias}", **QUICK_RECONNECT}
            )
        follower = self._follower(alias)
        snapshot = collect_cluster(
            admin,
            alias,
            now_ms,
            cluster=self.clusters[alias],
            timeout_s=max(5.0, self.settings.interval_seconds),
            follower=follower,
            watched=self._watched,
        )
        if follower is not None and follower.failure is not None:
            log.warning(
                "monitor: cluster %r: %s; reading committed offsets with one OffsetFetch per group instead",
                alias,
                follower.failure,
            )
            follower.stop()
            self._followers[alias] = None
        return snapshot

    def _follower(self, alias: str) -> CommitFollower | None:
        """The cluster's `__consumer_offsets` follower (started on first use), unless the config or a failure says
        to use the admin API."""
        if self.settings.commits_from == "admin_api" or self._stop.is_set():
            return None
        if alias not in self._followers:
            follower = CommitFollower(self.clusters[alias], alias)
            follower.start()
            self._followers[alias] = follower
            log.info("monitor: cluster %r: following %s for committed offsets", alias, "__consumer_offsets")
        return self._followers[alias]

    def _history(self, cluster: str, group: str, topic: str, partition: int) -> tuple[OffsetSample, ...]:
        return self._windows.samples((cluster, group, topic, partition))

    def _wanted_record_times(
        self, snapshots: Mapping[str, ClusterSnapshot], positions: Mapping[str, Mapping[tuple[str, int], SafePosition]]
    ) -> set[Key]:
        """The records whose age is a lag in seconds: at each lagging group's committed offset and each link
        partition's safe position (only on clusters that answered)."""
        wanted: set[Key] = set()
        for alias, snapshot in snapshots.items():
            if not snapshot.up:
                continue
            for group in snapshot.groups.values():
                for (topic, partition), offset in group.offsets.items():
                    hwm = snapshot.partitions.get((topic, partition))
                    if hwm is not None and hwm.latest is not None and offset < hwm.latest:
                        wanted.add((alias, topic, partition, offset))
        for link in self.links:
            source = snapshots.get(link.source)
            if source is None or not source.up:
                continue
            for (topic, partition), position in positions[link.name].items():
                hwm = source.partitions.get((topic, partition))
                highs = [h for h in (position.high_watermark, hwm.latest if hwm else None) if h is not None]
                if position.safe is not None and highs and position.safe < max(highs):
                    wanted.add((link.source, topic, partition, position.safe))
        return wanted

    def _times(self, wanted: set[Key]) -> tuple[dict[Key, int | None], frozenset[Key]]:
        """The wanted records' times, and the wanted offsets with nothing but transaction markers after them."""
        if not wanted:
            return {}, frozenset()
        if self._record_times is None:
            self._record_times = RecordTimeFetcher(self.clusters)
        # bounded: a cluster that answers slowly (just thawed, say) leaves some ages unknown for a round rather
        # than holding the round, and with it every other figure, back
        times = self._record_times.times(wanted, budget_s=max(2.0, self.settings.interval_seconds / 2))
        return times, frozenset(self._record_times.markers_only)

    def _dated(self, times: dict[Key, int | None], snapshots: Mapping[str, ClusterSnapshot]) -> dict[Key, int | None]:
        """Record times as `date_record` settles them the first round each is known, from the source snapshot of
        this round (the offset is below its high-watermark) and the one before (whether the offset was, yet): kept
        from then on, so that a record's age does not change its basis when those observations are long gone."""
        dates = self._dates
        out: dict[Key, int | None] = {}
        for key, timestamp in times.items():
            if timestamp is None:
                out[key] = None
                continue
            dated = dates.get(key)
            if dated is None:
                alias, topic, partition, offset = key
                now = _high_watermark(snapshots.get(alias), topic, partition, read_by=True)
                then = _high_watermark(self._previous.get(alias), topic, partition, read_by=False)
                earlier = then if then is not None and then[1] <= offset else None
                later = now if now is not None and now[1] > offset else None
                dated = dates[key] = date_record(timestamp, offset, earlier, later)
            else:
                dates.move_to_end(key)
            out[key] = dated
        while len(dates) > DATES_KEPT:
            dates.popitem(last=False)
        return out

    def _collect_safely(self) -> None:
        self.publishing = True
        try:
            state = self.collect()
            for listener in self.on_publish:  # e.g. /metrics rendered now, so no scrape waits for it
                listener(state)
            self.published_up.update(alias for alias, snapshot in state.clusters.items() if snapshot.up)
            self.rounds_published += 1
        except Exception:  # a bug in one round must not stop the monitor; the next round tries again
            log.exception("monitor: collection failed")
        finally:
            self.publishing = False

    def not_ready(self) -> str | None:
        """Why /readyz is not ready yet (None: ready): `monitor.readiness.why_not_ready`."""
        loop, since, published = self._loop is not None, self._started_ms, self.rounds_published > 0
        waited_out = since is not None and self._clock.now_ms() - since >= READY_WAIT_S * 1000
        return why_not_ready(self.state, self.clusters, self.published_up if loop else None, self._latest,
                             self._running, rendered=not loop or published, waited_out=waited_out)  # fmt: skip

    def _run(self) -> None:
        interval = self.settings.interval_seconds
        stretched = False
        while not self._stop.is_set():
            started, first = time.monotonic(), self.state is None
            self._collect_safely()
            self.round_seconds = time.monotonic() - started
            if first and self.round_seconds > interval:  # it waited for the first answers: not an overrun
                continue
            if self.round_seconds > interval:
                self.overruns += 1
                if not stretched:
                    log.warning(
                        "monitor: a collection took %.1f s, longer than monitor.interval_seconds (%g s): the next one "
                        "starts now, the interval stretches until rounds are faster again",
                        self.round_seconds,
                        interval,
                    )
                stretched = True
                continue
            if stretched:
                log.info("monitor: collections are within the interval again (%.1f s)", self.round_seconds)
                stretched = False
            self._stop.wait(interval - self.round_seconds)

    def start(self) -> None:
        """Collect now and then every interval, in a background thread."""
        self._started_ms = self._clock.now_ms()
        self._loop = threading.Thread(target=self._run, name="mirrorwatch-monitor", daemon=True)
        self._loop.start()

    def stop(self) -> None:
        self._stop.set()
        if self._loop is not None:
            self._loop.join(timeout=60)
            self._loop = None
        for follower in self._followers.values():
            if follower is not None:
                follower.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._record_times is not None:
            self._record_times.close()
