"""A rate in bytes per second as an operator writes it (pure): `1048576`, `1MB`, `1 MiB/s`, `500KB/s`, `2.5GB`.

Units as Kafka's tools and Prometheus' dashboards print them: B, KB, MB, GB in powers of 1,000 (`humanize1024` is not
Kafka's habit: `kafka-configs --add-config` takes plain bytes), KiB, MiB, GiB in powers of 1,024; `/s` optional;
case-insensitive. A bare number is bytes."""

from __future__ import annotations

import re

__all__ = ["format_byte_rate", "parse_byte_rate"]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b|b)?\s*(?:/\s*s(?:ec)?)?\s*$", re.IGNORECASE)


def parse_byte_rate(value: object) -> int:
    """Bytes per second; ValueError naming the value when it is none (zero and negative rates included: "no budget"
    is the setting left out, not 0)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a rate in bytes per second")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    elif isinstance(value, str) and (match := _RATE.match(value)):
        number, unit = float(match.group(1)), (match.group(2) or "").lower()
    else:
        raise ValueError(f"{value!r} is not a rate in bytes per second (e.g. 1048576, 1MB, 800KiB/s)")
    rate = int(number * _UNITS[unit])
    if rate < 1:
        raise ValueError(f"{value!r}: a budget is at least 1 byte per second (leave it out for none)")
    return rate


def format_byte_rate(rate: int | None) -> str:
    """`1.0 MB/s` (powers of 1,000, as the units above), `unlimited` for None."""
    if rate is None:
        return "unlimited"
    for unit, size in (("GB", 1000**3), ("MB", 1000**2), ("KB", 1000)):
        if rate >= size:
            return f"{rate / size:.1f} {unit}/s"
    return f"{rate} B/s"
