"""Time-based translation on a topic MirrorMaker 2 mirrored (no provenance): the real MirrorMaker 2 from the Maven
jars copies a topic whose records share timestamps in runs of ten, a group is committed inside such a run and at a
run's start, and the group then reads on the target after `failover apply`. Nothing is missed, and what it reads
twice is what the plan said."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.mm2 import DATA_ONLY, mm2_properties, running_mm2
from mirrorwatch.config import MirrorwatchConfig
from tests.failover.test_drill import (
    commit_source_group,
    consume_as_group,
    failover,
    judge,
    link,
    planned,
    predicted_twice,
    source_truth,
)
from tests.kafka_helpers import Record, produce, wait_for_records

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
    with running_mm2(tmp_path, "time", mm2_properties(clusters_config, "source", [topic], DATA_ONLY)):
        wait_for_records(target, "target", mirrored, partitions, n, timeout_s=180, description="MirrorMaker 2 to copy")
    commits = {0: 505, 1: 600}  # inside a run of equal timestamps (5 of it read already), and at a run's start
    commit_source_group(source, group, topic, commits)
    config = write_config([link("mm2", topic, rename={"policy": "prefix"})])
    group_plan = planned(config, "mm2", group)
    assert {t["method"] for t in group_plan["partitions"]} == {"time"}
    assert predicted_twice(group_plan) == {0: 5}
    applied = failover("apply", config, "--link", "mm2", "--group", group)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    unread = {v for v, (p, o) in truth.items() if o >= commits[p]}
    read = consume_as_group(target, group, mirrored, lambda got: {r.value for r in got} >= unread)
    missed, twice = judge(truth, commits, read)
    assert missed == set()
    assert twice == {0: 5}
