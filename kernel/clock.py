"""Time as a dependency: pure code takes `now_ms`; shells own a `Clock`."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch (comparable with Kafka record timestamps)."""
        ...

    def now_ns(self) -> int:
        """Wall-clock time in nanoseconds since the epoch (probe creation and arrival times)."""
        ...

    def monotonic_s(self) -> float:
        """A clock for measuring intervals; never goes backwards."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def now_ns(self) -> int:
        return time.time_ns()

    def monotonic_s(self) -> float:
        return time.monotonic()
