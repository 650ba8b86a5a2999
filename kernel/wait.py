"""Wait for a condition instead of sleeping a fixed time (tests, cluster start-up, shutdown)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["WaitTimeout", "wait_until"]

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """The condition did not hold in time. `last` is the condition's last value (or the last exception)."""

    def __init__(self, description: str, timeout_s: float, last: object) -> None:
        super().__init__(f"timed out after {timeout_s:g}s waiting for {description} (last: {last!r})")
        self.last = last


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout_s: float,
    description: str,
    interval_s: float = 0.1,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `condition` until it returns something truthy and return that; raise `WaitTimeout` past `timeout_s`.

    Exceptions listed in `ignore` count as "not yet" (e.g. a broker that does not answer while it starts).
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            result = condition()
        except ignore as exc:
            last = exc
        else:
            if result:
                return result
            last = result
        if time.monotonic() >= deadline:
            raise WaitTimeout(description, timeout_s, last)
        time.sleep(interval_s)
