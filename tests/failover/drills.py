"""What the failover drills share (tests/failover): the link they mirror, the failover commands as a subprocess, a
group's commits set on the source, the source read directly (the truth), a group reading on the target as an
application would, and the judge of what it missed and read twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition

from kernel.config import ClusterConfig
from kernel.kafka import new_admin, new_consumer
from kernel.wait import wait_until
from tests.kafka_helpers import ReadRecord, Record, read_to_end

__all__ = [
    "apply_and_read",
    "commit_source_group",
    "consume_as_group",
    "failover",
    "judge",
    "keyed",
    "link",
    "planned",
    "predicted_twice",
    "source_truth",
]


def link(name: str, topic: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "refresh_topics_interval_seconds": 2,
        "offset_commit_interval_ms": 500,
        "consumer_properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        **fields,
    }


def failover(command: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", "failover", command, "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# a group coordinator loading or moving (librdkafka says so non-retriable in an admin answer): asked again
_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)


def commit_source_group(cluster: ClusterConfig, group: str, topic: str, offsets: dict[int, int]) -> None:
    """The group's commits on the source, set as a consumer that read exactly the records below them would."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in offsets.items()])
    admin = new_admin(cluster, "source")  # held until the answer is in: a collected client never completes its futures

    def committed() -> bool:  # a coordinator still loading (a cluster just started) is asked again
        result = admin.alter_consumer_group_offsets([request])[group].result(timeout=30)
        errors = [tp.error for tp in result.topic_partitions if tp.error is not None]
        assert all(e.retriable() or e.code() in _MOVING for e in errors), errors
        return not errors

    wait_until(committed, timeout_s=60, interval_s=0.5, description=f"group {group}'s commits on the source")


def source_truth(cluster: ClusterConfig, topic: str, partitions: int) -> dict[bytes, tuple[int, int]]:
    """value -> (partition, offset) of every committed record on the source, read directly."""
    return {r.value or b"": (r.partition, r.offset) for r in read_to_end(cluster, "source", topic, partitions)}


def consume_as_group(
    cluster: ClusterConfig, group: str, topic: str, until: Callable[[list[ReadRecord]], bool], quiet_s: float = 3.0
) -> list[ReadRecord]:
    """Read `topic` as `group` on the target (where `failover apply` left it) until `until` holds and nothing more
    arrived for `quiet_s`; commits what it read, as an application would."""
    consumer = new_consumer(
        cluster, "target", group, {"auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    )
    got: list[ReadRecord] = []
    try:
        consumer.subscribe([topic])
        deadline, last_new = time.monotonic() + 120, time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=5000, timeout=0.5)
            for msg in batch:
                assert msg.error() is None, msg.error()
                got.append(ReadRecord.of(msg))
            if batch:
                last_new = time.monotonic()
            elif until(got) and time.monotonic() - last_new >= quiet_s:
                return got
        raise AssertionError(f"the group read {len(got)} records and never got what it should")
    finally:
        consumer.close()


def judge(
    truth: dict[bytes, tuple[int, int]], commits: dict[int, int], read: Iterable[ReadRecord]
) -> tuple[set[bytes], dict[int, int]]:
    """(records at or after the commits that were not read, per target partition the reads of records already read
    on the source or read again)."""
    unread = {v for v, (p, o) in truth.items() if o >= commits[p]}
    seen: set[bytes] = set()
    twice: dict[int, int] = {}
    for r in read:
        value = r.value or b""
        if value in seen or value not in unread:
            twice[r.partition] = twice.get(r.partition, 0) + 1
        seen.add(value)
    return unread - seen, twice


def apply_and_read(
    config: Path,
    name: str,
    group: str,
    target: ClusterConfig,
    topic: str,
    truth: dict[bytes, tuple[int, int]],
    commits: dict[int, int],
) -> tuple[set[bytes], dict[int, int]]:
    """`failover apply` for the group, then the group reads `topic` on the target until it has every record at or
    after its source commits: what it missed, and per partition what it read twice (`judge`)."""
    applied = failover("apply", config, "--link", name, "--group", group)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    unread = {v for v, (p, o) in truth.items() if o >= commits[p]}
    read = consume_as_group(target, group, topic, lambda got: {r.value for r in got} >= unread)
    return judge(truth, commits, read)


def planned(config: Path, name: str, group: str) -> dict[str, Any]:
    result = failover("plan", config, "--link", name, "--group", group, "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    plan = json.loads(result.stdout)
    assert [g["group"] for g in plan["groups"]] == [group]
    return dict(plan["groups"][0])


def predicted_twice(group_plan: dict[str, Any]) -> dict[int, int]:
    return {t["partition"]: t["read_twice"] for t in group_plan["partitions"] if t["read_twice"]}


def keyed(start: int, n: int, partitions: int) -> list[Record]:
    return [
        Record(value=f"r{i}".encode(), key=f"k{i % 97}".encode(), partition=i % partitions)
        for i in range(start, start + n)
    ]
