"""B1/B2: drain pre-loaded records from the source to the target, peers side by side in one run.

    .venv/bin/python -m bench.throughput --bench b1            # 2,000,000 x 100 B over 12 partitions
    .venv/bin/python -m bench.throughput --bench b2            # 500,000 x 1 KB, uncompressed and lz4 at source
    .venv/bin/python -m bench.throughput --records 20000 --repeat 1 --peers python-1,kcat   # a quick look
    .venv/bin/python -m bench.throughput --bench b1 --peers python-1 --against ee48008 --repeat 4
                                                               # an engine change's A/B: this tree against a commit
    .venv/bin/python -m bench.throughput --records 50000 --size 1000 --slow-kbit 20000 --peers python-1,mm2
                                                               # across a 20 Mbit/s WAN link (root: bench.netns)

The records (JSON-like events behind a sequence number; lz4 compresses them about 2.5x, like real event
streams) are produced into the source before the clock starts; each peer then mirrors the same topic into its
own target topic, peers interleaved (A, B, B, A, A, B ...: every pair in both orders) and repeated (median of
--repeat runs), after an unmeasured warm-up drain by the first peer (--warm-up: the brokers' JVMs compile their
fetch and produce paths in it; the first measured run was the slowest, whichever peer it was) and each run after the
page cache was written out (sync: the pre-load's and the last peer's writes not in the next one's drain). Measured per
run:
records/s and MB/s from the first record on the target to the last, CPU-seconds per million records (the whole run,
start-up included), the cores used while draining (CPU-seconds from the first record to the last, per second) and
records/s per such core (the per-core figure: a JVM's start-up does not count), the same over the drain's second
half (records per CPU-second from half the records on the target to the last: a long-running mirror's steady state,
with the JIT's compilation of the hot path, in the drain's first seconds, behind it), peak RSS of the peer's whole
process tree (from /proc), time to the first record on the target; afterwards every target record
is read back and checked (count, no duplicates, per-partition order where the peer keeps partitions, per-key order
otherwise).

Peers: `python-1`, `python-2` and `python-4` (mirrorwatch's python engine with 1, 2 and 4 worker processes: the
scale-out curve, `--peers python-1,python-2,python-4`), `spark` (the spark
engine, local mode), `spark-standalone-1` and `-2` (the spark engine on a Spark standalone cluster of two workers of
one core, started for the run from pyspark's own distribution, its application given one or two cores: executors on
one or both workers; their CPU and memory count with the driver's), `kcat`
(`kcat -C ... | kcat -P -X enable.idempotence=true ...`, Debian's kcat: plain librdkafka with no mirroring logic; it
keeps keys but not partitions, so its order is checked per key), `mm2` and `mm2-tuned`
(Apache Kafka's MirrorMaker 2 4.1.1 in dedicated mode, jars org.apache.kafka:connect-mirror from Maven Central;
defaults, and a profile with 2 tasks, bigger fetches and batches, lz4 to the target).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from bench.common import (
    EventBodies,
    ProcessTree,
    add_run_options,
    checkout_at,
    checkout_of,
    chosen_peers,
    clusters_for,
    exit_on_sigterm,
    in_turn,
    markdown_table,
    median,
    own_engine,
    peer_kind,
    python_for,
    stop_peer,
    topic_label,
    total_records,
)
from bench.mm2 import DATA_ONLY, mm2_command, mm2_properties
from bench.netns import clusters_apart
from kernel.config import ClusterConfig, MirrorwatchConfig, load_config
from kernel.kafka import create_topics, new_admin, new_consumer, new_producer
from mirror.spark_cluster import LocalSparkCluster

STANDALONE = ("spark-standalone-1", "spark-standalone-2")
SCALE_OUT = ("python-1", "python-2", "python-4")  # the python engine with 1, 2 and 4 worker processes (issue #45)
PEERS = (*SCALE_OUT, "spark", *STANDALONE, "kcat", "mm2", "mm2-tuned")
KEEPS_PARTITIONS = {*SCALE_OUT, "spark", *STANDALONE, "mm2", "mm2-tuned"}
PEER_TIMEOUT_S = 900.0  # one peer's drain, at most (--peer-timeout)
EXITED_GRACE_S = 10.0  # kcat exits once it flushed: what it wrote is on the target within this, or it never comes


@dataclass(frozen=True)
class Case:
    records: int
    size: int  # bytes per value
    compression: str = "none"  # at the source producer

    def title(self, partitions: int) -> str:
        return f"{self.records:,} records x {self.size} B, {partitions} partitions, compression {self.compression}"


BENCHES = {
    "b1": [Case(2_000_000, 100)],
    "b2": [Case(500_000, 1024), Case(500_000, 1024, "lz4")],
}


def key_of(seq: int) -> bytes:
    return b"k%d" % (seq % 1024)


def source_partition(seq: int, partitions: int) -> int:
    """Each key on one partition, so per-partition order is per-key order, which a key-hashing peer can keep."""
    return (seq % 1024) % partitions


@dataclass
class Run:
    peer: str
    records: int
    seconds: float
    records_per_second: float
    mb_per_second: float
    cpu_seconds_per_million: float  # the whole run: start-up (a JVM's class loading, JIT) included
    drain_cores: float  # CPU seconds per second between the first record on the target and the last
    # records per CPU-second from half the records on the target to the last: the steady state of a long-running
    # mirror, a JVM's JIT warm-up behind it (it compiles the hot path during the drain's first seconds)
    second_half_per_core: float
    peak_rss_mb: float
    first_record_seconds: float
    verified: str


def preload(source: ClusterConfig, topic: str, case: Case, partitions: int) -> None:
    records, size, compression = case.records, case.size, case.compression
    create_topics(new_admin(source, "source"), {topic: partitions}, config={"retention.ms": "-1"})
    producer = new_producer(
        source,
        "source",
        # idempotence: a batch retried after the new topic's first metadata errors cannot overtake later ones
        {
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": compression,
        },
    )
    bodies, body_size = EventBodies(), max(0, size - 13)  # 13: the b"%012d|" sequence header
    for seq in range(records):
        while True:
            try:
                producer.produce(
                    topic,
                    value=b"%012d|" % seq + bodies.body(seq, body_size),
                    key=key_of(seq),
                    partition=source_partition(seq, partitions),
                )
                break
            except BufferError:
                producer.poll(0.05)
        if seq % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("could not pre-load the source topic")


def verify(target: ClusterConfig, topic: str, records: int, partitions: int, keeps_partitions: bool) -> str:
    """'ok', or what is wrong with the target topic. Partition by partition, up to each high-watermark."""
    consumer = new_consumer(target, "target", "mirrorwatch-bench-verify", {"enable.auto.commit": False})
    seen: set[int] = set()
    problems: list[str] = []
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in metadata.partitions}
        # every partition at once: one at a time, each first fetch waited out consume's timeout (12 s for 12
        # partitions of a few records, most of a small run's time)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(ends)])
        positions = dict.fromkeys(ends, 0)
        last_by: dict[tuple[int, object], int] = {}
        deadline = time.monotonic() + 120
        while any(positions[p] < end for p, end in ends.items()) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1):
                if msg.error() is not None:
                    continue
                partition = msg.partition() or 0
                positions[partition] = (msg.offset() or 0) + 1
                seq = int((msg.value() or b"")[:12])
                if seq in seen:
                    problems.append(f"duplicate {seq}")
                seen.add(seq)
                if keeps_partitions and source_partition(seq, partitions) != partition:
                    problems.append(f"record {seq} on partition {partition}")
                # one key lives on one source partition: its order must hold in whichever partition it is found
                key = (partition, msg.key())
                if last_by.get(key, -1) > seq:
                    problems.append(f"record {seq} after {last_by[key]} (key {key[1]!r})")
                last_by[key] = max(seq, last_by.get(key, -1))
    finally:
        consumer.close()
    if len(seen) != records:
        problems.append(f"{len(seen)} of {records} records")
    return "ok" if not problems else f"{len(problems)} problem(s), e.g. {problems[0]}"


def _config_file(work: Path, clusters: MirrorwatchConfig, link: dict[str, Any]) -> Path:
    path = work / f"{link['name']}.yaml"
    document = {
        "clusters": {a: {"bootstrap_servers": c.bootstrap_servers} for a, c in clusters.clusters.items()},
        "links": [link],
        "canary": {"enabled": False, "topic": f"mirrorwatch.canary.bench-{uuid.uuid4().hex[:6]}"},
        "state_dir": str(work / "state"),
    }
    path.write_text(yaml.safe_dump(document))
    return path


def peer_command(
    peer: str,
    work: Path,
    clusters: MirrorwatchConfig,
    source_topic: str,
    target_topic: str,
    *,
    records: int | None = None,
    spark_master: str | None = None,
) -> list[str]:
    """The command line of one peer mirroring `source_topic` to `target_topic`; `records`: kcat's consumer exits
    once it has read that many (a drain), or with None keeps reading at the end of the topic (a steady-rate run); the
    others always keep going; `spark_master`: the standalone cluster of the spark-standalone peers."""
    name = f"bench-{topic_label(peer)}-{uuid.uuid4().hex[:6]}"
    checkout, peer = checkout_of(peer), peer_kind(peer)
    link: dict[str, Any] = {
        "name": name,
        "source": "source",
        "target": "target",
        "topics": {"include": [re.escape(source_topic)]},
        "rename": {"policy": "map", "map": {source_topic: target_topic}},
        "refresh_topics_interval_seconds": 5,
    }
    cli = [*python_for(checkout), "-m", "mirrorwatch.cli", "--log-level", "warning", "mirror", "--config"]
    if peer.startswith("python-"):
        link["num_streams"] = int(peer.split("-")[1])
        return [*cli, str(_config_file(work, clusters, link))]
    if peer == "spark":
        link["engine"] = "spark"
        link["spark"] = {"trigger_interval_seconds": 0, "checkpoint_dir": str(work / f"checkpoint-{name}")}
        return [*cli, str(_config_file(work, clusters, link)), "--link", name]
    if peer in STANDALONE:
        if spark_master is None:
            raise SystemExit(f"{peer} needs the standalone cluster the run starts")
        cores = peer.rsplit("-", 1)[1]
        conf = {"spark.cores.max": cores, "spark.executor.cores": "1", "spark.executor.memory": "768m"}
        link["engine"] = "spark"
        link["spark"] = {
            "master": spark_master,
            "trigger_interval_seconds": 0,
            "checkpoint_dir": str(work / f"checkpoint-{name}"),
            "conf": conf,
        }
        return [*cli, str(_config_file(work, clusters, link)), "--link", name]
    if peer.startswith("mm2"):
        alias = target_topic.split(".", maxsplit=1)[0]
        return _mm2_command(work, clusters, source_topic, alias, tuned=peer == "mm2-tuned")
    if peer == "kcat":
        source = clusters.clusters["source"].bootstrap_servers
        target = clusters.clusters["target"].bootstrap_servers
        return [
            "bash",
            "-c",
            # a drain: -c, exit after exactly that many records. Not -e (exit once end-of-partition was said as many
            # times as there are partitions): it counts events, not partitions, and librdkafka says it again for a
            # partition that reaches its end again; under the loaded suite -e once ended a 12-partition drain with
            # records unread and exit 0 (issue #69). Following: -u, or the last records of a quiet moment wait in
            # kcat's stdout buffer.
            # pipefail: a consumer that fails (an error fetching) fails the peer, not only an empty producer's stdin
            "set -o pipefail; "
            f"kcat -C -b {source} -t {source_topic} -o beginning {'-u' if records is None else f'-c {records}'} -q "
            "-K $'\\x1f' -D $'\\x1e' "
            f"| kcat -P -b {target} -t {target_topic} -X enable.idempotence=true -K $'\\x1f' -D $'\\x1e'",
        ]
    raise SystemExit(f"unknown peer {peer!r} (peers: {', '.join(PEERS)})")


def _mm2_command(work: Path, clusters: MirrorwatchConfig, source_topic: str, alias: str, *, tuned: bool) -> list[str]:
    """MirrorMaker 2 in dedicated mode, the source cluster under a fresh alias (so its DefaultReplicationPolicy target
    topic `<alias>.<topic>` and its internal topics are new each run); defaults, or a throughput profile."""
    tuning = (
        "tasks.max = 2",
        f"{alias}.consumer.max.poll.records = 5000",
        f"{alias}.consumer.fetch.min.bytes = 65536",
        "target.producer.linger.ms = 20",
        "target.producer.batch.size = 524288",
        "target.producer.compression.type = lz4",
    )
    lines = mm2_properties(clusters, alias, [source_topic], [*DATA_ONLY, *(tuning if tuned else ())])
    return mm2_command(work, alias, lines)


def target_topic_for(peer: str, clusters: MirrorwatchConfig, source_topic: str, partitions: int) -> str:
    """A fresh target topic name for one run of `peer` (created here for kcat, which does not create topics)."""
    target_topic = f"{source_topic}.{topic_label(peer)}.{uuid.uuid4().hex[:6]}"
    if peer.startswith("mm2"):  # its replication policy names the target topic: <source alias>.<topic>
        target_topic = f"src{uuid.uuid4().hex[:6]}.{source_topic}"
    if peer == "kcat":  # same partitions as the source, like the mirror does
        target = clusters.clusters["target"]
        create_topics(new_admin(target, "target"), {target_topic: partitions}, config={"retention.ms": "-1"})
    return target_topic


def run_peer(
    peer: str,
    work: Path,
    clusters: MirrorwatchConfig,
    source_topic: str,
    *,
    case: Case,
    partitions: int,
    spark: LocalSparkCluster | None = None,
    timeout_s: float = PEER_TIMEOUT_S,
) -> Run:
    target = clusters.clusters["target"]
    target_topic = target_topic_for(peer, clusters, source_topic, partitions)
    records, size = case.records, case.size
    log = (work / f"{target_topic}.log").open("wb")
    master = spark.master_url if spark is not None else None
    executors = spark.executors if spark is not None and peer_kind(peer) in STANDALONE else None
    started = time.monotonic()
    process = subprocess.Popen(
        peer_command(peer, work, clusters, source_topic, target_topic, records=records, spark_master=master),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=work,  # what a peer leaves in its working directory goes with the run (a Spark driver's artifacts/)
    )
    tree = ProcessTree(process.pid, also=executors)
    first = done = None
    cpu_at_first = cpu_at_half = cpu_at_done = 0.0
    count_at_half = None
    try:
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            tree.sample()
            count = total_records(target, "target", target_topic, partitions)
            now = time.monotonic()
            if count and first is None:
                first, cpu_at_first = now, tree.cpu_seconds
            if count >= records // 2 and count_at_half is None and count < records:
                count_at_half, cpu_at_half = count, tree.cpu_seconds
            if count >= records:
                done, cpu_at_done = now, tree.cpu_seconds
                break
            if process.poll() is not None:
                # the others exit only on failure; kcat (-e) when it flushed everything, a moment before it counts
                if peer != "kcat" or process.returncode != 0:
                    break
                deadline = min(deadline, now + EXITED_GRACE_S)
            time.sleep(0.2)
        tree.sample()
    finally:
        exited = process.poll()  # before stop_peer, which ends it either way
        stop_peer(process)
        log.close()
    if first is None or done is None:
        # the work directory goes with the run: the peer's last words go into the message
        tail = Path(log.name).read_text(errors="replace").splitlines()[-30:]
        how = f"it exited with {exited}" if exited is not None else f"stopped after {timeout_s:.0f} s"
        raise SystemExit(f"{peer} did not mirror {records} records ({how}); its log ends:\n" + "\n".join(tail))
    span = max(done - first, 1e-3)
    # no sample between half and the end (a drain shorter than one poll): from the first record instead
    from_count, from_cpu = (count_at_half, cpu_at_half) if count_at_half is not None else (0, cpu_at_first)
    verified = verify(target, target_topic, records, partitions, peer_kind(peer) in KEEPS_PARTITIONS)
    return Run(
        peer=peer,
        records=records,
        seconds=round(span, 2),
        records_per_second=records / span,
        mb_per_second=records * size / span / 1e6,
        cpu_seconds_per_million=tree.cpu_seconds / (records / 1e6),
        drain_cores=(cpu_at_done - cpu_at_first) / span,
        second_half_per_core=(records - from_count) / max(cpu_at_done - from_cpu, 1e-3),
        peak_rss_mb=tree.peak_rss_kb / 1024,
        first_record_seconds=first - started,
        verified=verified,
    )


def summarize(title: str, runs: Sequence[Run], peers: Sequence[str]) -> str:
    rows = []
    medians: dict[str, dict[str, float]] = {"records/s": {}, "per core": {}, "per core, 2nd half": {}}
    for peer in peers:
        of_peer = [r for r in runs if r.peer == peer]
        rate = median([r.records_per_second for r in of_peer])
        per_core = median([r.records_per_second / max(r.drain_cores, 1e-3) for r in of_peer])
        second_half = median([r.second_half_per_core for r in of_peer])
        for figure, value in zip(medians, (rate, per_core, second_half), strict=True):
            medians[figure][peer] = value
        rows.append(
            [
                peer,
                f"{rate:,.0f}",
                f"{median([r.mb_per_second for r in of_peer]):.1f}",
                f"{median([r.cpu_seconds_per_million for r in of_peer]):.1f}",
                f"{median([r.drain_cores for r in of_peer]):.2f}",
                f"{per_core:,.0f}",
                f"{second_half:,.0f}",
                f"{median([r.peak_rss_mb for r in of_peer]):.0f}",
                f"{median([r.first_record_seconds for r in of_peer]):.1f}",
                ", ".join(sorted({r.verified for r in of_peer})),
                len(of_peer),
            ]
        )
    table = markdown_table(
        [
            "peer",
            "records/s",
            "MB/s",
            "CPU s per M records",
            "cores while draining",
            "records/s per core",
            "per core, 2nd half",
            "peak RSS MB",
            "first record s",
            "verified",
            "runs",
        ],
        rows,
    )
    lines = [f"### {title}", "", table, ""]
    for figure, of in medians.items():
        lines.append(f"{figure} ratios (median): {'; '.join(_ratios(of)) or 'n/a'}")
    return "\n".join(lines) + "\n"


def _ratios(medians: dict[str, float]) -> list[str]:
    """mirrorwatch's engines against the other peers, and each engine against its own earlier checkout's."""
    ratios = []
    for mine in (*SCALE_OUT, "spark", *STANDALONE):
        for peer in ("mm2", "mm2-tuned", "kcat", "python-1"):
            if mine in medians and peer in medians and mine != peer:
                ratios.append(f"{mine} / {peer} = {medians[mine] / medians[peer]:.2f}")
    for other, rate in medians.items():
        if checkout_of(other) is not None and peer_kind(other) in medians:
            ratios.append(f"{peer_kind(other)} / {other} = {medians[peer_kind(other)] / rate:.2f}")
    return ratios


def run_case(
    case: Case,
    peers: Sequence[str],
    args: argparse.Namespace,
    work: Path,
    clusters: MirrorwatchConfig,
    *,
    spark: LocalSparkCluster | None,
) -> list[Run]:
    """One case: its records pre-loaded, `--warm-up` unmeasured drains by the first peer, then every peer's measured
    runs in turn."""
    topic = f"bench.{case.records}x{case.size}.{case.compression}.{uuid.uuid4().hex[:6]}"
    print(f"pre-loading {case.title(args.partitions)} ...", flush=True)
    preload(clusters.clusters["source"], topic, case, args.partitions)
    runs = []
    turns = [(None, peers[0])] * args.warm_up + [(r, p) for r in range(args.repeat) for p in in_turn(peers, r)]
    for repeat, peer in turns:
        # the page cache's dirty pages (the pre-load, the last peer's target topic) written out before the clock
        # starts, not during the next peer's drain: the first run after the pre-load was the slowest whichever peer
        # it was (issue #63)
        os.sync()
        run = run_peer(
            peer, work, clusters, topic, case=case, partitions=args.partitions, spark=spark, timeout_s=args.peer_timeout
        )
        said = f"{peer}: {run.records_per_second:,.0f} records/s, {run.verified}"
        if repeat is None:
            print(f"  warm-up {said} (not counted)", flush=True)
        else:
            print(f"  run {repeat + 1} {said}", flush=True)
            runs.append(run)
    return runs


@contextlib.contextmanager
def clusters_placed(
    existing: Path | None, slow_kbit: int | None, work: Path, delay_ms: float | None = None
) -> Iterator[MirrorwatchConfig]:
    """`clusters_for`, or with `slow_kbit` the clusters apart with the target's link that slow, or with `delay_ms`
    the source that far away (a round trip; a relay in front of it: bench.relay) (removed at the end)."""
    if not slow_kbit and not delay_ms:
        with clusters_for(existing, work) as config:
            yield config
        return
    delays = {"source": delay_ms / 2} if delay_ms else None
    with clusters_apart(work / "clusters", delay_ms=delays) as apart:
        if slow_kbit:
            apart.hosts["target"].slow(slow_kbit)
            print(f"the clusters on hosts of their own, the network to the target at {slow_kbit:,} kbit/s", flush=True)
        if delay_ms:
            print(f"the clusters on hosts of their own, the source {delay_ms:g} ms away (a round trip)", flush=True)
        yield load_config(apart.clusters.config_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", choices=sorted(BENCHES), help="a named benchmark (b1, b2)")
    parser.add_argument("--records", type=int, help="records to drain (instead of --bench)")
    parser.add_argument("--size", type=int, default=100, help="bytes per record value [100]")
    parser.add_argument("--compression", default="none", help="compression at the source producer [none]")
    parser.add_argument(
        "--slow-kbit",
        type=int,
        help="each cluster on a host of its own (bench.netns, root only) and the network to the target rate-limited "
        "to this many kbit/s (tbf in its router) for every peer alike: a WAN link (cannot go with --clusters)",
    )
    parser.add_argument(
        "--delay-ms",
        type=float,
        help="each cluster on a host of its own (root only) and the source this many ms away, a round trip, for every "
        "peer alike (a relay in front of its broker, half each way: bench.relay; the mirror runs in the target's "
        "data centre, as MirrorMaker's guidance has it; cannot go with --clusters)",
    )
    parser.add_argument(
        "--peer-timeout",
        type=float,
        default=PEER_TIMEOUT_S,
        help=f"seconds a peer may take to mirror the records, else the run fails with its log [{PEER_TIMEOUT_S:.0f}]",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="an A/B of an engine change: each mirrorwatch peer (python-N, spark) also runs from the tree of this "
        "commit (git archive into the run's directory, `python-1@...`), side by side on the same records; with "
        "--repeat 2 or more every pair runs in both orders",
    )
    add_run_options(parser, PEERS, repeat_help="runs per peer, interleaved, their order reversed every other run")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=1,
        help="unmeasured drains of each case by the first peer before the measured runs: the brokers' JVMs compile "
        "their fetch and produce paths, which the measured runs would otherwise pay for, the first one most [1]",
    )
    parser.set_defaults(peers=",".join(p for p in PEERS if p != "python-4"))  # the scale-out peer when asked for
    args = parser.parse_args(argv)
    if (args.slow_kbit or args.delay_ms) and args.clusters:
        parser.error("--slow-kbit and --delay-ms start clusters of their own: leave --clusters out")
    if args.bench:
        cases = BENCHES[args.bench]
    elif args.records:
        cases = [Case(args.records, args.size, args.compression)]
    else:
        parser.error("give --bench NAME or --records N")
    peers = chosen_peers(parser, args, PEERS)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp:
        work = Path(tmp)
        if args.against:
            tree = checkout_at(args.against, work)
            mine = [p for p in peers if checkout_of(p) is None and own_engine(p)]
            args.peers = ",".join([*peers, *(f"{p}@{tree}" for p in mine)])
            peers = chosen_peers(parser, args, PEERS)
            print(f"against {args.against}: {tree}", flush=True)
        placed = clusters_placed(args.clusters, args.slow_kbit, work, args.delay_ms)
        with placed as clusters, contextlib.ExitStack() as started:
            spark = None
            if any(peer_kind(p) in STANDALONE for p in peers):
                spark = started.enter_context(LocalSparkCluster(work / "spark", workers=2, cores=1, progress=print))
            for case in cases:
                runs = run_case(case, peers, args, work, clusters, spark=spark)
                print(summarize(case.title(args.partitions), runs, peers), flush=True)
                out.append({"case": asdict(case), "runs": [asdict(r) for r in runs]})
    print(f"machine: {os.cpu_count()} cores; figures are this machine's")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
