"""From snapshots to what the monitor reports (pure): windows fed, groups evaluated, mirror links measured.

A mirror link's partition, in records:
- committed lag   = source high-watermark - committed offset (what Burrow and kafka_exporter see);
- replication lag = source high-watermark - acknowledged offset (what is really not yet safe on the target);
- in flight       = consumed - acknowledged (read, not yet acknowledged).
and in seconds: the age of the oldest record not yet acknowledged (0 when caught up; None when not known).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class LinkView:
    link: str
    source: str
    target: str
    consumer_group: str
    engine_running: bool  # positions come from a running engine in this process (else: from the group only)
    partitions: tuple[LinkPartitionView, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)  # the workers' counters, summed
    failure: str | None = None
    config_drift: tuple[Mapping[str, Any], ...] = ()  # source/target topic config differences the workers found

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
            lag_seconds = None
            if committed is not None and committed < offsets.latest:
                lag_seconds = _age_seconds(now, record_times.get((snapshot.alias, topic, partition, committed)))
            evaluations.append(
                evaluate_partition(
                    topic,
                    partition,
                    samples,
                    high_watermark_now=offsets.latest,
                    now_ms=now,
                    config=config,
                    lag_seconds=lag_seconds,
                )
            )
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
) -> LinkView:
    """A link's per-partition lag, from its running workers' positions or, without them, from its group's commits."""
    context = _Context(
        hwm=snapshot.partitions if snapshot is not None and snapshot.up else {},
        source=link.source,
        now_ms=snapshot.observed_ms if snapshot is not None else 0,
        record_times=record_times,
    )
    partitions: list[LinkPartitionView] = []
    stats: dict[str, Any] = {}
    failure = None
    drift: dict[tuple[str, str], Mapping[str, Any]] = {}
    for status in worker_statuses:
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
        partitions.extend(_partition_view(position, context) for position in status.get("partitions", []))
    group = link.consumer_group
    if not worker_statuses and snapshot is not None and snapshot.up and group in snapshot.groups:
        for (topic, partition), committed in sorted(snapshot.groups[group].offsets.items()):
            position = {"topic": topic, "partition": partition, "committed": committed, "in_flight_records": 0}
            partitions.append(_partition_view(position, context))
    partitions.sort(key=lambda p: (p.topic, p.partition))
    return LinkView(
        link.name, link.source, link.target, group, bool(worker_statuses), tuple(partitions), stats, failure
    )


@dataclass(frozen=True)
class _Context:
    hwm: Mapping[tuple[str, int], PartitionOffsets]
    source: str
    now_ms: int
    record_times: RecordTimes


def _partition_view(position: Mapping[str, Any], context: _Context) -> LinkPartitionView:
    """`position` as the engine reports it: topic, partition, target_topic, consumed, acked, committed, in flight."""
    topic, partition = position["topic"], position["partition"]
    acked, committed = position.get("acked"), position.get("committed")
    offsets = context.hwm.get((topic, partition))
    high = offsets.latest if offsets is not None else None
    safe = acked if acked is not None else committed  # without the engine, committed is what we know is safe
    replication_lag = max(0, high - safe) if high is not None and safe is not None else None
    seconds: float | None = None
    if replication_lag == 0:
        seconds = 0.0
    elif replication_lag is not None and safe is not None:
        seconds = _age_seconds(context.now_ms, context.record_times.get((context.source, topic, partition, safe)))
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
    )
