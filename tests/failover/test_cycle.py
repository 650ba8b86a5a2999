"""The whole disaster-recovery cycle on real clusters (issue #42): an application on A (the source) with its group;
the mirror A -> B SIGKILLed while A keeps taking records, so that A holds a tail the mirror never copied; A's
producers stop and A is lost; `failover promote --source-lost`; the application resumes on B and writes there; A comes
back; `failover diverged` lists exactly the tail; `failover failback --diverged read` delivers the tail through B
(copied to the end of B's partitions, once however often it runs, whatever marks an application wrote there) and
starts the reverse link, which copies to A exactly what B took after the promotion, the tail's copies among it; the
application reads the tail on B once and moves home to A; then the cycle runs in the first direction again (the
reverse link promoted, failed back with the default `--diverged skip`: A -> B copies again).

The truth is taken outside mirrorwatch: what the test produced, A and B read directly (values and offsets), and
what the application's group reads. "A is lost" for the promotion: the command runs with a config whose source
address nothing answers on (a cluster it cannot reach, whatever it tries), while the test's own A keeps its data
for its return. The application's position on B is the standby's work while A lives (`failover apply` here, as a
standby's round does: tests/failover/test_standby.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from failover.redeliver import DIVERGED_HEADER, parse_mark
from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.provenance import read_provenance
from tests.failover.drills import commit_source_group, consume_as_group, failover, keyed, link
from tests.failover.test_promote import promotions
from tests.kafka_helpers import ReadRecord, Record, end_offsets, produce, read_to_end, wait_for_commits
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

PARTITIONS = 3


def unreachable_source(config: Path) -> Path:
    """The same config with the source at an address nothing listens on: a lost cluster, as the command sees it."""
    document = yaml.safe_load(config.read_text())
    with socket.socket() as s:  # a port that was free a moment ago, closed: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    document["clusters"]["source"] = {"bootstrap_servers": f"127.0.0.1:{port}"}
    lost = config.with_name("source-lost.yaml")
    lost.write_text(yaml.safe_dump(document, sort_keys=False))
    return lost


def by_value(records: list[ReadRecord]) -> dict[bytes, ReadRecord]:
    return {r.value or b"": r for r in records}


def read_once(cluster: ClusterConfig, group: str, topic: str, expected: set[bytes]) -> tuple[set[bytes], list[bytes]]:
    """The group reads `topic` where it stands until it has `expected`: (what it missed, what else it read or read
    twice)."""
    read = consume_as_group(cluster, group, topic, lambda got: {r.value for r in got} >= expected)
    values = [r.value or b"" for r in read]
    extra = [v for i, v in enumerate(values) if v not in expected or v in values[:i]]
    return expected - set(values), extra


def test_the_whole_cycle_promote_with_the_source_lost_diverged_failback_and_promote_back(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    a, b = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, name, back, app = make_topic("source", PARTITIONS), unique("link"), unique("back"), unique("app")
    make_topic("target", PARTITIONS, name=topic)
    links = [link(name, topic), link(back, topic, source="target", target="source")]
    config = write_config(links, canary={"enabled": False}, state_dir=str(tmp_path / "state"))
    produce(a, "source", topic, keyed(0, 300, PARTITIONS))
    commit_source_group(a, app, topic, dict.fromkeys(range(PARTITIONS), 40))  # the application read 40 of 100

    # the mirror copies, the application's position is kept on B, then the mirror is SIGKILLed while A takes records
    mirror = start_mirror("--config", str(config), "--link", name)
    wait_for_commits(a, "source", f"mirrorwatch-{name}", topic, PARTITIONS, upto=[100] * PARTITIONS)
    kept = failover("apply", config, "--link", name, "--group", app)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    tail_written = trickle_and_kill(a, topic, mirror)
    a_records, b_records = read_to_end(a, "source", topic, PARTITIONS), read_to_end(b, "target", topic, PARTITIONS)
    on_b = set(by_value(b_records))
    tail = {v: r for v, r in by_value(a_records).items() if v not in on_b}
    assert tail, "the SIGKILL left no tail: the drill did not happen"
    assert set(tail) <= tail_written

    # A is lost: promoted with its source lost, every step says what it could judge
    code, said = promote_lost(unreachable_source(config), name, app)
    assert code == 0, said
    assert "step 1/5 quiet: ok: not judged: the source is lost" in said, said
    assert "step 4/5 groups: ok: 1 group(s) keep their position on target" in said and f"  {app}: its" in said, said
    (record,) = promotions(clusters_config, name)
    copied = copied_truth(b_records, a_records)
    assert {(o["partition"], o["offset"]) for o in record["offsets"]} == set(copied.items()), (record, copied)
    assert record["source_lost"] is True
    for p, upto in copied.items():
        assert all(r.offset >= upto for r in tail.values() if r.partition == p)  # the tail is past the point

    # the application resumes on B: every record it had not read, once, and what it writes there — one record with a
    # header naming a record of the tail (forged, or an application's mistake: not that record's copy, which must be
    # delivered all the same)
    named = min(tail.values(), key=lambda r: (r.partition, r.offset))
    mark = (DIVERGED_HEADER, f"{topic};{named.partition};{named.offset}".encode())
    forged = Record(value=b"forged-mark", key=named.key, partition=named.partition, headers=(mark,))
    written_on_b = [*keyed(50_000, 30, PARTITIONS), forged]
    produce(b, "target", topic, written_on_b)
    unread = {r.value or b"" for r in b_records if read_provenance(list(r.headers)) and r.offset >= 40}
    missed, extra = read_once(b, app, topic, unread | {r.value or b"" for r in written_on_b})
    assert (missed, extra) == (set(), [])

    # A is back: the tail is listed exactly, record by record
    out = tmp_path / "tail.jsonl"
    listed = failover("diverged", config, "--link", name, "--to-file", str(out))
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"its old source took {len(tail)} record(s) after it" in listed.stdout, listed.stdout
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((e["partition"], e["offset"]) for e in exported) == sorted(
        (r.partition, r.offset) for r in tail.values()
    )

    # the way home: the tail delivered through B, then the reverse link copies to A exactly what B took after the
    # promotion (the tail's copies among it), and nothing of A's own
    b_end = end_offsets(b, "target", topic, PARTITIONS)
    reverse = fail_back_and_copy(config, (name, back), topic, (a, b), start_mirror, written_on_b, tail)
    delivered = [r for r in read_to_end(b, "target", topic, PARTITIONS) if r.offset >= b_end[r.partition]]
    assert sorted((r.partition, r.value) for r in delivered) == sorted((r.partition, v) for v, r in tail.items())
    assert all(parse_mark(dict(r.headers).get(DIVERGED_HEADER)) == (topic, r.partition, tail[r.value or b""].offset)
               for r in delivered)  # fmt: skip
    move_home(config, back, app, topic, (a, b), set(tail))

    # and the cycle again in the first direction: the reverse link promoted, failed back, A -> B copies again
    promote_back(config, (name, back), topic, (a, b), start_mirror, reverse)


def move_home(
    config: Path, back: str, app: str, topic: str, clusters: tuple[ClusterConfig, ClusterConfig], tail: set[bytes]
) -> None:
    """The application, still on B, reads the tail there once; then it moves home and reads exactly what A takes
    next."""
    a, b = clusters
    missed, extra = read_once(b, app, topic, tail)
    assert (missed, extra) == (set(), [])
    moved = failover("apply", config, "--link", back, "--group", app)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    written_on_a = keyed(60_000, 30, PARTITIONS)
    produce(a, "source", topic, written_on_a)
    missed, extra = read_once(a, app, topic, {r.value or b"" for r in written_on_a})
    assert (missed, extra) == (set(), [])


def trickle_and_kill(a: ClusterConfig, topic: str, mirror: MirrorProcess) -> set[bytes]:
    """A producer writes to A every 50 ms; the mirror is SIGKILLed in the middle, A goes on taking records for a
    second, then its producers stop. The values written."""
    written: set[bytes] = set()
    stop = threading.Event()

    def trickle() -> None:
        n = 10_000
        while not stop.is_set():
            records = keyed(n, 6, PARTITIONS)
            produce(a, "source", topic, records)
            written.update(r.value or b"" for r in records)
            n += 6
            stop.wait(0.05)

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    try:
        stop.wait(1.5)
        os.killpg(mirror.process.pid, signal.SIGKILL)
        mirror.process.wait(timeout=30)
        stop.wait(1.0)
    finally:
        stop.set()
        writer.join()
    return written


def promote_lost(config: Path, name: str, app: str) -> tuple[int, str]:
    done = failover("promote", config, "--link", name, "--groups", f"{app}.*", "--source-lost")
    return done.returncode, done.stdout + done.stderr


def copied_truth(b_records: list[ReadRecord], a_records: list[ReadRecord]) -> dict[int, int]:
    """Per partition of A, the offset below which every record of A is on B (read directly: the values)."""
    on_b = {r.value for r in b_records}
    copied: dict[int, int] = {}
    for p in range(PARTITIONS):
        offsets = sorted(r.offset for r in a_records if r.partition == p and r.value in on_b)
        assert offsets == list(range(len(offsets))), f"A's partition {p} is not copied as a prefix"
        copied[p] = len(offsets)
    return copied


def fail_back_and_copy(
    config: Path,
    links: tuple[str, str],
    topic: str,
    clusters: tuple[ClusterConfig, ClusterConfig],
    start_mirror: Callable[..., MirrorProcess],
    written_on_b: list[Any],
    tail: dict[bytes, ReadRecord],
) -> MirrorProcess:
    """`failover failback --diverged read` (run twice: the second copies nothing again), then the reverse link
    runs: once it has read B to its end, A holds exactly B's own records and the tail's copies more, once each, and
    none of A's own came back. The reverse link's mirror, running."""
    (name, back), (a, b) = links, clusters
    before = end_offsets(a, "source", topic, PARTITIONS)
    done = failover("failback", config, "--link", name, "--diverged", "read")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the diverged tail: {len(tail)} record(s) on source; {len(tail)} copied" in done.stdout, done.stdout
    again = failover("failback", config, "--link", name, "--diverged", "read")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"0 copied to the end of their partitions on the promoted cluster now, {len(tail)} copied by an earlier" \
        in again.stdout, again.stdout  # fmt: skip
    mirror = start_mirror("--config", str(config), "--link", back)
    home = [*written_on_b, *tail.values()]
    arrived_exactly(mirror, (b, "target"), f"mirrorwatch-{back}", (a, "source"), topic, before, home)
    return mirror


def arrived_exactly(
    mirror: MirrorProcess,
    source: tuple[ClusterConfig, str],
    group: str,
    target: tuple[ClusterConfig, str],
    topic: str,
    before: list[int],
    written: list[Any],
) -> None:
    """Once the link's group has committed the end of its source, its target holds after `before` exactly the
    records `written`, each once, in its partition, and nothing else."""
    ends = end_offsets(*source, topic, PARTITIONS)
    wait_for_commits(*source, group, topic, PARTITIONS, upto=ends, while_running=mirror.running)
    came = [r for r in read_to_end(*target, topic, PARTITIONS) if r.offset >= before[r.partition]]
    assert sorted((r.partition, r.value) for r in came) == sorted((r.partition, r.value) for r in written)


def promote_back(
    config: Path,
    links: tuple[str, str],
    topic: str,
    clusters: tuple[ClusterConfig, ClusterConfig],
    start_mirror: Callable[..., MirrorProcess],
    reverse: MirrorProcess,
) -> None:
    """The reverse link promoted (B's producers are quiet, it copied everything), then failed back: the first link
    runs again from where A stood, and copies to B exactly what A takes from then on."""
    (name, back), (a, b) = links, clusters
    promoted = failover("promote", config, "--link", back, "--settle-seconds", "2")
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert f"link {back} promoted" in promoted.stdout, promoted.stdout
    assert reverse.stop() == 0
    again = failover("failback", config, "--link", back)
    assert again.returncode == 0, again.stdout + again.stderr
    forward = start_mirror("--config", str(config), "--link", name)
    b_before = end_offsets(b, "target", topic, PARTITIONS)
    fresh = keyed(70_000, 30, PARTITIONS)
    produce(a, "source", topic, fresh)
    arrived_exactly(forward, (a, "source"), f"mirrorwatch-{name}", (b, "target"), topic, b_before, fresh)
    assert forward.stop() == 0
