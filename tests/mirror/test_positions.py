"""The engine's in-memory view (what the monitor and /mirror/links read), from a worker run in this process."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from kernel.config import MirrorwatchConfig
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from mirror.transactional import TransactionalLinkWorker
from tests.kafka_helpers import Record, end_offsets, produce, read_all
from tests.processes import running_worker, session_config

pytestmark = pytest.mark.integration


def test_positions_status_and_drift_of_a_running_worker(
    clusters_config: MirrorwatchConfig, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 3, config={"retention.ms": "3600000"})
    make_topic("target", 3, name=topic, config={"retention.ms": "7200000"})
    records = [Record(value=b"x" * 10, key=b"k", partition=i % 3, timestamp_ms=1_700_000_000_000) for i in range(300)]
    produce(source, "source", topic, records)
    config = session_config(
        clusters_config,
        [
            {
                "name": "inproc",
                "source": "source",
                "target": "target",
                "topics": {"include": [topic]},
                "group_id": unique("g"),
                "offset_commit_interval_ms": 200,
                "consumer_properties": {"statistics.interval.ms": 500},
                "producer_properties": {"statistics.interval.ms": 500},
            }
        ],
    )
    with running_worker(config) as worker:
        ends = end_offsets(source, "source", topic, 3)

        def caught_up() -> bool:
            positions = worker.positions()
            return (
                len(positions) == 3
                and all((p["consumed"], p["acked"], p["committed"]) == (ends[p["partition"]],) * 3 for p in positions)
                and {"producer", "consumer"} <= set(worker.status()["clients"])
            )

        wait_until(caught_up, timeout_s=60, description="consumed = acked = committed = high-watermark")
        status = worker.status()
        json.dumps(status)  # JSON-able as it is
        assert status["state"] == "running" and status["failure"] is None
        assert all(
            p["in_flight_records"] == 0 and p["last_record_timestamp_ms"] == 1_700_000_000_000
            for p in status["partitions"]
        )
        stats = status["stats"]
        assert (stats["records_in_total"], stats["records_out_total"], stats["bytes_out_total"]) == (300, 300, 300 * 11)
        assert sum(stats["replication_latency_seconds"]["counts"]) == 300
        assert stats["send_errors_total"] == 0
        assert status["clients"]["producer"]["role"] == "producer"
        assert status["config_drift"] == [
            {
                "source_topic": topic,
                "target_topic": topic,
                "config": "retention.ms",
                "source_value": "3600000",
                "target_value": "7200000",
                "reason": "sync.topic_configs is off for this link",
            }
        ]


def test_target_down_pauses_the_source_within_bounded_memory_and_resumes_without_loss(
    clusters_config: MirrorwatchConfig,
    local_clusters: LocalClusters,
    owns_clusters: bool,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", 2)
    make_topic("target", 2, name=topic)
    config = session_config(
        clusters_config,
        [
            {
                "name": "pressure",
                "source": "source",
                "target": "target",
                "topics": {"include": [topic]},
                "group_id": unique("g"),
                "offset_commit_interval_ms": 200,
                # a small producer buffer, so that it fills while the target is down
                "producer_properties": {"queue.buffering.max.messages": 200},
            }
        ],
    )
    with running_worker(config) as worker:
        wait_until(lambda: len(worker.positions()) == 2, timeout_s=60, description="the worker to own both partitions")
        local_clusters.kill("target")
        produce(source, "source", topic, [Record(value=str(i).encode(), partition=i % 2) for i in range(3000)])
        wait_until(
            lambda: worker.status()["state"] == "throttled",
            timeout_s=60,
            description="the worker to pause the source (producer full: throttled)",
        )
        assert sum(p["in_flight_records"] for p in worker.positions()) <= 200 + 2000  # producer cap + one batch read
        committed_while_down = [p["committed"] for p in worker.positions()]
        local_clusters.up(["target"], tie_to_parent=owns_clusters)
        ends = end_offsets(source, "source", topic, 2)
        wait_until(
            lambda: [p["committed"] for p in worker.positions()] == ends,
            timeout_s=120,
            description="the worker to catch up once the target is back",
        )
        assert all(c is None or c < e for c, e in zip(committed_while_down, ends, strict=True))
        assert worker.status()["state"] == "running"
    got = read_all(target, "target", topic, expected=3000)
    assert {r.value for r in got} == {str(i).encode() for i in range(3000)}


def test_an_exactly_once_worker_reports_the_high_watermark_its_consumer_saw(
    clusters_config: MirrorwatchConfig, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:
    """As the at-least-once worker does: the monitor measures a worker at its own moment against it (without it, a
    worker is measured against the monitor's last snapshot, and only as a floor once that is a round older)."""
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 3)
    produce(source, "source", topic, [Record(value=b"x", partition=i % 3) for i in range(30)])
    link = {
        "name": "eos-high",
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "group_id": unique("g"),
        "delivery": "exactly-once",
        "offset_commit_interval_ms": 200,
    }
    config = session_config(clusters_config, [link])
    stop = threading.Event()
    worker = TransactionalLinkWorker(config, config.links[0], stop=stop)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), name="test-eos-high")
    thread.start()
    try:
        ends = end_offsets(source, "source", topic, 3)

        def reported() -> bool:
            positions = worker.positions()
            return len(positions) == 3 and all(
                (p["acked"], p["high_watermark"]) == (ends[p["partition"]],) * 2 for p in positions
            )

        wait_until(reported, timeout_s=60, description="acked = the high-watermark the consumer saw, per partition")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert result == [0], f"the worker exited with {result}"
