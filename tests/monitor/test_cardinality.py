"""The per-partition series budget of the borrowed families (pure `monitor.cardinality`, issue #45)."""

from __future__ import annotations

from monitor.cardinality import partition_series_groups, series_exposition


def test_the_links_groups_come_first_then_a_prefix_by_cluster_and_name_within_the_budget() -> None:
    groups = [(("b", "g1"), 12), (("a", "g2"), 12), (("a", "mirrorwatch-dr"), 12), (("a", "g1"), 12)]
    chosen, left_out = partition_series_groups(groups, lambda _g: True, frozenset({"mirrorwatch-dr"}), 30)
    assert chosen == {("a", "mirrorwatch-dr"), ("a", "g1")}  # 24 partitions; a third group would make 36
    assert left_out == 2


def test_a_prefix_is_stable_a_smaller_group_after_the_cut_does_not_slip_in() -> None:
    """The set depends on the order alone, not on which sizes happen to fit: no series churn while the fleet stays."""
    groups = [(("a", "big"), 20), (("a", "c"), 15), (("a", "d"), 2)]
    chosen, left_out = partition_series_groups(groups, lambda _g: True, frozenset(), 30)
    assert chosen == {("a", "big")} and left_out == 2


def test_groups_not_selected_neither_count_nor_use_the_budget() -> None:
    groups = [(("a", "billing"), 100), (("a", "orders"), 12)]
    chosen, left_out = partition_series_groups(groups, lambda g: g != "billing", frozenset(), 12)
    assert chosen == {("a", "orders")} and left_out == 0
    assert partition_series_groups(groups, lambda _g: True, frozenset(), 0) == (frozenset(), 2)


def test_the_left_out_groups_are_a_series_of_their_own() -> None:
    text = series_exposition({"kafka_exporter": 10}, left_out=3).decode()
    assert 'mirrorwatch_exporter_series{style="kafka_exporter"} 10' in text
    assert "mirrorwatch_exporter_groups_without_partition_series 3" in text
