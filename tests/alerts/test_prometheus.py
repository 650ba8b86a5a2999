"""End to end: a real Prometheus (Debian's package) scrapes a real `mirrorwatch monitor` with the rules of alerts/;
stopping the mirror makes the stall and mirror-down alerts fire in Prometheus' /api/v1/alerts."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.rules import build_rules, render
from mirrorwatch.config import MirrorwatchConfig
from mirrorwatch.local import die_with_parent, free_port, stop_process
from mirrorwatch.wait import wait_until
from tests.kafka_helpers import Record, produce
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

# Short windows so the alerts fire within a test; the expressions are the shipped ones.
FAST = {"rate_window": "20s", "mirror_stalled_for": "5s", "mirror_down_for": "5s"}


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[int], str]]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: scripts/setup.sh installs Debian's prometheus package"
    started: list[subprocess.Popen[bytes]] = []

    def start(target_port: int) -> str:
        rules = tmp_path / "mirrorwatch.rules.yml"
        rules.write_text(render(build_rules(FAST)))
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(rules)],
                    "scrape_configs": [
                        {"job_name": "mirrorwatch", "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}
                    ],
                }
            )
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        started.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,  # noqa: PLW1509 -- only prctl: dies with pytest, never orphaned
            )
        )
        url = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: get_json(f"{url}/api/v1/status/runtimeinfo")["status"] == "success",
            timeout_s=60,
            interval_s=0.5,
            ignore=(urllib.error.URLError, ConnectionError),
            description="Prometheus to start",
        )
        return url

    yield start
    for process in started:
        stop_process(process)


def firing(url: str) -> set[tuple[str, str]]:
    alerts = get_json(f"{url}/api/v1/alerts")["data"]["alerts"]
    return {(a["labels"]["alertname"], a["labels"].get("link", "")) for a in alerts if a["state"] == "firing"}


def test_stopping_the_mirror_fires_the_stall_and_down_alerts_in_prometheus(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    prometheus: Callable[[int], str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic = make_topic("source", 2)
    source = clusters_config.clusters["source"]
    config = write_config(
        [
            {
                "name": "watched",
                "source": "source",
                "target": "target",
                "topics": {"include": [topic]},
                "group_id": unique("g"),
                "offset_commit_interval_ms": 500,
            }
        ],
        monitor={"interval_seconds": 1},
        canary={"enabled": False},
        http={"host": "127.0.0.1", "port": 0},
        state_dir=str(tmp_path / "state"),
    )
    mirror = start_mirror("--config", str(config))
    monitor = start_mirror("--config", str(config), command="monitor")
    url = prometheus(int(monitor.http_base().rsplit(":", 1)[1]))

    stop_traffic = threading.Event()

    def traffic() -> None:  # the source keeps growing, as it would in production
        while not stop_traffic.wait(0.5):
            produce(source, "source", topic, [Record(value=b"x", partition=i % 2) for i in range(10)])

    producer = threading.Thread(target=traffic, name="test-traffic", daemon=True)
    producer.start()
    try:
        wait_until(
            lambda: get_json(f"{url}/api/v1/query?query=mirrorwatch_mirror_workers")["data"]["result"],
            timeout_s=60,
            interval_s=1,
            description="Prometheus to scrape the monitor with the link's worker",
        )
        # Mirror running and keeping up for longer than the stall window: nothing fires.
        wait_until(
            lambda: (
                float(
                    get_json(f"{url}/api/v1/query?query=mirrorwatch:mirror_records_out:rate20s")["data"]["result"][0][
                        "value"
                    ][1]
                )
                > 0
            ),
            timeout_s=60,
            interval_s=1,
            ignore=(IndexError,),
            description="the mirror's out rate to show in Prometheus",
        )
        assert not {name for name, link in firing(url) if link == "watched"}

        assert mirror.stop() == 0
        wait_until(
            lambda: {("MirrorwatchMirrorStalled", "watched"), ("MirrorwatchMirrorDown", "watched")} <= firing(url),
            timeout_s=120,
            interval_s=1,
            description="the stall and mirror-down alerts to fire in Prometheus",
        )
    finally:
        stop_traffic.set()
        producer.join(timeout=30)
    alert = next(
        a
        for a in get_json(f"{url}/api/v1/alerts")["data"]["alerts"]
        if a["labels"]["alertname"] == "MirrorwatchMirrorStalled"
    )
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["summary"] == "Link watched mirrors nothing while its source grows"
    assert monitor.stop() == 0
