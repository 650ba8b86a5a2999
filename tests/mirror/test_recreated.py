"""A source topic deleted and created again under its name (issue #43), on real brokers. The link had mirrored 1,000
records of each of 2 partitions; the topic was deleted, created again (a new topic id) and given 300 new records per
partition. Read on at its old commit (1,000), a link would skip the new topic's records (or stop as truncated, not
knowing why); MirrorMaker 2 mirrors the new topic as if it were the old one.

Kafka drops the group's offsets of a deleted topic, so to a consumer the new topic is one never read. The link's
workers note the topic id each partition's records come from (`<state_dir>/topics/`), so the link knows: by default
(`on_recreate: stop`) both partitions stop, failed, with the reason, and nothing of the new topic is written; with
`on_recreate: restart` the new topic is mirrored from its beginning into the same target topic, exactly once, after
the old one's records. Both deliveries: an exactly-once link keeps its offsets on the target, where they outlive the
topic (read on at 1,000, a new topic that grew past it would lose its first 1,000 records without a word), and its
notes like the at-least-once workers'. The link stopped on one host and started on another (a state directory of its
own): the notes of the old topic's id reach it through the link's progress topic. Also while the link runs: the topic deleted and created again under it. A failover plan for a
group on the new topic never translates into the old topic's copies (the same offsets): refused while the link has
not copied the new topic, exact once it has (the workers note where the new generation begins on the target). The
truth is what the test produced and a consumer reading the target."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_admin
from kernel.processes import free_port
from kernel.wait import wait_until
from tests.kafka_helpers import (
    Record,
    by_partition,
    committed_offsets,
    end_offsets,
    produce,
    provenance,
    read_all,
    recreate,
    topic_id,
    wait_for_commits,
)
from tests.processes import MirrorProcess, get_json

pytestmark = pytest.mark.integration

OLD, NEW = 1000, 300  # records per partition of the old topic, and of the new one


def records(generation: str, partition: int, count: int) -> list[Record]:
    return [Record(key=f"{generation}-{partition}-{i}".encode(), value=b"v", partition=partition) for i in range(count)]


def target_keys(cluster: ClusterConfig, topic: str, expected: int) -> dict[int, list[str]]:
    got = by_partition(read_all(cluster, "target", topic, expected, timeout_s=60))
    return {p: [r.key.decode() if r.key else "" for r in rs] for p, rs in got.items()}


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_recreated_source_topic_stops_its_partitions_by_default_then_restarts_from_its_beginning(
    delivery: str,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group, name = make_topic("source", 2), unique("recreate"), unique("link")
    port = free_port()

    def config(on_recreate: str, host: str = "elsewhere") -> Path:
        link: dict[str, Any] = {"name": name, "source": "source", "target": "target", "group_id": group}
        link.update(on_recreate=on_recreate, topics={"include": [topic]}, offset_commit_interval_ms=500)
        link["delivery"] = delivery  # exactly-once: its offsets are stored on the target, the notes on this host
        return write_config(
            [link],
            monitor={"interval_seconds": 1},
            http={"host": "127.0.0.1", "port": port},
            state_dir=str(tmp_path / host),
        )

    for p in (0, 1):
        produce(source, "source", topic, records("old", p, OLD))
    old_id = topic_id(source, topic)
    # the link runs on one host, then on another (a state directory of its own): the notes of the old topic's id
    # reach it through the link's progress topic, and so does the failover plan there
    first = start_mirror("--config", str(config("stop", "first-host")), "--link", name)
    wait_for_commits(source, "source", group, topic, 2, upto=[OLD, OLD], timeout_s=120, while_running=first.running)
    assert first.stop() == 0

    recreate(source, topic, 2)
    assert topic_id(source, topic) != old_id
    assert committed_offsets(source, "source", group, topic, 2) == [-1001, -1001]  # Kafka forgot them
    for p in (0, 1):
        produce(source, "source", topic, records("new", p, NEW))

    # on_recreate: stop (the default): both partitions failed with the reason; nothing new written, commits kept
    monitor = start_mirror("--config", str(config("stop")), command="monitor")
    stopping = start_mirror("--config", str(config("stop")), "--link", name)

    def failed() -> list[str | None]:
        seen = get_json(f"http://127.0.0.1:{port}/mirror/links/{name}")
        return [p.get("failed") for p in sorted(seen["partitions"], key=lambda p: p["partition"])]

    wait_until(
        lambda: monitor.running() and stopping.running() and len(f := failed()) == 2 and all(f),
        timeout_s=90,
        ignore=(OSError,),  # the monitor's HTTP API not up yet
        description="both partitions failed, said by the monitor",
    )
    seen = get_json(f"http://127.0.0.1:{port}/mirror/links/{name}")
    gaps = sorted((g["partition"], g["reason"], g["action"], g["records"]) for g in seen["gaps"])
    assert gaps == [(0, "recreated", "stopped", 0), (1, "recreated", "stopped", 0)]  # the old topic: all copied
    assert "was deleted and created again" in seen["gaps"][0]["text"]
    assert "deleted and created again" in stopping.log()
    assert "note(s) of its source topics learnt from the link's workers elsewhere" in stopping.log()
    assert committed_offsets(source, "source", group, topic, 2) == [-1001, -1001]  # nothing of the new topic
    # an application group on the new topic is not translated into the old topic's copies (the same offsets)
    app = unique("app")
    request = ConsumerGroupTopicPartitions(app, [TopicPartition(topic, 0, 100), TopicPartition(topic, 1, NEW)])
    admin = new_admin(source, "source")  # referenced until the answer (see topic_id)
    assert not any(tp.error for tp in admin.alter_consumer_group_offsets([request])[app].result(30).topic_partitions)
    refused = failover_plan(config("stop"), name, app)
    assert refused.returncode != 0 and f"{topic} (deleted and created again since)" in refused.stderr, refused
    assert stopping.stop() == 0
    assert target_keys(target, topic, 2 * OLD) == {p: [f"old-{p}-{i}" for i in range(OLD)] for p in (0, 1)}

    # on_recreate: restart: the new topic from its beginning, after the old one's records, once each
    restarting = start_mirror("--config", str(config("restart")), "--link", name)
    wait_for_commits(
        source, "source", group, topic, 2, upto=[NEW, NEW], timeout_s=120, while_running=restarting.running
    )
    got = target_keys(target, topic, 2 * (OLD + NEW))
    assert got == {p: [*(f"old-{p}-{i}" for i in range(OLD)), *(f"new-{p}-{i}" for i in range(NEW))] for p in (0, 1)}

    def went_on() -> tuple[list[str | None], list[str]]:
        seen = get_json(f"http://127.0.0.1:{port}/mirror/links/{name}")
        return failed(), sorted(g["action"] for g in seen["gaps"])

    wait_until(
        lambda: went_on() == ([None, None], ["restarted", "restarted"]),
        timeout_s=60,
        description="the monitor to say both partitions went on with the new topic",
    )
    # the group at 100 of the new topic's partition 0 starts at the copy of its record 100 (after the old topic's
    # 1,000 copies), not among the old topic's records 100-999; at the end of partition 1, at the end
    planned = failover_plan(config("restart"), name, app, "--json")
    assert planned.returncode == 0, planned.stderr
    (group,) = json.loads(planned.stdout)["groups"]
    assert_plan_reads_the_new_generation(
        {t["partition"]: t["offset"] for t in group["partitions"]}, target, topic, exact=delivery == "at-least-once"
    )
    assert group["read_twice"] == 0 and group["recreated_topics"] == []
    assert restarting.stop() == 0


def assert_plan_reads_the_new_generation(
    planned_at: dict[int, int], target: ClusterConfig, topic: str, *, exact: bool
) -> None:
    """A group at 100 of the new topic's partition 0 and at the end of partition 1: what it reads on the target from
    the plan's offsets is exactly the new topic's records from there on, and the plan is within the target's log.
    At least once the offsets are exact numbers too; exactly once the target's offsets hold the transactions'
    markers as well."""
    if exact:
        assert planned_at == {0: OLD + 100, 1: OLD + NEW}
    copies = by_partition(read_all(target, "target", topic, 2 * (OLD + NEW), timeout_s=60))
    for p, commit in ((0, 100), (1, NEW)):
        after = [r.key.decode() if r.key else "" for r in copies[p] if r.offset >= planned_at[p]]
        assert after == [f"new-{p}-{i}" for i in range(commit, NEW)], (p, planned_at[p])
    assert [planned_at[p] <= end for p, end in enumerate(end_offsets(target, "target", topic, 2))] == [True, True]


def failover_plan(config: Path, link: str, group: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", "failover", "plan", "--config", str(config), "--link", link,
         "--group", group, *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_topic_recreated_under_a_running_link_is_restarted_from_its_beginning_without_loss(
    delivery: str,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group, name = make_topic("source", 2), unique("recreate"), unique("link")
    link: dict[str, Any] = {"name": name, "source": "source", "target": "target", "group_id": group}
    link.update(on_recreate="restart", topics={"include": [topic]}, offset_commit_interval_ms=500)
    link.update(refresh_topics_interval_seconds=1, delivery=delivery)
    path = write_config([link], state_dir=str(tmp_path / "state"))
    for p in (0, 1):
        produce(source, "source", topic, records("old", p, OLD))
    mirror = start_mirror("--config", str(path), "--link", name)
    wait_for_commits(source, "source", group, topic, 2, upto=[OLD, OLD], timeout_s=120, while_running=mirror.running)

    recreate(source, topic, 2)
    for p in (0, 1):
        produce(source, "source", topic, records("new", p, NEW))
    wait_for_commits(source, "source", group, topic, 2, upto=[NEW, NEW], timeout_s=120, while_running=mirror.running)
    got = target_keys(target, topic, 2 * (OLD + NEW))
    assert got == {p: [*(f"old-{p}-{i}" for i in range(OLD)), *(f"new-{p}-{i}" for i in range(NEW))] for p in (0, 1)}
    offsets = {p: [int(provenance(r, "source.offset")) for r in rs] for p, rs in by_partition(
        read_all(target, "target", topic, 2 * (OLD + NEW), timeout_s=60)).items()}  # fmt: skip
    assert offsets == {p: [*range(OLD), *range(NEW)] for p in (0, 1)}
    assert mirror.log().count("was deleted and created again") == 2
    assert mirror.stop() == 0
