"""Headless Chromium (Debian's package) driven over the DevTools protocol: load a page, read its rendered text."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from mirrorwatch.processes import die_with_parent, free_port, stop_process
from tests.processes import wait_for_http

__all__ = ["Browser", "headless_chromium"]


class Browser:
    def __init__(self, devtools: str) -> None:
        self.devtools = devtools

    def open(self, url: str) -> str:
        """Open `url` in a new tab; returns the tab's DevTools websocket URL."""
        request = urllib.request.Request(f"{self.devtools}/json/new?{url}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.load(response)["webSocketDebuggerUrl"])

    def text(self, tab: str) -> str:
        """The tab's rendered text (document.body.innerText)."""
        request = {
            "id": 1,
            "method": "Runtime.evaluate",
            "params": {"expression": "document.body ? document.body.innerText : ''"},
        }
        with connect(tab, open_timeout=10, max_size=None) as connection:
            connection.send(json.dumps(request))
            while True:
                reply: dict[str, Any] = json.loads(connection.recv(timeout=10))
                if reply.get("id") == 1:
                    return str(reply["result"]["result"].get("value", ""))


@contextlib.contextmanager
def headless_chromium(profile: Path) -> Iterator[Browser]:
    binary = shutil.which("chromium")
    assert binary, "chromium is missing: scripts/setup.sh installs Debian's chromium package"
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--headless",
            "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces we do not have
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--remote-debugging-port={port}",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,  # noqa: PLW1509 -- only prctl: dies with pytest, never orphaned
    )
    devtools = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{devtools}/json/version", description="Chromium's DevTools endpoint")
        yield Browser(devtools)
    finally:
        stop_process(process)
