"""What the collector saw of one cluster at one moment (pure types: the evaluator and the views read them, the
collector in `monitor.collector` fills them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ClusterSnapshot", "GroupInfo", "Member", "PartitionOffsets", "Replicas"]


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    earliest: int | None  # None: the broker did not answer for this partition
    latest: int | None  # the high-watermark


@dataclass(frozen=True, slots=True)
class Replicas:
    """Where a partition lives, as the cluster's metadata says (kafka_exporter's per-partition families)."""

    leader: int  # broker id; -1 while the partition has no leader
    replicas: tuple[int, ...]  # the assigned replicas, the preferred leader first
    isr: tuple[int, ...]  # the in-sync replicas

    @property
    def leader_is_preferred(self) -> bool:
        return bool(self.replicas) and self.leader == self.replicas[0]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True, slots=True)
class Member:
    """The group member a partition is assigned to (kafka-lag-exporter's member labels)."""

    host: str
    consumer_id: str  # the member id the coordinator gave it
    client_id: str


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str  # STABLE, EMPTY, PREPARING_REBALANCE, ... (as the broker says)
    members: int
    is_simple: bool  # no group protocol: offsets committed by a client that never joined (e.g. a Spark link's group)
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)  # committed offset per partition
    error: str | None = None
    assignments: Mapping[tuple[str, int], Member] = field(default_factory=dict)  # who holds a partition now
    # When each offset was committed (the commit's own timestamp, read from __consumer_offsets); empty when the
    # offsets came from the admin API, which does not say.
    commit_ms: Mapping[tuple[str, int], int] = field(default_factory=dict)


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
    brokers: Mapping[int, str] = field(default_factory=dict)  # broker id -> host:port, from the metadata
    replicas: Mapping[tuple[str, int], Replicas] = field(default_factory=dict)
    # where the committed offsets came from: "offsets-topic" (followed) or "admin-api" (one OffsetFetch per group)
    commits_from: str = "admin-api"

    def topics(self) -> dict[str, int]:
        """Topic -> partition count."""
        counts: dict[str, int] = {}
        for topic, _ in self.partitions:
            counts[topic] = counts.get(topic, 0) + 1
        return counts
