"""The mark `failover failback --diverged read` leaves on each copy of the tail, read back (no cluster): what makes a
run cut short resume without copying a record twice."""

from __future__ import annotations

import pytest

from failover.redeliver import parse_mark


@pytest.mark.parametrize(
    ("value", "origin"),
    [
        (b"orders;3;1200", ("orders", 3, 1200)),
        (b"a.b-c_d;0;0", ("a.b-c_d", 0, 0)),
        (b"we;ird;1;2", ("we;ird", 1, 2)),  # read from the right: a forged topic with `;` stays whole
    ],
)
def test_a_mark_names_the_record_it_copied(value: bytes, origin: tuple[str, int, int]) -> None:
    assert parse_mark(value) == origin


@pytest.mark.parametrize("value", [None, b"", b"orders;3", b";3;4", b"orders;x;4", b"orders;3;", b"\xff\xfe;1;2"])
def test_what_is_not_a_mark_names_nothing(value: bytes | None) -> None:
    assert parse_mark(value) is None
