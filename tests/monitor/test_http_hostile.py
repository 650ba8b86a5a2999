"""The HTTP API against clients that connect and never finish (issue #22, case 4), on the real clusters: thousands
of idle connections used to exhaust the process's file descriptors, and /healthz, collection and the status files
stopped while the event loop logged a traceback per refused accept."""

from __future__ import annotations

import contextlib
import json
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.config import MirrorwatchConfig
from kernel.wait import wait_until
from monitor.connections import FIRST_REQUEST_TIMEOUT_S, MAX_CONNECTIONS, ConnectionBook
from tests.kafka_helpers import Record, produce
from tests.processes import MirrorProcess

IDLE = 3_000  # connections that never send a byte: far more than the cap
SLOW = 50  # connections that send half a request head and stop


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


class _Connection:
    """A stand-in for a connection: whether it has sent a request (`cycle`), and how often the book looked."""

    looked = 0

    def __init__(self, busy: bool = False) -> None:
        self.busy = busy

    @property
    def cycle(self) -> object:
        _Connection.looked += 1
        return object() if self.busy else None


def test_the_cap_closes_the_oldest_idle_connection_with_work_that_does_not_grow_with_the_connections_open() -> None:
    """A flood of N idle connections over the cap: each newcomer closes the longest-waiting connection that has sent
    no request, found at the front of the book. Looking among every open connection made the flood cost N x open
    (4.5 M looks for 3,000) and /healthz waited seconds behind it."""
    book = ConnectionBook()
    # connections that sent a request before the flood: never closed for the cap
    busy: list[Any] = [_Connection(busy=True) for _ in range(100)]
    flood: list[Any] = [_Connection() for _ in range(10_000)]
    for connection in (*busy, *flood[:MAX_CONNECTIONS]):
        book.waiting[connection] = None
    _Connection.looked = 0
    closed: list[Any] = []
    for newcomer in flood[MAX_CONNECTIONS:]:
        book.waiting[newcomer] = None
        victim = book.oldest_waiting(newcomer)
        del book.waiting[victim]  # as _Guarded._close does
        closed.append(victim)
    assert closed == flood[: len(flood) - MAX_CONNECTIONS]  # oldest first, none of the busy ones
    assert _Connection.looked <= len(busy) + len(closed), _Connection.looked  # each looked at once
    # every other connection busy with a request: the newcomer is the one closed
    alone = ConnectionBook()
    for connection in busy:
        alone.waiting[connection] = None
    last: Any = _Connection()
    alone.waiting[last] = None
    assert alone.oldest_waiting(last) is last


@pytest.mark.integration
def test_thousands_of_idle_and_half_sent_connections_leave_healthz_and_collection_working(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    tmp_path: Path,
) -> None:
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 1)
    config = write_config(
        [],
        monitor={"interval_seconds": 1},
        http={"host": "127.0.0.1", "port": 0},
        state_dir=str(tmp_path / "state"),
    )
    monitor = start_mirror("--config", str(config), command="monitor")
    base = monitor.http_base()
    port = int(base.rsplit(":", 1)[1])
    # the flood comes once the monitor has settled (its first round ended: the start's own work done)
    wait_until(
        lambda: get(f"{base}/readyz")["status"] == "ready",
        timeout_s=60,
        ignore=(OSError,),
        description="the monitor's first round",
    )
    assert get(f"{base}/healthz") == {"status": "ok"}

    clients: list[socket.socket] = []
    try:
        for _ in range(IDLE):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        for _ in range(SLOW):
            slow = socket.create_connection(("127.0.0.1", port), timeout=10)
            slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            clients.append(slow)

        # While they are all open (or being closed by the server): /healthz answers, every time ...
        for _ in range(5):
            assert get(f"{base}/healthz") == {"status": "ok"}
        # ... and the monitor keeps collecting: records produced now show in the topic's high-watermark
        produce(source, "source", topic, [Record(value=b"x")] * 7)
        wait_until(
            lambda: get(f"{base}/v3/kafka/source/topic/{topic}")["offsets"] == [7],
            timeout_s=30,
            ignore=(OSError,),
            description="the monitor to collect the new high-watermark",
        )

        # Every idle or half-sent connection is closed by the server: at the cap, oldest first; the rest once
        # they have not sent a request head within FIRST_REQUEST_TIMEOUT_S
        deadline = time.monotonic() + FIRST_REQUEST_TIMEOUT_S + 20
        for client in clients:
            client.settimeout(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ConnectionResetError):  # closed with data unread (a half-sent head)
                assert client.recv(1024) == b"", "the server answered a request that was never sent"
    finally:
        for client in clients:
            client.close()

    assert get(f"{base}/healthz") == {"status": "ok"}
    log = monitor.log()
    assert "Traceback" not in log and "socket.accept() out of system resource" not in log
    said = log.count(f"HTTP: {MAX_CONNECTIONS} connections open, the cap")
    assert said == 1, log[-3000:]
    assert monitor.stop() == 0
