"""From snapshots to what the monitor reports (pure): windows fed, groups evaluated, mirror links measured.

A mirror link's partition, in records:
- committed lag   = source high-watermark - committed offset (what Burrow and kafka_exporter see);
- replication lag = source high-watermark - acknowledged offset (what is really not yet safe on the target);
- in flight       = consumed - acknowledged (read, not yet acknowledged).
and in seconds: the age of the oldest record not yet acknowledged (0 when caught up; None when not known).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mirrorwatch.config import LinkConfig
from monitor.collector import ClusterSnapshot, PartitionOffsets
from monitor.evaluator import (
    EvaluatorConfig,
    GroupEvaluation,
    OffsetSample,
    PartitionEvaluation,
    evaluate_group,
    evaluate_partition,
)
from monitor.windows import OffsetWindows

__all__ = [
    "GroupView",
    "LinkPartitionView",
    "LinkView",
    "MonitorState",
    "RecordTimes",
    "evaluate_groups",
    "interpolate_record_time",
    "lag_age",
    "link_view",
    "observe_snapshot",
]

# (cluster alias, topic, partition, offset) -> the record's timestamp in ms (None: the record is gone)
RecordTimes = Mapping[tuple[str, str, int, int], int | None]


@dataclass(frozen=True)
class GroupView:
    cluster: str
    group: str
    state: str
    members: int
    evaluation: GroupEvaluation


@dataclass(frozen=True)
class LinkPartitionView:
    topic: str
    partition: int
    target_topic: str
    high_watermark: int | None
    consumed: int | None
    acked: int | None
    committed: int | None
    replication_lag_records: int | None
    committed_lag_records: int | None
    in_flight_records: int
    replication_lag_seconds: float | None
    replication_lag_seconds_method: str | None = None  # "record", "interpolated" or "at_least" (see lag_age)


@dataclass(frozen=True)
class LinkView:
    link: str
    source: str
    target: str
    consumer_group: str
    engine_running: bool  # positions come from running workers (in memory or their status files), else the group
    partitions: tuple[LinkPartitionView, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)  # the workers' counters, summed
    failure: str | None = None
    config_drift: tuple[Mapping[str, Any], ...] = ()  # source/target topic config differences the workers found
    workers: int = 0  # how many workers reported
    clients: tuple[Mapping[str, Any], ...] = ()  # librdkafka statistics per worker and role (see ClientStats)

    @property
    def replication_lag_records(self) -> int:
        return sum(p.replication_lag_records or 0 for p in self.partitions)

    @property
    def replication_lag_seconds(self) -> float:
        return max((p.replication_lag_seconds or 0.0 for p in self.partitions), default=0.0)


@dataclass(frozen=True)
class MonitorState:
    observed_ms: int
    clusters: Mapping[str, ClusterSnapshot]
    groups: Mapping[tuple[str, str], GroupView]
    links: Mapping[str, LinkView]


def observe_snapshot(windows: OffsetWindows, snapshot: ClusterSnapshot) -> None:
    """Add one observation per committed partition of every group (nothing when the cluster was down)."""
    if not snapshot.up:
        return
    for group in snapshot.groups.values():
        for (topic, partition), offset in group.offsets.items():
            offsets = snapshot.partitions.get((topic, partition))
            if offsets is None or offsets.latest is None:
                continue
            sample = OffsetSample(offset, snapshot.observed_ms, offsets.latest, group.members > 0)
            windows.observe((snapshot.alias, group.group_id, topic, partition), sample)


def _age_seconds(now_ms: int, timestamp_ms: int | None) -> float | None:
    return None if timestamp_ms is None else max(0.0, (now_ms - timestamp_ms) / 1000)


def interpolate_record_time(history: Sequence[OffsetSample], offset: int) -> int | None:
    """When the record at `offset` was written, from the high-watermarks observed over time (for a record that
    retention already removed). Before the oldest observation: that observation's time, so the age is a lower bound."""
    if not history or offset >= history[-1].high_watermark:
        return None
    if offset < history[0].high_watermark:
        return history[0].observed_ms
    for earlier, later in itertools.pairwise(history):
        if earlier.high_watermark <= offset < later.high_watermark:
            share = (offset - earlier.high_watermark) / (later.high_watermark - earlier.high_watermark)
            return earlier.observed_ms + int(share * (later.observed_ms - earlier.observed_ms))
    return None


