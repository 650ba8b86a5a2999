"""The Streamlit console, driven by Streamlit's AppTest against a fake HTTP API (every page, the filter, the
drill-down, the empty and unreachable states)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import bcrypt
import pytest
from streamlit.testing.v1 import AppTest

from dashboards.launch import CONSOLE_SCRIPT
from kernel.processes import free_port
from kernel.wait import wait_until
from kernel.web_config import WebConfig
from kernel.worker_status import Gap
from tests.dashboards import fake_api
from tests.dashboards.browser import headless_chromium
from tests.dashboards.fake_api import ASKED, serving
from tests.processes import wait_for_http
from tests.tls import make_certificates


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
    assert metrics["Throughput"] == "100 rec/s"  # the monitor's history: 6,000 records more every minute
    assert metrics["Canary p99 / last probe"] == "40 ms"  # the probes' own p99 (their 50 ms bucket's bound was shown)
    # its newest change of state among the monitor's events: from "not running"
    assert ":green[**healthy**] for " in texts(app) and "(was not running)" in texts(app)
    assert len(app.get("vega_lite_chart")) == 3  # lag in records, in seconds, throughput: over the history


def test_consumer_groups_table_filter_and_drill_down(api: str) -> None:
    app = open_page(console(), "Consumer groups")
    table = app.dataframe[0].value  # one request for every group, the worst first
    assert list(table["group"]) == ["fraud-detector", "billing"]
    assert [s.split()[-1] for s in table["status"]] == ["ERR", "OK"]
    assert list(table["lag change / min"]) == [60.0, 0.0]  # 60 records more every minute
    app.selectbox[0].set_value("total lag").run()
    assert list(app.dataframe[0].value["total lag"]) == [420, 0]
    app.text_input[0].set_value("fraud").run()
    assert list(app.dataframe[0].value["group"]) == ["fraud-detector"]
    partitions = app.dataframe[1].value
    assert list(partitions["status"]) == ["STALL"] and list(partitions["current lag"]) == [420]
    assert "Offset window" in texts(app) and "Total lag over the monitor's history" in texts(app)
    assert len(app.get("vega_lite_chart")) == 2, "the offset window and the group's lag over time are drawn"


def test_the_group_picked_stays_picked_when_the_table_changes_under_it(api: str) -> None:
    """The drill-down keeps the group the operator picked when the table's rows change (a filter here; a refresh
    with a new group or a status change in the field): the selectbox used to start over at the table's first row."""
    app = open_page(console(), "Consumer groups")
    [picker] = [s for s in app.selectbox if s.label == "Partitions of"]
    picker.set_value("dc1 / billing").run()
    assert list(app.dataframe[1].value["current lag"]) == [0]  # billing's partitions
    app.text_input[0].set_value("bill").run()
    app.text_input[0].set_value("").run()
    assert list(app.dataframe[0].value["group"]) == ["fraud-detector", "billing"]
    [picker] = [s for s in app.selectbox if s.label == "Partitions of"]
    assert picker.value == "dc1 / billing"
    assert list(app.dataframe[1].value["current lag"]) == [0], "the drill-down jumped to the table's first group"


def test_the_groups_page_asks_for_every_group_at_once(api: str) -> None:
    """One request for the table whatever the number of groups (it once asked twice per group), and three for the
    group picked for the drill-down."""
    app = console()
    ASKED.clear()
    open_page(app, "Consumer groups")
    assert ASKED.count("/mirror/groups") == 1
    per_group = [path for path in ASKED if "/consumer/" in path or "/history/groups/" in path]
    assert sorted(per_group) == [
        "/mirror/history/groups/dc1/fraud-detector",
        "/v3/kafka/dc1/consumer/fraud-detector",
        "/v3/kafka/dc1/consumer/fraud-detector/lag",
    ]


def test_events_newest_first_and_filtered(api: str) -> None:
    app = open_page(console(), "Events")
    assert list(app.dataframe[0].value["event"]) == [
        "group fraud-detector on dc1: WARN -> ERR",
        "link dc1-to-dc2: a worker joined (0 -> 2 live)",
        "link dc1-to-dc2: not running -> running",
        "group fraud-detector on dc1: OK -> WARN",
        "link dc1-to-dc2: a worker left (2 -> 0 live)",
        "link dc1-to-dc2: running -> not running",
    ]
    app.text_input[1].set_value("fraud-detector").run()
    assert list(app.dataframe[0].value["what"]) == ["group", "group"]
    app.text_input[1].set_value("nobody").run()
    assert "No events" in texts(app)


def test_canary_page_counts_and_latency(api: str) -> None:
    app = open_page(console(), "Canary")
    metrics = {m.label: m.value for m in app.metric}
    assert (metrics["Received"], metrics["Lost"], metrics["Duplicated"]) == ("9", "1", "0")
    table = app.dataframe[0].value
    assert list(table["lost"]) == [0, 1] and list(table["received"]) == [5, 4]


