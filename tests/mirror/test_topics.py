"""The topic planner: selection, creation, growth, partition problems and config drift."""

from __future__ import annotations

import re

import pytest

from kernel.config import IdentityRename, MapRename, PrefixRename, SyncOptions, TopicSelection
from kernel.rename import rename_policy
from mirror.topics import (
    AddPartitions,
    AlterConfigs,
    ConfigDrift,
    CreateTopic,
    Partitioning,
    TopicInfo,
    plan_topics,
    select_topics,
)

IDENTITY = rename_policy(IdentityRename(), "src")
PREFIX = rename_policy(PrefixRename(policy="prefix"), "src")


@pytest.mark.parametrize(
    ("include", "exclude", "exclude_internal", "expected"),
    [
        ([".*"], [], True, ["orders", "orders.eu", "payments"]),
        (
            [".*"],
            [],
            False,
            [
                "__consumer_offsets",
                "_confluent-metrics",
                "mirrorwatch-offsets",
                "mm2-offsets.internal",
                "orders",
                "orders.eu",
                "payments",
                "streams-app-store-changelog-internal",
            ],
        ),
        ([r"orders.*"], [r"orders\.eu"], True, ["orders"]),
        ([r"order"], [], True, []),  # full match: "order" is not "orders"
        ([r"orders|payments"], [], True, ["orders", "payments"]),
    ],
)
def test_select_topics(include: list[str], exclude: list[str], exclude_internal: bool, expected: list[str]) -> None:
    all_topics = [
        "orders",
        "orders.eu",
        "payments",
        "__consumer_offsets",
        "mm2-offsets.internal",
        "streams-app-store-changelog-internal",
        "_confluent-metrics",
        "mirrorwatch-offsets",
    ]
    selection = TopicSelection(include=tuple(map(re.compile, include)), exclude=tuple(map(re.compile, exclude)))
    assert select_topics(all_topics, selection, exclude_internal=exclude_internal) == expected


def test_the_canary_topic_is_always_selected() -> None:
    selection = TopicSelection(include=(re.compile("orders"),))
    assert select_topics(["orders", "mirrorwatch.canary", "x"], selection, always=["mirrorwatch.canary"]) == [
        "mirrorwatch.canary",
        "orders",
    ]


def test_missing_targets_are_created_with_source_partitions_and_copyable_configs() -> None:
    source = {
        "orders": TopicInfo(
            6,
            {
                "retention.ms": "1000",
                "min.insync.replicas": "2",
                "cleanup.policy": "compact",
                "confluent.placement.constraints": "{}",
            },
        )
    }
    plan = plan_topics(source, {}, ["orders"], PREFIX, replication_factor=3)
    assert plan.mapping == {"orders": "src.orders"}
    assert plan.create == (CreateTopic("src.orders", 6, 3, {"retention.ms": "1000", "cleanup.policy": "compact"}),)
    assert plan.problems == () and plan.add_partitions == ()
    assert plan.source_partitions == {"orders": 6}


def test_a_pre_existing_smaller_target_is_a_problem_in_preserve_mode() -> None:
    plan = plan_topics({"orders": TopicInfo(6)}, {"orders": TopicInfo(3)}, ["orders"], IDENTITY)
    assert plan.problems == (
        "target topic 'orders' has 3 partition(s) but source topic 'orders' has 6: add partitions to the target, "
        "or set the link's partitioning to hash or modulo",
    )


@pytest.mark.parametrize("partitioning", ["hash", "modulo"])
def test_hash_and_modulo_accept_any_partition_count(partitioning: Partitioning) -> None:
    plan = plan_topics(
        {"orders": TopicInfo(6)}, {"orders": TopicInfo(3)}, ["orders"], IDENTITY, partitioning=partitioning
    )
    assert plan.problems == () and plan.add_partitions == ()


def test_a_target_kept_in_step_grows_with_its_source() -> None:
    plan = plan_topics(
        {"orders": TopicInfo(8)}, {"orders": TopicInfo(6)}, ["orders"], IDENTITY, known_source_partitions={"orders": 6}
    )
    assert plan.add_partitions == (AddPartitions("orders", 6, 8),)
    assert plan.problems == ()


