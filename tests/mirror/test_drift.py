"""The drift report (`mirror.drift`, pure): every difference between source topics and their copies, once, with what
the link does about it. `tests/mirror/test_sync.py` runs `mirrorwatch drift` on real clusters."""

from __future__ import annotations

import re

from kernel.config import IdentityRename, LinkConfig, PrefixRename, SyncOptions, TopicSelection
from kernel.rename import rename_policy
from mirror.acl_sync import TopicAcl
from mirror.drift import AclState, Difference, drift_of, extra_targets, link_drift
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


def test_a_links_report_adds_its_acl_differences_and_says_when_the_link_makes_each_the_same() -> None:
    plan = plan_topics({"orders": TopicInfo(2)}, {}, ["orders"], PREFIX)  # no copy yet
    link = LinkConfig(name="l", source="dc1", target="dc2", sync=SyncOptions(acls=True))
    wanted = frozenset({TopicAcl("dc1.orders", "User:app", "*", "READ", "ALLOW")})
    made_gone = TopicAcl("dc1.orders", "User:old", "*", "READ", "ALLOW")  # made by the link, gone from the source
    acls = AclState(wanted, frozenset({made_gone}), frozenset({made_gone}))
    found = link_drift(plan, {"orders": 2}, {}, link, extras={}, created=(), acls=acls, when="by the round")
    assert found == (
        Difference("dc1.orders", "orders", "missing", None, None, True, "created by the round"),
        Difference("dc1.orders", "orders", "acl ALLOW READ for User:app", "ALLOW", None, True, "created by the round"),
        Difference(
            "dc1.orders",
            "orders",
            "acl ALLOW READ for User:old",
            None,
            "ALLOW",
            True,
            "made by the link, gone from the source: removed by the round",
        ),
    )
    assert [d.kind for d in found] == ["missing", "acl", "acl"]
    # ACLs that could not be read are left out (the report says why: `drift_report(acls=...)`).
    assert link_drift(plan, {"orders": 2}, {}, link, extras={}, created=(), acls=None) == (
        Difference("dc1.orders", "orders", "missing", None, None, True, "created at the link's next topic refresh "
                   "(every 30 s)"),
    )  # fmt: skip
