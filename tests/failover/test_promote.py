"""`mirrorwatch failover promote` on real clusters (issue #42): the whole cutover of a link in steps that each say what
they checked. Refused while the source's producers still write and while the link lags, each with its reason, and
for a paused link; a dry run commits nothing; a promotion commits the groups exactly (the group then reads on the
target every record it had not read: none missed, none twice), records where the link stood on the target, and
stops the running mirror (a record produced after it is not copied). The truth: what the test produced, the source
read directly, the target's end offsets and what the group reads there."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from failover.promote import PROMOTIONS_TOPIC
from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_consumer
from kernel.wait import wait_until
from tests.failover.drills import commit_source_group, consume_as_group, failover, judge, keyed, link, source_truth
from tests.kafka_helpers import end_offsets, produce, read_all, read_to_end, wait_for_commits
from tests.mirror.test_pause import link_command
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

PARTITIONS = 3


def promote(config: Path, name: str, *args: str) -> tuple[int, str]:
    done = failover("promote", config, "--link", name, "--settle-seconds", "2", *args)
    return done.returncode, done.stdout + done.stderr


def target_commits(clusters_config: MirrorwatchConfig, group: str, topic: str) -> list[int]:
    consumer = new_consumer(clusters_config.clusters["target"], "target", group, {"enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return [tp.offset for tp in sorted(found, key=lambda tp: tp.partition)]
    finally:
        consumer.close()


def promotions(clusters_config: MirrorwatchConfig, name: str) -> list[dict[str, Any]]:
    """The promotion records of the link on the target (read from the start of the topic)."""
    consumer = new_consumer(clusters_config.clusters["target"], "target", "mirrorwatch-test-promotions")
    if PROMOTIONS_TOPIC not in consumer.list_topics(timeout=30).topics:
        consumer.close()
        return []  # no promotion yet on this cluster
    try:
        consumer.assign([TopicPartition(PROMOTIONS_TOPIC, 0, 0)])
        found: list[dict[str, Any]] = []
        _, end = consumer.get_watermark_offsets(TopicPartition(PROMOTIONS_TOPIC, 0), timeout=30)
        read = 0
        while read < end:
            for msg in consumer.consume(num_messages=1000, timeout=1):
                read = (msg.offset() or 0) + 1
                if msg.error() is None and msg.key() == name.encode():
                    found.append(json.loads(msg.value() or b"{}"))
        return found
    finally:
        consumer.close()


def trickle_while(source: ClusterConfig, topic: str, action: Callable[[], tuple[int, str]]) -> tuple[int, str]:
    """`action` while a producer writes a few records to the topic every 0.2 s."""
    stop = threading.Event()

    def trickle() -> None:
        n = 300
        while not stop.is_set():
            produce(source, "source", topic, keyed(n, 3, PARTITIONS))
            n += 3
            stop.wait(0.2)

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    try:
        return action()
    finally:
        stop.set()
        writer.join()


def test_promote_refuses_while_producers_write_or_the_link_lags_then_commits_the_groups_and_stops_the_link(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source = clusters_config.clusters["source"]
    topic, name, app = make_topic("source", PARTITIONS), unique("link"), unique("app")
    back = unique("back")  # the way home (failback): from the target to the source, not running until then
    links = [link(name, topic), link(back, topic, source="target", target="source")]
    config = write_config(links, canary={"enabled": False}, state_dir=str(tmp_path / "state"))
    groups = ("--groups", f"{app}.*")
    produce(source, "source", topic, keyed(0, 300, PARTITIONS))
    commit_source_group(source, app, topic, dict.fromkeys(range(PARTITIONS), 40))  # the application read 40 of 100
    mirror = start_mirror("--config", str(config), "--link", name)
    wait_for_commits(source, "source", f"mirrorwatch-{name}", topic, PARTITIONS, upto=[100] * PARTITIONS)

    # 1. the source's producers still write: refused at the first step, nothing else judged
    code, said = trickle_while(source, topic, lambda: promote(config, name, *groups, "--dry-run"))
    assert code == 1, said
    assert "step 1/5 quiet: REFUSED: producers still write" in said and "step 2/5" not in said, said

    # 2. the link lags (its mirror stopped, once it copied the trickle, while the source took 60 more records):
    # refused at the second step
    ends = end_offsets(source, "source", topic, PARTITIONS)
    wait_for_commits(source, "source", f"mirrorwatch-{name}", topic, PARTITIONS, upto=ends)
    assert mirror.stop() == 0
    produce(source, "source", topic, keyed(10_000, 60, PARTITIONS))
    code, said = promote(config, name, *groups, "--dry-run", "--wait-seconds", "2")
    assert code == 1, said
    assert "step 1/5 quiet: ok" in said and "step 2/5 copied: REFUSED" in said, said
    assert "has not copied 60 record(s)" in said and "is its mirror running?" in said, said

    # 3. a paused link is refused before anything is checked
    mirror = start_mirror("--config", str(config), "--link", name)
    assert link_command(config, "pause", "--link", name).returncode == 0
    code, said = promote(config, name, *groups, "--dry-run")
    assert code == 1 and "is paused" in said and "step 1/5" not in said, said
    resumed = link_command(config, "resume", "--link", name)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    # 4. a dry run: every check passes, the group's commit is said and not made
    code, said = promote(config, name, *groups, "--dry-run", "--wait-seconds", "60")
    assert code == 0, said
    assert "step 3/5 canary: ok: not judged" in said and f"{app}: would commit" in said, said
    assert "dry run: nothing was changed" in said, said
    assert target_commits(clusters_config, app, topic) == [-1001] * PARTITIONS  # the truth: nothing committed
    assert promotions(clusters_config, name) == [] and "promoted" not in link_command(config, "status").stdout
    never = failover("diverged", config, "--link", name)
    assert never.returncode == 2 and "was never promoted" in never.stderr, never.stdout + never.stderr

    # 5. the promotion, then 6. promoted once, 7. the way home
    promoted_and_final(clusters_config, config, name, app, topic)
    assert mirror.stop() == 0
    failed_back(clusters_config, config, (name, back), topic, start_mirror)


def promoted_and_final(clusters_config: MirrorwatchConfig, config: Path, name: str, app: str, topic: str) -> None:
    """The group committed exactly, where the link stood recorded, the running mirror stopped; promoting again,
    resuming or pausing it refused, nothing changed."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    truth = source_truth(source, topic, PARTITIONS)
    ends = end_offsets(source, "source", topic, PARTITIONS)
    code, said = promote(config, name, "--groups", f"{app}.*")
    assert code == 0, said
    assert f"{app}: committed" in said and f"link {name} promoted" in said, said
    (record,) = promotions(clusters_config, name)
    assert [o["offset"] for o in record["offsets"]] == ends and record["link"] == name, record
    assert [o["offset"] for o in record["target_offsets"]] == ends, record  # each copied once: the same offsets
    status = json.loads(link_command(config, "status", "--link", name, "--json").stdout)
    assert status[0]["state"] == "promoted" and status[0]["promoted"]["offsets"] == record["offsets"], status
    wait_until(
        lambda: (
            [w["state"] for w in json.loads(link_command(config, "status", "--json").stdout)[0]["workers"]]
            == ["paused"]
        ),
        timeout_s=30,
        description="the running mirror to obey the promotion",
    )
    produce(source, "source", topic, keyed(20_000, 30, PARTITIONS))  # the old source, written to after the cutover
    time.sleep(3)  # a running link copies 30 records many times over in 3 s: a promoted one none
    assert end_offsets(target, "target", topic, PARTITIONS) == ends
    what_diverged(clusters_config, config, name, topic, ends)

    commits = dict.fromkeys(range(PARTITIONS), 40)
    unread = {v for v, (p, o) in truth.items() if o >= commits[p]}
    read = consume_as_group(target, app, topic, lambda got: {r.value for r in got} >= unread)
    assert judge(truth, commits, read) == (set(), {})  # nothing missed, nothing read twice

    code, said = promote(config, name, "--groups", f"{app}.*")
    assert code == 1 and "already promoted" in said, said
    for change in ("resume", "pause"):
        refused = link_command(config, change, "--link", name)
        assert refused.returncode == 2 and "failover failback" in refused.stderr, refused.stdout + refused.stderr
    assert promotions(clusters_config, name) == [record]


