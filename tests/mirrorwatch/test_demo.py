"""`mirrorwatch demo` is the first quick-start command: it must run from nothing and stop cleanly on Ctrl-C."""

from __future__ import annotations

import functools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from kernel.wait import WaitTimeout, wait_until
from localkafka.oidc import provider_running
from tests.dashboards.browser import Browser, headless_chromium
from tests.localkafka.test_local import _kafka_pids
from tests.processes import get_json, wait_for_http

pytestmark = pytest.mark.integration


@pytest.mark.secured("oidc")  # on the oidc phase the demo makes its own clusters with tokens from a provider of theirs
def test_demo_mirrors_sample_traffic_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    state_dir = tmp_path / "demo"
    secured = request.config.getoption("--security") == "oidc"
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mirrorwatch.cli",
            "demo",
            "--state-dir",
            str(state_dir),
            "--rate",
            "50",
            f"--security={request.config.getoption('--security')}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert demo.stdout is not None and demo.stderr is not None
    lines: queue.Queue[str] = queue.Queue()

    def read_stdout() -> None:
        for line in demo.stdout or []:
            lines.put(line.rstrip())

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    seen: list[str] = []

    def progress_shows_mirrored_records() -> bool:
        while not lines.empty():
            seen.append(lines.get())
        if demo.poll() is not None:
            raise AssertionError(f"the demo exited early ({demo.returncode}):\n" + "\n".join(seen))
        return any(line.startswith("[") and " mirrored, " in line and "target: read 0" not in line for line in seen)

    try:
        wait_until(progress_shows_mirrored_records, timeout_s=120, description="a progress line with mirrored records")
        api = next(line for line in seen if line.startswith("HTTP API: ")).split()[2]  # .../mirror/links/demo

        def served() -> bool:
            with urllib.request.urlopen(api, timeout=5) as response:
                link = json.load(response)
            return bool(link["engine_running"]) and link["stats"].get("records_out_total", 0) > 0

        wait_until(
            served,
            timeout_s=60,
            interval_s=0.5,
            ignore=(urllib.error.URLError,),
            description="the demo's HTTP API to show the link",
        )

        def canary_came_back() -> bool:
            progress_shows_mirrored_records()
            return any(
                line.startswith("[") and "| canary: " in line and "canary: 0 probes" not in line for line in seen
            )

        wait_until(canary_came_back, timeout_s=90, description="a progress line with canary probes read back")
        _check_canary_and_drift(api)
        _check_pause_and_resume(api, seen)
        _check_standby(api, seen, progress_shows_mirrored_records)
        _check_memory(api.replace("/mirror/links/demo", ""), config_group="mirrorwatch-demo")
        console = next(line for line in seen if line.startswith("console: ")).split()[1]
        wait_for_http(f"{console}/_stcore/health", description="the demo's console to serve")
        _check_console_pages(console, tmp_path)
        demo.send_signal(signal.SIGINT)
        returncode = demo.wait(timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()
    stderr = demo.stderr.read()
    reader.join(timeout=10)  # stdout is closed once the demo exited
    while not lines.empty():
        seen.append(lines.get())
    output = "\n".join(seen)
    assert returncode == 0, output + stderr
    assert "SIGINT received, stopping cleanly" in stderr
    assert_logged_apart(seen, stderr, state_dir)
    assert "mirroring 'demo.orders' from source" in output
    assert any(" records, " in line and "replication lag" in line for line in seen if line.startswith("["))
    _ended_with_its_verdict_then_stopped_everything(seen, state_dir, secured)


def assert_logged_apart(seen: list[str], stderr: str, state_dir: Path) -> None:
    """The components' lines go to the log whose path the demo printed first, not between the progress lines; the
    gapless CONFWARN not even there (DEBUG)."""
    assert (
        seen[0]
        == f"logs: {state_dir / 'demo.log'} (every component's lines; errors show here too); Ctrl-C stops everything"
    )
    assert not [line for line in stderr.splitlines() if " INFO " in line or " WARNING " in line], stderr
    logged = (state_dir / "demo.log").read_text()
    assert " INFO mirrorwatch." in logged and "enable.gapless.guarantee" not in logged, logged[-3000:]


# What each page shows once it has the demo's data (its own text, outside the tables Streamlit draws on a canvas).
PAGE_TEXTS = {
    "Overview": ("demo: source → target", "healthy", "Replication lag (records)", "Canary p99 / last probe"),
    "Consumer groups": (
        "lag change: records per minute",
        "Partitions of",
        "Offset window: lag at each observed commit",
        "Total lag over the monitor's history",
    ),
    "Events": ("Link", "Group", "Cluster"),
    "Alerts": ("No alert is firing.",),
    "Canary": ("demo",),
    "Topics": ("demo: source → target", "In step at the last topic refresh"),
    "Failover": ("demo: 1 of 1 standby group(s) ready",),
}


def _check_console_pages(console: str, tmp_path: Path) -> None:
    """The demo's console in headless Chromium: every page, reached by a click in the sidebar, renders with the
    demo's data; with MIRRORWATCH_SCREENSHOTS=DIR, each page's screenshot is saved there (the README's)."""
    shots = os.environ.get("MIRRORWATCH_SCREENSHOTS")
    with headless_chromium(tmp_path / "profile") as browser:
        tab = browser.open(console)
        if shots:
            time.sleep(60)  # a minute of history in the charts
        for page, wanted in PAGE_TEXTS.items():
            wait_until(
                functools.partial(browser.click_label, tab, page),
                timeout_s=60,
                interval_s=0.5,
                description=f"the sidebar's {page!r}",
            )
            try:
                text = wait_until(
                    functools.partial(_text_with, browser, tab, wanted),
                    timeout_s=60,
                    interval_s=0.5,
                    description=f"the {page} page with the demo's data ({wanted})",
                )
            except WaitTimeout as exc:
                raise AssertionError(f"{exc}; the page reads:\n{browser.text(tab)}") from exc
            assert "monitor unreachable" not in text and "Traceback" not in text, (page, text)
            if shots:
                time.sleep(3)  # charts drawn
                browser.screenshot(tab, Path(shots) / f"console-{page.lower().replace(' ', '-')}.png")


def _text_with(browser: Browser, tab: str, wanted: tuple[str, ...]) -> str | None:
    text = browser.text(tab)
    return text if all(w in text for w in wanted) else None


def _ended_with_its_verdict_then_stopped_everything(seen: list[str], state_dir: Path, secured: bool) -> None:
    """The verdict, then what it stopped: the brokers and, on the oidc mode, their identity provider; nothing left."""
    verdict = max(i for i, line in enumerate(seen) if line.endswith("every order arrived on the target"))
    assert seen[verdict].endswith("read from the target through the mirror: every order arrived on the target")
    assert [line.split(":")[0] for line in seen[verdict + 1 :]] == ["source", "target", *(["oidc"] * secured)], seen
    assert all(": stopped (pid " in line for line in seen[verdict + 1 :]), seen
    assert _kafka_pids(state_dir) == [] and provider_running(state_dir) is None


def _as_printed_environment(seen: list[str]) -> dict[str, str]:
    """The environment an operator's commands get by doing what the demo printed for secured clusters
    (`set -a; . DIR/client.env; set +a`: the secrets its demo.yaml names as `${VAR}`); this process's otherwise."""
    said = next((line for line in seen if " takes its secrets from the environment: set -a; . " in line), None)
    if said is None:
        return dict(os.environ)
    env_file = Path(said.split("set -a; . ", 1)[1].split(";", 1)[0])
    pairs = [line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line]
    return {**os.environ, **dict(pairs)}


def _check_pause_and_resume(api: str, seen: list[str]) -> None:
    """The command the demo prints pauses its running link (the monitor says so) and resumes it; the demo's verdict
    (every order produced arrived on the target) then covers the pause. Its cutover check refuses: producers write."""
    printed = next(line for line in seen if line.startswith("pause, resume, budget, read the link: "))
    config = printed.split("--config ")[1].split()[0]
    env = _as_printed_environment(seen)

    def link(command: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "mirrorwatch.cli", "link", command, "--config", config, "--link", "demo"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    # the cutover check it prints: not safe while the demo's producer writes, and it says so at the first step
    cutover = next(line for line in seen if line.startswith("is a cutover safe now: ")).split(": ", 1)[1].split()
    assert cutover[:4] == ["mirrorwatch", "failover", "promote", "--config"] and cutover[-1] == "--dry-run"
    refused = subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", *cutover[1:], "--settle-seconds", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert refused.returncode == 1 and "step 1/5 quiet: REFUSED: producers still write" in refused.stdout, (
        refused.stdout + refused.stderr
    )
    assert "obeyed by 1 running worker(s) of link demo" in link("pause")
    wait_until(lambda: get_json(api)["state"] == "paused", timeout_s=30, description="the monitor to say paused")
    assert "obeyed by 1 running worker(s) of link demo" in link("resume")
    wait_until(lambda: get_json(api)["state"] == "running", timeout_s=30, description="the monitor to say running")


def _check_canary_and_drift(api: str) -> None:
    """The canary serves its probes, and the demo link's topic refreshes report its drift: its copies are made from
    the source and kept in step."""
    with urllib.request.urlopen(api.replace("/mirror/links/demo", "/canary"), timeout=5) as response:
        (probed,) = json.load(response)["links"]
    assert probed["link"] == "demo" and probed["received_total"] > 0
    wait_until(
        lambda: get_json(api + "/drift")["count"] == 0,
        timeout_s=90,
        description="the demo link's drift report to say in step",
        ignore=(OSError, KeyError),
    )


def _check_memory(base: str, config_group: str) -> None:
    """The monitor remembers: the link's lag, throughput and canary latency over its rounds, every group in one
    answer."""

    def link_series() -> dict[str, list[list[float]]] | None:
        """The link's history once it holds two rounds with the lag known: the first round may come before any worker
        reported, and then the link's lag is not known (it used to be remembered as 0)."""
        with urllib.request.urlopen(base + "/mirror/history/links/demo", timeout=5) as response:
            series: dict[str, list[list[float]]] = json.load(response)["series"]
        return series if len(series.get("replication_lag_records", [])) >= 2 else None

    series = wait_until(
        link_series,
        timeout_s=60,
        interval_s=1,
        description="two rounds of the link's lag in the history",
    )
    assert any(v > 0 for _, v in series["records_out_per_second"])
    with urllib.request.urlopen(base + "/mirror/groups", timeout=5) as response:
        groups = {(g["cluster"], g["group"]) for g in json.load(response)["groups"]}
    assert ("source", config_group) in groups and ("source", "demo-billing") in groups, groups

    def canary_points() -> list[list[float]]:
        with urllib.request.urlopen(base + "/mirror/history/links/demo", timeout=5) as response:
            return list(json.load(response)["series"].get("canary_e2e_latency_p99_seconds", []))

    # the canary's latency joins the link's history once its first probe is back through the mirror
    points = wait_until(canary_points, timeout_s=120, interval_s=1, description="the canary's p99 in the history")
    assert all(0 < v < 60 for _, v in points), points


def _check_standby(api: str, seen: list[str], more_lines: Callable[[], bool]) -> None:
    """The demo's application group is kept ready on the target: said on a progress line and by the API."""

    def standby_ready() -> bool:
        more_lines()
        return any(line.startswith("[") and "standby demo-billing: ready on the target" in line for line in seen)

    wait_until(standby_ready, timeout_s=90, description="a progress line with the standby group ready")
    with urllib.request.urlopen(api + "/checkpoints", timeout=5) as response:
        (kept,) = json.load(response)["groups"]
    assert kept["group"] == "demo-billing" and kept["ready"] and kept["synced"]
