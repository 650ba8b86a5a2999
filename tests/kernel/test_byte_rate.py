"""kernel.byte_rate: a budget as an operator writes it (pure)."""

from __future__ import annotations

import pytest

from kernel.byte_rate import format_byte_rate, parse_byte_rate


@pytest.mark.parametrize(
    ("written", "rate"),
    [
        (1_048_576, 1_048_576),
        ("1048576", 1_048_576),
        ("1MB", 1_000_000),
        ("1 mb/s", 1_000_000),
        ("1MiB", 1_048_576),
        ("800KiB/s", 819_200),
        ("2.5GB", 2_500_000_000),
        ("500 KB/sec", 500_000),
        ("64B", 64),
    ],
)
def test_rates_in_bytes_with_decimal_and_binary_units(written: object, rate: int) -> None:
    assert parse_byte_rate(written) == rate


@pytest.mark.parametrize("written", ["fast", "", "1 Mbit", "-1MB", "1e6", 0, -5, "0MB", True, None, [1]])
def test_anything_else_is_an_error_naming_the_value(written: object) -> None:
    with pytest.raises(ValueError, match=r"bytes per second|at least 1 byte"):
        parse_byte_rate(written)


def test_formatted_in_the_units_it_is_read_in() -> None:
    assert [format_byte_rate(r) for r in (None, 512, 1_000_000, 2_500_000_000)] == [
        "unlimited",
        "512 B/s",
        "1.0 MB/s",
        "2.5 GB/s",
    ]
