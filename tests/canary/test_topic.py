"""The probe topic's plan: create, grow to one partition per broker, report what it cannot fix."""

from __future__ import annotations

from canary.topic import CanaryTopicPlan, plan_canary_topic


def test_missing_topic_is_created_with_one_partition_per_broker() -> None:
    assert plan_canary_topic("c", None, [1, 2, 3], {}) == CanaryTopicPlan("c", 3, create=True)
    assert plan_canary_topic("c", None, [], {}).partitions == 1


def test_too_few_partitions_are_grown_never_shrunk() -> None:
    assert plan_canary_topic("c", 2, [1, 2, 3], {0: 1, 1: 2}) == CanaryTopicPlan("c", 3, grow_from=2)
    plan = plan_canary_topic("c", 6, [1, 2, 3], {p: p % 3 + 1 for p in range(6)})
    assert plan == CanaryTopicPlan("c", 6) and not plan.changes


def test_brokers_leading_nothing_and_leaderless_partitions_are_reported_with_the_fix() -> None:
    plan = plan_canary_topic("c", 3, [1, 2, 3], {0: 1, 1: 1, 2: -1})
    assert not plan.changes
    assert len(plan.warnings) == 2
    assert "broker(s) 2, 3 lead no partition" in plan.warnings[0] and "kafka-leader-election.sh" in plan.warnings[0]
    assert "partition(s) 2 have no leader" in plan.warnings[1]
