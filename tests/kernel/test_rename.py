"""Rename policies: each direction on a table, and the inverse round trip as a property."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kernel.config import FormatRename, IdentityRename, MapRename, PrefixRename, RenameConfig
from kernel.rename import rename_policy

topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789._-", min_size=1, max_size=60)

POLICIES: list[tuple[str, RenameConfig]] = [
    ("identity", IdentityRename()),
    ("prefix", PrefixRename(policy="prefix")),
    ("prefix with _", PrefixRename(policy="prefix", separator="_")),
    ("format suffix", FormatRename(policy="format", format="${topic}.replica")),
    ("format with source", FormatRename(policy="format", format="${source}-${topic}-copy")),
    ("format twice", FormatRename(policy="format", format="${topic}.${topic}")),
    ("map", MapRename(policy="map", map={"orders": "orders-eu", "a": "b"})),
]


@pytest.mark.parametrize(
    ("config", "source_topic", "target_topic"),
    [
        (IdentityRename(), "orders", "orders"),
        (PrefixRename(policy="prefix"), "orders", "nyc.orders"),
        (PrefixRename(policy="prefix", separator="_"), "orders", "nyc_orders"),
        (FormatRename(policy="format", format="${topic}.replica"), "orders", "orders.replica"),
        (FormatRename(policy="format", format="${source}-${topic}"), "orders", "nyc-orders"),
        (MapRename(policy="map", map={"orders": "orders-eu"}), "orders", "orders-eu"),
        (MapRename(policy="map", map={"orders": "orders-eu"}), "payments", "payments"),
    ],
)
def test_target_topic(config: RenameConfig, source_topic: str, target_topic: str) -> None:
    policy = rename_policy(config, "nyc")
    assert policy.target_topic(source_topic) == target_topic
    assert policy.source_topic(target_topic) == source_topic


@pytest.mark.parametrize(
    ("config", "target_topic"),
    [
        (PrefixRename(policy="prefix"), "orders"),  # no prefix: not produced by this policy
        (PrefixRename(policy="prefix"), "nyc."),  # prefix only: no topic behind it
        (PrefixRename(policy="prefix"), "lon.orders"),  # another cluster's prefix
        (FormatRename(policy="format", format="${topic}.replica"), "orders"),
        (FormatRename(policy="format", format="${topic}.${topic}"), "a.b"),  # both halves must agree
        (MapRename(policy="map", map={"orders": "orders-eu"}), "orders"),  # renamed away: never written as itself
    ],
)
def test_names_a_policy_cannot_produce_have_no_source(config: RenameConfig, target_topic: str) -> None:
    assert rename_policy(config, "nyc").source_topic(target_topic) is None


@pytest.mark.parametrize(("case", "config"), POLICIES, ids=[p[0] for p in POLICIES])
@given(topic=topics)
def test_inverse_round_trips(case: str, config: RenameConfig, topic: str) -> None:
    # A source topic named like a map destination collides with it; the planner refuses such a selection.
    assume(not isinstance(config, MapRename) or topic not in config.map.values())
    policy = rename_policy(config, "nyc")
    assert policy.source_topic(policy.target_topic(topic)) == topic, case


@pytest.mark.parametrize(
    ("config", "renames_every_topic"),
    [
        (IdentityRename(), False),
        (PrefixRename(policy="prefix"), True),
        (FormatRename(policy="format", format="${topic}.replica"), True),
        (FormatRename(policy="format", format="${topic}"), False),
        (MapRename(policy="map", map={"a": "b"}), False),
    ],
)
def test_renames_every_topic(config: RenameConfig, renames_every_topic: bool) -> None:
    assert rename_policy(config, "nyc").renames_every_topic is renames_every_topic


@pytest.mark.parametrize(("case", "config"), [p for p in POLICIES if p[0] != "map"], ids=[p[0] for p in POLICIES[:-1]])
@given(topic=topics)
def test_policies_that_rename_every_topic_never_keep_a_name(case: str, config: RenameConfig, topic: str) -> None:
    policy = rename_policy(config, "nyc")
    if policy.renames_every_topic:
        assert policy.target_topic(topic) != topic, case
