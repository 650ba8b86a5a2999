"""The collector on the real local clusters: offsets, groups, members, and failures recorded as data."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition

from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_admin, new_consumer
from kernel.processes import free_port
from kernel.wait import wait_until
from monitor.collector import PartitionOffsets, Replicas, collect_cluster
from tests.kafka_helpers import Record, produce

pytestmark = pytest.mark.integration


def test_a_snapshot_has_offsets_groups_members_and_commits(
    clusters_config: MirrorwatchConfig, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 2)
    produce(source, "source", topic, [Record(value=b"x", partition=i % 2) for i in range(30)])
    active, committed_only = unique("active"), unique("simple")
    consumer = new_consumer(source, "source", active, {"auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    wait_until(
        lambda: consumer.consume(num_messages=100, timeout=0.5) and consumer.assignment(),
        timeout_s=30,
        description="the consumer to join and read",
    )
    consumer.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 15)], asynchronous=False)
    # A group that only commits (as a Spark link's group does): never joins, has no members.
    simple = new_consumer(source, "source", committed_only)
    simple.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    simple.close()
    try:
        # what a snapshot holds, not how soon: the round's 30 s ran out describing the groups once, under the loaded
        # suite (`describing: no answer (_TIMED_OUT)`, the collector saying so as it should)
        snapshot = collect_cluster(new_admin(source, "source"), "source", now_ms=123, cluster=source, timeout_s=120)
        member_id = consumer.memberid()
    finally:
        consumer.close()
    assert snapshot.up and snapshot.error is None and snapshot.observed_ms == 123
    assert snapshot.cluster_id
    assert snapshot.partitions[(topic, 0)] == PartitionOffsets(0, 15)
    assert snapshot.partitions[(topic, 1)] == PartitionOffsets(0, 15)
    assert snapshot.topics()[topic] == 2
    group = snapshot.groups[active]
    assert (group.members, group.state, group.error) == (1, "STABLE", None)
    assert dict(group.offsets) == {(topic, 0): 7, (topic, 1): 15}
    # who holds each partition, as the coordinator knows it (kafka-lag-exporter's member labels)
    assert {tp: m.consumer_id for tp, m in group.assignments.items()} == {(topic, 0): member_id, (topic, 1): member_id}
    assert all(m.host for m in group.assignments.values())
    # the metadata: the single broker of a local cluster leads and holds every replica
    [(broker_id, address)] = snapshot.brokers.items()
    assert address == source.bootstrap_servers
    assert snapshot.replicas[(topic, 1)] == Replicas(broker_id, (broker_id,), (broker_id,))
    simple_group = snapshot.groups[committed_only]
    assert (simple_group.members, dict(simple_group.offsets)) == (0, {(topic, 0): 3})
    assert snapshot.collect_seconds > 0


def test_an_unreachable_cluster_is_a_snapshot_that_says_so() -> None:
    nowhere = ClusterConfig(bootstrap_servers=f"127.0.0.1:{free_port()}")
    snapshot = collect_cluster(
        new_admin(nowhere, "nowhere", {"log_level": 0}), "nowhere", 5, cluster=nowhere, timeout_s=2
    )
    assert not snapshot.up
    assert snapshot.error is not None and snapshot.partitions == {} and snapshot.groups == {}
