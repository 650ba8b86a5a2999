"""The HTTP API (one server on `http.port`): Burrow's v3 read API with Burrow's JSON shape, the mirror's links,
Prometheus metrics, and health checks. It only reads the monitor's current state.

    /v3/kafka                                   clusters
    /v3/kafka/{cluster}                         one cluster's module detail
    /v3/kafka/{cluster}/topic[/{topic}]         topics; one topic's high-watermarks by partition
    /v3/kafka/{cluster}/consumer[/{group}]      groups; one group's offset windows
    /v3/kafka/{cluster}/consumer/{group}/status partitions at WARN or worse, with the group's status
    /v3/kafka/{cluster}/consumer/{group}/lag    every partition, with the group's status
    /mirror/links[/{link}]                      per-partition positions and replication lag of the mirror links
    /mirror/drift  /mirror/links/{link}/drift   what differs between each link's source topics and their copies
    /metrics  /healthz  /readyz
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import math
import resource
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kernel.web_config import BasicAuth, WebConfig
from kernel.worker_status import records_by_partition
from monitor.burrow_json import burrow, group_status_json, not_found, sample_json, unseen
from monitor.connections import GuardedH11
from monitor.exporter import MonitorCollector
from monitor.history import History
from monitor.links import LinkView
from monitor.own_alerts import NOT_JUDGED, firing
from monitor.service import MonitorService
from monitor.state import GroupView, MonitorState

__all__ = ["HttpServer", "create_app"]

log = logging.getLogger("mirrorwatch.http")


def _link(view: LinkView) -> dict[str, Any]:
    return {
        "link": view.link,
        "source": view.source,
        "target": view.target,
        "consumer_group": view.consumer_group,
        "engine_running": view.engine_running,
        "state": view.state,
        "workers": view.workers,
        "workers_gone": view.workers_gone,
        "observed_ms": view.observed_ms,
        "failure": view.failure,
        "target_silent_since_ms": view.target_silent_since_ms,
        # the bandwidth budget in force (its live workers' shares added up; None: none) and how long it held them
        "budget_bytes_per_second": view.stats.get("budget_bytes_per_second") or None,
        "budget_throttled_seconds_total": view.stats.get("budget_throttled_seconds_total", 0),
        "replication_lag_records": view.replication_lag_records,
        "replication_lag_seconds": view.replication_lag_seconds,
        # true: the figure is only a lower bound (the source stopped answering before a waiting record was dated)
        "replication_lag_seconds_at_least": view.replication_lag_seconds_at_least,
        "reason": view.reason,
        "partitions": [asdict(p) for p in view.partitions],
        "stats": dict(view.stats),
        "config_drift": [dict(d) for d in view.config_drift],
        "config_synced": [dict(d) for d in view.config_synced],
        "records_lost": sum(records_by_partition(view.gaps).values()),
        "gaps": [{**asdict(g), "records": g.records, "text": g.describe(view.link)} for g in view.gaps],
        "drift_differences": view.drift_report.get("count"),  # None: no topic refresh reported yet
    }


def _drift(view: LinkView) -> dict[str, Any]:
    """The link's drift report as its newest topic refresh found it (`mirror.drift.drift_report`)."""
    head = {"link": view.link, "source": view.source, "target": view.target}
    if not view.drift_report:
        reason = "not measured yet: no worker of the link has reported a topic refresh (`mirrorwatch drift` reads now)"
        return head | {"at_ms": None, "count": None, "counts": [], "differences": [], "acls": None, "reason": reason}
    return head | dict(view.drift_report) | {"reason": None}


