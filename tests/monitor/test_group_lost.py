"""A consumer group's records deleted before it read them (issue #43), on real brokers: a group committed 100 of a
partition's 1,000 records and left; the records below offset 600 were deleted (`delete-records`, what retention does
over a weekend). The monitor counts the 500 it will never read — the truth is what the test committed and deleted —
gives the partition and the group ERR (rule 0), and says it in the Burrow view and in /metrics; once the group
commits past the log start they are gone from the figures again. Burrow and kafka_exporter count them as lag. And a
group's first commit on a topic deleted and created again is not read as a move backwards from its old commits."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from kernel.config import MirrorwatchConfig
from kernel.kafka import new_admin, new_consumer
from kernel.wait import wait_until
from monitor.evaluator import GroupEvaluation, Status
from monitor.exporter import MonitorCollector
from monitor.http import create_app
from monitor.service import MonitorService
from tests.kafka_helpers import Record, produce, recreate
from tests.processes import session_config

pytestmark = pytest.mark.integration


@pytest.fixture
def service(clusters_config: MirrorwatchConfig) -> Iterator[MonitorService]:
    config = session_config(clusters_config, monitor={"interval_seconds": 1, "window": 3})
    monitor = MonitorService(config.monitor, config.clusters, config.links)
    yield monitor
    monitor.stop()


def lost_series(service: MonitorService, group: str) -> dict[tuple[str, str], float]:
    text = MonitorCollector(service).render().decode()
    return {
        (s.labels["topic"], s.labels["partition"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "mirrorwatch_consumergroup_records_lost" and s.labels["group"] == group
    }


def test_a_groups_unread_records_deleted_below_its_commit_are_counted_exactly_and_read_err(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    service: MonitorService,
) -> None:
    source = clusters_config.clusters["source"]
    topic, group = make_topic("source", 2), unique("weekend")
    for p in (0, 1):
        produce(source, "source", topic, [Record(value=b"x", partition=p) for _ in range(1000)])
    consumer = new_consumer(source, "source", group, {"enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 100), TopicPartition(topic, 1, 1000)], asynchronous=False)
    admin = new_admin(source, "source")  # held: its futures complete on its thread
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 600)]).values()
    assert deleted.result().low_watermark == 600
    deleted_ms = int(time.time() * 1000)

    evaluation = evaluation_of(service, group, committed=100, after_ms=deleted_ms)
    by_partition = {p.partition: p for p in evaluation.partitions}
    assert (by_partition[0].records_lost, by_partition[0].status) == (500, Status.ERR)
    assert (by_partition[1].records_lost, by_partition[1].status) == (0, Status.OK)
    assert evaluation.status == Status.ERR
    assert lost_series(service, group) == {(topic, "0"): 500}
    lag = TestClient(create_app(service)).get(f"/v3/kafka/source/consumer/{group}/lag").json()["status"]
    assert lag["status"] == "ERR"
    assert {p["partition"]: p["records_lost"] for p in lag["partitions"]} == {0: 500, 1: 0}

    consumer.commit(offsets=[TopicPartition(topic, 0, 1000)], asynchronous=False)  # read on past the log start
    committed_ms = int(time.time() * 1000)
    consumer.close()
    evaluation = evaluation_of(service, group, committed=1000, after_ms=committed_ms)
    assert [(p.records_lost, p.status) for p in evaluation.partitions] == [(0, Status.OK), (0, Status.OK)]
    assert evaluation.status == Status.OK and lost_series(service, group) == {}


def evaluation_of(
    service: MonitorService, group: str, committed: int | None = None, after_ms: int = 0
) -> GroupEvaluation:
    """The group's evaluation from the first round that lists it (a group just committed may miss one listing) and,
    with `committed`, that saw partition 0 committed there at `after_ms` or later: the monitor follows commits in
    __consumer_offsets (a round right after a commit may predate its reading), and a round's collection that ran
    over its wait joins the next round (its snapshot may predate the test's last change). Up to 90 s: late in a
    loaded run, the shared clusters hold every earlier test's groups."""

    def listed() -> GroupEvaluation | None:
        seen = service.collect().groups.get(("source", group))
        if seen is None:
            return None
        ends = {p.partition: p.end for p in seen.evaluation.partitions if p.end is not None}
        if committed is not None and not (
            0 in ends and ends[0].offset == committed and ends[0].observed_ms >= after_ms
        ):
            return None
        return seen.evaluation

    found: GroupEvaluation = wait_until(listed, timeout_s=90, description=f"the monitor to list {group}")
    return found


def test_a_groups_first_commit_on_a_topic_deleted_and_created_again_is_not_a_rewind(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    service: MonitorService,
) -> None:
    """The group had read all 1,000 records of the topic; the topic was deleted and created again (Kafka drops the
    group's commit with it) and the group read 50 of the new topic's 300. Its window held commits of the old log: the
    new commit, below them, read as a move backwards (REWIND, the group ERR). The window starts again on the new log."""
    source = clusters_config.clusters["source"]
    topic, group = make_topic("source", 1), unique("reborn")
    produce(source, "source", topic, [Record(value=b"old") for _ in range(1000)])
    consumer = new_consumer(source, "source", group, {"enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 1000)], asynchronous=False)
    assert evaluation_of(service, group, committed=1000).status == Status.OK

    recreate(source, topic, 1)
    produce(source, "source", topic, [Record(value=b"new") for _ in range(300)])
    consumer.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
    committed_ms = int(time.time() * 1000)
    consumer.close()
    evaluation = evaluation_of(service, group, committed=50, after_ms=committed_ms)
    (partition,) = evaluation.partitions
    assert partition.start is not None and partition.start.offset == 50  # nothing of the old log's window
    assert partition.status not in (Status.REWIND, Status.ERR) and evaluation.status != Status.ERR, evaluation
    assert partition.current_lag == 250
