"""A target topic deleted under the link (issue #43, the target side), on real brokers. The link had mirrored 1,000
records of each of 2 partitions; the target topic was deleted and the source took 200 more per partition. Every
mirror in use today goes on as if nothing happened: the target topic is created again (by the mirror, or by the
broker's auto-creation) and the new records land in it, the 2,000 copied before gone without a word.

The link's workers note the id of the target topic each partition's records went to (`<state_dir>/topics/`), and
the keeper compares it with what the target has at every refresh. By default (`on_target_loss: stop`) both partitions
stop, failed, with the reason and the count (the 1,000 records per partition the target no longer has and the
source still does), the topic is not created again, and nothing is committed past what was copied; the link process
runs on (no crash loop). With `on_target_loss: recopy` the topic is created again and the source's records are
copied into it from its log start, once each, in order. Also while a recopy link runs: the topic deleted under it.
Both deliveries (exactly once: a transaction that wrote to the deleted topic is aborted and replayed, and the copy's
start is stored in the next one). The truth is what the test produced and a consumer reading the target."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_admin
from kernel.processes import free_port
from kernel.topic_notes import created_topic_ids
from kernel.wait import wait_until
from tests.kafka_helpers import (
    Record,
    by_partition,
    committed_offsets,
    end_offsets,
    produce,
    provenance,
    read_all,
    wait_for_commits,
)
from tests.processes import MirrorProcess, get_json

pytestmark = pytest.mark.integration

FIRST, MORE = 1000, 200  # records per partition before the target topic is deleted, and after


def records(generation: str, partition: int, count: int) -> list[Record]:
    return [Record(key=f"{generation}-{partition}-{i}".encode(), value=b"v", partition=partition) for i in range(count)]


def delete(cluster: ClusterConfig, topic: str) -> None:
    """Delete `topic` and wait until the cluster no longer lists it (KRaft deletes asynchronously)."""
    admin = new_admin(cluster, "target")  # referenced until the answer: a client collected early fails its futures
    (deleted,) = admin.delete_topics([topic], operation_timeout=30).values()
    deleted.result(timeout=30)
    wait_until(
        lambda: topic not in admin.list_topics(timeout=10).topics,
        timeout_s=60,
        ignore=(KafkaException,),
        description=f"{topic} gone from the target",
    )


def listed(cluster: ClusterConfig, topic: str) -> bool:
    admin = new_admin(cluster, "target")
    return topic in admin.list_topics(timeout=10).topics


def link_doc(name: str, group: str, topic: str, **fields: Any) -> dict[str, Any]:
    """The test's link: its topic, a commit every 500 ms and a topic refresh every second."""
    return {
        "name": name,
        "source": "source",
        "target": "target",
        "group_id": group,
        "topics": {"include": [topic]},
        "offset_commit_interval_ms": 500,
        "refresh_topics_interval_seconds": 1,
        **fields,
    }


