"""From snapshots to what the monitor reports (pure): windows fed, groups evaluated, one published state.

How a link is measured is `monitor.links`; when a record was written, `monitor.dating`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from kernel.config import LinkConfig
from monitor.dating import RecordTimes, lag_age
from monitor.evaluator import (
    EvaluatorConfig,
    GroupEvaluation,
    OffsetSample,
    PartitionEvaluation,
    evaluate_group,
    evaluate_partition,
)
from monitor.links import LinkView
from monitor.snapshot import ClusterSnapshot
from monitor.windows import OffsetWindows, WindowKey

__all__ = ["GroupView", "MonitorState", "evaluate_groups", "observe_snapshot"]


@dataclass(frozen=True)
class GroupView:
    cluster: str
    group: str
    state: str
    members: int
    evaluation: GroupEvaluation
    # The offset window each partition was evaluated on, as it was then (Burrow's consumer detail).
    windows: Mapping[tuple[str, int], tuple[OffsetSample, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class MonitorState:
    """One collection round, published whole: every reader (HTTP routes, /metrics) answers from one of these, never
    from the service's live windows, so no answer mixes two rounds."""

    observed_ms: int
    clusters: Mapping[str, ClusterSnapshot]
    groups: Mapping[tuple[str, str], GroupView]
    links: Mapping[str, LinkView]
    last_success_ms: Mapping[str, int] = field(default_factory=dict)  # per cluster: its last good collection
    round_seconds: float = 0.0  # how long the round that made this state took


def observe_snapshot(windows: OffsetWindows, snapshot: ClusterSnapshot) -> None:
    """Add one observation per committed partition of every group (nothing when the cluster was down)."""
    if not snapshot.up:
        return
    for group in snapshot.groups.values():
        for (topic, partition), offset in group.offsets.items():
            offsets = snapshot.partitions.get((topic, partition))
            if offsets is None or offsets.latest is None:
                continue
            committed = group.commit_ms.get((topic, partition))
            sample = OffsetSample(offset, snapshot.observed_ms, offsets.latest, group.members > 0, commit_ms=committed)
            windows.observe((snapshot.alias, group.group_id, topic, partition), sample)


def evaluate_groups(
    windows: OffsetWindows,
    snapshot: ClusterSnapshot,
    config: EvaluatorConfig,
    record_times: RecordTimes,
    markers_only: AbstractSet[tuple[str, str, int, int]] = frozenset(),
    *,
    cadences: Mapping[tuple[str, str], int] | None = None,
) -> dict[tuple[str, str], GroupView]:
    """Every group of the cluster evaluated against the high-watermarks of this snapshot. `markers_only`: the
    committed offsets with nothing but transaction markers from them to the end (the group is caught up there).
    `cadences`: (cluster, group) -> the commit interval its configuration gives (a link's own group), which stands in
    for the cadence until the windows learnt it: a monitor started in the middle of an incident (or restarted with
    `mirrorwatch run`) would otherwise allow the longest assumed interval before a stuck link's group reads WARN."""
    views: dict[tuple[str, str], GroupView] = {}
    if not snapshot.up:
        return views
    now = snapshot.observed_ms
    for group in snapshot.groups.values():
        evaluations: list[PartitionEvaluation] = []
        evaluated: dict[tuple[str, int], tuple[OffsetSample, ...]] = {}
        for topic, partition in windows.partitions(snapshot.alias, group.group_id):
            offsets = snapshot.partitions.get((topic, partition))
            if offsets is None or offsets.latest is None:
                continue
            samples = evaluated[(topic, partition)] = windows.samples(
                (snapshot.alias, group.group_id, topic, partition)
            )
            committed = samples[-1].offset if samples else None
            lag_seconds, method, caught_up = None, None, False
            if committed is not None and committed < offsets.latest:
                key = (snapshot.alias, topic, partition, committed)
                lag_seconds, method = lag_age(now, key, record_times, samples)
                caught_up = key in markers_only
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
                commit_gap_ms=_cadence(windows, (snapshot.alias, group.group_id, topic, partition), cadences),
                nothing_to_read=caught_up,
                log_start=offsets.earliest,
            )
            if method == "at_least":
                evaluation = replace(evaluation, lag_seconds=lag_seconds)
            if method is not None:  # (a replace per partition costs a second per 60,000 of them)
                evaluation = replace(evaluation, lag_seconds_method=method)
            evaluations.append(evaluation)
        views[(snapshot.alias, group.group_id)] = GroupView(
            snapshot.alias, group.group_id, group.state, group.members, evaluate_group(evaluations), evaluated
        )
    return views


def evaluate_clusters(  # noqa: PLR0917 - a round's parts, as MonitorService.collect has them
    windows: OffsetWindows,
    snapshots: Mapping[str, ClusterSnapshot],
    config: EvaluatorConfig,
    record_times: RecordTimes,
    markers_only: AbstractSet[tuple[str, str, int, int]],
    links: Iterable[LinkConfig],
) -> dict[tuple[str, str], GroupView]:
    """`evaluate_groups` of every cluster's snapshot of a round, in one mapping; the links' own groups with the
    cadence their configuration gives (`link_cadences`)."""
    cadences = link_cadences(links)
    return {
        key: view
        for snapshot in snapshots.values()
        for key, view in evaluate_groups(
            windows, snapshot, config, record_times, markers_only, cadences=cadences
        ).items()
    }


def link_cadences(links: Iterable[LinkConfig]) -> dict[tuple[str, str], int]:
    """(source cluster, group) -> commit interval of every python link's own group: its cadence before the windows
    learn it (`evaluate_groups`). A spark link's commits follow its micro-batches, whose length only observation
    tells."""
    return {
        (link.source, link.consumer_group): link.offset_commit_interval_ms for link in links if link.engine == "python"
    }


def _cadence(windows: OffsetWindows, key: WindowKey, configured: Mapping[tuple[str, str], int] | None) -> int | None:
    """The partition's learnt commit gap, or else the one its group's configuration gives (None: neither)."""
    learnt = windows.commit_gap_ms(key)
    if learnt is not None or not configured:
        return learnt
    return configured.get((key[0], key[1]))
