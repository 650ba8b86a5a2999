"""The probe topic's plan (pure): at least one partition per broker, leaders spread over the brokers.

The canary creates the topic when it is missing and grows it when it has fewer partitions than the cluster has
brokers; it never shrinks or deletes anything. Leaders it cannot move itself (that takes a preferred-leader
election or a reassignment) are reported with the command that fixes them, never silently accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["CanaryTopicPlan", "plan_canary_topic"]


@dataclass(frozen=True)
class CanaryTopicPlan:
    topic: str
    partitions: int  # what the topic will have once the plan is applied
    create: bool = False
    grow_from: int | None = None  # current partition count when it must grow
    warnings: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return self.create or self.grow_from is not None


def plan_canary_topic(
    topic: str, existing_partitions: int | None, brokers: Sequence[int], leaders: Mapping[int, int]
) -> CanaryTopicPlan:
    """`leaders`: partition -> leader broker id of the existing topic (-1 or missing: none)."""
    wanted = max(1, len(set(brokers)))
    if existing_partitions is None:
        return CanaryTopicPlan(topic, wanted, create=True)
    if existing_partitions < wanted:
        return CanaryTopicPlan(topic, wanted, grow_from=existing_partitions)
    idle = sorted(set(brokers) - {leader for leader in leaders.values() if leader >= 0})
    warnings: tuple[str, ...] = ()
    if idle:
        warnings = (
            f"canary topic {topic!r}: broker(s) {', '.join(map(str, idle))} lead no partition of it, so the probes do "
            f"not cover them; run `kafka-leader-election.sh --election-type preferred --topic {topic} "
            "--all-topic-partitions` (or reassign its partitions)",
        )
    leaderless = sorted(p for p in range(existing_partitions) if leaders.get(p, -1) < 0)
    if leaderless:
        warnings += (f"canary topic {topic!r}: partition(s) {', '.join(map(str, leaderless))} have no leader",)
    return CanaryTopicPlan(topic, existing_partitions, warnings=warnings)
