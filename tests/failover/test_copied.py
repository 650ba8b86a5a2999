"""Where a link had copied each source partition up to, read off the provenance of its last copies on the target
(`failover.copied`: `failover promote --source-lost`)."""

from __future__ import annotations

import pytest

from failover.copied import AmbiguousSource, copied_up_to

A, B, C = b"cluster-a", b"cluster-b", b"cluster-c"


def test_the_last_copy_of_each_source_partition_says_every_record_below_it_was_copied() -> None:
    found = {
        ("orders", 0): {A: {("orders", 0): 41}},
        ("orders", 1): {A: {("orders", 1): 9}},
        ("orders", 2): {},  # nothing copied there (or all of it expired)
    }
    assert copied_up_to(found, B) == (A, {("orders", 0): 42, ("orders", 1): 10})


def test_copies_of_one_source_partition_in_two_target_partitions_count_at_the_furthest() -> None:
    found = {("t", 0): {A: {("s", 3): 100}}, ("t", 1): {A: {("s", 3): 250}}, ("t", 2): {A: {("s", 3): 7}}}
    assert copied_up_to(found, B) == (A, {("s", 3): 251})


def test_a_target_partition_holding_copies_of_several_source_partitions_says_each() -> None:
    """`partitioning: hash` spreads every source partition over the target's: each one's furthest copy counts."""
    found = {("t", 0): {A: {("s", 0): 10, ("s", 1): 20}}, ("t", 1): {A: {("s", 0): 12, ("s", 2): 5}}}
    assert copied_up_to(found, B) == (A, {("s", 0): 13, ("s", 1): 21, ("s", 2): 6})


def test_no_copy_at_all_names_no_source() -> None:
    assert copied_up_to({("t", 0): {}, ("t", 1): {}}, B) == (None, {})


def test_a_record_stamped_by_the_target_itself_is_no_copy_of_the_source() -> None:
    assert copied_up_to({("t", 0): {B: {("t", 0): 5}, A: {("t", 0): 3}}}, B) == (A, {("t", 0): 4})


def test_copies_from_two_clusters_in_the_link_topics_are_refused_naming_both() -> None:
    with pytest.raises(AmbiguousSource, match=r"2 clusters \(cluster-a, cluster-c\)"):
        copied_up_to({("t", 0): {A: {("t", 0): 1}}, ("t", 1): {C: {("t", 1): 1}}}, B)
