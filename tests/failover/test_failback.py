"""Failover and back, on the real clusters: a group fails over from A to B, reads there while producers write on B,
and fails back to A over the reverse link. The reverse link does not send A's records back (provenance), and the
translation B -> A is exact too: A's own records, whose copies the group read on B, count as those copies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_consumer
from tests.failover.drills import consume_as_group, failover, keyed, link
from tests.kafka_helpers import Record, end_offsets, produce, wait_for_records
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration


def consume(cluster: ClusterConfig, alias: str, group: str, topic: str, n: int) -> list[bytes]:
    """Read exactly `n` records as `group` (where it is committed) and commit them, as an application would."""
    consumer = new_consumer(cluster, alias, group, {"auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < n:
            for msg in consumer.consume(num_messages=1, timeout=1.0):
                assert msg.error() is None, msg.error()
                values.append(msg.value() or b"")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def test_failover_and_failback_read_every_record_once(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    a, b = clusters_config.clusters["source"], clusters_config.clusters["target"]
    # one partition, so the group's commit on B lies among A's own records (with several, a consumer may have read
    # one partition entirely and not started another, which any translation gets right)
    partitions = 1
    topic, group = make_topic("source", partitions), unique("app")
    config = write_config([link("dr", topic), link("back", topic, source="target", target="source")])
    produce(a, "source", topic, keyed(0, 1000, partitions))
    forward = start_mirror("--config", str(config), "--link", "dr")
    wait_for_records(b, "target", topic, partitions, 1000)
    read = consume(a, "source", group, topic, 400)
    # A is lost: the group moves to B, where producers now write too
    assert forward.stop() == 0
    applied = failover("apply", config, "--link", "dr", "--group", group)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    produce(
        b,
        "target",
        topic,
        [Record(value=f"b{i}".encode(), key=f"k{i}".encode(), partition=i % partitions) for i in range(600)],
    )
    read += consume(b, "target", group, topic, 300)
    # A is back: the reverse link copies B's new records to A, and none of A's own back again
    backward = start_mirror("--config", str(config), "--link", "back")
    wait_for_records(a, "source", topic, partitions, 1600)
    assert sum(end_offsets(a, "source", topic, partitions)) == 1600
    plan = failover("plan", config, "--link", "back", "--group", group, "--json")
    assert plan.returncode == 0, plan.stderr
    applied = failover("apply", config, "--link", "back", "--group", group)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    everything = {f"r{i}".encode() for i in range(1000)} | {f"b{i}".encode() for i in range(600)}
    assert len(read) == len(set(read)) == 700
    unread = everything - set(read)
    back = consume_as_group(a, group, topic, lambda got: {r.value for r in got} >= unread)
    values = [r.value for r in back]
    assert len(values) == len(set(values)), "records read twice after failing back"
    assert set(values) == unread
    assert backward.stop() == 0
