"""The console on a running monitor on the real clusters, in headless Chromium (the demo's walk through every page is
in tests/mirrorwatch/test_demo.py): the Overview's charts get their lines after a few collections, and a mirror
stopped turns its link red and adds an event, without reloading the page."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mirrorwatch.config import ClusterConfig, MirrorwatchConfig
from mirrorwatch.kafka import new_producer
from mirrorwatch.processes import free_port, stop_process
from mirrorwatch.wait import wait_until
from tests.dashboards.browser import Browser, headless_chromium
from tests.processes import MirrorProcess, wait_for_http

pytestmark = pytest.mark.integration

REFRESH_S = 2.0  # the console's refresh (MIRRORWATCH_CONSOLE_REFRESH)
# The charts' lines: per canvas, its saturated pixels (axes, grid and labels are grey); per SVG line, its vertices.
CHART_INK = """(() => {
  const canvases = [...document.querySelectorAll('.vega-embed canvas')].map(c => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 0 && Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) n++;
    }
    return n;
  });
  const paths = [...document.querySelectorAll('.vega-embed .mark-line path')]
    .map(p => ((p.getAttribute('d') || '').match(/[ML]/g) || []).length);
  return {canvases, paths};
})()"""


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def _traffic(cluster: ClusterConfig, topic: str, stop: threading.Event) -> None:
    """50 records/s into the source until `stop`."""
    producer = new_producer(cluster, "source", {"linger.ms": 5})
    while not stop.wait(0.2):
        for i in range(10):
            producer.produce(topic, b"x", partition=i % 2)
        producer.poll(0)
    producer.flush(30)


def _lines_drawn(browser: Browser, tab: str) -> bool:
    ink = browser.evaluate(tab, CHART_INK) or {}
    drawn = [n for n in ink.get("canvases", []) if n > 50] + [n for n in ink.get("paths", []) if n >= 3]
    return len(drawn) >= 3  # lag in records, in seconds, throughput


def test_a_stopped_mirror_turns_red_with_its_event_without_a_reload(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    tmp_path: Path,
) -> None:
    topic = make_topic("source", 2)
    port = free_port()
    config = write_config(
        [{"name": "live", "source": "source", "target": "target", "topics": {"include": [re.escape(topic)]}}],
        monitor={"interval_seconds": 1},
        canary={"enabled": False},
        http={"host": "127.0.0.1", "port": port},
    )
    api = f"http://127.0.0.1:{port}"
    stop_traffic = threading.Event()
    traffic = threading.Thread(target=_traffic, args=(clusters_config.clusters["source"], topic, stop_traffic))
    traffic.start()
    console_port = free_port()
    console: subprocess.Popen[bytes] | None = None
    try:
        start_mirror("--config", str(config), command="monitor")
        mirror = start_mirror("--config", str(config))
        wait_for_http(f"{api}/healthz", description="the monitor's HTTP API")
        console = subprocess.Popen(
            [sys.executable, "-m", "mirrorwatch.cli", "console", "--api", api, "--port", str(console_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "MIRRORWATCH_CONSOLE_REFRESH": str(REFRESH_S)},
        )
        wait_for_http(f"http://127.0.0.1:{console_port}/_stcore/health", description="the console to serve")
        with headless_chromium(tmp_path / "profile") as browser:
            tab = browser.open(f"http://127.0.0.1:{console_port}/")
            wait_until(
                lambda: "live: source → target" in (text := browser.text(tab)) and "🟢 healthy" in text,
                timeout_s=90,
                interval_s=0.5,
                description="the Overview with the link healthy",
            )
            # the charts: the API's history has points, and the page draws them (coloured lines, not just axes)
            wait_until(
                lambda: len(_get(f"{api}/mirror/history/links/live")["series"]["replication_lag_records"]) >= 3,
                timeout_s=60,
                interval_s=0.5,
                description="three collections in the link's history",
            )
            wait_until(
                lambda: _lines_drawn(browser, tab),
                timeout_s=30,
                interval_s=0.5,
                description=f"the three charts drawn with lines ({browser.evaluate(tab, CHART_INK)})",
            )
            print(f"charts: {browser.evaluate(tab, CHART_INK)}")
            mirror.process.send_signal(signal.SIGTERM)  # an operator stops the mirror
            assert mirror.process.wait(timeout=60) == 0
            stopped = time.monotonic()
            text = wait_until(
                lambda: t if "🔴 not running" in (t := browser.text(tab)) and "(was running)" in t else None,
                timeout_s=30,
                interval_s=0.25,
                description="the link red, since its event, on the open page",
            )
            seen_after_s = time.monotonic() - stopped
            events = _get(f"{api}/mirror/events?link=live")["events"]
            assert any(e["kind"] == "link" and e["before"] == "running" for e in events), events
            assert "monitor unreachable" not in text
            print(f"red on the open page {seen_after_s:.1f} s after the mirror stopped (refresh {REFRESH_S:g} s)")
            # the Events page: reached by a click, it lists the change
            assert browser.click_label(tab, "Events")
            wait_until(
                lambda: "running -> not running" in browser.text(tab) or _events_grid_has(browser, tab),
                timeout_s=30,
                interval_s=0.5,
                description="the Events page with the link's change",
            )
    finally:
        stop_traffic.set()
        traffic.join(timeout=30)
        if console is not None:
            stop_process(console)


def _events_grid_has(browser: Browser, tab: str) -> bool:
    """Streamlit draws a dataframe on a canvas; its accessible table holds the visible cells' text."""
    cells = browser.evaluate(tab, "[...document.querySelectorAll('[role=gridcell]')].map(c => c.innerText)") or []
    return any("running -> not running" in str(c) for c in cells)