def create_app(
    service: MonitorService | None,
    *,
    extra_routes: Sequence[Route] = (),
    collectors: Sequence[Collector] = (),
) -> Starlette:
    """The HTTP API: the monitor's routes (when it runs here), `extra_routes` (e.g. the canary's `/canary`),
    `/metrics` from the monitor's and the extra `collectors`, `/healthz` and `/readyz`."""
    registry = CollectorRegistry(auto_describe=True)
    for collector in collectors:
        registry.register(collector)
    rendered = _RenderedOnce(service)

    async def metrics(request: Request) -> Response:
        """The Prometheus exposition: the monitor's families and those of the canary and standbys running here.

        Gzip to a scraper that asks for it (Prometheus does): the monitor's text as it was compressed once per
        round, then the families served for this moment and the other collectors', compressed onto a copy of that
        stream (one gzip stream); plain text otherwise."""
        packed, packer = await rendered.packed()
        others = await run_in_threadpool(rendered.served) + generate_latest(registry)
        if _accepts_gzip(request.headers.get("accept-encoding", "")):
            headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
            if packer is None:
                body = gzip.compress(others, compresslevel=1)
            else:
                tail = packer.copy()
                body = packed + tail.compress(others) + tail.flush()
            return Response(body, media_type=CONTENT_TYPE_LATEST, headers=headers)
        text = await run_in_threadpool(zlib.decompressobj(31).decompress, packed) if packed else b""
        return Response(text + others, media_type=CONTENT_TYPE_LATEST, headers={"Vary": "Accept-Encoding"})

    async def healthz(request: Request) -> Response:
        """200 while the process serves: a liveness probe."""
        return JSONResponse({"status": "ok"})

    async def always_ready(request: Request) -> Response:
        """200 at once where no monitor runs here (a canary's or a worker's API): a readiness probe."""
        return JSONResponse({"status": "ready"})

    common = [Route("/metrics", metrics), Route("/healthz", healthz), *extra_routes]
    if service is None:
        return Starlette(routes=[*common, Route("/readyz", always_ready)])
    return Starlette(routes=[*_monitor_routes(service), *common], exception_handlers={_BadQuery: _bad_query})


def _accepts_gzip(accept_encoding: str) -> bool:
    for item in accept_encoding.lower().split(","):
        coding, _, parameters = item.strip().partition(";")
        if coding.strip() == "gzip":
            return parameters.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


class _RenderedOnce:
    """The monitor's families rendered once per published state (a collection), gzip-compressed as they are
    rendered, and served as those bytes to every scrape until the next one: rendered on the monitor's thread right
    after the round, and until it is done a scrape gets the last complete rendering (never waits for one: a fleet's
    takes seconds), or, for a state published otherwise, by the first scrape in a worker thread (never on the event
    loop that answers the API)."""

    def __init__(self, service: MonitorService | None) -> None:
        self._service = service
        self._collector = MonitorCollector(service) if service is not None else None
        self._lock = asyncio.Lock()  # concurrent scrapes of a new state wait for one rendering
        # the state rendered from, its text (an open gzip stream) and the stream's compressor
        self._cached: tuple[object, bytes, Any] = (object(), b"", None)
        self._rendering: MonitorState | None = None  # the state the monitor's thread renders now (`_prerender`)
        if service is not None:
            service.on_publish.append(self._prerender)

    def _render(self) -> tuple[object, bytes, Any]:
        assert self._service is not None and self._collector is not None
        state = self._service.state  # read before rendering: a newer state published meanwhile renders again
        return (state, *self._collector.render_gzip())

    def _prerender(self, state: MonitorState) -> None:
        self._rendering = state
        try:
            self._cached = self._render()
        finally:
            self._rendering = None

    def served(self) -> bytes:
        """The families served for the moment of the scrape (`MonitorCollector.render_served`)."""
        return self._collector.render_served() if self._collector is not None else b""

    async def packed(self) -> tuple[bytes, Any]:
        """The monitor's text as an open gzip stream, and its compressor (None: no monitor here)."""
        if self._service is None:
            return b"", None
        async with self._lock:
            service = self._service
            while self._cached[0] is not service.state:
                if self._cached[1] and (service.publishing or self._rendering is not None):
                    break  # the round's own rendering is coming: the last complete one until then, no waiting
                if self._rendering is service.state:  # the first one: wait for it rather than render it twice
                    await asyncio.sleep(0.05)
                    continue
                self._cached = await run_in_threadpool(self._render)  # a state published otherwise
            return self._cached[1], self._cached[2]