def what_diverged(clusters_config: MirrorwatchConfig, config: Path, name: str, topic: str, ends: list[int]) -> None:
    """`failover diverged` lists exactly the 30 records the old source took after the promotion point, and exports
    them to a file and to a new topic of the target, each the same as produced; an export into a topic that holds
    records, and a link never promoted, are refused with the reason, nothing written."""
    produced = {r.value or b"": r for r in keyed(20_000, 30, PARTITIONS)}
    out = config.parent / "tail.jsonl"
    listed = failover("diverged", config, "--link", name, "--to-file", str(out))
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "its old source took 30 record(s) after it" in listed.stdout, listed.stdout
    for p in range(PARTITIONS):
        assert f"{topic}[{p}]: 10 record(s), offsets {ends[p]}..{ends[p] + 9} (promoted at {ends[p]}" in listed.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(base64.b64decode(r["value"]) for r in lines) == sorted(produced)
    assert all(base64.b64decode(r["key"]) == produced[base64.b64decode(r["value"])].key for r in lines)
    assert {(r["partition"], r["offset"]) for r in lines} == {
        (p, ends[p] + i) for p in range(PARTITIONS) for i in range(10)
    }

    copies = f"{topic}.diverged"
    exported = failover("diverged", config, "--link", name, "--to-topic", f"target:{copies}")
    assert exported.returncode == 0 and f"exported 30 record(s) to target:{copies}" in exported.stderr, exported.stderr
    copied = read_all(clusters_config.clusters["target"], "target", copies, 30, partitions=PARTITIONS)
    assert sorted((r.partition, r.key, r.value) for r in copied) == sorted(
        (r.partition, r.key, r.value) for r in produced.values()
    )
    again = failover("diverged", config, "--link", name, "--to-topic", f"target:{copies}")
    assert again.returncode == 2 and "holds 30 record(s)" in again.stderr, again.stdout + again.stderr
    assert sum(end_offsets(clusters_config.clusters["target"], "target", copies, PARTITIONS)) == 30
    assert failover("diverged", config, "--link", name, "--to-file", str(out)).returncode == 2  # the file exists


