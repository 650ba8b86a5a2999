"""The monitor's round loop: a round longer than the interval stretches it (counted, logged once per spell), never
overlaps the next and is never skipped."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from mirrorwatch.config import ClusterConfig, MonitorConfig
from mirrorwatch.wait import wait_until
from monitor.service import MonitorService
from monitor.state import MonitorState


def _service(round_s: list[float]) -> tuple[MonitorService, list[tuple[float, float]]]:
    service = MonitorService(MonitorConfig(interval_seconds=0.1), {"c": ClusterConfig(bootstrap_servers="x:1")})
    rounds: list[tuple[float, float]] = []
    running = threading.Lock()

    def collect() -> MonitorState:
        assert running.acquire(blocking=False), "two rounds overlapped"
        started = time.monotonic()
        time.sleep(round_s[min(len(rounds), len(round_s) - 1)])
        rounds.append((started, time.monotonic()))
        running.release()
        service.state = MonitorState(0, {}, {}, {})
        return service.state

    service.collect = collect  # type: ignore[method-assign]
    return service, rounds


def test_slow_rounds_stretch_the_interval_and_say_so(caplog: pytest.LogCaptureFixture) -> None:
    service, rounds = _service([0.3, 0.3, 0.3, 0.0])
    with caplog.at_level(logging.INFO, logger="mirrorwatch.monitor"):
        service.start()
        try:
            wait_until(lambda: len(rounds) >= 5, timeout_s=30, description="five rounds")
        finally:
            service.stop()
    assert service.overruns == 3  # the three slow rounds, none skipped
    stretched = [r.message for r in caplog.records if "longer than monitor.interval_seconds" in r.message]
    assert len(stretched) == 1  # once per spell, not once per round
    assert any("within the interval again" in r.message for r in caplog.records)
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(rounds))


def test_fast_rounds_do_not_overrun() -> None:
    service, rounds = _service([0.0])
    service.start()
    try:
        wait_until(lambda: len(rounds) >= 3, timeout_s=30, description="three rounds")
    finally:
        service.stop()
    assert service.overruns == 0
