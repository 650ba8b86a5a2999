"""Provenance headers and the loop check they carry."""

from __future__ import annotations

from mirror.provenance import (
    HOPS,
    PATH,
    SOURCE_CLUSTER,
    SOURCE_OFFSET,
    has_visited,
    provenance_stamp,
    with_provenance,
)


def test_first_hop_adds_provenance_after_the_records_own_headers() -> None:
    headers = with_provenance([("trace", b"abc"), ("empty", None)], b"clusterA", b"orders", b"3", 42)
    assert headers == [
        ("trace", b"abc"),
        ("empty", None),
        ("mirrorwatch.source.cluster", b"clusterA"),
        ("mirrorwatch.source.topic", b"orders"),
        ("mirrorwatch.source.partition", b"3"),
        ("mirrorwatch.source.offset", b"42"),
        ("mirrorwatch.path", b"clusterA"),
        ("mirrorwatch.hops", b"1"),
    ]


def test_second_hop_replaces_source_and_extends_the_path() -> None:
    first = with_provenance(None, b"A", b"orders", b"0", 7)
    second = with_provenance(first, b"B", b"orders", b"1", 9)
    assert dict(second)[SOURCE_CLUSTER] == b"B"
    assert dict(second)[SOURCE_OFFSET] == b"9"
    assert dict(second)[PATH] == b"A,B"
    assert dict(second)[HOPS] == b"2"
    assert sum(1 for name, _ in second if name == SOURCE_CLUSTER) == 1


def test_loop_check() -> None:
    on_b = with_provenance(None, b"A", b"t", b"0", 0)  # produced on A, now on B
    assert has_visited(on_b, b"A")  # B -> A must not write it back
    assert not has_visited(on_b, b"C")  # B -> C may
    on_c = with_provenance(on_b, b"B", b"t", b"0", 0)
    assert has_visited(on_c, b"A") and has_visited(on_c, b"B")  # ring A -> B -> C -> A stops at A
    assert not has_visited(None, b"A")
    assert not has_visited([("other", b"x")], b"A")
    assert not has_visited([(PATH, b"AB")], b"A")  # ids are compared whole, not as substrings


def test_the_stamp_of_a_partition_is_the_first_hop_provenance_of_each_of_its_records() -> None:
    before, after = provenance_stamp(b"clusterA", b"orders", b"3")
    for offset in (0, 7, 12345678901):
        stamped = [*before, (SOURCE_OFFSET, b"%d" % offset), *after]
        assert stamped == with_provenance(None, b"clusterA", b"orders", b"3", offset)
        assert stamped == with_provenance([], b"clusterA", b"orders", b"3", offset)