def _memory_routes(service: MonitorService) -> list[Route]:
    """What the monitor remembers (monitor.history): every group at once with its trend, figures over time, events."""

    async def all_groups(request: Request) -> Response:
        """Every group of every cluster in one answer (the console's table), with its lag trend from the history."""
        current = service.state
        if current is None:
            return JSONResponse({"error": True, "message": "no collection yet"}, status_code=503)
        trend_ms = int(_number(request, "trend_seconds", 300.0) * 1000)

        def rows() -> list[dict[str, Any]]:  # thousands of groups: off the event loop that answers /healthz
            return [_group_row(view, service.history, trend_ms) for view in current.groups.values()]

        return JSONResponse(
            {
                "observed_ms": current.observed_ms,
                "trend_seconds": trend_ms / 1000,
                "groups": await run_in_threadpool(rows),
            }
        )

    async def link_history(request: Request) -> Response:
        """The link's series over `monitor.history_seconds` as `[ms, value]` pairs, with `span_seconds` and
        `interval_seconds` (`?since_ms=`)."""
        name = request.path_params["link"]
        if all(link.name != name for link in service.links):
            return JSONResponse({"error": True, "message": "link not found"}, status_code=404)
        series = service.history.link(name, int(_number(request, "since_ms", 0)))
        return JSONResponse(_history(service, {"link": name, "series": _pairs(series)}))

    async def group_history(request: Request) -> Response:
        """The group's `total_lag` and `status` over time (Burrow's numbers: 1 OK, 2 WARN, 3 ERR, ...;
        `?since_ms=`)."""
        cluster_name, group = request.path_params["cluster"], request.path_params["group"]
        series = service.history.group(cluster_name, group, int(_number(request, "since_ms", 0)))
        if not series:
            return JSONResponse({"error": True, "message": "no history for this cluster and group"}, status_code=404)
        return JSONResponse(_history(service, {"cluster": cluster_name, "group": group, "series": _pairs(series)}))

    async def events(request: Request) -> Response:
        """The events the monitor recorded, newest first: clusters down or back, link states, pauses, workers
        joining, leaving or dying, drift, group statuses, a canary absent (`?link=&group=&cluster=&limit=500`)."""
        q = request.query_params
        found = service.events.query(
            link=q.get("link"),
            group=q.get("group"),
            cluster=q.get("cluster"),
            limit=int(min(10_000, max(1, _number(request, "limit", 500)))),
        )
        return JSONResponse({"events": [e.as_dict() for e in found]})

    async def alerts(request: Request) -> Response:
        """The shipped alert rules judged by the monitor on its own history with `monitor.alert_thresholds` (not
        Prometheus), with the rules it cannot judge."""
        current = service.state
        now = current.observed_ms if current is not None else 0
        judged = await run_in_threadpool(firing, service.history, now, service.settings.alert_thresholds)
        return JSONResponse(
            {
                "evaluated_by": (
                    "the monitor on its own history (not Prometheus), the rules' thresholds (monitor.alert_thresholds)"
                ),
                "alerts": [a.as_dict() for a in judged] if current is not None else [],
                "not_judged": list(NOT_JUDGED),
            }
        )

    return [
        Route("/mirror/alerts", alerts),
        Route("/mirror/groups", all_groups),
        Route("/mirror/history/links/{link}", link_history),
        Route("/mirror/history/groups/{cluster}/{group}", group_history),
        Route("/mirror/events", events),
    ]


