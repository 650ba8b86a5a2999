"""The process runner: `mirrorwatch monitor`, `canary` and `run` (and the demo, through `everything_running`) compose
the engine, the canary, the monitor and the HTTP server in one process (the composition root, with the CLI)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from canary.exporter import CanaryCollector
from canary.service import CanaryService
from failover.exporter import StandbyCollector
from failover.standby import Standby
from kernel.access import require_access
from kernel.clock import SystemClock
from kernel.config import MirrorwatchConfig
from kernel.errors import MirrorwatchError
from kernel.group_offsets import end_children
from kernel.processes import limit_malloc_arenas
from kernel.progress_format import merge_statuses
from kernel.progress_topic import ProgressReader, progress_readers
from kernel.status_board import KEEP_STALE_MS, STATUS_MAX_AGE_MS, StatusBoard, pids_readable_here, stopped_cleanly
from kernel.web_config import WebConfig, load_web_config
from kernel.worker_status import WorkerStatus
from mirror.runner import python_links, run_links, tune_gc, worker_for
from mirror.worker import WorkerBase
from mirrorwatch.control_routes import control_routes
from monitor.history import CanaryReading
from monitor.http import HttpServer, create_app
from monitor.service import LinkStatuses, MonitorService

__all__ = [
    "Running",
    "canary_running",
    "everything_running",
    "run_canary",
    "run_everything",
    "run_monitor",
    "serve",
    "standbys_running",
]

log = logging.getLogger("mirrorwatch")


def serve(
    config: MirrorwatchConfig,
    monitor: MonitorService | None,
    canary: CanaryService | None,
    *,
    standbys: Sequence[Standby] = (),
    any_port_if_taken: bool = False,
) -> HttpServer:
    """The HTTP API on http.host:http.port with what runs in this process. Without an in-process canary, `/canary`
    serves the status a canary in another process publishes."""
    collectors: list[Collector] = []
    if standbys:
        clock = SystemClock()
        collectors.append(StandbyCollector(lambda: [s.view() for s in standbys], clock.now_ms))
    if canary is not None:
        collectors.append(CanaryCollector(canary.view))
    web = load_web_config(config.http.web_config_file) if config.http.web_config_file else None
    routes = extra_routes(config, monitor is not None, canary, standbys, web)

    def start(port: int) -> HttpServer:
        app = create_app(monitor, extra_routes=routes, collectors=collectors)
        server = HttpServer(app, config.http.host, port, web)
        server.start()
        return server

    try:
        server = start(config.http.port)
    except MirrorwatchError:
        if not any_port_if_taken:
            raise
        server = start(0)
    what = "Burrow /v3/kafka, /mirror/links, " if monitor is not None else ""
    guard = "" if web is None else f", {web.describe()}"
    url = f"{server.scheme}://{config.http.host}:{server.port}"
    log.info("HTTP API on %s%s (%s/canary, /metrics, /healthz)", url, guard, what)
    return server


def extra_routes(
    config: MirrorwatchConfig,
    with_monitor: bool,
    canary: CanaryService | None,
    standbys: Sequence[Standby],
    web: WebConfig | None,
) -> list[Route]:
    """The routes beside the monitor's (`monitor.http.create_app`): the standbys', the canary's and, where a monitor
    runs, the link controls (POST only behind the API's basic auth)."""
    routes = [Route("/mirror/links/{link}/checkpoints", _checkpoints_route(standbys))]
    if canary is not None:
        routes.append(Route("/canary", _json_route(canary.as_json)))
    else:
        routes.append(Route("/canary", _json_route(lambda: published_canary(config))))
    if with_monitor:
        routes.extend(control_routes(config, web))
    return routes


def _json_route(body: Callable[[], Mapping[str, Any] | None]) -> Callable[[Request], Awaitable[Response]]:
    async def respond(_request: Request) -> Response:
        """The canary's probes per link: sent, back, lost, duplicated, reordered, end-to-end latency percentiles (a
        canary in another process: the status it publishes; 503 when none runs)."""
        document = body()
        if document is None:
            return JSONResponse({"error": True, "message": "no canary is running"}, status_code=503)
        return JSONResponse(document)

    return respond


def _checkpoints_route(standbys: Sequence[Standby]) -> Callable[[Request], Awaitable[Response]]:
    by_link = {s.link.name: s for s in standbys}

    async def respond(request: Request) -> Response:
        """The link's standby groups: each group's translation to the target, when, and whether it was committed."""
        name = request.path_params["link"]
        standby = by_link.get(name)
        if standby is None:
            message = f"link {name!r} keeps no standby groups here (no checkpoint: section, or no such link)"
            return JSONResponse({"error": True, "message": message}, status_code=404)
        return JSONResponse(standby.view().as_json())

    return respond


@contextlib.contextmanager
def standbys_running(config: MirrorwatchConfig) -> Iterator[list[Standby]]:
    """The standby of every link with a `checkpoint:` section, for the duration of the block."""
    config = config.as_client("failover")  # a standby commits the groups' positions on the target
    standbys = [Standby(config, link) for link in config.links if link.checkpoint is not None]
    for standby in standbys:
        standby.start()
    try:
        yield standbys
    finally:
        for standby in standbys:
            standby.stop()


def published_canary(config: MirrorwatchConfig) -> Mapping[str, Any] | None:
    max_age_ms = int(config.canary.interval_seconds * 3000) + STATUS_MAX_AGE_MS  # it publishes once per round
    found = StatusBoard(config.state_path / "status").read("canary", SystemClock().now_ms(), max_age_ms)
    documents = sorted((d for ds in found.values() for d in ds), key=lambda d: d["updated_ms"])
    return documents[-1] if documents else None


def canary_readings(document: Mapping[str, Any] | None) -> dict[str, CanaryReading]:
    """Per link of a `/canary` document: its worst partition's end-to-end p99 (None: no probe in the window) and
    whether it is absent. No document (no canary has published lately): nothing."""
    out: dict[str, CanaryReading] = {}
    for link in (document or {}).get("links", []):
        known = [p["e2e_latency"]["p99_seconds"] for p in link["partitions"]]
        p99 = max((v for v in known if v is not None), default=None)
        out[link["link"]] = CanaryReading(p99, bool(link["absent"]))
    return out


@contextlib.contextmanager
def canary_running(config: MirrorwatchConfig, *, required: bool = False) -> Iterator[CanaryService | None]:
    """The canary probing every link for the duration of the block (None when disabled or there are no links)."""
    if not required and (not config.canary.enabled or not config.links):
        yield None
        return
    clusters = config.as_client("canary").clusters
    canary = CanaryService(config.canary, clusters, config.links, state_path=config.state_path)
    canary.start()
    try:
        yield canary
    finally:
        canary.stop()


def _link_statuses(
    config: MirrorwatchConfig, in_memory: Mapping[str, Sequence[WorkerBase]], readers: Sequence[ProgressReader]
) -> LinkStatuses:
    """Each link's worker statuses: in memory for the workers of this process, and from the status files and the
    progress topics for the others, wherever they run, those of dead workers included (the last word of a worker
    that died is evidence of what reached the target: `monitor.state`)."""
    board = StatusBoard(config.state_path / "status")
    clock = SystemClock()
    groups = {link.name: link.consumer_group for link in config.links}

    def statuses() -> Mapping[str, Sequence[WorkerStatus]]:
        found: dict[str, list[WorkerStatus]] = {}
        pid, now = os.getpid(), clock.now_ms()
        withdrawn = board.withdrawn("links")  # stopped cleanly here: their tombstones may not be read yet
        documents = merge_statuses(
            board.read("links", now, KEEP_STALE_MS), *(r.read("links", now, KEEP_STALE_MS) for r in readers)
        )
        for name, written in documents.items():
            parsed = [WorkerStatus.from_json(d) for d in written if not stopped_cleanly(d, withdrawn)]
            # This process's own workers are read in memory (fresher than their files); a status of another link of
            # the same name (another config's, on the same target: its group says so) is not this link's.
            found[name] = [
                s
                for s in parsed
                if s is not None
                and not (pids_readable_here(s.host, s.pids) and s.pid == pid)
                and s.consumer_group in ("", groups.get(name, s.consumer_group))
            ]
        for name, workers in in_memory.items():
            found.setdefault(name, []).extend(w.worker_status() for w in workers)
        return found

    return statuses


@contextlib.contextmanager
def _monitoring(
    config: MirrorwatchConfig,
    in_memory: Mapping[str, Sequence[WorkerBase]],
    canary: CanaryService | None = None,
    *,
    any_port_if_taken: bool = False,
) -> Iterator[tuple[MonitorService, HttpServer, list[Standby]]]:
    """The monitor collecting, the links' standbys translating and the HTTP API serving, for the duration of the
    block."""
    as_monitor = config.as_client("monitor")
    with progress_readers(as_monitor) as readers:
        link_statuses = _link_statuses(config, in_memory, readers)
        service = MonitorService(config.monitor, as_monitor.clusters, config.links, link_statuses=link_statuses)
        if config.canary.enabled and config.links:  # its latency joins the monitor's history, in this process or not
            service.canary = lambda: canary_readings(
                canary.as_json() if canary is not None else published_canary(config)
            )
        service.start()
        with standbys_running(config) as standbys:
            try:
                server = serve(config, service, canary, standbys=standbys, any_port_if_taken=any_port_if_taken)
            except BaseException:
                service.stop()
                raise
            try:
                yield service, server, standbys
            finally:
                server.stop()
                service.stop()


def run_monitor(config: MirrorwatchConfig, stop: threading.Event) -> int:
    """The monitor and its HTTP API until `stop` is set."""
    limit_malloc_arenas()  # before the first client's threads
    require_access(config, config.clusters, ("monitor", "failover"))
    with _monitoring(config, {}):
        stop.wait()
        end_children()  # a collection or a standby waiting on one ends now: the stop is not held up by it
    return 0


def run_canary(config: MirrorwatchConfig, stop: threading.Event) -> int:
    """The canary alone, with its own HTTP server (/canary, /metrics), until `stop` is set."""
    require_access(config, [alias for link in config.links for alias in (link.source, link.target)], ("canary",))
    with canary_running(config, required=True) as canary:
        server = serve(config, None, canary)
        try:
            stop.wait()
        finally:
            server.stop()
    return 0


@dataclass
class Running:
    """What `everything_running` started: the in-process link workers (by link), the canary (None when disabled),
    the monitor, the HTTP server, how each link's workers ended (an exit code, or the error that stopped it), and the
    links' standbys."""

    workers: dict[str, list[WorkerBase]]
    canary: CanaryService | None
    monitor: MonitorService
    server: HttpServer
    results: dict[str, int | MirrorwatchError] = field(default_factory=dict)
    standbys: list[Standby] = field(default_factory=list)

    def exit_code(self) -> int:
        codes = [r.exit_code if isinstance(r, MirrorwatchError) else r for r in self.results.values()]
        failed = [code for code in codes if code != 0]
        return max(failed) if failed else 0


@contextlib.contextmanager
def everything_running(
    config: MirrorwatchConfig, stop: threading.Event, *, any_port_if_taken: bool = False
) -> Iterator[Running]:
    """Every python link, the canary, the monitor and the HTTP API, for the duration of the block: the one wiring of
    `mirrorwatch run` and the demo. Links with one worker run on threads here, so the monitor reads their
    positions in memory; links with several workers run in their own processes. A link that ends sets `stop`: a
    half-running mirror is worse than a restarted one. Leaving the block stops the links first, then the rest."""
    require_access(config, config.clusters)
    links = python_links(config, skip_spark=True) if config.links else []
    in_process = [link for link in links if link.num_streams == 1]
    elsewhere = [link for link in links if link.num_streams > 1]
    workers: dict[str, list[WorkerBase]] = {}
    results: dict[str, int | MirrorwatchError] = {}
    threads: list[threading.Thread] = []
    worker_stop = threading.Event()

    def run_worker(worker: WorkerBase) -> None:
        try:
            results[worker.name] = worker.run()
        except MirrorwatchError as exc:
            log.error("%s", exc)
            results[worker.name] = exc
        stop.set()

    if in_process:
        tune_gc()
    for link in in_process:
        worker = worker_for(config, link, stop=worker_stop)
        workers[link.name] = [worker]
        threads.append(threading.Thread(target=run_worker, args=(worker,), name=f"link-{link.name}", daemon=True))
    if elsewhere:

        def run_elsewhere() -> None:
            results["workers"] = run_links(config, elsewhere, worker_stop)
            stop.set()

        threads.append(threading.Thread(target=run_elsewhere, name="link-processes", daemon=True))

    for thread in threads:
        thread.start()
    try:
        with (
            canary_running(config) as canary,
            _monitoring(config, workers, canary, any_port_if_taken=any_port_if_taken) as (
                monitor,
                server,
                standbys,
            ),
        ):
            try:
                yield Running(workers, canary, monitor, server, results, standbys)
            finally:
                worker_stop.set()
                for thread in threads:
                    thread.join(timeout=90)
    finally:
        worker_stop.set()  # also when the monitor or the server could not start


def run_everything(config: MirrorwatchConfig, stop: threading.Event) -> int:
    """`mirrorwatch run`: everything (see `everything_running`) until `stop` is set or a link ends."""
    with everything_running(config, stop) as running:
        stop.wait()
        end_children()
    return running.exit_code()