def test_a_larger_target_is_fine() -> None:
    plan = plan_topics({"orders": TopicInfo(3)}, {"orders": TopicInfo(6)}, ["orders"], IDENTITY)
    assert not plan.changes_target and plan.problems == ()


def test_config_drift_ignores_settings_that_are_not_copied() -> None:
    source = {"orders": TopicInfo(1, {"retention.ms": "1000", "min.insync.replicas": "2", "segment.bytes": "1024"})}
    target = {"orders": TopicInfo(1, {"retention.ms": "2000", "min.insync.replicas": "1", "compression.type": "lz4"})}
    plan = plan_topics(source, target, ["orders"], IDENTITY)
    assert plan.drift == (
        ConfigDrift("orders", "orders", "compression.type", None, "lz4"),
        ConfigDrift("orders", "orders", "retention.ms", "1000", "2000"),
        ConfigDrift("orders", "orders", "segment.bytes", "1024", None),
    )


def test_config_sync_sets_what_differs_deletes_what_only_the_copy_sets_and_leaves_the_excluded_with_the_reason() -> (
    None
):
    source = {"orders": TopicInfo(1, {"retention.ms": "1000", "min.insync.replicas": "2", "segment.bytes": "1024",
                                      "cleanup.policy": "compact", "segment.ms": "60000"})}  # fmt: skip
    target = {"orders": TopicInfo(1, {"retention.ms": "2000", "min.insync.replicas": "1", "compression.type": "lz4",
                                      "cleanup.policy": "compact", "segment.ms": "120000"})}  # fmt: skip
    sync = SyncOptions(topic_configs=True, topic_configs_exclude=(re.compile(r"segment\..*"),))
    plan = plan_topics(source, target, ["orders"], IDENTITY, sync=sync)
    assert plan.alter_configs == (
        AlterConfigs("orders", {"retention.ms": "1000"}, ("compression.type",), {"compression.type": "lz4",
                                                                                 "retention.ms": "2000"}),
    )  # fmt: skip
    excluded = "excluded by sync.topic_configs_exclude 'segment\\..*'"
    assert plan.drift == (
        ConfigDrift("orders", "orders", "segment.bytes", "1024", None, excluded),
        ConfigDrift("orders", "orders", "segment.ms", "60000", "120000", excluded),
    )  # min.insync.replicas describes a cluster: never copied, never drift
    assert plan.changes_target
    in_step = {"orders": TopicInfo(1, {**source["orders"].configs, "min.insync.replicas": "1"})}
    assert plan_topics(source, in_step, ["orders"], IDENTITY, sync=sync).alter_configs == ()


def test_with_config_sync_off_every_difference_is_drift_and_nothing_is_altered() -> None:
    source, target = {"orders": TopicInfo(1, {"retention.ms": "1000"})}, {"orders": TopicInfo(1)}
    for sync in (None, SyncOptions()):
        plan = plan_topics(source, target, ["orders"], IDENTITY, sync=sync)
        assert plan.alter_configs == () and not plan.changes_target
        assert [d.reason for d in plan.drift] == ["sync.topic_configs is off for this link"]


def test_the_dead_letter_topic_is_created_when_missing() -> None:
    plan = plan_topics({}, {}, [], IDENTITY, dead_letter_topic="mirror.dlq")
    assert plan.create == (CreateTopic("mirror.dlq", 1, None, {}),)
    assert plan_topics({}, {"mirror.dlq": TopicInfo(1)}, [], IDENTITY, dead_letter_topic="mirror.dlq").create == ()


def test_two_source_topics_never_merge_into_one_target() -> None:
    merge = rename_policy(MapRename(policy="map", map={"a": "b"}), "src")
    plan = plan_topics({"a": TopicInfo(1), "b": TopicInfo(1)}, {}, ["a", "b"], merge)
    assert plan.problems == (
        "source topics 'a' and 'b' would both be written to target topic 'b': exclude one of them or rename it elsewhere",
    )
