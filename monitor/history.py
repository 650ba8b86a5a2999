"""What the monitor remembers between rounds, without Prometheus (pure): a bounded history of its own figures at
collection resolution, and the events (transitions) an on-call engineer asks about first — since when, what changed.

History, per link: replication lag in records and seconds, records/s in and out (from the workers' counters between two
rounds), records in flight, live workers, and the canary's end-to-end p99 (its worst partition, over the canary's
window; when a canary publishes); per group: total lag and Burrow status; per cluster: up or not. Storage is
compact: one ring of round times (8 bytes a round) shared by every series, and per series one float32 per round (4
bytes; a round without a figure holds NaN). The ring holds `span / interval + 1` rounds, so memory is bounded by `rounds
x (8 + 4 x series)` bytes whatever the rounds' pace (a stretched interval covers a longer span with the same rounds);
points older than the span are never served. A series not written for a whole ring (a group or link that is gone) is
dropped. float32 keeps integers exact up to 16,777,216 and ~7 significant digits beyond: enough for a chart, not for
arithmetic on offsets.

Events, compared between two consecutive states: a link's state (running, workers gone, not running, failed),
workers joining, leaving or dying, a group's status, a cluster going down or coming back, config drift found or gone;
and between two readings of the canary: a link's canary going absent or coming back.
A bounded ring, newest last.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from monitor.links import LinkView
from monitor.state import MonitorState

__all__ = [
    "GROUP_SERIES",
    "LINK_SERIES",
    "CanaryReading",
    "Event",
    "Events",
    "History",
    "Point",
    "canary_transitions",
    "transitions",
]

Point = tuple[int, float]  # (observed ms, value)
Key = tuple[str, ...]  # ("link", name, series) or ("group", cluster, group, series)
LINK_SERIES = (
    "replication_lag_records",
    "replication_lag_seconds",
    "records_in_per_second",
    "records_out_per_second",
    "in_flight_records",
    "workers",
    "canary_e2e_latency_p99_seconds",
    "paused_partitions",  # partitions an operator paused (`mirrorwatch link pause`)
    # the lag of the partitions not paused: what the lag alerts judge (a paused partition's lag grows, and that is
    # no stall; none while every partition is paused)
    "unpaused_lag_records",
    "unpaused_lag_seconds",
    # the share of the time between two rounds its live workers were held back by its bandwidth budget
    "budget_throttled_share",
)
GROUP_SERIES = ("total_lag", "status")
_NAN = float("nan")


class History:
    """Written by the monitor's thread once a round, read by the HTTP API's: every access holds one lock."""

    def __init__(self, span_ms: int, interval_ms: int) -> None:
        self.span_ms = span_ms
        self.capacity = max(2, span_ms // max(1, interval_ms) + 1)  # rounds held
        self._times = array("q", [0]) * self.capacity
        self._rounds = 0  # rounds recorded since the start; round r sits in slot r % capacity
        self._series: dict[Key, array[float]] = {}
        self._written: dict[Key, int] = {}  # the last round each series had a figure in
        self._previous: MonitorState | None = None
        self._lock = threading.Lock()

    def record(self, state: MonitorState, canary_p99: Mapping[str, float | None] | None = None) -> None:
        """Add one round's figures (a state not newer than the last one recorded is ignored); `canary_p99`: per link,
        the canary's end-to-end p99 latency in seconds now."""
        previous = self._previous
        if previous is not None and state.observed_ms <= previous.observed_ms:
            return
        now = state.observed_ms
        seconds = (now - previous.observed_ms) / 1000 if previous is not None else 0.0
        links: dict[Key, float | None] = {}
        for name, view in state.links.items():
            before = previous.links.get(name) if previous is not None else None
            unpaused = view.unpaused()
            for series, value in {
                "replication_lag_records": None
                if view.replication_lag_records is None
                else float(view.replication_lag_records),
                "replication_lag_seconds": view.replication_lag_seconds,
                "in_flight_records": float(sum(p.in_flight_records or 0 for p in view.partitions)),
                "workers": float(view.workers),
                **_rates(before, view, seconds),
                "paused_partitions": float(len(view.partitions) - len(unpaused.partitions)),
                "unpaused_lag_records": None
                if unpaused.replication_lag_records is None
                else float(unpaused.replication_lag_records),
                "unpaused_lag_seconds": unpaused.replication_lag_seconds,
            }.items():
                links["link", name, series] = value
        for name, p99 in (canary_p99 or {}).items():
            links["link", name, "canary_e2e_latency_p99_seconds"] = p99
        with self._lock:  # the groups written straight in: a fleet's round is 20,000 series
            slot = self._rounds % self.capacity
            self._times[slot] = now
            for values in self._series.values():  # what this round does not say stays unknown
                values[slot] = _NAN
            for key, value in links.items():
                if value is not None:
                    self._put(key, slot, value)
            for alias, snapshot in state.clusters.items():
                self._put(("cluster", alias, "up"), slot, 1.0 if snapshot.up else 0.0)
            for (cluster, group), group_view in state.groups.items():
                self._put(("group", cluster, group, "total_lag"), slot, float(group_view.evaluation.total_lag))
                self._put(("group", cluster, group, "status"), slot, float(int(group_view.evaluation.status)))
            self._rounds += 1
            for key in [k for k, last in self._written.items() if self._rounds - last > self.capacity]:
                del self._series[key], self._written[key]
        self._previous = state

    def _put(self, key: Key, slot: int, value: float) -> None:
        values = self._series.get(key)
        if values is None:
            values = self._series[key] = array("f", [_NAN]) * self.capacity
        values[slot] = value
        self._written[key] = self._rounds

    def _points(self, key: Key, since_ms: int) -> list[Point]:
        """Oldest first; walks back from the newest round only as far as `since_ms` (or the span)."""
        values = self._series.get(key)
        if values is None or not self._rounds:
            return []
        newest = self._times[(self._rounds - 1) % self.capacity]
        since_ms = max(since_ms, newest - self.span_ms)
        out = []
        for r in range(self._rounds - 1, max(0, self._rounds - self.capacity) - 1, -1):
            slot = r % self.capacity
            at, value = self._times[slot], values[slot]
            if at < since_ms:
                break
            if not math.isnan(value):
                out.append((at, value))
        out.reverse()
        return out

    def link(self, name: str, since_ms: int = 0) -> dict[str, list[Point]]:
        with self._lock:
            return {
                s: self._points(("link", name, s), since_ms) for s in LINK_SERIES if ("link", name, s) in self._series
            }

    def group(self, cluster: str, group: str, since_ms: int = 0) -> dict[str, list[Point]]:
        with self._lock:
            return {
                s: self._points(("group", cluster, group, s), since_ms)
                for s in GROUP_SERIES
                if ("group", cluster, group, s) in self._series
            }

    def keys(self, kind: str) -> list[Key]:
        """The keys of every series of one kind ("link", "group", "cluster")."""
        with self._lock:
            return sorted(k for k in self._series if k[0] == kind)

    def points(self, key: Key, since_ms: int = 0) -> list[Point]:
        with self._lock:
            return self._points(key, since_ms)

    def change_per_minute(self, key: Key, over_ms: int) -> float | None:
        """How fast a series moved over the last `over_ms` (newest minus the oldest point in that time, per minute);
        None with fewer than two points."""
        with self._lock:
            if not self._rounds:
                return None
            points = self._points(key, self._times[(self._rounds - 1) % self.capacity] - over_ms)
        if len(points) < 2 or points[-1][0] == points[0][0]:
            return None
        return (points[-1][1] - points[0][1]) * 60_000 / (points[-1][0] - points[0][0])

    @property
    def series(self) -> int:
        return len(self._series)

    @property
    def bytes(self) -> int:
        """What the rings hold (the arrays' payload; dict overhead comes on top)."""
        return self.capacity * (8 + 4 * len(self._series))