def _monitor_routes(service: MonitorService) -> list[Route]:

    def state() -> MonitorState | None:
        return service.state

    async def clusters(request: Request) -> Response:
        """Burrow: the clusters the monitor reads."""
        return burrow(request, "cluster list returned", clusters=sorted(service.clusters))

    async def cluster(request: Request) -> Response:
        """Burrow: one cluster's bootstrap servers and client settings as Burrow shows them."""
        alias = request.path_params["cluster"]
        if alias not in service.clusters:
            return not_found(request, "cluster")
        c = service.clusters[alias]
        module = {
            "class-name": "kafka",
            "servers": c.bootstrap_servers.split(","),
            "client-profile": {},
            "topic-refresh": service.settings.interval_seconds,
            "offset-refresh": service.settings.interval_seconds,
        }
        return burrow(request, "cluster module detail returned", module=module)

    def snapshot_of(request: Request) -> Any:
        current = state()
        alias = request.path_params["cluster"]
        return current.clusters.get(alias) if current is not None else None

    async def topics(request: Request) -> Response:
        """Burrow: the cluster's topics (503 with the reason while the cluster cannot be seen)."""
        if (cannot_see := unseen(request, state())) is not None:
            return cannot_see
        snapshot = snapshot_of(request)
        if snapshot is None:
            return not_found(request, "cluster")
        return burrow(request, "topic list returned", topics=sorted(snapshot.topics()))

    async def topic(request: Request) -> Response:
        """Burrow: a topic's partitions' high-watermarks."""
        if (cannot_see := unseen(request, state())) is not None:
            return cannot_see
        snapshot = snapshot_of(request)
        name = request.path_params["topic"]
        if snapshot is None or name not in snapshot.topics():
            return not_found(request, "cluster or topic")
        offsets = [snapshot.partitions[(name, p)].latest for p in range(snapshot.topics()[name])]
        return burrow(request, "topic offsets returned", offsets=offsets)

    async def consumers(request: Request) -> Response:
        """Burrow: the cluster's consumer groups."""
        if (cannot_see := unseen(request, state())) is not None:
            return cannot_see
        snapshot = snapshot_of(request)
        if snapshot is None:
            return not_found(request, "cluster")
        return burrow(request, "consumer list returned", consumers=sorted(snapshot.groups))

    def group_view(request: Request) -> Any:
        current = state()
        key = (request.path_params["cluster"], request.path_params["group"])
        return current.groups.get(key) if current is not None else None

    async def consumer(request: Request) -> Response:
        """Burrow: a group's committed offsets per topic and partition, with their window."""
        if (cannot_see := unseen(request, state())) is not None:
            return cannot_see
        view = group_view(request)
        if view is None:
            return not_found(request, "cluster or consumer")
        detail: dict[str, list[dict[str, Any]]] = {}
        for p in view.evaluation.partitions:
            samples = view.windows.get((p.topic, p.partition), ())
            detail.setdefault(p.topic, []).append(
                {
                    "offsets": [sample_json(s) for s in samples],
                    "owner": "",
                    "client_id": "",
                    "current-lag": p.current_lag,
                }
            )
        return burrow(request, "consumer detail returned", topics=detail)

    async def consumer_status(request: Request) -> Response:
        """Burrow: a group's status judged by Burrow's rules, `/status` with the partitions at WARN or worse, `/lag`
        with all of them and their lag."""
        if (cannot_see := unseen(request, state())) is not None:
            return cannot_see
        view = group_view(request)
        if view is None:
            return not_found(request, "cluster or consumer")
        only_bad = request.url.path.endswith("/status")
        return burrow(
            request,
            "consumer status returned",
            status=group_status_json(view.cluster, view.group, view.evaluation, only_bad=only_bad),
        )

    return [
        *_memory_routes(service),
        Route("/v3/kafka", clusters),
        Route("/v3/kafka/{cluster}", cluster),
        Route("/v3/kafka/{cluster}/topic", topics),
        Route("/v3/kafka/{cluster}/topic/{topic}", topic),
        Route("/v3/kafka/{cluster}/consumer", consumers),
        Route("/v3/kafka/{cluster}/consumer/{group}", consumer),
        Route("/v3/kafka/{cluster}/consumer/{group}/status", consumer_status),
        Route("/v3/kafka/{cluster}/consumer/{group}/lag", consumer_status),
        *_link_routes(service),
        *_drift_routes(service),
    ]


def _link_routes(service: MonitorService) -> list[Route]:
    async def links(request: Request) -> Response:
        """Every link's view, as `/mirror/links/{link}` gives one.

        Figures for the moment they are served (`MonitorService.served_links`): read off the event loop."""
        views = await run_in_threadpool(service.served_links)
        return JSONResponse({"links": [_link(v) for v in views.values()]})

    async def link(request: Request) -> Response:
        """The link's view: each partition's source high-watermark and the offsets read, acknowledged by the target
        and committed, its replication lag in records and seconds (or why it is not known), workers, state and
        budget."""
        view = await _served_view(service, request)
        return view if isinstance(view, Response) else JSONResponse(_link(view))

    async def readyz(request: Request) -> Response:
        """200 once a round holding every cluster's answer has been rendered for `/metrics`, else 503 with the
        reason: a readiness probe after which every scrape is complete."""
        current, why = service.state, service.not_ready()
        if current is None or why is not None:
            return JSONResponse({"status": why or "no collection yet"}, status_code=503)
        return JSONResponse(
            {
                "status": "ready",
                "round_seconds": round(current.round_seconds, 3),
                "interval_seconds": service.settings.interval_seconds,
                # per cluster: "offsets-topic" (following __consumer_offsets) or "admin-api" (OffsetFetch per group)
                "commits_from": {alias: s.commits_from for alias, s in current.clusters.items() if s.up},
            }
        )

    return [Route("/mirror/links", links), Route("/mirror/links/{link}", link), Route("/readyz", readyz)]


def _drift_routes(service: MonitorService) -> list[Route]:
    async def drift(request: Request) -> Response:
        """Every link's drift report (topics and configs that differ between source and target) as its newest topic
        refresh found it."""
        views = await run_in_threadpool(service.served_links)
        return JSONResponse({"links": [_drift(v) for v in views.values()]})

    async def link_drift(request: Request) -> Response:
        """The link's drift report as its newest topic refresh found it."""
        view = await _served_view(service, request)
        return view if isinstance(view, Response) else JSONResponse(_drift(view))

    return [Route("/mirror/links/{link}/drift", link_drift), Route("/mirror/drift", drift)]


