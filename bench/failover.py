"""B6: failover translation — at fleet scale, and against MirrorMaker 2 on the same data and the same positions.

    .venv/bin/python -m bench.failover --bench scale [--groups 1000 --partitions 12 --records 120000]
    .venv/bin/python -m bench.failover --bench mm2
    (add --clusters DIR to use clusters already up; --json F for the figures)

scale: a topic of P partitions mirrored by the python engine, G consumer groups committed at random offsets on every
partition, then `failover plan` for all of them (one scan of the target partitions answers every group), and two
standby rounds (the first reads the partitions, the second only what arrived since). Reported: seconds per plan and
per round, records scanned.

mm2: one source topic, written while both mirrors copy it (mirrorwatch's python engine with a standby that commits
the exact translation to the idle target group; MirrorMaker 2 4.1.1 in dedicated mode with checkpoints and
sync.group.offsets every second), each mirror SIGKILLed once mid-stream and restarted (so both targets hold records
written twice), and an application consuming on the source and committing as it goes. When the application stops,
the time until each tool's target group stops moving is measured, and then the group is read on each tool's target
topic from where the tool left it: records missed and read twice, against the values produced (ground truth).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from bench.common import clusters_for, exit_on_sigterm, markdown_table, stop_peer
from bench.mm2 import checkpointing, mm2_command, mm2_properties
from failover.plan import make_plan
from failover.scan import TargetScans
from kernel.config import MirrorwatchConfig, parse_config
from kernel.kafka import create_topics, new_admin, new_consumer, new_producer
from kernel.wait import wait_until

__all__ = ["main", "values_on"]


def _document(config: MirrorwatchConfig, work: Path, links: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "clusters": {a: {"bootstrap_servers": c.bootstrap_servers} for a, c in config.clusters.items()},
        "links": links,
        "monitor": {"interval_seconds": 5},
        "canary": {"enabled": False},
        "http": {"host": "127.0.0.1", "port": 0},
        "state_dir": str(work / "state"),
    }


def _produce(config: MirrorwatchConfig, topic: str, start: int, n: int, partitions: int) -> None:
    producer = new_producer(config.clusters["source"], "source", {"linger.ms": 20, "enable.idempotence": True})
    for i in range(start, start + n):
        while True:
            try:
                producer.produce(topic, value=b"v%d" % i, key=b"k%d" % (i % 1000), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def _ends(config: MirrorwatchConfig, alias: str, topic: str, partitions: int) -> list[int]:
    consumer = new_consumer(config.clusters[alias], alias, "bench-watermarks")
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def _wait_for(config: MirrorwatchConfig, topic: str, partitions: int, count: int, what: str) -> None:
    def there() -> bool:
        return sum(_ends(config, "target", topic, partitions)) >= count

    # the mirror creates the target topic: until its metadata has spread, its partitions are unknown
    wait_until(there, timeout_s=600, description=what, ignore=(KafkaException,))


def _start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _mirrorwatch(work: Path, document: dict[str, Any], command: str = "mirror") -> subprocess.Popen[bytes]:
    path = work / f"mirrorwatch-{command}.yaml"
    path.write_text(yaml.safe_dump(document))
    cli = [sys.executable, "-m", "mirrorwatch.cli", "--log-level", "warning", command, "--config", str(path)]
    return _start(cli, work / f"mirrorwatch-{command}.log")


def scale_bench(existing: Path | None, groups: int, partitions: int, records: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp, clusters_for(existing, Path(tmp)) as config:
        work = Path(tmp)
        run = uuid.uuid4().hex[:6]
        topic = f"bench.failover.{run}"
        source_admin = new_admin(config.clusters["source"], "source")
        create_topics(source_admin, {topic: partitions}, config={"retention.ms": "-1"})
        link = {"name": "bench", "source": "source", "target": "target", "topics": {"include": [topic]}}
        document = _document(config, work, [link])
        mirror = _mirrorwatch(work, document)
        try:
            print(f"producing {records:,} records to {partitions} partitions and mirroring them ...", flush=True)
            _produce(config, topic, 0, records, partitions)
            _wait_for(config, topic, partitions, records, "the mirror to copy everything")
            ends = _ends(config, "source", topic, partitions)
            rng = random.Random(6)
            prefix = f"bench-failover-{run}"
            print(f"committing {groups:,} groups x {partitions} partitions on the source ...", flush=True)
            futures: list[Any] = []
            for g in range(groups):  # one request per group (the API's limit), all in flight at once
                offsets = [TopicPartition(topic, p, rng.randint(0, ends[p])) for p in range(partitions)]
                futures += source_admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(f"{prefix}-{g}", offsets)]
                ).values()
            for future in futures:
                future.result(timeout=120)
            parsed = parse_config(document, env={})
            started = time.perf_counter()
            plan = make_plan(parsed, "bench", pattern=f"{prefix}-.*")
            plan_s = time.perf_counter() - started
            translated = sum(len(g.translations) for g in plan.groups)
            scans = TargetScans(parsed.clusters["target"], "target")
            rounds = []
            for more in (0, records // 10):
                if more:
                    _produce(config, topic, records, more, partitions)
                    _wait_for(config, topic, partitions, records + more, "the mirror to copy the new records")
                started = time.perf_counter()
                again = make_plan(parsed, "bench", pattern=f"{prefix}-.*", scans=scans)
                rounds.append(
                    {"new_records": more, "seconds": time.perf_counter() - started, "groups": len(again.groups)}
                )
        finally:
            stop_peer(mirror)
            names = [f"{prefix}-{g}" for g in range(groups)] if "prefix" in locals() else []
            for future in source_admin.delete_consumer_groups(names).values() if names else []:
                future.exception(timeout=60)
    return {
        "groups": len(plan.groups),
        "partitions": partitions,
        "translations": translated,
        "records_scanned": plan.scanned_records,
        "plan_seconds": plan_s,
        "standby_rounds": rounds,
    }


def _committed(config: MirrorwatchConfig, alias: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = new_consumer(config.clusters[alias], alias, group, {"enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in sorted(found, key=lambda tp: tp.partition)]
    finally:
        consumer.close()


def _read_as(config: MirrorwatchConfig, group: str, topic: str, quiet_s: float = 5.0) -> list[bytes]:
    consumer = new_consumer(config.clusters["target"], "target", group, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    last = time.monotonic()
    try:
        while time.monotonic() - last < quiet_s:
            batch = consumer.consume(num_messages=5000, timeout=0.5)
            values += [m.value() or b"" for m in batch if m.error() is None]
            if batch:
                last = time.monotonic()
    finally:
        consumer.close()
    return values


def values_on(config: MirrorwatchConfig, alias: str, topics: Iterable[str]) -> dict[bytes, tuple[str, int, int]]:
    """Every value on these topics of one cluster, with where it is (the last place, for a value held twice)."""
    admin = new_admin(config.clusters[alias], alias)
    listing = admin.list_topics(timeout=30).topics
    consumer = new_consumer(config.clusters[alias], alias, "bench-truth", {"enable.partition.eof": True})
    assigned = [TopicPartition(t, p, 0) for t in topics if t in listing for p in listing[t].partitions]
    found: dict[bytes, tuple[str, int, int]] = {}
    try:
        if not assigned:
            return found
        consumer.assign(assigned)
        at_end: set[tuple[str, int]] = set()
        while len(at_end) < len(assigned):
            for m in consumer.consume(num_messages=5000, timeout=1):
                where = (m.topic() or "", m.partition() or 0)
                if m.error() is None:
                    found[m.value() or b""] = (*where, m.offset() or 0)
                else:
                    at_end.add(where)
    finally:
        consumer.close()
    return found


def mm2_bench(existing: Path | None, records: int, partitions: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp, clusters_for(existing, Path(tmp)) as config:
        work = Path(tmp)
        run = uuid.uuid4().hex[:6]
        topic, group = f"bench.fo.{run}", f"bench-app-{run}"
        topics = {"mirrorwatch": f"bench.fo.{run}.mw", "mm2": f"bench.{topic}"}  # MM2: <alias>.<topic>
        create_topics(
            new_admin(config.clusters["source"], "source"), {topic: partitions}, config={"retention.ms": "-1"}
        )
        link = {
            "name": "fo",
            "source": "source",
            "target": "target",
            "topics": {"include": [topic.replace(".", r"\.")]},
            "rename": {"policy": "map", "map": {topic: topics["mirrorwatch"]}},
            "offset_commit_interval_ms": 1000,
            "consumer_properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
            "checkpoint": {"groups": {"include": [group]}, "interval_seconds": 1, "sync_group_offsets": True},
        }
        document = _document(config, work, [link])
        lines = mm2_properties(config, "bench", [topic], checkpointing(group))
        mm2_cli = mm2_command(work, "failover", lines, progress=False)

        def restart(name: str) -> subprocess.Popen[bytes]:
            return _mirrorwatch(work, document, "run") if name == "mirrorwatch" else _start(mm2_cli, work / "mm2.log")

        peers = {name: restart(name) for name in topics}
        stop_app = threading.Event()

        def application() -> None:  # consumes on the source slower than it is written, committing every 500 ms
            app = new_consumer(
                config.clusters["source"],
                "source",
                group,
                {"auto.offset.reset": "earliest", "auto.commit.interval.ms": 500},
            )
            app.subscribe([topic])
            while not stop_app.is_set():
                app.consume(num_messages=50, timeout=0.2)
                time.sleep(0.1)
            app.close()

        app = threading.Thread(target=application)
        app.start()
        try:
            _produce_with_kills(config, topic, records, partitions, peers=peers, restart=restart, topics=topics)
            stop_app.set()  # the source is "lost" as production ends: the application stops mid-topic
            app.join(timeout=60)
            stopped = time.monotonic()
            for name, target_topic in topics.items():
                _wait_for(config, target_topic, partitions, records, f"{name} to copy everything")
            final = _committed(config, "source", group, topic, partitions)
            print(f"the application stopped at {final}; watching the target groups ...", flush=True)
            seen, last_change = _watch_target_groups(config, group, topics, partitions, stopped)
        finally:
            stop_app.set()
            for process in peers.values():
                stop_peer(process)
        truth = values_on(config, "source", [topic])
        unread = {v for v, (_, p, o) in truth.items() if o >= final[p]}
        results = []
        for name, target_topic in topics.items():
            read = _read_as(config, group, target_topic)
            results.append(
                {
                    "tool": name,
                    "target_commits": seen.get(name),
                    "reflects_commit_after_s": round(last_change[name] - stopped, 1),
                    "missed": len(unread - set(read)),
                    "read_twice": len(read) - len(unread & set(read)),
                    "duplicates_on_target": sum(_ends(config, "target", target_topic, partitions)) - len(truth),
                }
            )
    return {
        "records": records,
        "partitions": partitions,
        "source_commits": final,
        "unread": len(unread),
        "tools": results,
    }


def _produce_with_kills(
    config: MirrorwatchConfig,
    topic: str,
    records: int,
    partitions: int,
    *,
    peers: dict[str, subprocess.Popen[bytes]],
    restart: Any,
    topics: dict[str, str],
) -> None:
    """Produce in 30 chunks, half a second apart; SIGKILL mirrorwatch as soon as the 11th chunk reaches its target
    and MirrorMaker 2 as soon as the 21st reaches its own (records written there, not yet committed at the source),
    each restarted at once."""
    print(f"producing {records:,} records while both mirror; each mirror is SIGKILLed once ...", flush=True)
    chunk = max(1, records // 30)
    for i, start in enumerate(range(0, records, chunk)):
        name = {10: "mirrorwatch", 20: "mm2"}.get(i)
        before = sum(_ends(config, "target", topics[name], partitions)) if name else 0
        writing = threading.Thread(
            target=_produce, args=(config, topic, start, min(chunk, records - start), partitions)
        )
        writing.start()
        if name is not None:
            _wait_for(config, topics[name], partitions, before + 1, f"the chunk to reach {name}'s target")
            os.killpg(peers[name].pid, signal.SIGKILL)  # the mirror and every process it started, no goodbye
            peers[name].wait(timeout=30)
            peers[name] = restart(name)
        writing.join()
        time.sleep(0.5)


def _watch_target_groups(
    config: MirrorwatchConfig, group: str, topics: dict[str, str], partitions: int, stopped: float
) -> tuple[dict[str, list[int]], dict[str, float]]:
    """Each tool's target group offsets until none has moved for 20 s (3 minutes at most): the last seen, and when
    each last changed."""
    last_change = dict.fromkeys(topics, stopped)
    seen: dict[str, list[int]] = {}
    while time.monotonic() - max(last_change.values()) < 20 and time.monotonic() - stopped < 180:
        for name, target_topic in topics.items():
            now = _committed(config, "target", group, target_topic, partitions)
            if seen.get(name) != now:
                seen[name], last_change[name] = now, time.monotonic()
        time.sleep(0.2)
    return seen, last_change


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", choices=("scale", "mm2"), default="scale")
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=None, help="[12 for scale, 3 for mm2]")
    parser.add_argument("--records", type=int, default=None, help="[120,000 for scale, 30,000 for mm2]")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.bench == "scale":
        result = scale_bench(args.clusters, args.groups, args.partitions or 12, args.records or 120_000)
        rows = [
            [
                "failover plan",
                f"{result['groups']:,} groups x {result['partitions']} partitions",
                f"{result['plan_seconds']:.1f} s",
                f"{result['records_scanned']:,} records",
            ]
        ]
        for r in result["standby_rounds"]:
            what = (
                "standby round, first" if not r["new_records"] else f"standby round, {r['new_records']:,} new records"
            )
            rows.append([what, f"{r['groups']:,} groups", f"{r['seconds']:.1f} s", ""])
        print(markdown_table(["what", "size", "time", "scanned"], rows))
        ok = result["groups"] == args.groups
    else:
        result = mm2_bench(args.clusters, args.records or 30_000, args.partitions or 3)
        print(f"{result['records']:,} records, {result['unread']:,} unread by the application when it stopped")
        print(
            markdown_table(
                [
                    "tool",
                    "records missed",
                    "records read twice",
                    "target group settled (after the app stopped)",
                    "duplicates on its target",
                ],
                [
                    [
                        t["tool"],
                        t["missed"],
                        t["read_twice"],
                        f"{t['reflects_commit_after_s']} s",
                        t["duplicates_on_target"],
                    ]
                    for t in result["tools"]
                ],
            )
        )
        ok = all(t["target_commits"] for t in result["tools"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