def _rates(before: LinkView | None, now: LinkView, seconds: float) -> dict[str, float | None]:
    """Records/s in and out between two rounds, from the workers' counters, and the share of the time the budget held
    its workers back; unknown for the first round, and 0 when a restart reset the counters (never a negative rate)."""
    rates: dict[str, float | None] = {}
    for direction in ("in", "out"):
        key = f"records_{direction}_total"
        if before is None or seconds <= 0:
            rates[f"records_{direction}_per_second"] = None
            continue
        moved = float(now.stats.get(key, 0)) - float(before.stats.get(key, 0))
        rates[f"records_{direction}_per_second"] = max(0.0, moved / seconds)
    held = "budget_throttled_seconds_total"
    rates["budget_throttled_share"] = (  # a series only for a link with a budget
        None
        if before is None or seconds <= 0 or not now.stats.get("budget_bytes_per_second")
        else max(0.0, float(now.stats.get(held, 0)) - float(before.stats.get(held, 0))) / seconds / max(1, now.workers)
    )
    return rates


@dataclass(frozen=True, slots=True)
class CanaryReading:
    """A link's canary as it reads now: its worst partition's end-to-end p99 over its window (None: no probe in it),
    and whether its probes are absent (none back within the canary's limit)."""

    p99_seconds: float | None
    absent: bool


