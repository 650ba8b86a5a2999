"""The drift report where operators look (#46): each worker's topic refresh puts its report in the worker's status
(`mirror.drift.drift_report`), the link's view carries the newest of them, and the API (`/mirror/drift`,
`/mirror/links/{link}/drift`) and `/metrics` (`mirrorwatch_link_drift_differences`) serve it. Real clusters:
`tests/mirror/test_sync.py`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from kernel.config import ClusterConfig, LinkConfig, MonitorConfig
from kernel.worker_status import WorkerStatus
from mirror.drift import DIFFERENCES_KEPT, Difference, drift_report
from monitor.exporter import MonitorCollector
from monitor.http import create_app
from monitor.links import WorkerSighting, link_view
from monitor.service import MonitorService
from monitor.snapshot import ClusterSnapshot, PartitionOffsets
from monitor.state import MonitorState

T0 = 1_700_000_000_000
LINK = LinkConfig(name="l", source="source", target="target", group_id="g")
OTHER = LinkConfig(name="quiet", source="source", target="target", group_id="q")
EXCLUDED = Difference("orders", "orders", "config segment.ms", "600000", None, False, "excluded")
GROWN = Difference("orders", "orders", "partitions", "4", "2", True, "grown by the refresh round that found it")
EXTRA = Difference("old", None, "extra", None, "1", False, "a copy of 'old': left as it is")
ACL = Difference("orders", "orders", "acl ALLOW READ for User:app", "ALLOW", None, False, "sync.acls is off")


def _status(worker: int, report: Mapping[str, Any] | None) -> WorkerStatus:
    document = {
        "link": "l",
        "worker": worker,
        "engine": "python",
        "state": "running",
        "publish_interval_ms": 500,
        "observed_ms": T0,
        "partitions": [],
        "drift_report": report,
    }
    parsed = WorkerStatus.from_json(document)
    assert parsed is not None
    return parsed


def _snapshot() -> ClusterSnapshot:
    return ClusterSnapshot("source", T0, up=True, partitions={("orders", 0): PartitionOffsets(0, 10)})


def test_a_report_counts_every_difference_by_kind_and_keeps_the_first_ones() -> None:
    many = [EXTRA] + [
        Difference(f"t{i:04}", f"t{i:04}", "missing", None, None, True, "created") for i in range(DIFFERENCES_KEPT + 5)
    ]
    report = drift_report([ACL, EXCLUDED, GROWN, *many], at_ms=T0, acls="compared")
    assert report["at_ms"] == T0 and report["acls"] == "compared"
    assert report["count"] == DIFFERENCES_KEPT + 9
    assert report["counts"] == [
        {"kind": "acl", "synced": False, "count": 1},
        {"kind": "config", "synced": False, "count": 1},
        {"kind": "extra", "synced": False, "count": 1},
        {"kind": "missing", "synced": True, "count": DIFFERENCES_KEPT + 5},
        {"kind": "partitions", "synced": True, "count": 1},
    ]
    assert len(report["differences"]) == DIFFERENCES_KEPT
    assert report["differences"][:3] == [asdict(ACL), asdict(EXCLUDED), asdict(GROWN)]


def test_the_link_carries_the_newest_report_of_any_worker_live_or_gone_and_a_forged_one_is_no_status() -> None:
    older = drift_report([EXCLUDED, GROWN], at_ms=T0 - 60_000, acls="compared")
    newer = drift_report([EXCLUDED], at_ms=T0 - 1_000, acls="not compared: a cluster has no authorizer")
    sightings = [
        WorkerSighting(_status(0, older), is_live=True),
        WorkerSighting(_status(1, newer), is_live=False),  # gone since: its round is still the newest one
        WorkerSighting(_status(2, None), is_live=True),  # no round yet
    ]
    view = link_view(LINK, sightings=sightings, snapshot=_snapshot(), record_times={}, now_ms=T0)
    assert view.drift_report == newer
    none = link_view(LINK, sightings=sightings[2:], snapshot=_snapshot(), record_times={}, now_ms=T0)
    assert none.drift_report == {}
    assert WorkerStatus.from_json({**_status(0, None).as_json(), "drift_report": ["not", "a", "mapping"]}) is None
    assert WorkerStatus.from_json({**_status(0, None).as_json(), "highs_stale_since_ms": "soon"}) is None


@pytest.fixture
def service() -> Iterator[MonitorService]:
    monitor = MonitorService(MonitorConfig(), {"source": ClusterConfig(bootstrap_servers="b1:9092")}, [LINK, OTHER])
    report = drift_report([ACL, EXCLUDED, GROWN, EXTRA], at_ms=T0 - 1_000, acls="compared")
    sighting = WorkerSighting(_status(0, report), is_live=True)
    views = {
        "l": link_view(LINK, sightings=[sighting], snapshot=_snapshot(), record_times={}, now_ms=T0),
        "quiet": link_view(OTHER, sightings=[], snapshot=_snapshot(), record_times={}, now_ms=T0),
    }
    monitor.state = MonitorState(T0, {"source": _snapshot()}, {}, views, {"source": T0})
    yield monitor
    monitor.stop()


def test_the_api_serves_each_links_report_and_says_when_there_is_none(service: MonitorService) -> None:
    client = TestClient(create_app(service))
    body = client.get("/mirror/links/l/drift").json()
    assert body == {
        "link": "l",
        "source": "source",
        "target": "target",
        "at_ms": T0 - 1_000,
        "count": 4,
        "counts": [
            {"kind": "acl", "synced": False, "count": 1},
            {"kind": "config", "synced": False, "count": 1},
            {"kind": "extra", "synced": False, "count": 1},
            {"kind": "partitions", "synced": True, "count": 1},
        ],
        "differences": [asdict(d) for d in (ACL, EXCLUDED, GROWN, EXTRA)],
        "acls": "compared",
        "reason": None,
    }
    quiet = client.get("/mirror/links/quiet/drift").json()
    assert (quiet["count"], quiet["differences"]) == (None, [])
    assert quiet["reason"].startswith("not measured yet: no worker of the link has reported a topic refresh")
    assert client.get("/mirror/drift").json() == {"links": [body, quiet]}
    assert client.get("/mirror/links/l").json()["drift_differences"] == 4
    missing = client.get("/mirror/links/nosuch/drift")
    assert (missing.status_code, missing.json()["message"]) == (404, "link not found")


def test_metrics_count_the_differences_by_link_kind_and_whether_the_round_synced_them(
    service: MonitorService,
) -> None:
    text = MonitorCollector(service).render().decode()
    found = {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "mirrorwatch_link_drift_differences"
    }
    assert found == {
        (("kind", "acl"), ("link", "l"), ("synced", "false")): 1,
        (("kind", "config"), ("link", "l"), ("synced", "false")): 1,
        (("kind", "extra"), ("link", "l"), ("synced", "false")): 1,
        (("kind", "partitions"), ("link", "l"), ("synced", "true")): 1,
    }
