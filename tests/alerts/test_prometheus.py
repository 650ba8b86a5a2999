"""End to end: a real Prometheus (Debian's package) scrapes a real `mirrorwatch monitor` with the rules of alerts/;
stopping the mirror makes the stall and mirror-down alerts fire in Prometheus' /api/v1/alerts."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kernel.config import MirrorwatchConfig
from kernel.wait import wait_until
from tests.kafka_helpers import Record, produce
from tests.processes import MirrorProcess
from tests.prometheus import firing, get_json

pytestmark = pytest.mark.integration

# Short windows so the alerts fire within a test; the expressions are the shipped ones.
FAST = {"rate_window": "20s", "mirror_stalled_for": "5s", "mirror_down_for": "5s"}


def test_stopping_the_mirror_fires_the_stall_and_down_alerts_in_prometheus(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    prometheus: Callable[..., str],
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
    url = prometheus(int(monitor.http_base().rsplit(":", 1)[1]), FAST)

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
