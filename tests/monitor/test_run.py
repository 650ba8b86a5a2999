"""`mirrorwatch run`: the engine, the monitor and the HTTP API in one real process."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from streamlit.testing.v1 import AppTest

from dashboards.launch import CONSOLE_SCRIPT
from kernel.config import MirrorwatchConfig
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from tests.kafka_helpers import Record, produce
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
        return json.loads(body) if response.headers.get_content_type() == "application/json" else body


def test_run_mirrors_monitors_and_serves_the_link(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    topic = make_topic("source", 2)
    produce(
        clusters_config.clusters["source"], "source", topic, [Record(value=b"x", partition=i % 2) for i in range(200)]
    )
    config = write_config(
        [
            {
                "name": "served",
                "source": "source",
                "target": "target",
                "topics": {"include": [topic]},
                "group_id": unique("g"),
                "offset_commit_interval_ms": 200,
            }
        ],
        monitor={"interval_seconds": 1},
        canary={"interval_seconds": 1, "topic": unique("canary")},
        http={"host": "127.0.0.1", "port": 0},
    )
    process = start_mirror("--config", str(config), command="run")
    base = process.http_base()

    def caught_up() -> bool:
        link = get(f"{base}/mirror/links/served")
        # The link also mirrors the canary's probe topic; the data topic's positions are exact.
        data = [(p["acked"], p["replication_lag_records"]) for p in link["partitions"] if p["topic"] == topic]
        return link["engine_running"] and data == [(100, 0), (100, 0)] and link["stats"]["records_out_total"] >= 200

    wait_until(
        caught_up,
        timeout_s=60,
        interval_s=0.5,
        ignore=(urllib.error.HTTPError,),  # 503 until collected
        description="/mirror/links to show the link caught up",
    )
    families = {f.name: f for f in text_string_to_metric_families(get(f"{base}/metrics"))}
    out = next(
        s.value
        for s in families["mirrorwatch_mirror_records"].samples
        if s.name.endswith("_total") and s.labels == {"link": "served", "direction": "out"}
    )
    assert out >= 200  # the 200 records plus the canary's probes
    assert get(f"{base}/healthz") == {"status": "ok"}
    # The canary runs alongside: its probes come back through the same link.
    wait_until(
        lambda: get(f"{base}/canary")["links"][0]["received_total"] >= 2,
        timeout_s=60,
        interval_s=0.5,
        description="canary probes read back through the link",
    )
    (canary,) = get(f"{base}/canary")["links"]
    assert canary["link"] == "served" and not canary["absent"]
    assert canary["partitions"][0]["e2e_latency"]["count"] >= 2
    names = {f.name for f in text_string_to_metric_families(get(f"{base}/metrics"))}
    assert {"mirrorwatch_canary_e2e_latency_seconds", "mirrorwatch_canary_probes_sent"} <= names
    assert process.stop() == 0
    assert "Traceback" not in process.log()


def test_monitor_in_its_own_process_reads_the_positions_of_every_mirror_worker(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Any,
) -> None:
    """`mirrorwatch mirror` with two worker processes and `mirrorwatch monitor` alone: the monitor serves the acked
    and consumed positions of both workers from their status files (not only the group's commits), and falls back to
    the commits once the mirror has stopped and withdrawn them."""
    topic = make_topic("source", 4)
    source = clusters_config.clusters["source"]
    produce(source, "source", topic, [Record(value=b"x", partition=i % 4) for i in range(400)])
    config = write_config(
        [
            {
                "name": "two-workers",
                "source": "source",
                "target": "target",
                "topics": {"include": [topic]},
                "group_id": unique("g"),
                "num_streams": 2,
                # Commits so rare that only the workers' own positions can show the link caught up in time.
                "offset_commit_interval_ms": 3_600_000,
            }
        ],
        monitor={"interval_seconds": 1},
        http={"host": "127.0.0.1", "port": 0},
        state_dir=str(tmp_path / "state"),
    )
    mirror = start_mirror("--config", str(config))
    monitor = start_mirror("--config", str(config), command="monitor")
    link_url = f"{monitor.http_base()}/mirror/links/two-workers"

    def both_workers_caught_up() -> bool:
        link = get(link_url)
        partitions = link["partitions"]
        return (
            link["engine_running"]
            and link["workers"] == 2
            and [p["partition"] for p in partitions] == [0, 1, 2, 3]
            and all(p["acked"] == 100 and p["replication_lag_records"] == 0 for p in partitions)
            and link["stats"]["records_out_total"] == 400
        )

    wait_until(
        both_workers_caught_up,
        timeout_s=90,
        interval_s=0.5,
        ignore=(urllib.error.HTTPError,),
        description="the separate monitor to show both workers' positions caught up",
    )
    produce(source, "source", topic, [Record(value=b"y", partition=0) for _ in range(50)])
    wait_until(
        lambda: get(link_url)["partitions"][0]["acked"] == 150,
        timeout_s=60,
        interval_s=0.5,
        description="the monitor to follow the acked position of partition 0",
    )
    assert mirror.stop() == 0  # SIGTERM: the workers commit and withdraw their status files
    wait_until(  # (the round that finds the status files gone may have read the commits just before the last)
        lambda: not (link := get(link_url))["engine_running"] and link["partitions"][0]["committed"] == 150,
        timeout_s=30,
        interval_s=0.5,
        description="the monitor to fall back to the group's commits once the workers are gone",
    )
    link = get(link_url)
    assert [(p["committed"], p["acked"]) for p in link["partitions"]] == [
        (150, None),
        (100, None),
        (100, None),
        (100, None),
    ]
    assert monitor.stop() == 0
    assert "Traceback" not in mirror.log() + monitor.log()


def test_canary_alone_serves_its_probes_and_a_separate_monitor_shows_them_at_canary(
    clusters_config: MirrorwatchConfig,
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Any,
) -> None:
    """`mirrorwatch canary` with no mirror running: probes are sent (and the link reported absent); a
    `mirrorwatch monitor` on another port serves the same canary status at its /canary."""
    document = {
        "links": [{"name": "unmirrored", "source": "source", "target": "target", "group_id": unique("g")}],
        "canary": {"interval_seconds": 1, "topic": unique("canary"), "absent_after_intervals": 2},
        "state_dir": str(tmp_path / "state"),
        "monitor": {"interval_seconds": 1},
    }
    canary_config = write_config(http={"host": "127.0.0.1", "port": 0}, **document)
    monitor_config = write_config(http={"host": "127.0.0.1", "port": 0}, **document)
    canary = start_mirror("--config", str(canary_config), command="canary")
    monitor = start_mirror("--config", str(monitor_config), command="monitor")
    urls = []
    for process in (canary, monitor):
        urls.append(f"{process.http_base()}/canary")

    def sent_and_absent() -> bool:
        (link,) = get(urls[0])["links"]
        return bool(link["sent_total"] >= 3 and link["absent"] and link["received_total"] == 0)

    wait_until(sent_and_absent, timeout_s=60, interval_s=0.5, description="probes sent and the link absent")
    instance = get(urls[0])["instance"]
    wait_until(
        lambda: get(urls[1])["instance"] == instance and get(urls[1])["links"][0]["sent_total"] >= 3,
        timeout_s=30,
        interval_s=0.5,
        ignore=(urllib.error.HTTPError,),  # 503 until the canary published its first round
        description="the monitor to serve the canary's published status",
    )
    assert "mirrorwatch_canary_absent" in get(urls[0].replace("/canary", "/metrics"))
    assert canary.stop() == 0 and monitor.stop() == 0
    assert "Traceback" not in canary.log() + monitor.log()


def test_while_the_source_broker_is_down_a_link_behind_reads_a_lower_bound_that_grows(
    clusters_config: MirrorwatchConfig,
    local_clusters: LocalClusters,
    owns_clusters: bool,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The source broker stops while records wait (a link held to 100 KB/s behind a 1.5 MB backlog; issue #67 read
    "not known" for 12 s of a restart while the truth grew from 2 to 12 s): every figure served while it is down is a
    number above 0, said a lower bound once the link acknowledged records nobody had dated, growing, and never above
    the age of the oldest record not acknowledged by the producer's own clock; the console says "at least"; when the
    broker is back the link catches up."""
    topic = make_topic("source", 1)
    source = clusters_config.clusters["source"]
    started_ms = time.time() * 1000  # no record was written before
    produce(source, "source", topic, [Record(value=bytes(1_000)) for _ in range(1_500)])
    name = unique("down")
    config = write_config(
        [
            {
                "name": name,
                "source": "source",
                "target": "target",
                "topics": {"include": [topic]},
                "group_id": unique("g"),
                "max_bytes_per_second": "100KB",
            }
        ],
        monitor={"interval_seconds": 1},
        http={"host": "127.0.0.1", "port": 0},
    )
    process = start_mirror("--config", str(config), command="run")
    link_url = f"{process.http_base()}/mirror/links/{name}"

    def partition() -> Any:
        (p,) = [p for p in get(link_url)["partitions"] if p["topic"] == topic]
        return p

    wait_until(  # under way, behind, its oldest waiting record dated
        lambda: (p := partition())["acked"] and p["replication_lag_seconds"] and p["replication_lag_records"] > 300,
        timeout_s=60,
        interval_s=0.3,
        ignore=(urllib.error.HTTPError, ValueError),
        description="the link under way and behind",
    )
    local_clusters.down(["source"])
    try:
        samples = []
        for _ in range(16):
            link = get(link_url)
            (p,) = [p for p in link["partitions"] if p["topic"] == topic]
            seconds, method = p["replication_lag_seconds"], p["replication_lag_seconds_method"]
            assert seconds is not None and seconds > 0, json.dumps(p)  # never empty, never 0 while records wait
            assert seconds <= (p["observed_ms"] - started_ms) / 1000, p  # a floor of the truth, never above it
            assert link["replication_lag_seconds"] is not None, json.dumps(link["partitions"])
            if method == "at_least":
                assert link["replication_lag_seconds_at_least"] and "at least" in p["reason"], p["reason"]
                samples.append(seconds)
            time.sleep(0.5)
        assert len(samples) >= 5 and samples == sorted(samples) and samples[-1] > samples[0], samples
        # said why, once the monitor knows: its round against the stopped broker fails first, which took longer than
        # the 8 s of samples above on the loaded machine once (flaky34: the reason still the undated-record one)
        wait_until(
            lambda: partition()["reason"].startswith("cannot see the source"),
            timeout_s=30,
            interval_s=0.5,
            description="the link's view to say it cannot see the source",
        )
        monkeypatch.setenv("MIRRORWATCH_API", process.http_base())
        app = AppTest.from_file(str(CONSOLE_SCRIPT), default_timeout=30)
        app.run()
        assert not app.exception, app.exception
        assert {m.label: m.value for m in app.metric}["Replication lag (seconds)"].startswith("at least ")
        metrics = get(f"{process.http_base()}/metrics")
        assert (
            f'mirrorwatch_mirror_replication_lag_seconds_at_least{{link="{name}",topic="{topic}",partition="0"}} 1'
            in metrics
        )
    finally:
        local_clusters.up(["source"], tie_to_parent=owns_clusters)
    wait_until(
        lambda: partition()["replication_lag_records"] == 0,
        timeout_s=90,
        interval_s=0.5,
        description="the link to catch up once the source is back",
    )
    assert process.stop() == 0
