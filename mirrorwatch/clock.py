"""Time as a dependency: pure code takes `now_ms`; shells own a `Clock`. Tests use `ManualClock`."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch (comparable with Kafka record timestamps)."""
        ...

    def monotonic_s(self) -> float:
        """A clock for measuring intervals; never goes backwards."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._mono_s = 0.0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_s(self) -> float:
        return self._mono_s

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a ManualClock never goes backwards")
        self._now_ms += ms
        self._mono_s += ms / 1000