def test_topics_page_compares_partition_counts_and_shows_the_drift_report(api: str) -> None:
    app = open_page(console(), "Topics")
    row = app.dataframe[0].value.iloc[0]
    assert (row["source topic"], row["target topic"], row["source partitions"], row["target partitions"]) == (
        "orders",
        "dc1.orders",
        2,
        2,
    )
    [said] = [t for t in texts(app).splitlines() if "difference(s)" in t]
    assert re.fullmatch(r"3 difference\(s\) at the last topic refresh, 5\.\d s ago \(ACLs compared\)", said), said
    drift = app.dataframe[1].value
    assert list(drift["what"]) == ["config retention.ms", "config segment.ms", "extra"]
    assert list(drift["synced"]) == ["✅ by that round", "left", "left"]


def test_records_a_link_lost_are_said_on_the_overview(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    gap = Gap("orders", 1, 1000, 1500, "retention", "stopped", 1_800_000_000_000)
    view = replace(fake_api.link_view(), gaps=(gap,))
    monkeypatch.setattr(fake_api, "link_view", lambda *_args: view)
    errors = [str(e.value) for e in console().error]
    assert errors == [
        "link dc1-to-dc2: 500 records of orders[1] lost, offsets 1000 to 1499: the source's log start had passed "
        "them (retention or delete-records) before the link copied them; the partition is stopped (on_gap: stop)"
    ]


def test_the_links_bandwidth_budget_and_how_long_it_held_the_link_back_are_said_on_the_overview(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "bandwidth budget" not in texts(console())  # none: not said
    stats = {"budget_bytes_per_second": 1_000_000, "budget_throttled_seconds_total": 12.5}
    view = replace(fake_api.link_view(), stats={**fake_api.link_view().stats, **stats})
    monkeypatch.setattr(fake_api, "link_view", lambda *_args: view)
    assert "workers 2 · bandwidth budget 1.0 MB/s (held the workers back 12.5 s in all)" in texts(console())


def test_paused_partitions_are_said_on_the_overview_and_a_link_all_paused_reads_paused(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = "paused by ops@h (mirrorwatch link pause): reindex"
    view = fake_api.link_view()
    view = replace(view, partitions=tuple(replace(p, position_from="worker") for p in view.partitions))  # live
    one = replace(view, partitions=(replace(view.partitions[0], paused=why), view.partitions[1]))
    monkeypatch.setattr(fake_api, "link_view", lambda *_args: one)
    app = console()
    assert [str(w.value) for w in app.warning] == [
        "paused by an operator: orders[0]: they copy nothing, their lag grows"
    ]
    assert "healthy" in texts(app)  # the link's other partition is judged as ever
    both = replace(view, partitions=tuple(replace(p, paused=why) for p in view.partitions))
    monkeypatch.setattr(fake_api, "link_view", lambda *_args: both)
    app = console()
    assert ":blue[**paused**] by an operator: copies nothing, its lag grows" in texts(app) and not app.warning


def test_an_unreachable_monitor_is_said_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("MIRRORWATCH_API", url)
    for page in ("Overview", "Consumer groups", "Events", "Alerts", "Canary", "Topics"):
        app = open_page(console(), page)
        errors = [str(e.value) for e in app.error]
        assert len(errors) == 1 and errors[0].startswith(f"monitor unreachable at {url} ("), (page, errors)


def test_an_api_behind_tls_and_basic_auth_is_read_with_the_user_and_ca_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    certs = make_certificates(tmp_path)
    users = {"console": bcrypt.hashpw(b"right-pw", bcrypt.gensalt(rounds=4))}
    web = WebConfig(source="web.yml", cert_file=certs.cert, key_file=certs.key, users=users)
    with serving(web) as url:
        assert url.startswith("https://")
        monkeypatch.setenv("MIRRORWATCH_API", url)
        monkeypatch.setenv("MIRRORWATCH_API_USER", "console")
        monkeypatch.setenv("MIRRORWATCH_API_CA_FILE", str(certs.ca))
        monkeypatch.setenv("MIRRORWATCH_API_PASSWORD", "right-pw")
        app = console()
        assert not app.error and "dc1-to-dc2: dc1 → dc2" in texts(app)
        monkeypatch.setenv("MIRRORWATCH_API_PASSWORD", "wrong-pw")
        errors = [str(e.value) for e in console().error]
        assert errors == [f"the monitor at {url} wants other credentials (--api-user, MIRRORWATCH_API_PASSWORD)"], (
            errors
        )
        monkeypatch.delenv("MIRRORWATCH_API_CA_FILE")  # a private CA not trusted: said, not a traceback
        errors = [str(e.value) for e in console().error]
        assert (
            len(errors) == 1 and errors[0].startswith(f"monitor unreachable at {url} (") and "CERTIFICATE" in errors[0]
        )


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


def test_alerts_judged_by_the_monitor_are_labelled_as_such(api: str) -> None:
    app = open_page(console(), "Alerts")
    assert "Evaluated by the monitor on its own history (not Prometheus)" in texts(app)
    rows = app.dataframe[0].value.to_dict("records")
    assert [(r["alert"], r["on"]) for r in rows] == [("MirrorwatchClusterDown", "cluster=dc2")]
    assert "not judged here" in texts(app) and "MirrorwatchCanaryAbsent" in texts(app)