def source_offsets(cluster: ClusterConfig, topic: str, expected: int) -> dict[int, list[int]]:
    """Per target partition, the source offsets of the records on it, in order (from their provenance)."""
    got = read_all(cluster, "target", topic, expected, timeout_s=60)
    return {p: [int(provenance(r, "source.offset")) for r in rs] for p, rs in by_partition(got).items()}


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_target_topic_deleted_under_the_link_stops_its_partitions_counted_then_recopy_restores_it(
    delivery: str,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group, name = make_topic("source", 2), unique("target-lost"), unique("link")
    port = free_port()

    def config(on_target_loss: str) -> Path:
        return write_config(
            [link_doc(name, group, topic, on_target_loss=on_target_loss, delivery=delivery)],
            monitor={"interval_seconds": 1},
            http={"host": "127.0.0.1", "port": port},
            state_dir=str(tmp_path / "state"),
        )

    for p in (0, 1):
        produce(source, "source", topic, records("first", p, FIRST))
    mirror = start_mirror("--config", str(config("stop")), "--link", name)
    monitor = start_mirror("--config", str(config("stop")), command="monitor")
    wait_for_commits(
        source, "source", group, topic, 2, upto=[FIRST, FIRST], timeout_s=120, while_running=mirror.running
    )

    delete(target, topic)
    for p in (0, 1):
        produce(source, "source", topic, records("more", p, MORE))

    # on_target_loss: stop (the default): both partitions failed, counted, said; the topic not created again
    def view() -> dict[str, Any]:
        body: dict[str, Any] = get_json(f"http://127.0.0.1:{port}/mirror/links/{name}")
        return body

    def failed() -> list[str | None]:
        return [p.get("failed") for p in sorted(view()["partitions"], key=lambda p: p["partition"])]

    wait_until(
        lambda: monitor.running() and mirror.running() and len(f := failed()) == 2 and all(f),
        timeout_s=90,
        ignore=(OSError,),  # the monitor's HTTP API not up yet
        description="both partitions failed, said by the monitor",
    )
    seen = view()
    gaps = sorted((g["partition"], g["reason"], g["action"], g["first_offset"], g["records"]) for g in seen["gaps"])
    assert gaps == [(0, "target-deleted", "stopped", 0, FIRST), (1, "target-deleted", "stopped", 0, FIRST)]
    assert seen["records_lost"] == 2 * FIRST
    assert "was deleted under the link: 1000 records the link had copied there" in seen["gaps"][0]["text"]
    assert mirror.log().count("was deleted under the link") == 2
    assert mirror.running()  # the link runs on, its stopped partitions said: no crash loop
    assert not listed(target, topic)  # not created again: the operator chooses
    assert committed_offsets(source, "source", group, topic, 2) == [FIRST, FIRST]  # nothing given up
    assert mirror.stop() == 0

    # a restart under the same rule finds it again from its notes (the topic would otherwise be created anew)
    again = start_mirror("--config", str(config("stop")), "--link", name)
    wait_until(
        lambda: again.running() and again.log().count("was deleted under the link") == 2,
        timeout_s=60,
        description="the restarted link to find the target topic lost again",
    )
    assert not listed(target, topic)
    assert again.stop() == 0

    # on_target_loss: recopy: the topic created again, the source's records copied into it from its log start
    recopy = start_mirror("--config", str(config("recopy")), "--link", name)
    total = FIRST + MORE
    wait_for_commits(
        source, "source", group, topic, 2, upto=[total, total], timeout_s=120, while_running=recopy.running
    )
    assert source_offsets(target, topic, 2 * total) == {p: list(range(total)) for p in (0, 1)}  # once each, in order

    def went_on() -> tuple[list[str | None], list[str]]:
        return failed(), sorted(g["action"] for g in view()["gaps"])

    wait_until(
        lambda: went_on() == ([None, None], ["recopied", "recopied"]),
        timeout_s=60,
        description="the monitor to say both partitions were copied again",
    )
    assert recopy.stop() == 0
    monitor.stop()


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_target_topic_deleted_under_a_running_recopy_link_is_copied_again_in_full(
    delivery: str,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group, name = make_topic("source", 2), unique("target-lost"), unique("link")
    doc = link_doc(name, group, topic, on_target_loss="recopy", delivery=delivery)
    path = write_config([doc], state_dir=str(tmp_path / "state"))
    for p in (0, 1):
        produce(source, "source", topic, records("first", p, FIRST))
    mirror = start_mirror("--config", str(path), "--link", name)
    wait_for_commits(
        source, "source", group, topic, 2, upto=[FIRST, FIRST], timeout_s=120, while_running=mirror.running
    )

    delete(target, topic)
    for p in (0, 1):
        produce(source, "source", topic, records("more", p, MORE))
    total = FIRST + MORE
    wait_for_commits(
        source, "source", group, topic, 2, upto=[total, total], timeout_s=120, while_running=mirror.running
    )
    assert source_offsets(target, topic, 2 * total) == {p: list(range(total)) for p in (0, 1)}
    assert mirror.log().count("was deleted under the link") == 2
    assert mirror.stop() == 0


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_target_topic_recreated_with_fewer_partitions_stops_every_partition_that_wrote_to_it(
    delivery: str,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Someone deleted the target topic and created it again with 1 partition instead of 2 (another topic id):
    under the default rule both partitions stop with reason `target-recreated`, counted, the link runs on (the
    partition count short of the source's is no longer a problem that ends it), and once it has found the topic it
    neither grows it nor writes into it."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group, name = make_topic("source", 2), unique("target-lost"), unique("link")
    path = write_config([link_doc(name, group, topic, delivery=delivery)], state_dir=str(tmp_path / "state"))
    for p in (0, 1):
        produce(source, "source", topic, records("first", p, FIRST))
    mirror = start_mirror("--config", str(path), "--link", name)
    wait_for_commits(
        source, "source", group, topic, 2, upto=[FIRST, FIRST], timeout_s=120, while_running=mirror.running
    )
    # deleted and created again while the mirror is frozen: its next refresh finds the other topic, never the gap
    # between the two (that is the deletion of the test above)
    os.kill(mirror.process.pid, signal.SIGSTOP)
    try:
        time.sleep(1)  # what it asked just before is answered by the broker before the deletion, not in between
        delete(target, topic)
        make_topic("target", 1, name=topic)
        # and in the broker's metadata (which a CreateTopics answer can precede by a moment)
        wait_until(lambda: listed(target, topic), timeout_s=30, description="the new topic in the metadata")
    finally:
        os.kill(mirror.process.pid, signal.SIGCONT)
    wait_until(
        lambda: mirror.log().count("was deleted and created again (another topic id) under the link") == 2,
        timeout_s=60,
        description="both partitions stopped for the recreated target topic",
    )
    # found at the next topic refresh; records arriving after it are not written into the stranger's topic (what
    # arrives between the recreation and that refresh may be: the README says so)
    for p in (0, 1):
        produce(source, "source", topic, records("more", p, MORE))
    time.sleep(3)  # three refreshes and many polls: time to write them, were they to be written
    assert mirror.running()
    admin = new_admin(target, "target")
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 1  # not grown: the operator chooses
    assert end_offsets(target, "target", topic, 1) == [0]  # nothing written into the stranger's topic
    assert committed_offsets(source, "source", group, topic, 2) == [FIRST, FIRST]
    assert mirror.stop() == 0


def test_the_id_of_a_target_topic_just_created_is_known_in_the_same_round(
    clusters_config: MirrorwatchConfig, unique: Callable[[str], str]
) -> None:
    """The keeper notes the id of each target topic it creates, so that a deletion is found (CI at b659a2d: a spark
    link whose keeper refreshes once a day never noted it). The broker answering may not describe a topic the
    controller has just created: 1 in 60 here, created one at a time and read at once (`topic_ids`: this test failed
    2 of 3 runs with it); `created_topic_ids` asks again until it does."""
    admin = new_admin(clusters_config.clusters["target"], "target")
    created, missed = [unique(f"created-{i}") for i in range(60)], []
    for topic in created:
        admin.create_topics([NewTopic(topic, 2, -1)], operation_timeout=30)[topic].result(timeout=30)
        if topic not in created_topic_ids(admin, [topic]):
            missed.append(topic)
    for future in admin.delete_topics(created, operation_timeout=30).values():
        future.result(timeout=30)
    assert missed == []
