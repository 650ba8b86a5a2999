"""Records gone from the source before the link copied them (issue #43), on real brokers: the link mirrored 1,000
records of each partition and was stopped; 1,000 more were produced and the source records of partition 0 below
offset 1,500 deleted (`delete-records`, what retention does to a link stopped too long). Started again, the link
finds the 500 records it will never copy, exactly, says so (log, the link's view, an event, the counter, a real
Prometheus's alerts) and does what its `on_gap` rule says: stops partition 0 alone (the default; partition 1 goes
on), then, the rule changed to `skip`, goes on from offset 1,500 — the 500 counted once, nothing else lost or copied
twice. The truth is what the test produced and deleted, and a consumer reading the target."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from kernel.config import MirrorwatchConfig
from kernel.kafka import new_admin
from kernel.processes import free_port
from kernel.wait import wait_until
from kernel.worker_status import Gap, WorkerStatus
from tests.kafka_helpers import Record, by_partition, committed_offsets, produce, provenance, read_all, wait_for_commits
from tests.processes import MirrorProcess, get_json
from tests.prometheus import firing

pytestmark = pytest.mark.integration

PER_PARTITION = 1000
DELETED_BELOW = 1500  # partition 0's records 1000..1499 were never copied: 500 lost
LOST, STOPPED = "MirrorwatchRecordsLost", "MirrorwatchPartitionStopped"


def records(partition: int, start: int) -> list[Record]:
    return [
        Record(key=f"{partition}-{i}".encode(), value=b"v", partition=partition) for i in range(start, start + 1000)
    ]


# The cooperative protocol (the default) and an eager one (MirrorMaker 1's RoundRobinAssignor): a partition the
# consumer stopped fetching after the reset error is assigned again incrementally, or with the whole assignment.
@pytest.mark.parametrize("assignor", ["cooperative-sticky", "roundrobin"])
def test_records_retention_took_before_the_link_copied_them_are_counted_exactly_stopped_at_then_skipped(
    assignor: str,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    prometheus: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group, name = make_topic("source", 2), unique("gap"), unique("link")
    port = free_port()

    def config(on_gap: str, host: str = "state") -> Path:
        link: dict[str, Any] = {"name": name, "source": "source", "target": "target", "group_id": group}
        link.update(on_gap=on_gap, topics={"include": [topic]})
        link["consumer_properties"] = {"partition.assignment.strategy": assignor}
        return write_config(
            [link],
            monitor={"interval_seconds": 1},
            http={"host": "127.0.0.1", "port": port},
            state_dir=str(tmp_path / host),
        )

    def view() -> dict[str, Any]:
        seen: dict[str, Any] = get_json(f"http://127.0.0.1:{port}/mirror/links/{name}")
        return seen

    for p in (0, 1):
        produce(source, "source", topic, records(p, 0))
    first = start_mirror("--config", str(config("stop")), "--link", name)
    wait_for_commits(source, "source", group, topic, 2, upto=[1000, 1000], timeout_s=120, while_running=first.running)
    assert first.stop() == 0
    for p in (0, 1):
        produce(source, "source", topic, records(p, PER_PARTITION))
    admin = new_admin(source, "source")
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, DELETED_BELOW)]).values()
    assert deleted.result().low_watermark == DELETED_BELOW

    # on_gap: stop (the default) -- partition 1 goes on, partition 0 stays where it was, failed, with the offsets
    monitor = start_mirror("--config", str(config("stop")), command="monitor")
    url = prometheus(port, {"records_lost_window": "20s"})
    stopping = start_mirror("--config", str(config("stop")), "--link", name)
    wait_for_commits(
        source, "source", group, topic, 2, upto=[1000, 2000], timeout_s=120, while_running=stopping.running
    )

    wait_until(
        lambda: monitor.running() and partition_of(view(), 0).get("failed") is not None,
        timeout_s=60,
        ignore=(OSError,),  # not up yet, or 503 "no collection yet" (its first round under a loaded machine)
        description="the monitor to say partition 0 is stopped",
    )
    seen = view()
    assert seen["records_lost"] == 500
    assert [(g["topic"], g["partition"], g["first_offset"], g["end_offset"], g["records"], g["reason"], g["action"])
            for g in seen["gaps"]] == [(topic, 0, 1000, DELETED_BELOW, 500, "retention", "stopped")]  # fmt: skip
    by_p = {p["partition"]: p for p in seen["partitions"]}
    assert (by_p[0]["records_lost"], by_p[1]["records_lost"], by_p[1]["failed"]) == (500, 0, None)
    assert by_p[0]["failed"] == seen["gaps"][0]["text"]
    assert "500 records of" in seen["gaps"][0]["text"] and "offsets 1000 to 1499" in seen["gaps"][0]["text"]
    wait_until(lambda: {(LOST, name), (STOPPED, name)} <= firing(url), timeout_s=60, description="both alerts")
    time.sleep(3)  # a stopped partition stays stopped: no commit moves, the process does not exit or loop
    assert stopping.running() and committed_offsets(source, "source", group, topic, 2) == [1000, 2000]
    assert "500 records of" in stopping.log() and "lost, offsets 1000 to 1499" in stopping.log()
    events = get_json(f"http://127.0.0.1:{port}/mirror/events")["events"]
    assert [e["after"] for e in events if e["kind"] == "loss" and e["subject"] == name] == ["500"]
    assert stopping.stop() == 0

    # a failover plan for an application group that had read partition 0 to 900: the 500 are lost to it, said so
    plan_counts_the_loss(config("stop"), name, topic, admin, unique("app"))

    # on_gap: skip -- the operator's choice: partition 0 goes on from 1,500; the same 500 are counted once
    skipping = start_mirror("--config", str(config("skip")), "--link", name)
    wait_for_commits(
        source, "source", group, topic, 2, upto=[2000, 2000], timeout_s=120, while_running=skipping.running
    )
    got = by_partition(read_all(target, "target", topic, 3500, timeout_s=60))
    offsets = {p: [int(provenance(r, "source.offset")) for r in rs] for p, rs in got.items()}
    assert offsets == {0: [*range(1000), *range(DELETED_BELOW, 2000)], 1: list(range(2000))}  # once each, in order

    wait_until(
        lambda: (
            partition_of(seen := view(), 0)["failed"] is None and [g["action"] for g in seen["gaps"]] == ["skipped"]
        ),
        timeout_s=60,
        description="the monitor to say partition 0 went on",
    )
    assert view()["records_lost"] == 500
    # the stop alert resolves at once; the loss alert once its window (20 s here) has passed
    wait_until(lambda: not {(LOST, name), (STOPPED, name)} & firing(url), timeout_s=90, description="resolved")
    labels = (("link", name), ("partition", "0"), ("reason", "retention"), ("topic", topic))
    assert lost_metrics(port) == {("mirrorwatch_mirror_records_lost_total", labels): 500}
    assert skipping.stop() == 0 and monitor.stop() == 0

    other_hosts_know_the_gap(config, name, topic, admin, tmp_path, start_mirror, unique("app"))


def other_hosts_know_the_gap(
    config: Callable[[str, str], Path],
    name: str,
    topic: str,
    admin: AdminClient,
    tmp_path: Path,
    start_mirror: Callable[..., MirrorProcess],
    app: str,
) -> None:
    """Another host (a state directory of its own): the link's workers moved there, past the gap, and find nothing
    themselves; the worker learns the gap from the target's progress topic, writes it down there and carries it in
    its status, and a failover plan run on a third host, where no worker ever ran, counts the loss."""
    there = start_mirror("--config", str(config("skip", "elsewhere")), "--link", name)
    wait_until(
        lambda: (
            [(g.first_offset, g.end_offset, g.action) for g in status_gaps(tmp_path / "elsewhere", there)]
            == [(1000, DELETED_BELOW, "skipped")]
        ),
        timeout_s=60,
        description="the worker on the other host to carry the gap in its status",
    )
    assert "found by a worker of the link elsewhere: link" in there.log() and "500 records of" in there.log()
    assert (tmp_path / "elsewhere" / "lost").is_dir()
    assert there.stop() == 0
    plan_counts_the_loss(config("skip", "planner"), name, topic, admin, app)
    assert not (tmp_path / "planner" / "lost").exists()  # the plan read the topic, not a ledger of its host


def plan_counts_the_loss(config: Path, name: str, topic: str, admin: AdminClient, app: str) -> None:
    request = ConsumerGroupTopicPartitions(app, [TopicPartition(topic, 0, 900), TopicPartition(topic, 1, 1000)])
    assert not any(tp.error for tp in admin.alter_consumer_group_offsets([request])[app].result(30).topic_partitions)
    (group,) = json.loads(failover_plan(config, name, app, "--json"))["groups"]
    assert (group["records_lost"], group["lost"]) == (
        500,
        [{"topic": topic, "partition": 0, "first_offset": 1000, "end_offset": 1500, "reason": "retention",
          "records": 500}],
    )  # fmt: skip
    assert "LOST: 500 record(s) of" in failover_plan(config, name, app)


def failover_plan(config: Path, link: str, group: str, *args: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", "failover", "plan", "--config", str(config), "--link", link,
         "--group", group, *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout


def status_gaps(state: Path, mirror: MirrorProcess) -> tuple[Gap, ...]:
    """The gaps in the mirror process's status file ((): not written yet)."""
    found: tuple[Gap, ...] = ()
    for path in (state / "status" / "links").glob(f"*.{mirror.process.pid}.json"):
        try:
            status = WorkerStatus.from_json(json.loads(path.read_text()))
        except ValueError:  # caught in the middle of a write
            continue
        found += status.gaps if status is not None else ()
    return found


def partition_of(view: dict[str, Any], partition: int) -> dict[str, Any]:
    """One partition of a link's view ({} while the monitor does not list it yet)."""
    return next((p for p in view["partitions"] if p["partition"] == partition), {})


def lost_metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The records-lost counters and partition-failed gauges the monitor's /metrics serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ("mirrorwatch_mirror_records_lost_total", "mirrorwatch_mirror_partition_failed")
    }
