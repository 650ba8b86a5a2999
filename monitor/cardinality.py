"""Which groups get per-partition series in the borrowed families (pure; issue #45): a fleet's /metrics under a
stated cardinality budget.

kafka_exporter, kafka-lag-exporter and burrow_exporter serve up to nine series per group and partition: at 10,000
groups of 12 partitions that was 951,632 series per scrape, more than most Prometheus servers are sized for. The
per-group and per-topic series stay for every group; the per-partition ones go to the groups `partition_series_groups`
selects, the links' own groups first and then by cluster and name, as long as their partitions add up to at most
`partition_series_limit` (a prefix of that order: the set stays put while the fleet does, no series churn).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["partition_series_groups", "series_exposition"]

GroupKey = tuple[str, str]  # (cluster, group)


def partition_series_groups(
    groups: Iterable[tuple[GroupKey, int]], wanted: Callable[[str], bool], first: frozenset[str], limit: int
) -> tuple[frozenset[GroupKey], int]:
    """The groups (of `groups`: each with its partition count) whose per-partition series are served, and how many
    groups `wanted` selects that are left out by the budget."""
    chosen: set[GroupKey] = set()
    left_out, used, full = 0, 0, False
    for key, partitions in sorted(groups, key=lambda g: (g[0][1] not in first, g[0])):
        if not wanted(key[1]):
            continue
        if full or used + partitions > limit:
            full = True
            left_out += 1
            continue
        chosen.add(key)
        used += partitions
    return frozenset(chosen), left_out


def series_exposition(counts: dict[str, int], left_out: int = 0) -> bytes:
    """`mirrorwatch_exporter_series{style}`: the cardinality of what /metrics serves for the monitor; and the groups
    the partition series budget left without per-partition series (`monitor.cardinality`)."""
    lines = [
        "# HELP mirrorwatch_exporter_series Series /metrics serves for the monitor, per exporter style",
        "# TYPE mirrorwatch_exporter_series gauge",
        *(f'mirrorwatch_exporter_series{{style="{style}"}} {count}' for style, count in counts.items()),
        "# HELP mirrorwatch_exporter_groups_without_partition_series Groups partition_series_groups selects that "
        "monitor.partition_series_limit leaves without per-partition series",
        "# TYPE mirrorwatch_exporter_groups_without_partition_series gauge",
        f"mirrorwatch_exporter_groups_without_partition_series {left_out}",
    ]
    return ("\n".join(lines) + "\n").encode()
