"""A target whose retention is shorter than the link's lag (issue #43), on real brokers: the target topic keeps
records 10 minutes, and the link (at least or exactly once) copies 700 records of partition 0 written an hour ago (a link that fell an hour
behind) and 400 fresh ones of partition 1. The target takes all of them, and its broker deletes the 700 at its next
retention check, before most consumers read them: the link counts exactly those 700 (the producer's own timestamps
are the truth), says so (log, the link's view, an event, the counter, a real Prometheus's alert) and goes on; fresh
records of partition 0 after them are not counted, and the incident ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.config import MirrorwatchConfig
from kernel.processes import free_port
from kernel.wait import wait_until
from tests.kafka_helpers import Record, by_partition, produce, read_to_end, wait_for_commits, watermarks
from tests.mirror.test_retention_gap import lost_metrics, partition_of
from tests.processes import MirrorProcess, get_json
from tests.prometheus import firing

pytestmark = pytest.mark.integration

OLD, FRESH = 700, 400
HOUR_MS, RETENTION_MS = 3_600_000, 600_000
LOST = "MirrorwatchRecordsLost"


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_records_the_target_takes_already_older_than_its_retention_are_counted_exactly_and_the_link_goes_on(
    delivery: str,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    prometheus: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, name, port = make_topic("source", 2), unique("link"), free_port()
    make_topic("target", 2, name=topic, config={"retention.ms": str(RETENTION_MS)})
    link: dict[str, Any] = {"name": name, "source": "source", "target": "target", "group_id": unique("g")}
    link["delivery"] = delivery  # exactly-once: acknowledged when their transaction commits
    config = write_config(
        [{**link, "topics": {"include": [topic]}}],
        monitor={"interval_seconds": 1},
        http={"host": "127.0.0.1", "port": port},
        state_dir=str(tmp_path / "state"),
    )
    now_ms = int(time.time() * 1000)
    produce(source, "source", topic, [Record(b"old", partition=0, timestamp_ms=now_ms - HOUR_MS)] * OLD)
    produce(source, "source", topic, [Record(b"new", partition=1, timestamp_ms=now_ms)] * FRESH)

    def view() -> dict[str, Any]:
        seen: dict[str, Any] = get_json(f"http://127.0.0.1:{port}/mirror/links/{name}")
        return seen

    monitor = start_mirror("--config", str(config), command="monitor")
    url = prometheus(port, {"records_lost_window": "20s"})
    mirror = start_mirror("--config", str(config), "--link", name)
    group = link["group_id"]
    wait_for_commits(source, "source", group, topic, 2, upto=[OLD, FRESH], timeout_s=120, while_running=mirror.running)
    wait_until(
        lambda: monitor.running() and view()["records_lost"] == OLD,
        timeout_s=60,
        ignore=(OSError,),
        description=f"the monitor to count the {OLD} records",
    )
    seen = view()
    assert [(g["topic"], g["partition"], g["first_offset"], g["end_offset"], g["records"], g["reason"], g["action"])
            for g in seen["gaps"]] == [(topic, 0, 0, OLD, OLD, "target-retention", "copied")]  # fmt: skip
    assert (partition_of(seen, 0)["records_lost"], partition_of(seen, 1)["records_lost"]) == (OLD, 0)
    assert partition_of(seen, 0)["failed"] is None and partition_of(seen, 1)["failed"] is None
    # copied all the same: the link goes on. The target's broker deletes them at its next check (every 5 minutes,
    # at any moment of the run): either they are all there, or all gone with the log's start past them
    copied = by_partition(read_to_end(target, "target", topic, 2, timeout_s=60))
    (old_start, _), _ = watermarks(target, "target", topic, 2)
    assert [r.value for r in copied[1]] == [b"new"] * FRESH
    kept = [r.value for r in copied.get(0, [])]
    assert kept == [b"old"] * OLD or (not kept and old_start >= OLD), (len(kept), old_start)
    assert "older than the target topic's retention.ms when the target took them" in mirror.log()
    wait_until(lambda: (LOST, name) in firing(url), timeout_s=60, description="the records-lost alert")

    # the lag is within the retention again: fresh records are not counted, and the incident ends
    produce(source, "source", topic, [Record(b"new", partition=0, timestamp_ms=int(time.time() * 1000))] * 300)
    wait_for_commits(
        source, "source", group, topic, 2, upto=[OLD + 300, FRESH], timeout_s=60, while_running=mirror.running
    )
    wait_until(
        lambda: "the records the target takes are within its retention again" in mirror.log(),
        timeout_s=30,
        description="the incident's end in the log",
    )
    wait_until(
        lambda: partition_of(view(), 0).get("acked") == OLD + 300,
        timeout_s=30,
        description="the monitor to see the fresh records acknowledged",
    )
    assert view()["records_lost"] == OLD
    labels = (("link", name), ("partition", "0"), ("reason", "target-retention"), ("topic", topic))
    assert lost_metrics(port) == {("mirrorwatch_mirror_records_lost_total", labels): OLD}
    events = get_json(f"http://127.0.0.1:{port}/mirror/events")["events"]
    assert [e["kind"] for e in events if e["kind"] == "loss" and e["subject"] == name] == ["loss"]
    assert mirror.running()
    assert mirror.stop() == 0
    assert monitor.stop() == 0
