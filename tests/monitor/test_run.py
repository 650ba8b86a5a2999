"""`mirrorwatch run`: the engine, the monitor and the HTTP API in one real process."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mirrorwatch.config import MirrorwatchConfig
from mirrorwatch.wait import wait_until
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
        http={"host": "127.0.0.1", "port": 0},
    )
    process = start_mirror("--config", str(config), command="run")
    process.wait_for_log("HTTP API on http://127.0.0.1:")
    port = int(re.search(r"HTTP API on http://127\.0\.0\.1:(\d+)", process.log()).group(1))  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"

    def caught_up() -> bool:
        link = get(f"{base}/mirror/links/served")
        lags = [p["replication_lag_records"] for p in link["partitions"]]
        return (
            link["engine_running"] and len(lags) == 2 and lags == [0, 0] and link["stats"]["records_out_total"] == 200
        )

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
    assert out == 200
    assert get(f"{base}/healthz") == {"status": "ok"}
    assert process.stop() == 0
    assert "Traceback" not in process.log()
