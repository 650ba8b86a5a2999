"""The console on a running monitor on the real clusters, in headless Chromium (the demo's walk through every page is
in tests/mirrorwatch/test_demo.py): the Overview's charts get their lines after a few collections, and a mirror
stopped turns its link red and adds an event, without reloading the page; with --prometheus, a real Prometheus's
ranges and firing alerts."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_admin, new_producer
from kernel.processes import free_port, stop_process
from kernel.wait import WaitTimeout, wait_until
from tests.dashboards.browser import Browser, headless_chromium
from tests.processes import MirrorProcess, wait_for_http
from tests.prometheus import firing

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


class _CountingProxy:
    """Between a console and the API: forwards every GET and counts the paths asked (without their queries)."""

    def __init__(self, api: str) -> None:
        self.asked: list[str] = []
        lock = threading.Lock()
        asked = self.asked

        class Forward(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    asked.append(self.path.split("?")[0])
                try:
                    with urllib.request.urlopen(api + self.path, timeout=10) as response:
                        status, body = response.status, response.read()
                except urllib.error.HTTPError as exc:
                    status, body = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class _Live:
    api: str
    api_port: int
    mirror: MirrorProcess
    console: Callable[..., str]  # console(*extra_args, api=None) -> its URL (reading `api`, by default the monitor's)


@contextlib.contextmanager
def _live_link(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    **monitor: object,
) -> Iterator[_Live]:
    """A link "live" mirrored by a real mirror process under 50 records/s, a monitor process with its HTTP API, and
    consoles started on demand; all stopped at the end."""
    topic = make_topic("source", 2)
    port = free_port()
    config = write_config(
        [{"name": "live", "source": "source", "target": "target", "topics": {"include": [re.escape(topic)]}}],
        monitor={"interval_seconds": 1, **monitor},
        canary={"enabled": False},
        http={"host": "127.0.0.1", "port": port},
    )
    api = f"http://127.0.0.1:{port}"
    stop_traffic = threading.Event()
    traffic = threading.Thread(target=_traffic, args=(clusters_config.clusters["source"], topic, stop_traffic))
    traffic.start()
    consoles: list[subprocess.Popen[bytes]] = []

    def console(*extra: str, api_url: str | None = None) -> str:
        console_port = free_port()
        reads = api_url or api
        consoles.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mirrorwatch.cli",
                    "console",
                    "--api",
                    reads,
                    "--port",
                    str(console_port),
                    *extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "MIRRORWATCH_CONSOLE_REFRESH": str(REFRESH_S)},
            )
        )
        url = f"http://127.0.0.1:{console_port}"
        wait_for_http(f"{url}/_stcore/health", description="the console to serve")
        return url

    try:
        start_mirror("--config", str(config), command="monitor")
        mirror = start_mirror("--config", str(config))
        wait_for_http(f"{api}/healthz", description="the monitor's HTTP API")
        yield _Live(api, port, mirror, console)
    finally:
        stop_traffic.set()
        traffic.join(timeout=30)
        for process in consoles:
            stop_process(process)


def _wait_healthy(browser: Browser, tab: str) -> None:
    wait_until(
        lambda: "live: source → target" in (text := browser.text(tab)) and "healthy" in text,
        timeout_s=90,
        interval_s=0.5,
        description="the Overview with the link healthy",
    )


def _long_lines(browser: Browser, tab: str, points: int) -> dict[str, Any] | None:
    """The charts' ink when at least three lines have `points` vertices."""
    ink: dict[str, Any] = browser.evaluate(tab, CHART_INK) or {}
    return ink if sum(n >= points for n in ink.get("paths", [])) >= 3 else None


def test_a_stopped_mirror_turns_red_with_its_event_without_a_reload(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    tmp_path: Path,
) -> None:
    with (
        _live_link(clusters_config, make_topic, write_config, start_mirror) as live,
        headless_chromium(tmp_path / "profile") as browser,
        contextlib.closing(_CountingProxy(live.api)) as proxy,
    ):
        api = live.api
        tab = browser.open(live.console(api_url=proxy.url))
        _wait_healthy(browser, tab)
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
        _groups_page_asks_once_per_refresh(browser, tab, proxy, api, clusters_config.clusters["source"])
        assert browser.click_label(tab, "Overview")
        _wait_healthy(browser, tab)
        live.mirror.process.send_signal(signal.SIGTERM)  # an operator stops the mirror
        assert live.mirror.process.wait(timeout=60) == 0
        stopped = time.monotonic()
        try:
            text = wait_until(
                lambda: (
                    t
                    if "not running: no worker mirrors it" in (t := browser.text(tab)) and "(was running)" in t
                    else None
                ),
                timeout_s=30,
                interval_s=0.25,
                description="the link red, since its event, on the open page",
            )
        except WaitTimeout:
            page = browser.text(tab)
            shown = page[page.find("live: source") :][:600]
            events = _get(f"{api}/mirror/events?link=live")["events"]
            raise AssertionError(f"the page says {shown!r}; the link's events: {events}") from None
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


