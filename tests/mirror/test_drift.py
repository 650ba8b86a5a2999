"""The drift report (`mirror.drift`, pure): every difference between source topics and their copies, once, with what
the link does about it. `tests/mirror/test_sync.py` runs `mirrorwatch drift` on real clusters."""

from __future__ import annotations

import re

from kernel.config import IdentityRename, PrefixRename, SyncOptions, TopicSelection
from kernel.rename import rename_policy
from mirror.drift import Difference, drift_of, extra_targets
from mirror.topics import TopicInfo, plan_topics

PREFIX = rename_policy(PrefixRename(policy="prefix"), "dc1")
SYNC = SyncOptions(topic_configs=True, topic_configs_exclude=(re.compile(r"segment\.ms"),))


def test_each_kind_of_difference_is_listed_once_with_what_the_link_does() -> None:
    source = {
        "orders": TopicInfo(4, {"retention.ms": "1000", "segment.ms": "60000"}),
        "payments": TopicInfo(2),
        "refunds": TopicInfo(1),
        "audit": TopicInfo(1),
    }
    target = {
        "dc1.orders": TopicInfo(2, {"retention.ms": "2000"}),
        "dc1.payments": TopicInfo(3),
        "dc1.audit": TopicInfo(1),
    }
    selected = ["audit", "orders", "payments", "refunds"]
    in_step = {"orders": 2, "payments": 3, "audit": 1}
    plan = plan_topics(source, target, selected, PREFIX, known_source_partitions=in_step, sync=SYNC)
    sizes = {name: info.partitions for name, info in source.items()}
    copies = {name: info.partitions for name, info in target.items()} | {"dc1.gone": 1, "dc1.other": 1}
    extras = extra_targets(copies, sizes, TopicSelection(include=(re.compile("gone|orders"),)), PREFIX)
    assert extras == {"dc1.gone": "gone"}  # dc1.other's source topic is not one the link selects
    found = drift_of(plan, sizes, copies, extras=extras, refresh_s=5)
    when = "at the link's next topic refresh (every 5 s)"
    assert found == (
        Difference(
            "dc1.gone",
            None,
            "extra",
            None,
            "1",
            False,
            "a copy of 'gone', which the source no longer has: left as it is (sync.topic_deletions is off)",
        ),
        Difference("dc1.orders", "orders", "partitions", "4", "2", True, f"grown {when}"),
        Difference("dc1.orders", "orders", "config retention.ms", "1000", "2000", True, f"synced {when}"),
        Difference(
            "dc1.orders",
            "orders",
            "config segment.ms",
            "60000",
            None,
            False,
            "excluded by sync.topic_configs_exclude 'segment\\.ms'",
        ),
        Difference(
            "dc1.payments", "payments", "partitions", "2", "3", False, "the target has more partitions: never shrunk"
        ),
        Difference("dc1.refunds", "refunds", "missing", None, None, True, f"created {when}"),
    )
    assert [d.line() for d in found if d.target_topic == "dc1.orders"] == [
        f"partitions: source 4, target 2: grown {when}",
        f"config retention.ms: source 1000, target 2000: synced {when}",
        "config segment.ms: source 60000, target unset: excluded by sync.topic_configs_exclude 'segment\\.ms'",
    ]


def test_a_pair_in_step_has_no_difference_and_other_partitionings_accept_any_count() -> None:
    identity = rename_policy(IdentityRename(), "dc1")
    same = {"orders": TopicInfo(3, {"retention.ms": "1000"})}
    plan = plan_topics(same, same, ["orders"], identity, sync=SYNC)
    assert drift_of(plan, {"orders": 3}, {"orders": 3}) == ()
    wider = {"orders": TopicInfo(6, {"retention.ms": "1000"})}
    plan = plan_topics(same, wider, ["orders"], identity, partitioning="hash", sync=SYNC)
    assert drift_of(plan, {"orders": 3}, {"orders": 6}, partitioning="hash") == (
        Difference("orders", "orders", "partitions", "3", "6", False, "partitioning: hash writes to any count"),
    )


def test_a_target_topic_of_the_link_is_not_extra_while_its_source_exists_nor_internal_nor_ignored() -> None:
    identity = rename_policy(IdentityRename(), "dc1")
    everything = TopicSelection()
    targets = ["orders", "__consumer_offsets", "orders.dlq", "local-only"]
    assert extra_targets(targets, ["orders"], everything, identity, ignore=["orders.dlq"]) == {
        "local-only": "local-only"
    }
    assert "__consumer_offsets" in extra_targets(targets, ["orders"], everything, identity, exclude_internal=False)