def lag_age(
    now_ms: int, key: tuple[str, str, int, int], record_times: RecordTimes, history: Sequence[OffsetSample]
) -> tuple[float | None, str | None]:
    """Age in seconds of the record at `key`'s offset, and how it was found: "record", "interpolated", or "at_least"
    when the record predates the history (the age is then a lower bound)."""
    if key not in record_times:
        return None, None  # not read (yet): unknown
    timestamp = record_times[key]
    if timestamp is not None:
        return _age_seconds(now_ms, timestamp), "record"
    interpolated = interpolate_record_time(history, key[3])
    if interpolated is None:
        return None, None
    # Older than every high-watermark observed: the age is only a lower bound.
    method = "at_least" if history and key[3] < history[0].high_watermark else "interpolated"
    return _age_seconds(now_ms, interpolated), method


def evaluate_groups(
    windows: OffsetWindows, snapshot: ClusterSnapshot, config: EvaluatorConfig, record_times: RecordTimes
) -> dict[tuple[str, str], GroupView]:
    """Every group of the cluster evaluated against the high-watermarks of this snapshot."""
    views: dict[tuple[str, str], GroupView] = {}
    if not snapshot.up:
        return views
    now = snapshot.observed_ms
    for group in snapshot.groups.values():
        evaluations: list[PartitionEvaluation] = []
        for topic, partition in windows.partitions(snapshot.alias, group.group_id):
            offsets = snapshot.partitions.get((topic, partition))
            if offsets is None or offsets.latest is None:
                continue
            samples = windows.samples((snapshot.alias, group.group_id, topic, partition))
            committed = samples[-1].offset if samples else None
            lag_seconds, method = None, None
            if committed is not None and committed < offsets.latest:
                key = (snapshot.alias, topic, partition, committed)
                lag_seconds, method = lag_age(now, key, record_times, samples)
            # A lower bound proves neither that the lag is allowed (rule 1) nor that the records are fresh (rule 2):
            # the rules see it as unknown; the view still shows it, labelled "at_least".
            evaluation = evaluate_partition(
                topic,
                partition,
                samples,
                high_watermark_now=offsets.latest,
                now_ms=now,
                config=config,
                lag_seconds=None if method == "at_least" else lag_seconds,
            )
            if method == "at_least":
                evaluation = replace(evaluation, lag_seconds=lag_seconds)
            evaluations.append(replace(evaluation, lag_seconds_method=method))
        views[(snapshot.alias, group.group_id)] = GroupView(
            snapshot.alias, group.group_id, group.state, group.members, evaluate_group(evaluations)
        )
    return views


