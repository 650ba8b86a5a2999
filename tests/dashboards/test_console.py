"""The Streamlit console, driven by Streamlit's AppTest against a fake HTTP API (every page, the filter, the
drill-down, the empty and unreachable states)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboards.launch import CONSOLE_SCRIPT
from mirrorwatch.processes import free_port
from mirrorwatch.wait import wait_until
from tests.dashboards.browser import headless_chromium
from tests.dashboards.fake_api import serving
from tests.processes import wait_for_http


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serving() as url:
        monkeypatch.setenv("MIRRORWATCH_API", url)
        yield url


def console() -> AppTest:
    app = AppTest.from_file(str(CONSOLE_SCRIPT), default_timeout=30)
    app.run()
    assert not app.exception, app.exception
    return app


def open_page(app: AppTest, page: str) -> AppTest:
    app.sidebar.radio[0].set_value(page).run()
    assert not app.exception, app.exception
    return app


def texts(app: AppTest) -> str:
    parts = [e.value for e in (*app.markdown, *app.caption, *app.subheader, *app.title, *app.info, *app.error)]
    parts += [e.value for e in app.warning]
    return "\n".join(str(p) for p in parts)


def test_overview_shows_each_links_health_lag_and_canary(api: str) -> None:
    app = console()
    assert "dc1-to-dc2: dc1 → dc2" in texts(app)
    assert "healthy" in texts(app) and "workers 2" in texts(app)
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Replication lag (records)"] == "42"
    assert metrics["Replication lag (seconds)"] == "1.5 s"
    assert metrics["In flight"] == "42"
    assert metrics["Throughput"] == "n/a"  # a rate needs two refreshes
    assert metrics["Canary p99 / last probe"] == "40 ms"  # the probes' own p99 (their 50 ms bucket's bound was shown)


def test_consumer_groups_table_filter_and_drill_down(api: str) -> None:
    app = open_page(console(), "Consumer groups")
    table = app.dataframe[0].value
    assert list(table["group"]) == ["billing", "fraud-detector"]
    assert [s.split()[-1] for s in table["status"]] == ["OK", "ERR"]
    app.text_input[0].set_value("fraud").run()
    assert list(app.dataframe[0].value["group"]) == ["fraud-detector"]
    partitions = app.dataframe[1].value
    assert list(partitions["status"]) == ["STALL"] and list(partitions["current lag"]) == [420]
    assert "Offset window" in texts(app)
    chart = app.get("vega_lite_chart")
    assert chart, "the offset window is drawn"


def test_canary_page_counts_and_latency(api: str) -> None:
    app = open_page(console(), "Canary")
    metrics = {m.label: m.value for m in app.metric}
    assert (metrics["Received"], metrics["Lost"], metrics["Duplicated"]) == ("9", "1", "0")
    table = app.dataframe[0].value
    assert list(table["lost"]) == [0, 1] and list(table["received"]) == [5, 4]


def test_topics_page_compares_partition_counts_and_shows_drift(api: str) -> None:
    app = open_page(console(), "Topics")
    row = app.dataframe[0].value.iloc[0]
    assert (row["source topic"], row["target topic"], row["source partitions"], row["target partitions"]) == (
        "orders",
        "dc1.orders",
        2,
        2,
    )
    assert "1 config difference(s)" in texts(app)
    assert list(app.dataframe[1].value["config"]) == ["retention.ms"]


def test_an_unreachable_monitor_is_said_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("MIRRORWATCH_API", url)
    for page in ("Overview", "Consumer groups", "Canary", "Topics"):
        app = open_page(console(), page)
        errors = [str(e.value) for e in app.error]
        assert len(errors) == 1 and errors[0].startswith(f"monitor unreachable at {url} ("), (page, errors)


@pytest.mark.integration
def test_the_served_console_renders_the_overview_in_headless_chromium(tmp_path: Path) -> None:
    """`mirrorwatch console` served by Streamlit, loaded in Debian's Chromium: the overview renders with data."""
    with serving() as url:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "mirrorwatch.cli", "console", "--api", url, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_for_http(f"http://127.0.0.1:{port}/_stcore/health", description="the console to serve")
            with headless_chromium(tmp_path / "profile") as browser:
                tab = browser.open(f"http://127.0.0.1:{port}/")
                wanted = ("mirrorwatch · Overview", "dc1-to-dc2: dc1 → dc2", "Replication lag (records)", "1.5 s")

                def rendered() -> str | None:
                    text = browser.text(tab)
                    return text if all(w in text for w in wanted) else None

                text = wait_until(
                    rendered,
                    timeout_s=60,
                    interval_s=0.5,
                    description="the overview to render with the link's data",
                )
                assert "monitor unreachable" not in text
        finally:
            process.terminate()
            process.wait(timeout=30)


def test_failover_page_shows_each_standby_group_ready_or_why_not(api: str) -> None:
    app = open_page(console(), "Failover")
    assert "dc1-to-dc2: 1 of 2 standby group(s) ready" in texts(app)
    assert "target groups kept at the translation" in texts(app)
    table = app.dataframe[0].value
    rows = {r["group"]: r for r in table.to_dict("records")}
    assert rows["billing"]["ready"] == "✅" and rows["billing"]["why not"] == ""
    assert rows["fraud-detector"]["ready"] == "❌" and "in use on the target" in rows["fraud-detector"]["why not"]
    assert rows["billing"]["offsets"] == "dc1.orders[0]@977 exact"
