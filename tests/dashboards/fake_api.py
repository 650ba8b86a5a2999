"""A stand-in for the mirrorwatch HTTP API with fixed data, for the console's tests. The mirror and canary documents
are made by the real serializers (monitor.http, canary.service, failover.standby); the Burrow ones follow Burrow's v3
JSON."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from canary.service import canary_json
from canary.tracker import Tracker
from failover.standby import GroupStandby, StandbyView
from failover.translate import Translation
from kernel.config import ClusterConfig, LinkConfig, MonitorConfig, parse_config
from kernel.web_config import WebConfig
from mirror.drift import Difference, drift_report
from monitor.evaluator import GroupEvaluation, Status
from monitor.history import transitions
from monitor.http import HttpServer, _drift, _link, _memory_routes
from monitor.links import LinkPartitionView, LinkView
from monitor.service import MonitorService
from monitor.snapshot import ClusterSnapshot
from monitor.state import GroupView, MonitorState

S = 1_000_000_000
NOW_NS = 1_800_000_000 * S


def link_view(records_out_total: int = 12345, workers: int = 2) -> LinkView:
    """The link, mirroring with `workers` workers (none: not running)."""
    partitions = tuple(
        LinkPartitionView(
            topic="orders",
            partition=p,
            target_topic="dc1.orders",
            high_watermark=1000,
            consumed=1000,
            acked=979,
            committed=950,
            replication_lag_records=21,
            committed_lag_records=50,
            in_flight_records=21,
            replication_lag_seconds=1.5,
            replication_lag_seconds_method="record",
        )
        for p in range(2)
    )
    return LinkView(
        link="dc1-to-dc2",
        source="dc1",
        target="dc2",
        consumer_group="mirrorwatch-dc1-to-dc2",
        engine_running=workers > 0,
        partitions=partitions,
        stats={"records_out_total": records_out_total, "records_in_total": records_out_total + 42},
        config_drift=(
            {
                "source_topic": "orders",
                "target_topic": "dc1.orders",
                "config": "retention.ms",
                "source_value": "604800000",
                "target_value": "86400000",
            },
        ),
        workers=workers,
        drift_report=drift_report(
            [
                Difference("dc1.orders", "orders", "config retention.ms", "604800000", "86400000", True, "synced"),
                Difference("dc1.orders", "orders", "config segment.ms", "600000", None, False, "excluded"),
                Difference("dc1.old", None, "extra", None, "1", False, "a copy of 'old': left as it is"),
            ],
            at_ms=int(time.time() * 1000) - 5_000,
            acls="compared",
        ),
    )


def links_document() -> dict[str, Any]:
    return {"links": [_link(link_view())]}


HISTORY_T0 = 1_800_000_000_000


def remembering_service() -> MonitorService:
    """A monitor that has recorded three rounds, a minute apart (its history and events, served by the real routes):
    the link's throughput 100 records/s, its workers stopped for a round and started again, fraud-detector going
    OK -> WARN -> ERR with its lag growing 60 records a round, dc2 not answering all along (an alert by now)."""
    service = MonitorService(
        MonitorConfig(interval_seconds=60),
        {"dc1": ClusterConfig(bootstrap_servers="dc1:9092"), "dc2": ClusterConfig(bootstrap_servers="dc2:9092")},
        [LinkConfig(name="dc1-to-dc2", source="dc1", target="dc2")],
    )
    previous = None
    for i, (fraud, workers) in enumerate(((Status.OK, 2), (Status.WARN, 0), (Status.ERR, 2))):
        at = HISTORY_T0 + i * 60_000
        groups = {
            ("dc1", "billing"): GroupView("dc1", "billing", "Stable", 2, GroupEvaluation(Status.OK, 1.0, (), None, 0)),
            ("dc1", "fraud-detector"): GroupView(
                "dc1", "fraud-detector", "Stable", 1, GroupEvaluation(fraud, 1.0, (), None, 300 + 60 * i)
            ),
        }
        link = link_view(12345 + 6000 * i, workers)
        clusters = {
            "dc1": ClusterSnapshot("dc1", at, up=True),
            "dc2": ClusterSnapshot("dc2", at, up=False, error="no answer"),
        }
        state = MonitorState(at, clusters, groups, {"dc1-to-dc2": link})
        service.state = state
        service.history.record(state)
        service.events.extend(transitions(previous, state))
        previous = state
    return service


def canary_document() -> dict[str, Any]:
    config = parse_config(
        {"clusters": {"dc1": {"bootstrap_servers": "dc1:9092"}}, "canary": {"interval_seconds": 1}}, env={}
    )
    tracker = Tracker(
        uuid.UUID(int=7).hex, ["dc1-to-dc2"], interval_s=1, sla_s=5, absent_after_intervals=3, now_ns=NOW_NS
    )
    for seq in range(5):
        for partition in range(2):
            probe = tracker.new_probe("dc1-to-dc2", partition, NOW_NS + seq * S)
            tracker.produced(probe, NOW_NS + seq * S + 2_000_000, ok=True)
            if (seq, partition) != (3, 1):  # one probe never arrives
                tracker.received_at_target(probe, NOW_NS + seq * S + 40_000_000)
    tracker.tick(NOW_NS + 20 * S)
    return canary_json(tracker.instance, config.canary, tracker.view(NOW_NS + 20 * S))


def burrow(body: dict[str, Any]) -> dict[str, Any]:
    return {"error": False, "message": "returned", **body, "request": {"url": "", "host": "fake"}}


def group_status(group: str, status: str, lag: int) -> dict[str, Any]:
    partition = {
        "topic": "orders",
        "partition": 0,
        "owner": "",
        "client_id": "",
        "status": status,
        "start": {"offset": 100, "timestamp": 1_800_000_000_000, "observedAt": 1_800_000_000_000, "lag": lag},
        "end": {"offset": 100, "timestamp": 1_800_000_060_000, "observedAt": 1_800_000_060_000, "lag": lag},
        "current_lag": lag,
        "complete": 1.0,
    }
    return {
        "cluster": "dc1",
        "group": group,
        "status": "ERR" if status in ("STOP", "STALL", "REWIND") else status,
        "complete": 1.0,
        "partitions": [partition],
        "partition_count": 1,
        "maxlag": partition,
        "totallag": lag,
    }


GROUPS = {"billing": ("OK", 0), "fraud-detector": ("STALL", 420)}
TOPICS = {("dc1", "orders"): [1000, 1000], ("dc2", "dc1.orders"): [979, 979]}


def checkpoints_document() -> dict[str, Any]:
    """What a real standby publishes (its own types, so the shape cannot drift): one group ready, one in use."""
    translation = Translation(
        "dc1.orders", 0, 977, "exact", "the last copy of orders[0]'s first unread record", 0, 23, 1000
    )
    groups = (
        GroupStandby("billing", True, "", (translation,), 0, 0, "Empty", 0, True),
        GroupStandby(
            "fraud-detector", False, "in use on the target (2 member(s))", (translation,), 3, 12, "Stable", 2, False
        ),
    )
    return StandbyView("dc1-to-dc2", 10.0, True, int(time.time() * 1000), 0.2, None, groups, 4).as_json()


def app(service: MonitorService) -> Starlette:
    async def drift(_: Request) -> Response:
        return JSONResponse(_drift(link_view()))

    async def links(_: Request) -> Response:
        return JSONResponse(links_document())

    async def canary(_: Request) -> Response:
        return JSONResponse(canary_document())

    async def checkpoints(request: Request) -> Response:
        if request.path_params["link"] != "dc1-to-dc2":
            return JSONResponse({"error": True}, status_code=404)
        return JSONResponse(checkpoints_document())

    async def clusters(_: Request) -> Response:
        return JSONResponse(burrow({"clusters": ["dc1"]}))

    async def consumers(_: Request) -> Response:
        return JSONResponse(burrow({"consumers": sorted(GROUPS)}))

    async def lag(request: Request) -> Response:
        status, value = GROUPS[request.path_params["group"]]
        return JSONResponse(burrow({"status": group_status(request.path_params["group"], status, value)}))

    async def consumer(request: Request) -> Response:
        _status, value = GROUPS[request.path_params["group"]]
        offsets = [
            {"offset": 100, "timestamp": 1_800_000_000_000 + i * 10_000, "observedAt": 0, "lag": value + i}
            for i in range(5)
        ]
        window = {"offsets": offsets, "owner": "", "client_id": "", "current-lag": value}
        return JSONResponse(burrow({"topics": {"orders": [window]}}))

    async def topic(request: Request) -> Response:
        offsets = TOPICS.get((request.path_params["cluster"], request.path_params["topic"]))
        if offsets is None:
            return JSONResponse(burrow({"error": True}), status_code=404)
        return JSONResponse(burrow({"offsets": offsets}))

    return Starlette(
        routes=[
            *_memory_routes(service),
            Route("/mirror/links", links),
            Route("/mirror/links/{link}/checkpoints", checkpoints),
            Route("/mirror/links/{link}/drift", drift),
            Route("/canary", canary),
            Route("/v3/kafka", clusters),
            Route("/v3/kafka/{cluster}/consumer", consumers),
            Route("/v3/kafka/{cluster}/consumer/{group}", consumer),
            Route("/v3/kafka/{cluster}/consumer/{group}/lag", lag),
            Route("/v3/kafka/{cluster}/topic/{topic}", topic),
        ],
        middleware=[Middleware(_Counted)],
    )


ASKED: list[str] = []  # every path the console asked for, in order (tests clear it)


class _Counted:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            ASKED.append(scope["path"])
        await self.app(scope, receive, send)


@contextlib.contextmanager
def serving(web: WebConfig | None = None) -> Iterator[str]:
    service = remembering_service()
    server = HttpServer(app(service), "127.0.0.1", 0, web)
    server.start()
    try:
        yield f"{server.scheme}://127.0.0.1:{server.port}"
    finally:
        server.stop()
        service.stop()
