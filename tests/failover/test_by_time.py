"""Time-based translation on a topic MirrorMaker 2 mirrored (no provenance): the real MirrorMaker 2 from the Maven
jars copies a topic whose records share timestamps in runs of ten, a group is committed inside such a run and at a
run's start, and the group then reads on the target after `failover apply`. Nothing is missed, and what it reads
twice is what the plan said."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from bench.mm2 import mm2_properties, running_mm2
from failover.mm2 import read_checkpoints
from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_consumer
from kernel.wait import wait_until
from tests.failover.drills import (
    apply_and_read,
    commit_source_group,
    failover,
    link,
    planned,
    predicted_twice,
    source_truth,
)
from tests.kafka_helpers import ReadRecord, Record, produce, wait_for_records

pytestmark = pytest.mark.integration


def test_time_based_translation_on_a_topic_mirrored_by_mirrormaker_2(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    partitions, n = 2, 2000
    topic, group = make_topic("source", partitions), unique("app")
    base = int(time.time() * 1000) - 3_600_000  # recent: the target topic keeps the default 7-day retention
    # per partition, ten records in a row share each timestamp
    produce(
        source,
        "source",
        topic,
        [
            Record(
                value=f"r{i}".encode(),
                key=f"k{i % 13}".encode(),
                partition=i % partitions,
                timestamp_ms=base + (i // 20) * 1000,
            )
            for i in range(n)
        ],
    )
    truth = source_truth(source, topic, partitions)
    mirrored = f"source.{topic}"  # MirrorMaker 2's DefaultReplicationPolicy, the source cluster's alias "source"
    commits = {0: 505, 1: 600}  # inside a run of equal timestamps (5 of it read already), and at a run's start
    commit_source_group(source, group, topic, commits)
    # MirrorMaker 2 also checkpoints the group (its own translation), for --mm2-checkpoints
    checkpointing = [
        "emit.heartbeats.enabled = false",
        "emit.checkpoints.interval.seconds = 1",
        "refresh.groups.interval.seconds = 1",
        f"groups = {group}",
        "sync.group.offsets.enabled = false",
    ]
    with running_mm2(tmp_path, "time", mm2_properties(clusters_config, "source", [topic], checkpointing)):
        wait_for_records(target, "target", mirrored, partitions, n, timeout_s=180, description="MirrorMaker 2 to copy")

        def checkpointed() -> bool:
            found = read_checkpoints(target, "target", "source.checkpoints.internal")
            return all(
                (group, mirrored, p) in found and found[(group, mirrored, p)].upstream == o for p, o in commits.items()
            )

        wait_until(checkpointed, timeout_s=120, interval_s=1, description="MirrorMaker 2 to checkpoint the group")
    config = write_config([link("mm2", topic, rename={"policy": "prefix"})])
    group_plan = planned(config, "mm2", group)
    assert {t["method"] for t in group_plan["partitions"]} == {"time"}
    assert predicted_twice(group_plan) == {0: 5}
    missed, twice = apply_and_read(config, "mm2", group, target, mirrored, truth, commits)
    assert missed == set()
    assert twice == {0: 5}

    unread = {v for v, (p, o) in truth.items() if o >= commits[p]}
    # MirrorMaker 2's own translation, read from its checkpoints: stated as such, and a consumer from there misses
    # nothing either (what it reads twice is not known to the plan)
    by_checkpoint = failover(
        "plan", config, "--link", "mm2", "--group", group, "--json", "--mm2-checkpoints", "source.checkpoints.internal"
    )
    assert by_checkpoint.returncode == 0, by_checkpoint.stderr
    (mm2_plan,) = json.loads(by_checkpoint.stdout)["groups"]
    assert {t["method"] for t in mm2_plan["partitions"]} == {"mm2-checkpoint"}
    from_checkpoint = read_from(target, mirrored, {t["partition"]: t["offset"] for t in mm2_plan["partitions"]})
    assert unread <= {r.value for r in from_checkpoint}
    missing = failover("plan", config, "--link", "mm2", "--group", group, "--mm2-checkpoints", "no.such.checkpoints")
    assert missing.returncode == 2 and "no MirrorMaker 2 checkpoint" in missing.stderr


def read_from(cluster: ClusterConfig, topic: str, offsets: dict[int, int]) -> list[ReadRecord]:
    """Every record of `topic` from these offsets to the end, read by assignment (no group)."""
    consumer = new_consumer(cluster, "target", "mirrorwatch-test-reader", {"enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
    out: list[ReadRecord] = []
    at_end: set[int] = set()
    try:
        while len(at_end) < len(offsets):
            for msg in consumer.consume(num_messages=1000, timeout=1):
                if msg.error() is None:
                    out.append(ReadRecord.of(msg))
                else:
                    at_end.add(msg.partition() or 0)
    finally:
        consumer.close()
    return out
