"""bench.relay, the delaying TCP relay that gives bench.netns a WAN's latency (the kernel has no netem): a real
process between two sockets of this host. Facts: every byte arrives, in order, both ways; the end of a stream is
passed on; a client of a relay whose upstream is down sees its connection closed. The delay itself is a lower bound
(a busy machine can only lengthen a round trip, never shorten it); how long the bench's links take is measured by
`bench.throughput --delay-ms`, not judged here."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.processes import free_port

DELAY_MS = 40


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        with server:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    while data := conn.recv(65536):
                        conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server, port


def _relay(listen: int, to: int) -> subprocess.Popen[bytes]:
    command = ["-m", "bench.relay", "--listen", f"127.0.0.1:{listen}", "--to", f"127.0.0.1:{to}"]
    process = subprocess.Popen(
        [sys.executable, *command, "--delay-ms", str(DELAY_MS)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stdout.readline().startswith(b"relay:")
    return process


@pytest.fixture
def relayed_echo() -> Iterator[int]:
    server, port = _echo_server()
    listen = free_port()
    relay = _relay(listen, port)
    try:
        yield listen
    finally:
        relay.terminate()
        assert relay.wait(timeout=10) == 0
        server.close()


def test_every_byte_goes_both_ways_in_order_and_each_way_takes_at_least_the_delay(relayed_echo: int) -> None:
    payload = os.urandom(3 * 1024 * 1024)
    with socket.create_connection(("127.0.0.1", relayed_echo), timeout=30) as conn:
        started = time.monotonic()
        conn.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        round_trip = time.monotonic() - started
        sender = threading.Thread(target=conn.sendall, args=(payload,))
        sender.start()
        received = bytearray()
        while len(received) < len(payload):
            received += conn.recv(1 << 20)
        sender.join()
        conn.shutdown(socket.SHUT_WR)
        assert conn.recv(1) == b""  # the end passed on: the echo server closed, and so did the relay
    assert bytes(received) == payload
    assert round_trip >= 2 * DELAY_MS / 1000  # there and back: the delay each way


def test_a_client_of_a_relay_whose_broker_is_down_sees_its_connection_closed() -> None:
    listen = free_port()
    relay = _relay(listen, free_port())  # nothing listens there
    try:
        with socket.create_connection(("127.0.0.1", listen), timeout=10) as conn:
            assert conn.recv(1) == b""
    finally:
        relay.terminate()
        relay.wait(timeout=10)
