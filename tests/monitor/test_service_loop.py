"""The monitor's round loop: a round longer than the interval stretches it (counted, logged once per spell), never
overlaps the next and is never skipped. A just-started monitor's first round waits for every cluster's first answer
instead of publishing a cluster it has not heard from yet as down (which left a restarted monitor's first figures
unknown)."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from kernel.config import ClusterConfig, MonitorConfig
from kernel.wait import wait_until
from monitor import service as service_module
from monitor.collector import ClusterSnapshot
from monitor.history import CanaryReading
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
    service.state = MonitorState(0, {}, {}, {})  # past its first round (which may wait longer: see below)
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


def _slow_first_answer(service: MonitorService, answer_s: float) -> list[int]:
    """Collections that answer (up) after `answer_s`; returns the moments they were asked."""
    asked: list[int] = []

    def collect_cluster(alias: str, now_ms: int) -> ClusterSnapshot:
        asked.append(now_ms)
        time.sleep(answer_s)
        return ClusterSnapshot(alias, now_ms, up=True)

    service._collect_cluster = collect_cluster  # type: ignore[method-assign]
    return asked


def test_the_first_round_waits_for_a_cluster_s_first_answer() -> None:
    service = MonitorService(MonitorConfig(interval_seconds=0.4), {"c": ClusterConfig(bootstrap_servers="x:1")})
    _slow_first_answer(service, 1.0)  # longer than the interval: a normal round waits half of one
    try:
        first = service.collect()
        assert first.clusters["c"].up, first.clusters["c"].error
    finally:
        service.stop()


def test_a_cluster_silent_through_the_first_wait_reads_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_module, "FIRST_ANSWER_WAIT_S", 0.5)
    service = MonitorService(MonitorConfig(interval_seconds=0.2), {"c": ClusterConfig(bootstrap_servers="x:1")})
    _slow_first_answer(service, 2.0)
    try:
        first = service.collect()
        assert not first.clusters["c"].up
        assert (first.clusters["c"].error or "").startswith("no answer for ")
    finally:
        service.stop()


def test_a_long_first_round_is_not_an_overrun() -> None:
    service = MonitorService(MonitorConfig(interval_seconds=0.2), {"c": ClusterConfig(bootstrap_servers="x:1")})
    asked = _slow_first_answer(service, 0.5)  # the first round waits for it; later ones wait half an interval
    service.start()
    try:
        wait_until(lambda: len(asked) >= 4, timeout_s=30, description="four collections")
    finally:
        service.stop()
    assert service.overruns == 0


def test_each_round_records_the_canary_s_latency_and_its_absence_as_events() -> None:
    service = MonitorService(MonitorConfig(interval_seconds=0.2), {"c": ClusterConfig(bootstrap_servers="x:1")})
    _slow_first_answer(service, 0.0)
    readings = iter([{"dr": CanaryReading(0.5, False)}, {"dr": CanaryReading(None, True)}])

    def canary() -> dict[str, CanaryReading]:
        reading = next(readings, None)
        if reading is None:
            raise OSError("status file unreadable")  # a round without a reading goes on
        return reading

    service.canary = canary
    try:
        for _ in range(3):
            service.collect()
            time.sleep(0.01)
    finally:
        service.stop()
    assert [v for _, v in service.history.link("dr")["canary_e2e_latency_p99_seconds"]] == [0.5]
    assert [(e.kind, e.subject, e.after) for e in service.events.query()] == [("canary", "dr", "absent")]


def test_readyz_is_not_ready_while_a_clusters_first_collection_is_under_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fleet's first collection (the history of __consumer_offsets at 10,000 groups) outlasts the first round's
    wait: that round publishes the cluster as not answering yet, and /readyz said ready while /metrics held almost no
    group for 40 s (issue #45). Ready once the cluster answered, and once the round's /metrics rendering is done."""
    from starlette.testclient import TestClient

    from monitor.http import create_app

    monkeypatch.setattr(service_module, "FIRST_ANSWER_WAIT_S", 0.3)
    service = MonitorService(MonitorConfig(interval_seconds=0.5), {"c": ClusterConfig(bootstrap_servers="x:1")})
    release = threading.Event()

    def slow_first(alias: str, started_ms: int) -> ClusterSnapshot:
        release.wait(30)
        return ClusterSnapshot(alias, started_ms, up=True)

    service._collect_cluster = slow_first  # type: ignore[method-assign,assignment]
    client = TestClient(create_app(service))
    service.start()
    try:
        wait_until(lambda: service.state is not None, timeout_s=10, description="the first round")
        answer = client.get("/readyz")
        assert answer.status_code == 503, answer.json()
        assert answer.json()["status"] == "the first collection of cluster 'c' is under way"
        release.set()
        wait_until(lambda: client.get("/readyz").status_code == 200, timeout_s=10, description="ready")
    finally:
        release.set()
        service.stop()


def test_readyz_is_not_ready_until_the_round_holding_every_clusters_answer_is_rendered() -> None:
    """Ready means complete (issue #67): a cluster that answered in the background joins the next round, whose
    rendering of /metrics takes seconds at 10,000 groups; until that rendering is done a scrape gets the last complete
    one, without the cluster's groups, so /readyz waits for it. A first answer that is an error is not ready either:
    it says why."""
    from starlette.testclient import TestClient

    from monitor.http import create_app

    service = MonitorService(MonitorConfig(interval_seconds=0.2), {"c": ClusterConfig(bootstrap_servers="x:1")})
    answers = iter([False, True])

    def collect_cluster(alias: str, started_ms: int) -> ClusterSnapshot:
        up = next(answers, True)
        return ClusterSnapshot(alias, started_ms, up=up, error=None if up else "no answer for 15.0s")

    rendering, rendered = threading.Event(), threading.Event()

    def render(state: MonitorState) -> None:  # as the exporter renders /metrics for a round (`on_publish`)
        if state.clusters["c"].up:
            rendering.set()
            rendered.wait(30)

    service._collect_cluster = collect_cluster  # type: ignore[method-assign,assignment]
    service.on_publish.append(render)
    client = TestClient(create_app(service))
    service.start()
    try:
        wait_until(lambda: service.rounds_published >= 1, timeout_s=10, description="the first round published")
        assert rendering.is_set() or client.get("/readyz").json()["status"] in {
            "cluster 'c' has not answered a collection yet: no answer for 15.0s",
            "cluster 'c' answered: the round that holds its answer is not published yet",
        }
        assert rendering.wait(10), "no round with the cluster's answer"
        answer = client.get("/readyz")
        assert (answer.status_code, answer.json()["status"]) == (
            503,
            "cluster 'c' answered: the round that holds its answer is not published yet",
        )
        rendered.set()
        wait_until(lambda: client.get("/readyz").status_code == 200, timeout_s=10, description="ready")
    finally:
        rendered.set()
        service.stop()