@dataclass(frozen=True, slots=True)
class Event:
    at_ms: int
    kind: str  # "cluster", "link", "workers", "pause", "drift", "sync", "loss", "canary" or "group"
    subject: str  # the cluster, link or group it is about
    cluster: str  # the cluster it happened on ("" for a link's events: see `subject`)
    before: str
    after: str
    text: str

    def as_dict(self) -> dict[str, object]:
        return {
            "at_ms": self.at_ms,
            "kind": self.kind,
            "subject": self.subject,
            "cluster": self.cluster,
            "before": self.before,
            "after": self.after,
            "text": self.text,
        }


def _pause_events(old: LinkView, view: LinkView, now: int) -> Iterator[Event]:
    """Partitions an operator paused, and those a live worker reports resumed (one that no live worker reports is
    not said resumed: its worker died or the group rebalances)."""
    was = {(p.topic, p.partition) for p in old.partitions if p.paused}
    paused = {(p.topic, p.partition): p.paused for p in view.partitions if p.paused}
    live = {(p.topic, p.partition) for p in view.partitions if p.position_from == "worker"}
    if new := sorted(set(paused) - was):
        where = ", ".join(f"{t}[{p}]" for t, p in new)
        yield Event(now, "pause", view.link, "", "active", "paused", f"link {view.link}: {where} {paused[new[0]]}")
    if resumed := sorted(k for k in was - set(paused) if k in live):
        where = ", ".join(f"{t}[{p}]" for t, p in resumed)
        yield Event(now, "pause", view.link, "", "paused", "active", f"link {view.link}: {where} resumed")


def _link_health(view: LinkView) -> str:
    return "failed" if view.failure else view.state


def transitions(previous: MonitorState | None, current: MonitorState) -> list[Event]:
    """What changed from one round to the next (for the first round, with no "before", only the losses: see
    `_loss_events`)."""
    if previous is None:
        return list(_loss_events(None, current))
    now = current.observed_ms
    events = [*_cluster_events(previous, current, now), *_link_events(previous, current, now)]
    events += _loss_events(previous, current)
    for (alias, group), group_view in current.groups.items():
        old = previous.groups.get((alias, group))
        before, after = (old.evaluation.status if old is not None else None), group_view.evaluation.status
        if before is not None and before != after:
            text = f"group {group} on {alias}: {before.name} -> {after.name}"
            events.append(Event(now, "group", group, alias, before.name, after.name, text))
    return events


def _cluster_events(previous: MonitorState, current: MonitorState, now: int) -> Iterator[Event]:
    for alias, snapshot in current.clusters.items():
        before = previous.clusters.get(alias)
        if before is not None and before.up != snapshot.up:
            after = "up" if snapshot.up else "down"
            why = "" if snapshot.up else f": {snapshot.error}"
            yield Event(
                now, "cluster", alias, alias, "down" if snapshot.up else "up", after, f"cluster {alias} {after}{why}"
            )


