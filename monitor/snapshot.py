"""What the collector saw of one cluster at one moment (pure types: the evaluator and the views read them, the
collector in `monitor.collector` fills them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ClusterSnapshot", "GroupInfo", "PartitionOffsets"]


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    earliest: int | None  # None: the broker did not answer for this partition
    latest: int | None  # the high-watermark


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str  # STABLE, EMPTY, PREPARING_REBALANCE, ... (as the broker says)
    members: int
    is_simple: bool  # no group protocol: offsets committed by a client that never joined (e.g. a Spark link's group)
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)  # committed offset per partition
    error: str | None = None


@dataclass(frozen=True)
class ClusterSnapshot:
    alias: str
    observed_ms: int
    up: bool
    error: str | None = None
    cluster_id: str | None = None
    partitions: Mapping[tuple[str, int], PartitionOffsets] = field(default_factory=dict)
    groups: Mapping[str, GroupInfo] = field(default_factory=dict)
    collect_seconds: float = 0.0

    def topics(self) -> dict[str, int]:
        """Topic -> partition count."""
        counts: dict[str, int] = {}
        for topic, _ in self.partitions:
            counts[topic] = counts.get(topic, 0) + 1
        return counts
