"""Burrow's shapes for a cluster the monitor cannot read now (issue #44: "cannot see", never a stale status presented
as current, never "not found" for a group that is only out of sight). No broker: the state is built here."""

from __future__ import annotations

import json

from starlette.requests import Request

from monitor.burrow_json import unseen
from monitor.snapshot import ClusterSnapshot
from monitor.state import MonitorState

T0 = 1_795_000_000_123


def request(cluster: str) -> Request:
    path = f"/v3/kafka/{cluster}/consumer/billing/status"
    return Request({"type": "http", "method": "GET", "path": path, "path_params": {"cluster": cluster}, "headers": []})


def state(source_up: bool) -> MonitorState:
    down = ClusterSnapshot("source", T0 + 9_000, up=False, error="no answer for 2.1s")
    clusters = {"source": ClusterSnapshot("source", T0, up=True) if source_up else down}
    return MonitorState(T0 + 9_000, clusters, {}, {}, last_success_ms={"source": T0})


def test_a_cluster_out_of_sight_is_said_so_with_the_reason_and_since_when() -> None:
    answer = unseen(request("source"), state(source_up=False))
    assert answer is not None and answer.status_code == 503
    body = json.loads(bytes(answer.body))
    assert body["error"] is True
    assert body["cannot_see"] == {"cluster": "source", "since_ms": T0, "reason": "no answer for 2.1s"}
    assert body["message"].startswith("cannot see cluster source since 2026-")
    assert "(no answer for 2.1s)" in body["message"] and body["message"].endswith("are not known now")


def test_a_cluster_in_sight_or_unknown_is_answered_as_usual() -> None:
    assert unseen(request("source"), state(source_up=True)) is None
    assert unseen(request("elsewhere"), state(source_up=False)) is None  # not the monitor's: "not found" says it
    assert unseen(request("source"), None) is None  # no round yet: readyz says so
