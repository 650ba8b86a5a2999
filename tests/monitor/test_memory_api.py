"""What the monitor remembers, served by its HTTP API: every group at once with its lag trend (the console's table
in one request), a link's and a group's figures over time, and the events, newest first. States are built by hand
and recorded the way the service records each round."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from kernel.config import ClusterConfig, LinkConfig, MonitorConfig
from monitor.evaluator import Status
from monitor.history import transitions
from monitor.http import create_app
from monitor.service import MonitorService
from tests.monitor.test_history import T0, _group, _link, _state


@pytest.fixture
def client() -> Iterator[TestClient]:
    yield from _client(MonitorConfig(interval_seconds=10))


def _client(settings: MonitorConfig) -> Iterator[TestClient]:
    service = MonitorService(
        settings,
        {"source": ClusterConfig(bootstrap_servers="b1:9092"), "target": ClusterConfig(bootstrap_servers="b2:9092")},
        [LinkConfig(name="dr", source="source", target="target")],
    )
    # three rounds: the group's lag grows 0 -> 40 -> 100 and its status goes OK -> WARN; the link's workers go
    previous = None
    rounds = ((Status.OK, 0, True), (Status.OK, 40, True), (Status.WARN, 100, False))
    for i, (status, lag, running) in enumerate(rounds):
        link = _link(lag // 10, 1000 * i, running=running, gone=0 if running else 1)
        state = _state(T0 + i * 10_000, link, _group(status, lag))
        service.state = state
        service.history.record(state)
        service.events.extend(transitions(previous, state))
        previous = state
    yield TestClient(create_app(service))
    service.stop()


def test_every_group_in_one_request_with_its_lag_trend(client: TestClient) -> None:
    body = client.get("/mirror/groups").json()
    assert body["observed_ms"] == T0 + 20_000 and body["trend_seconds"] == 300
    [row] = body["groups"]
    assert row == {
        "cluster": "source",
        "group": "billing",
        "state": "STABLE",
        "members": 1,
        "status": "WARN",
        "complete": 1.0,
        "total_lag": 100,
        "partitions": 0,
        "max_lag_seconds": None,
        "lag_change_per_minute": 300.0,  # 100 records in 20 s
    }
    # over the last 10 s only: 60 records in 10 s
    assert client.get("/mirror/groups?trend_seconds=10").json()["groups"][0]["lag_change_per_minute"] == 360.0


def test_figures_over_time_for_a_link_and_a_group(client: TestClient) -> None:
    link = client.get("/mirror/history/links/dr").json()
    assert link["span_seconds"] == 3600 and link["interval_seconds"] == 10
    assert link["series"]["replication_lag_records"] == [[T0, 0.0], [T0 + 10_000, 4.0], [T0 + 20_000, 10.0]]
    assert link["series"]["records_out_per_second"] == [[T0 + 10_000, 100.0], [T0 + 20_000, 100.0]]
    since = client.get(f"/mirror/history/links/dr?since_ms={T0 + 15_000}").json()
    assert since["series"]["replication_lag_records"] == [[T0 + 20_000, 10.0]]
    group = client.get("/mirror/history/groups/source/billing").json()
    assert group["series"]["total_lag"] == [[T0, 0.0], [T0 + 10_000, 40.0], [T0 + 20_000, 100.0]]
    assert [v for _, v in group["series"]["status"]] == [int(Status.OK), int(Status.OK), int(Status.WARN)]


def test_events_newest_first_and_filtered(client: TestClient) -> None:
    texts = [e["text"] for e in client.get("/mirror/events").json()["events"]]
    assert texts == [  # one round's events, newest first
        "group billing on source: OK -> WARN",
        "link dr: a worker died or froze (1 -> 0 live)",
        "link dr: running -> workers gone",
    ]
    assert [e["kind"] for e in client.get("/mirror/events?group=billing").json()["events"]] == ["group"]
    assert [e["text"] for e in client.get("/mirror/events?link=dr&limit=1").json()["events"]] == texts[1:2]
    assert client.get("/mirror/events?cluster=target").json()["events"] == []


@pytest.mark.parametrize(
    "path",
    [
        "/mirror/groups?trend_seconds=soon",
        "/mirror/history/links/dr?since_ms=-5",
        "/mirror/events?limit=nan",
        "/mirror/history/groups/source/billing?since_ms=1e999",
    ],
)
def test_a_query_that_is_not_a_number_is_a_400_saying_which(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 400 and response.json()["error"] is True
    assert path.split("?")[1].split("=", maxsplit=1)[0] in response.json()["message"]


def test_unknown_links_and_groups_are_404(client: TestClient) -> None:
    assert client.get("/mirror/history/links/elsewhere").status_code == 404
    assert client.get("/mirror/history/groups/source/nobody").status_code == 404


def test_alerts_judged_by_the_monitor_say_so_and_what_they_cannot_judge(client: TestClient) -> None:
    body = client.get("/mirror/alerts").json()
    assert body["evaluated_by"].startswith("the monitor on its own history (not Prometheus)")
    assert body["alerts"] == []  # 20 s of history: no rule's duration has passed
    assert "MirrorwatchCanaryAbsent" in body["not_judged"]


def test_alerts_are_judged_with_the_configured_thresholds() -> None:
    """monitor.alert_thresholds, as given to `alerts build --set`: the link's lag (0, 0.4, 1.0 s) is above 0.3 s for
    the last 10 s."""
    settings = MonitorConfig(
        interval_seconds=10, alert_thresholds={"replication_lag_seconds": "0.3", "replication_lag_for": "10s"}
    )
    for client in _client(settings):
        [alert] = client.get("/mirror/alerts").json()["alerts"]
        assert alert["alert"] == "MirrorwatchReplicationLagHigh" and alert["since_ms"] == T0 + 10_000
        assert alert["labels"] == {"link": "dr"} and alert["summary"] == "link dr is more than 0.3 s behind its source"