def _commit_groups(cluster: ClusterConfig, groups: list[str], topic: str) -> None:
    admin = new_admin(cluster, "source")
    for group in groups:
        for future in admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])]
        ).values():
            future.result(timeout=30)


def _groups_page_asks_once_per_refresh(
    browser: Browser, tab: str, proxy: _CountingProxy, api: str, cluster: ClusterConfig
) -> None:
    """The Consumer groups page, open for a few refreshes: one request for the table per refresh, and requests for
    the one group picked, however many groups the clusters hold (twelve more committed here), until that group is
    gone."""
    topic = next(p["topic"] for p in _get(f"{api}/mirror/links/live")["partitions"])
    _commit_groups(cluster, [f"{topic}-reader-{i}" for i in range(12)], topic)
    wait_until(
        lambda: len(_get(f"{api}/mirror/groups")["groups"]) >= 13,
        timeout_s=60,
        interval_s=0.5,
        description="the twelve groups in the monitor",
    )
    assert browser.click_label(tab, "Consumer groups")
    wait_until(
        lambda: "Partitions of" in browser.text(tab), timeout_s=30, interval_s=0.5, description="the groups page"
    )
    groups = _get(f"{api}/mirror/groups")["groups"]
    proxy.asked.clear()
    time.sleep(3 * REFRESH_S + 0.5)
    asked = list(proxy.asked)
    # from the first table request on: a refresh under way when the count began has its group's requests in the
    # list without its table request (seen: 13 requests over 3 refreshes)
    asked = asked[asked.index("/mirror/groups") :] if "/mirror/groups" in asked else asked
    refreshes = asked.count("/mirror/groups")
    per_group = {p for p in asked if "/consumer/" in p or "/history/groups/" in p}
    print(f"groups page: {len(groups)} groups, {len(asked)} requests over {refreshes} refreshes: {sorted(set(asked))}")
    assert 2 <= refreshes <= 4, asked
    assert len(asked) <= 4 * refreshes, asked  # the table, and three for the group picked: never one per group
    # /v3/kafka/C/consumer/G, /mirror/history/groups/C/G: one group, the one picked; the page picks another only when
    # that one is gone (the shared clusters hold other tests' groups, which come and go while the page is open)
    in_order = list(dict.fromkeys(p.split("/")[5] for p in asked if p in per_group))
    present = {g["group"] for g in _get(f"{api}/mirror/groups")["groups"]}
    assert in_order and not present & set(in_order[:-1]), (in_order, sorted(present))


def test_with_prometheus_the_charts_are_its_ranges_and_the_alerts_its_firing_ones(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    prometheus: Callable[..., str],
    tmp_path: Path,
) -> None:
    """`console --prometheus URL`: a real Prometheus scrapes the monitor with the shipped rules. The monitor keeps 5 s
    of history; the console's charts over 15 min hold more points than that (they are Prometheus' range), and when
    the mirror stops, the Alerts page lists what Prometheus itself has firing."""
    with (
        _live_link(clusters_config, make_topic, write_config, start_mirror, history_seconds=5) as live,
        headless_chromium(tmp_path / "profile") as browser,
    ):
        url = prometheus(live.api_port, {"mirror_down_for": "1s"})
        tab = browser.open(live.console("--prometheus", url))
        _wait_healthy(browser, tab)
        assert len(_get(f"{live.api}/mirror/history/links/live")["series"]["replication_lag_records"]) <= 6
        ink = wait_until(
            functools.partial(_long_lines, browser, tab, 10),
            timeout_s=90,
            interval_s=1,
            description="three charts with at least 10 points each (more than the monitor's 5 s of history holds)",
        )
        assert "Prometheus, last 15 min" in browser.text(tab)
        print(f"charts from Prometheus: {ink}")
        live.mirror.process.send_signal(signal.SIGTERM)
        assert live.mirror.process.wait(timeout=60) == 0
        wait_until(
            lambda: ("MirrorwatchMirrorDown", "live") in firing(url),
            timeout_s=60,
            interval_s=0.5,
            description="Prometheus firing MirrorwatchMirrorDown for the link",
        )
        assert browser.click_label(tab, "Alerts")
        text = wait_until(
            lambda: t if f"Alerts of Prometheus at {url}" in (t := browser.text(tab)) else None,
            timeout_s=30,
            interval_s=0.5,
            description="the Alerts page reading Prometheus",
        )
        assert "No alert is firing" not in text
        assert wait_until(
            lambda: _grid_has(browser, tab, "MirrorwatchMirrorDown"),
            timeout_s=30,
            interval_s=0.5,
            description="MirrorwatchMirrorDown in the page's table",
        )


def _grid_has(browser: Browser, tab: str, wanted: str) -> bool:
    """Streamlit draws a dataframe on a canvas; its accessible table holds the visible cells' text."""
    cells = browser.evaluate(tab, "[...document.querySelectorAll('[role=gridcell]')].map(c => c.innerText)") or []
    return any(wanted in str(c) for c in cells)


def _events_grid_has(browser: Browser, tab: str) -> bool:
    return _grid_has(browser, tab, "running -> not running")
