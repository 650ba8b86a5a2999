"""The process runner: `mirrorwatch monitor` and `mirrorwatch run` compose the engine, the monitor and the HTTP
server in one process (the composition root; the only module here that imports mirror/ and monitor/, with the CLI)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from mirror.engine import LinkWorker
from mirror.runner import python_links, run_links, worker_for
from mirrorwatch.clock import SystemClock
from mirrorwatch.config import MirrorwatchConfig
from mirrorwatch.errors import MirrorwatchError
from mirrorwatch.status_board import StatusBoard
from monitor.http import HttpServer, create_app
from monitor.service import LinkStatuses, MonitorService

__all__ = ["run_everything", "run_monitor"]

log = logging.getLogger("mirrorwatch")


def _serve(service: MonitorService, config: MirrorwatchConfig) -> HttpServer:
    server = HttpServer(create_app(service), config.http.host, config.http.port)
    server.start()
    log.info(
        "HTTP API on http://%s:%d (Burrow /v3/kafka, /mirror/links, /metrics, /healthz)", config.http.host, server.port
    )
    return server


def _link_statuses(config: MirrorwatchConfig, in_memory: Mapping[str, Sequence[LinkWorker]]) -> LinkStatuses:
    """Each link's worker statuses: in memory for the workers of this process, else from their status files."""
    board = StatusBoard(config.state_path / "status")
    clock = SystemClock()

    def statuses() -> Mapping[str, Sequence[Mapping[str, Any]]]:
        found: dict[str, Sequence[Mapping[str, Any]]] = dict(board.read("links", clock.now_ms()))
        found.update({name: [w.status() for w in workers] for name, workers in in_memory.items()})
        return found

    return statuses


@contextlib.contextmanager
def _monitoring(config: MirrorwatchConfig, link_statuses: LinkStatuses | None = None) -> Iterator[MonitorService]:
    """The monitor collecting and the HTTP API serving, for the duration of the block."""
    service = MonitorService(config, link_statuses=link_statuses)
    service.start()
    server = _serve(service, config)
    try:
        yield service
    finally:
        server.stop()
        service.stop()


def run_monitor(config: MirrorwatchConfig, stop: threading.Event) -> int:
    """The monitor and its HTTP API until `stop` is set."""
    with _monitoring(config, _link_statuses(config, {})):
        stop.wait()
    return 0


def run_everything(config: MirrorwatchConfig, stop: threading.Event) -> int:
    """Every python link, the monitor and the HTTP API side by side; links with one worker run here, so the monitor
    reads their positions in memory; links with several workers run in their own processes."""
    links = python_links(config) if config.links else []
    in_process = [link for link in links if link.num_streams == 1]
    elsewhere = [link for link in links if link.num_streams > 1]
    workers: dict[str, list[LinkWorker]] = {}
    results: dict[str, int] = {}
    threads: list[threading.Thread] = []
    worker_stop = threading.Event()

    def run_worker(worker: LinkWorker) -> None:
        try:
            results[worker.name] = worker.run()
        except MirrorwatchError as exc:
            log.error("%s", exc)
            results[worker.name] = exc.exit_code
        stop.set()  # a link that ends stops the process: a half-running mirror is worse than a restarted one

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
    with _monitoring(config, _link_statuses(config, workers)):
        try:
            stop.wait()
        finally:
            worker_stop.set()
            for thread in threads:
                thread.join(timeout=90)
    failed = [code for code in results.values() if code != 0]
    return max(failed) if failed else 0
