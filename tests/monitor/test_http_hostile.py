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

from mirrorwatch.config import MirrorwatchConfig
from mirrorwatch.wait import wait_until
from monitor.http import FIRST_REQUEST_TIMEOUT_S, MAX_CONNECTIONS
from tests.kafka_helpers import Record, produce
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

IDLE = 3_000  # connections that never send a byte: far more than the cap
SLOW = 50  # connections that send half a request head and stop


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


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
    wait_until(
        lambda: get(f"{base}/healthz") == {"status": "ok"}, timeout_s=30, ignore=(OSError,), description="healthz"
    )

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