def failed_back(
    clusters_config: MirrorwatchConfig,
    config: Path,
    links: tuple[str, str],
    topic: str,
    start_mirror: Callable[..., MirrorProcess],
) -> None:
    """`failover failback` sets the reverse link to start where the target began to take records of its own: run, it
    copies to the old source exactly the 20 records written on the target after the promotion, once each, and none
    of the old source's own records; run again, it changes nothing."""
    (name, back), (source, target) = links, (clusters_config.clusters["source"], clusters_config.clusters["target"])
    written = keyed(30_000, 20, PARTITIONS)
    produce(target, "target", topic, written)  # the applications, moved to the target, write there
    before = end_offsets(source, "source", topic, PARTITIONS)
    done = failover("failback", config, "--link", name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"reverse link {back}: its group mirrorwatch-{back} committed at the promotion point on 3" in done.stdout
    mirror = start_mirror("--config", str(config), "--link", back)
    home_ends = [b + sum(1 for r in written if r.partition == p) for p, b in enumerate(before)]
    wait_until(
        lambda: end_offsets(source, "source", topic, PARTITIONS) == home_ends,
        timeout_s=90,
        description="the reverse link to copy the target's own records",
    )
    time.sleep(2)  # anything more it would copy (the old source's own records, back) has time to arrive: none does
    assert end_offsets(source, "source", topic, PARTITIONS) == home_ends
    home = [r for r in read_to_end(source, "source", topic, PARTITIONS) if r.offset >= before[r.partition]]
    assert sorted((r.partition, r.value) for r in home) == sorted((r.partition, r.value) for r in written)
    again = failover("failback", config, "--link", name)
    assert again.returncode == 0 and "on 0 partition(s), 3 already there or past it" in again.stdout, again.stdout
    assert mirror.stop() == 0
