"""Helpers for the processes mirrorwatch starts (brokers, link workers, the console, test tools): a free port, a
clean stop, and a child that dies with its parent."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
from typing import Any

__all__ = ["die_with_parent", "free_port", "limit_malloc_arenas", "stop_process"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`; returns once it is gone."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


def die_with_parent() -> None:
    """Runs in the child between fork and exec: ask the kernel for SIGTERM when the parent dies (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)


M_ARENA_MAX = -8  # glibc's mallopt parameter


def limit_malloc_arenas(count: int = 2) -> None:
    """Call before any thread starts. glibc gives a thread that meets contention an arena of its own (up to eight per
    core) and keeps what each freed: a monitor that renders and serves hundreds of MB of /metrics from several threads
    holds more memory for it (B8: ~1,020 MB at 10,000 groups, ~945 MB with two arenas). MALLOC_ARENA_MAX in the
    environment wins; without glibc nothing happens."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    libc.mallopt(M_ARENA_MAX, count)
