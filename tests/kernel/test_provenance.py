"""Provenance headers, in both forms, and the loop check they carry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.provenance import (
    HOPS,
    PATH,
    PROVENANCE,
    SOURCE_CLUSTER,
    SOURCE_OFFSET,
    ProvenanceForm,
    has_visited,
    provenance_source,
    provenance_stamp,
    read_provenance,
    with_provenance,
)

FORMS: tuple[ProvenanceForm, ...] = ("compact", "full")


def test_first_hop_adds_one_compact_header_after_the_records_own_headers() -> None:
    headers = with_provenance([("trace", b"abc"), ("empty", None)], b"clusterA", b"orders", b"3", 42)
    assert headers == [("trace", b"abc"), ("empty", None), ("mirrorwatch.provenance", b"clusterA;orders;3;42")]


def test_first_hop_in_full_form_adds_six_headers() -> None:
    headers = with_provenance([("trace", b"abc")], b"clusterA", b"orders", b"3", 42, form="full")
    assert headers == [
        ("trace", b"abc"),
        ("mirrorwatch.source.cluster", b"clusterA"),
        ("mirrorwatch.source.topic", b"orders"),
        ("mirrorwatch.source.partition", b"3"),
        ("mirrorwatch.source.offset", b"42"),
        ("mirrorwatch.path", b"clusterA"),
        ("mirrorwatch.hops", b"1"),
    ]


def test_second_hop_replaces_source_and_extends_the_path() -> None:
    first = with_provenance(None, b"A", b"orders", b"0", 7, form="full")
    second = with_provenance(first, b"B", b"orders", b"1", 9, form="full")
    assert dict(second)[SOURCE_CLUSTER] == b"B"
    assert dict(second)[SOURCE_OFFSET] == b"9"
    assert dict(second)[PATH] == b"A,B"
    assert dict(second)[HOPS] == b"2"
    assert sum(1 for name, _ in second if name == SOURCE_CLUSTER) == 1
    compact = with_provenance(with_provenance(None, b"A", b"orders", b"0", 7), b"B", b"orders", b"1", 9)
    assert compact == [(PROVENANCE, b"A,B;orders;1;9")]


@pytest.mark.parametrize(("first", "second"), [(a, b) for a in FORMS for b in FORMS])
def test_a_hop_in_either_form_continues_the_path_of_either_form_and_drops_the_old_headers(
    first: ProvenanceForm, second: ProvenanceForm
) -> None:
    hop1 = with_provenance([("app", b"x")], b"A", b"t", b"0", 1, form=first)
    hop2 = with_provenance(hop1, b"B", b"t", b"2", 5, form=second)
    assert hop2[0] == ("app", b"x")
    assert len(hop2) == 1 + (1 if second == "compact" else 6)
    assert read_provenance(hop2) == {
        "source.cluster": b"B",
        "source.topic": b"t",
        "source.partition": b"2",
        "source.offset": b"5",
        "path": b"A,B",
        "hops": b"2",
    }


@pytest.mark.parametrize("form", FORMS)
def test_loop_check(form: ProvenanceForm) -> None:
    on_b = with_provenance(None, b"A", b"t", b"0", 0, form=form)  # produced on A, now on B
    assert has_visited(on_b, b"A")  # B -> A must not write it back
    assert not has_visited(on_b, b"C")  # B -> C may
    on_c = with_provenance(on_b, b"B", b"t", b"0", 0, form=form)
    assert has_visited(on_c, b"A") and has_visited(on_c, b"B")  # ring A -> B -> C -> A stops at A
    assert not has_visited(None, b"A")
    assert not has_visited([("other", b"x")], b"A")
    assert not has_visited([(PATH, b"AB")], b"A")  # ids are compared whole, not as substrings
    assert not has_visited([(PROVENANCE, b"AB;A;0;0")], b"A")  # the path is the text before the last three fields
    assert has_visited([(PROVENANCE, "X,A;t;0;0")], b"A")  # a str header value reads the same


@pytest.mark.parametrize("form", FORMS)
def test_the_stamp_of_a_partition_is_the_first_hop_provenance_of_each_of_its_records(form: ProvenanceForm) -> None:
    before, name, prefix, after = provenance_stamp(b"clusterA", b"orders", b"3", form=form)
    for offset in (0, 7, 12345678901):
        stamped = [*before, (name, prefix + b"%d" % offset), *after]
        assert stamped == with_provenance(None, b"clusterA", b"orders", b"3", offset, form=form)
        assert stamped == with_provenance([], b"clusterA", b"orders", b"3", offset, form=form)


def test_read_provenance_of_records_without_it_or_with_a_malformed_header() -> None:
    assert read_provenance(None) is None
    assert read_provenance([("app", b"x")]) is None
    with pytest.raises(ValueError, match=r"mirrorwatch\.provenance is not <path>;<topic>;<partition>;<offset>"):
        read_provenance([(PROVENANCE, b"A;t;0")])


@pytest.mark.parametrize("form", FORMS)
def test_provenance_source_is_the_last_hop_in_either_form(form: ProvenanceForm) -> None:
    first = with_provenance([("app", b"x")], b"A", b"orders", b"3", 1200, form=form)
    assert provenance_source(first) == (b"A", "orders", 3, 1200)
    second = with_provenance(first, b"B", b"a.orders", b"1", 7, form=form)
    assert provenance_source(second) == (b"B", "a.orders", 1, 7)


@pytest.mark.parametrize(
    "headers",
    [
        None,
        [],
        [("app", b"x")],
        [(PROVENANCE, b"A;t;0")],
        [(PROVENANCE, b"A;t;x;1")],
        [(PROVENANCE, b"A;\xff;0;1")],
        [(PROVENANCE, None)],
        [(SOURCE_OFFSET, b"12")],
        [
            (SOURCE_CLUSTER, b"A"),
            ("mirrorwatch.source.topic", b"t"),
            ("mirrorwatch.source.partition", b"p"),
            (SOURCE_OFFSET, b"1"),
        ],
    ],
)
def test_provenance_source_of_records_without_it_or_with_a_forged_one_is_none(
    headers: list[tuple[str, bytes | None]] | None,
) -> None:
    assert provenance_source(headers) is None


def test_a_semicolon_in_a_forged_full_form_path_survives_a_compact_hop() -> None:
    """Issue #22, case 2: a producer on A writes `mirrorwatch.path: evil;` itself; A -> B writes it compact as
    `evil;,A;t;0;5`, and B -> A must read A in that path (read from the left, the path was `evil`: the record went
    back to A)."""
    on_b = with_provenance([(PATH, b"evil;")], b"A", b"t", b"0", 5)
    assert on_b == [(PROVENANCE, b"evil;,A;t;0;5")]
    assert has_visited(on_b, b"A")
    assert provenance_source(on_b) == (b"A", "t", 0, 5)
    assert read_provenance(on_b) == {
        "source.cluster": b"A",
        "source.topic": b"t",
        "source.partition": b"0",
        "source.offset": b"5",
        "path": b"evil;,A",
        "hops": b"2",
    }


@pytest.mark.parametrize("value", [b"A", b"X;A", b"A;t", b"A;t;0", b"X,A;t;x"])
def test_a_compact_value_that_does_not_parse_is_all_path_and_never_reads_as_not_visited(value: bytes) -> None:
    assert has_visited([(PROVENANCE, value)], b"A")


CLUSTER_IDS = st.binary(min_size=1, max_size=8).filter(lambda b: b"," not in b and b";" not in b)
# Any bytes, and short values made of the separators and the ids' own letters (where the parsing can go wrong)
HEADER_VALUES = st.one_of(st.binary(max_size=30), st.text(alphabet=",;A0t", max_size=12).map(str.encode))


@given(
    forged=st.lists(st.tuples(st.sampled_from([PATH, PROVENANCE, SOURCE_OFFSET, "app"]), HEADER_VALUES)),
    hops=st.lists(st.tuples(st.one_of(st.just(b"A"), CLUSTER_IDS), st.sampled_from(FORMS)), min_size=1, max_size=4),
    offset=st.integers(min_value=0, max_value=2**63 - 1),
)
def test_loop_prevention_holds_for_any_forged_headers(
    forged: list[tuple[str, bytes]], hops: list[tuple[bytes, ProvenanceForm]], offset: int
) -> None:
    """Whatever a producer wrote into our headers, once a record was mirrored from a cluster, every later hop still
    reads that cluster as visited, and the last hop's source reads back exactly."""
    headers: list[tuple[str, bytes | str | None]] = list(forged)
    for cluster, form in hops:
        headers = with_provenance(headers, cluster, b"orders.v1", b"3", offset, form=form)
        assert provenance_source(headers) == (cluster, "orders.v1", 3, offset)
    for cluster, _ in hops:
        assert has_visited(headers, cluster)
    assert sum(1 for name, _ in headers if name in (PATH, PROVENANCE)) == 1
