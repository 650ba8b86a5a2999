"""Taking over from another mirror on the real clusters (issue #21): a MirrorMaker 1 style group-based mirror,
Replicator's offsets records in its documented format, real MirrorMaker 2 (dedicated mode) both ways, and every
refusal with its message and exit code. The judge is the target's contents, read by a plain consumer."""

from __future__ import annotations

import collections
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from bench.mm2 import mm2_properties, running_mm2
from failover.migrate_format import MM2_CONNECTOR
from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_admin, new_consumer, new_producer
from kernel.wait import wait_until
from tests.kafka_helpers import Record, end_offsets, produce, read_to_end, wait_for_commits
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

PARTITIONS = 2


def records(start: int, count: int) -> list[Record]:
    return [Record(key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTITIONS) for i in range(start, start + count)]


def group_copy(
    source: ClusterConfig, target: ClusterConfig, group: str, topic: str, target_topic: str, count: int
) -> None:
    """What MirrorMaker 1 does: a consumer in `group` reads `count` records, a producer writes them to the same
    partitions with their timestamps, and once the target acknowledged them the consumer commits (then it stops)."""
    consumer: Consumer = new_consumer(
        source, "source", group, {"enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    producer = new_producer(target, "target", {"acks": "all"})
    try:
        consumer.subscribe([topic])
        copied = 0
        while copied < count:
            for msg in consumer.consume(min(100, count - copied), timeout=1.0):
                if msg.error() is None:
                    producer.produce(
                        target_topic,
                        key=msg.key(),
                        value=msg.value(),
                        partition=msg.partition() or 0,
                        timestamp=msg.timestamp()[1],
                    )
                    copied += 1
        assert producer.flush(30) == 0
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def migrate(start_mirror: Callable[..., MirrorProcess], *args: str) -> tuple[int, str]:
    process = start_mirror(*args, command="migrate")
    code = process.wait_exit(timeout_s=120)
    return code, process.log()


def values_on(cluster: ClusterConfig, alias: str, topic: str) -> collections.Counter[bytes]:
    return collections.Counter(r.value or b"" for r in read_to_end(cluster, alias, topic, PARTITIONS))


def link(name: str, topic: str, group: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "group_id": group,
        "offset_commit_interval_ms": 300,
        **fields,
    }


@pytest.mark.secured("oauthbearer", "oidc")  # a client like any other: with tokens (tests/conftest.py)
def test_mirrormaker_1_takeover_continues_from_its_group_with_nothing_missing_or_twice(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, mm1_group, group = make_topic("source", PARTITIONS), unique("mm1"), unique("link")
    make_topic("target", PARTITIONS, name=topic)
    produce(source, "source", topic, records(0, 1000))
    group_copy(source, target, mm1_group, topic, topic, 600)
    produce(source, "source", topic, records(1000, 400))  # traffic went on after MirrorMaker 1 stopped
    config = str(write_config([link("takeover", topic, group)]))

    code, out = migrate(start_mirror, "from", "mm1", "--config", config, "--link", "takeover", "--group", mm1_group)
    assert code == 0, out
    assert out.count("exact: 0 twice, 0 skipped") == PARTITIONS, out
    assert "0 record(s) copied twice, 0 skipped" in out
    code, out = migrate(
        start_mirror, "from", "mm1", "--config", config, "--link", "takeover", "--group", mm1_group, "--apply"
    )
    assert code == 0 and "committed 2 position(s)" in out, out

    mirror = start_mirror("--config", config)
    wait_for_commits(source, "source", group, topic, PARTITIONS, timeout_s=90)
    assert mirror.stop() == 0
    assert values_on(target, "target", topic) == collections.Counter(r.value for r in records(0, 1400))


def test_replicator_offsets_the_newest_version_wins_and_the_link_continues(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group = make_topic("source", PARTITIONS), unique("link")
    make_topic("target", PARTITIONS, name=topic)
    offsets_topic = make_topic("target", 3)
    produce(source, "source", topic, records(0, 800))
    group_copy(source, target, unique("copier"), topic, topic, 800)  # Replicator copied everything ...
    produce(source, "source", topic, records(800, 200))  # ... and stopped before these

    def key(t: str, p: int) -> bytes:
        return json.dumps(["replicator", {"topic": t, "partition": p}], separators=(",", ":")).encode()

    def value(last: int) -> bytes:
        return json.dumps({"offset": last}).encode()

    history = [
        (key(topic, 0), value(100)),
        (key(topic, 1), value(150)),
        (key("gone", 0), value(5)),
        (key(topic, 0), value(250)),
        (key(topic, 1), None),  # a tombstone ...
        (key(topic, 1), value(399)),  # ... and the position written again
        (key("gone", 0), None),  # a topic no longer mirrored, deleted
        (key(topic, 0), value(399)),  # the newest: 400 copied of partition 0
        (json.dumps(["other-connector", {"topic": topic, "partition": 0}]).encode(), value(3)),
    ]
    # One partition of the offsets topic per key, as Connect's producer would place them
    produce(target, "target", offsets_topic, [Record(key=k, value=v, partition=0) for k, v in history])
    config = str(write_config([link("takeover", topic, group)]))
    args = ("from", "replicator", "--config", config, "--link", "takeover", "--connector", "replicator")
    code, out = migrate(start_mirror, *args, "--offsets-topic", offsets_topic, "--apply")
    assert code == 0, out
    assert f"{topic}[0]: previous mirror at 400" in out and f"{topic}[1]: previous mirror at 400" in out, out
    assert out.count("exact: 0 twice, 0 skipped") == 2, out

    mirror = start_mirror("--config", config)
    wait_for_commits(source, "source", group, topic, PARTITIONS, timeout_s=90)
    assert mirror.stop() == 0
    assert values_on(target, "target", topic) == collections.Counter(r.value for r in records(0, 1000))


def test_mirrormaker_2_both_ways_twice_is_what_it_wrote_after_its_last_offset_flush(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """MirrorMaker 2 mirrors, flushing its offsets every 3 s, and is SIGKILLed: what it wrote after its last flush
    is on the target but not in its offsets. The dry run counts those records; the link then copies exactly them
    again and everything else once. Back: `migrate to mm2`, and MirrorMaker 2 continues after the link."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group = make_topic("source", PARTITIONS), unique("link")
    alias = "source"  # MirrorMaker 2's name for the source cluster: its targets are `source.<topic>`
    target_topic = f"{alias}.{topic}"
    produce(source, "source", topic, records(0, 3000))
    lines = mm2_properties(
        clusters_config,
        alias,
        [topic],
        extra=[
            "emit.checkpoints.enabled = false",
            "emit.heartbeats.enabled = false",
            "sync.group.offsets.enabled = false",
            # a worker setting: MirrorMaker 2 takes it for the herder of the flow into `target` only with that
            # prefix (MirrorMakerConfig.workerConfig); unprefixed it is ignored and offsets flush every 60 s
            "target.offset.flush.interval.ms = 3000",
        ],
    )
    with running_mm2(tmp_path, "first", lines) as mm2:
        wait_until(
            lambda: sum(end_offsets(target, "target", target_topic, PARTITIONS)) >= 3000,
            timeout_s=120,
            interval_s=0.5,
            ignore=(Exception,),
            description="MirrorMaker 2 to copy the first records",
        )
        wait_until(
            lambda: mm2_positions(target, alias) >= 3000,
            timeout_s=60,
            interval_s=0.5,
            ignore=(Exception,),
            description="its offsets flushed",
        )
        produce(source, "source", topic, records(3000, 500))
        wait_until(
            lambda: sum(end_offsets(target, "target", target_topic, PARTITIONS)) >= 3500,
            timeout_s=60,
            interval_s=0.1,
            description="MirrorMaker 2 to copy the next records",
        )
        os.killpg(mm2.pid, signal.SIGKILL)  # before its next flush, most likely: the last records are unflushed
        mm2.wait(timeout=30)
    produce(source, "source", topic, records(3500, 500))  # traffic goes on
    config = str(write_config([link("takeover", topic, group, rename={"policy": "prefix"})]))

    code, out = migrate(start_mirror, "from", "mm2", "--config", config, "--link", "takeover", "--json")
    assert code == 0, out
    plan = json.loads(out[out.index("{") :])
    predicted = sum(row["twice"] for row in plan["rows"])
    assert all(row["check"] in ("exact", "located") for row in plan["rows"]), plan
    assert sum(row["skipped"] for row in plan["rows"]) == 0
    code, out = migrate(start_mirror, "from", "mm2", "--config", config, "--link", "takeover", "--apply")
    assert code == 0, out
    mirror = start_mirror("--config", config)
    wait_for_commits(source, "source", group, topic, PARTITIONS, timeout_s=90)
    assert mirror.stop() == 0
    on_target = values_on(target, "target", target_topic)
    assert set(on_target) == {r.value for r in records(0, 4000)}, "a record missing on the target"
    assert sum(n - 1 for n in on_target.values()) == predicted  # the twice are exactly the predicted ones

    # The way back: MirrorMaker 2 continues after the link
    produce(source, "source", topic, records(4000, 300))
    code, out = migrate(start_mirror, "to", "mm2", "--config", config, "--link", "takeover", "--apply")
    assert code == 0 and f"wrote {PARTITIONS} MirrorMaker 2 offset(s)" in out, out
    with running_mm2(tmp_path, "again", lines):
        wait_until(
            lambda: sum(end_offsets(target, "target", target_topic, PARTITIONS)) >= 4300 + predicted,
            timeout_s=120,
            interval_s=0.5,
            description="MirrorMaker 2 to continue after the link",
        )
        after = values_on(target, "target", target_topic)
    assert set(after) == {r.value for r in records(0, 4300)}
    assert sum(n - 1 for n in after.values()) == predicted  # nothing copied twice on the way back


def mm2_positions(target: ClusterConfig, alias: str) -> int:
    """The sum of MirrorMaker 2's flushed positions (newest per key) in its offsets topic on the target."""
    topic = f"mm2-offsets.{alias}.internal"
    consumer = new_consumer(target, "target", "mirrorwatch-test-reader", {"enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        newest: dict[bytes, int] = {}
        while msgs := consumer.consume(500, timeout=2.0):
            for msg in msgs:
                k, v = msg.key(), msg.value()
                if msg.error() is None and k and v and MM2_CONNECTOR.encode() in k:
                    newest[k] = json.loads(v)["offset"] + 1
        return sum(newest.values())
    finally:
        consumer.close()


def test_refused_while_the_previous_mirror_or_the_link_runs_exit_1_and_nothing_committed(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, mm1_group, group = make_topic("source", PARTITIONS), unique("mm1"), unique("link")
    make_topic("target", PARTITIONS, name=topic)
    produce(source, "source", topic, records(0, 200))
    group_copy(source, target, mm1_group, topic, topic, 100)
    config = str(write_config([link("takeover", topic, group)]))
    before = committed_of(source, group, topic)
    base = ("from", "mm1", "--config", config, "--link", "takeover", "--group", mm1_group, "--apply")

    # The previous mirror still running: its group has a member
    member = new_consumer(source, "source", mm1_group, {"enable.auto.commit": False})
    member.subscribe([topic])
    wait_until(lambda: member.poll(0.5) is not None or bool(member.assignment()), timeout_s=30, description="joined")
    code, out = migrate(start_mirror, *base)
    member.close()
    assert code == 1 and f"MirrorMaker 1's group {mm1_group!r} has 1 active member(s): stop it first" in out, out

    # ... or writing the target: it grew while watched
    stop = False
    producer = new_producer(target, "target", {})

    def keep_writing() -> None:
        while not stop:
            producer.produce(topic, value=b"late", partition=0)
            producer.flush(1)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        code, out = migrate(start_mirror, *base)
    finally:
        stop = True
        writer.join()
    assert code == 1 and "grew in 5 s: the previous mirror is still running" in out, out
    assert committed_of(source, group, topic) == before, "a refused migration committed something"

    # The link itself is running
    mirror = start_mirror("--config", config)
    wait_for_commits(source, "source", group, topic, PARTITIONS, timeout_s=60)
    code, out = migrate(start_mirror, *base)
    assert code == 1 and f"the link's group {group!r} has 1 active member(s)" in out, out
    assert mirror.stop() == 0


def committed_of(source: ClusterConfig, group: str, topic: str) -> list[int]:
    consumer = new_consumer(source, "source", group, {"enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def test_refused_for_names_positions_or_topics_that_do_not_fit_and_nothing_committed(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group = make_topic("source", PARTITIONS), unique("link")
    produce(source, "source", topic, records(0, 200))
    config = str(write_config([link("takeover", topic, group)]))

    # A rename policy writing other names than MirrorMaker 2 did (usage: exit 2, with the rename to use)
    offsets_topic = make_topic("target", 1)
    key = json.dumps([MM2_CONNECTOR, {"cluster": "source", "partition": 0, "topic": topic}]).encode()
    produce(target, "target", offsets_topic, [Record(key=key, value=b'{"offset": 9}', partition=0)])
    code, out = migrate(
        start_mirror, "from", "mm2", "--config", config, "--link", "takeover", "--offsets-topic", offsets_topic
    )
    assert code == 2 and "give the link `rename: {policy: prefix}`" in out, out

    # A position beyond the high-watermark (exit 1), and one of a topic missing on the source (exit 2)
    def replicator(config_path: str, *positions: tuple[str, int, int]) -> tuple[int, str]:
        offsets = make_topic("target", 1)
        history = [
            Record(
                key=json.dumps(["r", {"topic": t, "partition": p}]).encode(), value=b'{"offset": %d}' % o, partition=0
            )
            for t, p, o in positions
        ]
        produce(target, "target", offsets, history)
        return migrate(
            start_mirror,
            *("from", "replicator", "--config", config_path, "--link", "takeover", "--connector", "r"),
            *("--offsets-topic", offsets, "--apply"),
        )

    before = committed_of(source, group, topic)
    code, out = replicator(config, (topic, 0, 5_000))
    assert code == 1 and f"{topic}[0]: position 5001 is beyond the high-watermark 100" in out, out
    other = unique("missing")
    both = str(write_config([link("takeover", f"{topic}|{other}", group)]))
    code, out = replicator(both, (topic, 0, 10), (other, 0, 10))
    assert code == 2 and f"positions for topics missing on source: [{other!r}]" in out, out
    # A position below the log start (records retention removed): exit 1, per partition, never clamped
    admin = new_admin(source, "source")  # kept: its futures need it alive
    for future in admin.delete_records([TopicPartition(topic, 0, 50)]).values():
        future.result(timeout=30)
    code, out = replicator(config, (topic, 0, 10))
    assert code == 1 and f"{topic}[0]: position 11 is below the log start 50" in out, out
    assert committed_of(source, group, topic) == before, "a refused migration committed something"