async def _served_view(service: MonitorService, request: Request) -> LinkView | Response:
    """The view of the link the path names, as served now (`MonitorService.served_links`, read off the event loop);
    or the answer when there is none: 404 for a link the config does not have, 503 before the first collection."""
    name = request.path_params["link"]
    if all(link.name != name for link in service.links):
        return JSONResponse({"error": True, "message": "link not found"}, status_code=404)
    views = await run_in_threadpool(service.served_links)
    if name not in views:
        return JSONResponse({"error": True, "message": "no collection yet"}, status_code=503)
    return views[name]


class _BadQuery(ValueError):
    pass


def _number(request: Request, name: str, default: float) -> float:
    """A numeric query parameter; a value that is not a finite number answers 400 (see `_bad_query`)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise _BadQuery(f"{name} must be a number, not {raw[:40]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise _BadQuery(f"{name} must be a finite number >= 0, not {raw[:40]!r}")
    return value


async def _bad_query(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": True, "message": str(exc)}, status_code=400)


def _pairs(series: Mapping[str, list[tuple[int, float]]]) -> dict[str, list[list[float]]]:
    return {name: [[at, value] for at, value in points] for name, points in series.items()}


def _history(service: MonitorService, body: dict[str, Any]) -> dict[str, Any]:
    return {
        **body,
        "span_seconds": service.settings.history_seconds,
        "interval_seconds": service.settings.interval_seconds,
    }


def _group_row(view: GroupView, history: History, trend_ms: int) -> dict[str, Any]:
    worst = view.evaluation.max_lag
    return {
        "cluster": view.cluster,
        "group": view.group,
        "state": view.state,
        "members": view.members,
        "status": view.evaluation.status.name,
        "complete": view.evaluation.complete,
        "total_lag": view.evaluation.total_lag,
        "partitions": len(view.evaluation.partitions),
        "max_lag_seconds": worst.lag_seconds if worst is not None else None,
        # records of lag gained (positive) or worked off (negative) per minute over the trend span; null until the
        # history holds two rounds of the group
        "lag_change_per_minute": history.change_per_minute(("group", view.cluster, view.group, "total_lag"), trend_ms),
    }


def _raise_file_limit() -> None:
    """The soft limit on open files up to the hard one (commonly 1,024 of 524,288): headroom for Kafka clients."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


class _BasicAuthRequired:
    """Every request without one of the web config's users' credentials gets 401, before the app sees it."""

    def __init__(self, app: ASGIApp, auth: BasicAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            # a bcrypt check is tens of ms: off the event loop, so /healthz answers while it runs
            if not await asyncio.get_running_loop().run_in_executor(None, self.auth.allows, header):
                response = PlainTextResponse(
                    "401 Unauthorized\n", status_code=401, headers={"WWW-Authenticate": 'Basic realm="mirrorwatch"'}
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class HttpServer:
    """uvicorn serving the app on a background thread; `port` is the bound port (useful with port 0). With a web
    config: TLS and/or basic auth (`kernel.web_config`)."""

    def __init__(self, app: Starlette, host: str, port: int, web: WebConfig | None = None) -> None:
        _raise_file_limit()
        served: ASGIApp = app
        if web is not None and web.users:
            served = _BasicAuthRequired(app, BasicAuth(web.users))
        context = web.server_context() if web is not None and web.tls else None
        self._server = uvicorn.Server(
            uvicorn.Config(
                served,
                host=host,
                port=port,
                log_level="warning",
                lifespan="off",
                http=GuardedH11,
                ssl_context_factory=None if context is None else (lambda _config, _default: context),
            )
        )
        self._thread = threading.Thread(target=self._server.run, name="mirrorwatch-http", daemon=True)
        self.host = host
        self.port = port
        self.scheme = "https" if context is not None else "http"

    def start(self, timeout_s: float = 10.0) -> None:
        from kernel.wait import wait_until

        self._thread.start()
        wait_until(
            lambda: self._server.started or not self._thread.is_alive(),
            timeout_s=timeout_s,
            description="the HTTP server to start",
        )
        if not self._server.started:
            from kernel.errors import MirrorwatchError

            raise MirrorwatchError(f"the HTTP server could not listen on {self.host}:{self.port} (port in use?)")
        sockets = [s for server in self._server.servers for s in server.sockets]
        if sockets:
            self.port = int(sockets[0].getsockname()[1])

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
