"""Headless Chromium (Debian's package) driven over the DevTools protocol: load a page, read its rendered text."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from kernel.processes import die_with_parent, free_port, stop_process
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

    def evaluate(self, tab: str, expression: str) -> Any:
        """The value of a JavaScript expression in the tab (JSON-serialisable values only)."""
        request = {"id": 1, "method": "Runtime.evaluate", "params": {"expression": expression, "returnByValue": True}}
        with connect(tab, open_timeout=10, max_size=None) as connection:
            connection.send(json.dumps(request))
            while True:
                reply: dict[str, Any] = json.loads(connection.recv(timeout=10))
                if reply.get("id") == 1:
                    return reply["result"]["result"].get("value")

    def text(self, tab: str) -> str:
        """The tab's rendered text (document.body.innerText)."""
        return str(self.evaluate(tab, "document.body ? document.body.innerText : ''") or "")

    def screenshot(self, tab: str, path: Path) -> None:
        """What the tab shows (its viewport) as a PNG."""
        request = {
            "id": 1,
            "method": "Page.captureScreenshot",
            "params": {"format": "png"},
        }
        with connect(tab, open_timeout=10, max_size=None) as connection:
            connection.send(json.dumps(request))
            while True:
                reply: dict[str, Any] = json.loads(connection.recv(timeout=30))
                if reply.get("id") == 1:
                    path.write_bytes(base64.b64decode(reply["result"]["data"]))
                    return

    def click_label(self, tab: str, label: str) -> bool:
        """Click the label (a radio button's, say) whose text is `label`; False when there is none."""
        return bool(
            self.evaluate(
                tab,
                "(() => { const l = [...document.querySelectorAll('label')]"
                f".find(e => e.innerText.trim() === {json.dumps(label)}); if (l) l.click(); return !!l; }})()",
            )
        )


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
            "--window-size=1400,1000",  # the console's wide layout, and readable screenshots
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