def _link_events(previous: MonitorState, current: MonitorState, now: int) -> Iterator[Event]:
    for name, view in current.links.items():
        old = previous.links.get(name)
        if old is None:
            continue
        before, after = _link_health(old), _link_health(view)
        if before != after:
            why = f" ({view.failure})" if view.failure else ""
            yield Event(now, "link", name, "", before, after, f"link {name}: {before} -> {after}{why}")
        if view.workers != old.workers or view.workers_gone > old.workers_gone:
            if view.workers_gone > old.workers_gone:
                what = "died or froze"
            else:
                what = "joined" if view.workers > old.workers else "left"
            text = f"link {name}: a worker {what} ({old.workers} -> {view.workers} live)"
            yield Event(now, "workers", name, "", str(old.workers), str(view.workers), text)
        yield from _pause_events(old, view, now)
        drift_before = {(str(d["target_topic"]), str(d["config"])) for d in old.config_drift}
        drift_now = {(str(d["target_topic"]), str(d["config"])) for d in view.config_drift}
        for topic, config in sorted(drift_now - drift_before):
            yield Event(now, "drift", name, "", "", config, f"link {name}: {topic} differs from its source in {config}")
        for topic, config in sorted(drift_before - drift_now):
            text = f"link {name}: {topic} agrees with its source in {config} again"
            yield Event(now, "drift", name, "", config, "", text)
        synced_before = {(d.get("target_topic"), d.get("config"), d.get("at_ms")) for d in old.config_synced}
        for d in view.config_synced:
            if (d.get("target_topic"), d.get("config"), d.get("at_ms")) not in synced_before:
                was, to = ("unset" if v is None else str(v) for v in (d.get("was"), d.get("now")))
                text = f"link {name}: {d.get('target_topic')} synced {d.get('config')} from its source: {was} -> {to}"
                yield Event(now, "sync", name, "", was, to, text)


def _loss_events(previous: MonitorState | None, current: MonitorState) -> Iterator[Event]:
    """A gap (records a link will never copy) the previous round did not know, at the moment its worker found it.
    The first round knows none before it: every gap in the workers' statuses (their link's ledger) is an event then,
    so a monitor started after a loss, or restarted, still lists it at its own time."""
    for name, view in current.links.items():
        old = previous.links.get(name) if previous is not None else None
        seen = {g.key: g.action for g in old.gaps} if old is not None else {}
        for gap in view.gaps:
            if seen.get(gap.key) != gap.action:  # new, or now skipped where it was stopped at
                yield Event(gap.at_ms, "loss", name, "", seen.get(gap.key, ""), str(gap.records), gap.describe(name))


def canary_transitions(
    previous: Mapping[str, CanaryReading] | None, current: Mapping[str, CanaryReading], now_ms: int
) -> list[Event]:
    """A link's canary going absent or coming back between two readings (nothing without a reading before)."""
    events = []
    for link, reading in current.items():
        old = (previous or {}).get(link)
        if old is None or old.absent == reading.absent:
            continue
        before, after = ("present", "absent") if reading.absent else ("absent", "present")
        text = f"link {link}: canary {'absent: no probe back through the mirror' if reading.absent else 'probes back'}"
        events.append(Event(now_ms, "canary", link, "", before, after, text))
    return events


class Events:
    """The newest `size` events."""

    def __init__(self, size: int = 10_000) -> None:
        self._ring: deque[Event] = deque(maxlen=size)

    def extend(self, events: list[Event]) -> None:
        self._ring.extend(events)

    def query(
        self, *, link: str | None = None, group: str | None = None, cluster: str | None = None, limit: int = 500
    ) -> list[Event]:
        """Newest first, optionally about one link, group or cluster."""
        out: list[Event] = []
        for event in reversed(self._ring):
            if link is not None and not (
                event.kind in ("link", "workers", "pause", "drift", "sync", "loss", "canary") and event.subject == link
            ):
                continue
            if group is not None and not (event.kind == "group" and event.subject == group):
                continue
            if cluster is not None and event.cluster != cluster:
                continue
            out.append(event)
            if len(out) >= limit:
                break
        # a loss is listed at the moment its worker found it, which may be before the round that learnt of it
        return sorted(out, key=lambda e: e.at_ms, reverse=True)