def link_view(
    link: LinkConfig,
    *,
    worker_statuses: Sequence[Mapping[str, Any]],
    snapshot: ClusterSnapshot | None,
    record_times: RecordTimes,
    history: Callable[[str, int], Sequence[OffsetSample]] = lambda _topic, _partition: (),
    target: ClusterSnapshot | None = None,
) -> LinkView:
    """A link's per-partition lag, from its running workers' positions or, without them, from its group's commits."""
    context = _Context(
        hwm=snapshot.partitions if snapshot is not None and snapshot.up else {},
        source=link.source,
        now_ms=snapshot.observed_ms if snapshot is not None else 0,
        record_times=record_times,
        history=history,
    )
    partitions: list[LinkPartitionView] = []
    stats: dict[str, Any] = {}
    failure = None
    drift: dict[tuple[str, str], Mapping[str, Any]] = {}
    by_tp: dict[tuple[str, int], LinkPartitionView] = {}
    clients: list[Mapping[str, Any]] = []
    for status in worker_statuses:
        for role, client in sorted(status.get("clients", {}).items()):
            clients.append({**client, "role": role, "worker": str(status.get("worker", 0))})
        failure = failure or status.get("failure")
        for d in status.get("config_drift", []):
            drift[(d["source_topic"], d["config"])] = d
        for key, value in status.get("stats", {}).items():
            if isinstance(value, int | float):
                stats[key] = stats.get(key, 0) + value
            elif isinstance(value, Mapping) and "counts" in value:  # a histogram: add bucket by bucket
                total = stats.setdefault(
                    key, {"buckets": value["buckets"], "counts": [0] * len(value["counts"]), "sum": 0.0}
                )
                total["counts"] = [a + b for a, b in zip(total["counts"], value["counts"], strict=True)]
                total["sum"] += value["sum"]
        for position in status.get("partitions", []):
            # After a rebalance two workers may both have reported a partition; the later status wins.
            by_tp[(position["topic"], position["partition"])] = _partition_view(position, context)
    partitions.extend(by_tp.values())
    group = link.consumer_group
    if not worker_statuses and snapshot is not None and snapshot.up and group in snapshot.groups:
        for (topic, partition), committed in sorted(snapshot.groups[group].offsets.items()):
            position = {"topic": topic, "partition": partition, "committed": committed, "in_flight_records": 0}
            partitions.append(_partition_view(position, context))
    partitions.sort(key=lambda p: (p.topic, p.partition))
    for d in _partition_count_drift(partitions, snapshot, target):
        drift[(d["source_topic"], d["config"])] = d
    return LinkView(
        link.name,
        link.source,
        link.target,
        group,
        bool(worker_statuses),
        tuple(partitions),
        stats,
        failure,
        tuple(drift[k] for k in sorted(drift)),
        len(worker_statuses),
        tuple(clients),
    )


def _partition_count_drift(
    partitions: Sequence[LinkPartitionView], source: ClusterSnapshot | None, target: ClusterSnapshot | None
) -> list[dict[str, Any]]:
    """Topics whose partition count differs between source and target (reported like a config difference)."""
    if source is None or target is None or not source.up or not target.up:
        return []
    source_counts, target_counts = source.topics(), target.topics()
    pairs = {(p.topic, p.target_topic) for p in partitions}
    return [
        {
            "source_topic": s,
            "target_topic": t,
            "config": "partition_count",
            "source_value": str(source_counts[s]),
            "target_value": str(target_counts[t]),
        }
        for s, t in sorted(pairs)
        if s in source_counts and t in target_counts and source_counts[s] != target_counts[t]
    ]


@dataclass(frozen=True)
class _Context:
    hwm: Mapping[tuple[str, int], PartitionOffsets]
    source: str
    now_ms: int
    record_times: RecordTimes
    history: Callable[[str, int], Sequence[OffsetSample]]


def _partition_view(position: Mapping[str, Any], context: _Context) -> LinkPartitionView:
    """`position` as the engine reports it: topic, partition, target_topic, consumed, acked, committed, in flight."""
    topic, partition = position["topic"], position["partition"]
    acked, committed = position.get("acked"), position.get("committed")
    offsets = context.hwm.get((topic, partition))
    high = offsets.latest if offsets is not None else None
    safe = acked if acked is not None else committed  # without the engine, committed is what we know is safe
    replication_lag = max(0, high - safe) if high is not None and safe is not None else None
    seconds: float | None = None
    method: str | None = None
    if replication_lag == 0:
        seconds = 0.0
    elif replication_lag is not None and safe is not None:
        key = (context.source, topic, partition, safe)
        seconds, method = lag_age(context.now_ms, key, context.record_times, context.history(topic, partition))
    return LinkPartitionView(
        topic=topic,
        partition=partition,
        target_topic=position.get("target_topic", topic),
        high_watermark=high,
        consumed=position.get("consumed"),
        acked=acked,
        committed=committed,
        replication_lag_records=replication_lag,
        committed_lag_records=max(0, high - committed) if high is not None and committed is not None else None,
        in_flight_records=int(position.get("in_flight_records", 0)),
        replication_lag_seconds=seconds,
        replication_lag_seconds_method=method,
    )
