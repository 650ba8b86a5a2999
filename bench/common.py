"""What every benchmark needs: the two local clusters, CPU and memory of a process tree from /proc, medians and
markdown tables. Every process a benchmark starts is stopped by it."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kernel.config import ClusterConfig, MirrorwatchConfig, load_config
from kernel.kafka import create_topics, new_admin, new_consumer, new_producer
from kernel.processes import stop_process
from localkafka.local import LocalClusters

__all__ = [
    "ProcessTree",
    "checkout_at",
    "checkout_of",
    "clusters_for",
    "engine_file",
    "exit_on_sigterm",
    "in_turn",
    "markdown_table",
    "median",
    "own_engine",
    "peer_kind",
    "percentile",
    "process_tree",
    "python_for",
    "stop_peer",
    "stop_process",
    "topic_label",
    "total_records",
]

TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# Every topic a benchmark creates starts with one of these (records it pre-loads, peers' targets, probes).
BENCH_TOPIC_PREFIXES = ("bench.", "mirrorwatch.canary.bench-")


@contextlib.contextmanager
def clusters_for(existing: Path | None, work: Path) -> Iterator[MirrorwatchConfig]:
    """Clusters already up (`--clusters DIR`) or two started here and stopped at the end. On clusters already up,
    the benchmark topics this run created are deleted at the end (kept, B1 alone leaves ~2 GB per peer and run)."""
    clusters = LocalClusters(existing or work / "clusters", progress=lambda _line: None)
    if existing is None:
        clusters.up(tie_to_parent=True)
    config = load_config(clusters.config_path)
    before = {alias: bench_topics(config, alias) for alias in config.clusters} if existing else {}
    try:
        yield config
    finally:
        if existing is None:
            clusters.down()
        else:
            for alias, kept in before.items():
                delete_new_topics(config, alias, kept)


def bench_topics(config: MirrorwatchConfig, alias: str) -> set[str]:
    """The benchmark topics (BENCH_TOPIC_PREFIXES) on one cluster."""
    return _bench_topics(new_admin(config.clusters[alias], alias))


def _bench_topics(admin: AdminClient) -> set[str]:
    return {name for name in admin.list_topics(timeout=30).topics if name.startswith(BENCH_TOPIC_PREFIXES)}


def delete_new_topics(config: MirrorwatchConfig, alias: str, kept: set[str]) -> None:
    """Delete the benchmark topics on one cluster that are not in `kept` (those this run created)."""
    admin = new_admin(config.clusters[alias], alias)  # one client, alive until every deletion answered
    topics = _bench_topics(admin) - kept
    if not topics:
        return
    print(f"deleting {len(topics)} benchmark topic(s) this run created on {alias} ...", flush=True)
    for name, future in admin.delete_topics(sorted(topics)).items():
        try:
            future.result(timeout=60)
        except (KafkaException, TimeoutError) as exc:  # one left behind is reported, the others still go
            print(f"  could not delete {name} on {alias}: {exc}", flush=True)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def process_tree(*roots: int) -> list[int]:
    """`roots` and every process they started, and theirs (from /proc; one that exits meanwhile is left out)."""
    tree, pids, seen = _children(), list(roots), []
    while pids:
        pid = pids.pop()
        seen.append(pid)
        pids.extend(tree.get(pid, []))
    return seen


@dataclass
class ProcessTree:
    """CPU seconds and peak resident memory of a process and all its descendants, sampled from /proc."""

    root: int
    cpu_ticks: dict[int, int] = field(default_factory=dict)  # per pid, the latest (cumulative) user+system ticks
    peak_rss_kb: int = 0
    # More roots found at each sample: processes the peer makes others start (a Spark application's executors)
    also: Callable[[], list[int]] | None = None

    def sample(self) -> None:
        rss = 0
        for pid in process_tree(self.root, *(self.also() if self.also else [])):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.cpu_ticks[pid] = max(self.cpu_ticks.get(pid, 0), int(fields[11]) + int(fields[12]))
            rss += int(fields[21]) * PAGE_KB
        self.peak_rss_kb = max(self.peak_rss_kb, rss)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu_ticks.values()) / TICKS


def exit_on_sigterm() -> None:
    """SIGTERM (a benchmark stopped from outside) unwinds like Ctrl-C, so every `finally` stops what it started."""

    def _raise(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)


def stop_all(processes: Sequence[subprocess.Popen[bytes]], timeout_s: float = 60) -> None:
    """SIGTERM to each (their clean stops run side by side), then wait for each; SIGKILL what outlives `timeout_s`."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def stop_peer(process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Stop a peer started with start_new_session=True and everything it started (a kcat pipe is a shell with two
    children that would outlive it): SIGTERM to its process group, then SIGKILL; returns once the peer is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # whatever of the group is left
    stop_process(process)


class EventBodies:
    """Record values that compress like application events do, not like one repeated byte.

    A value of b"x" * N compresses ~60x under lz4, which makes a compressed benchmark measure a network that is free
    and a consumer whose memory is all decompressed fetches. These are slices of a pool of JSON-like events (repeated
    field names, random ids, numbers and paths), deterministic for a seed; the pool is larger than lz4's 64 KB
    window and a producer batch, so slices do not repeat each other within one. lz4 and zlib compress them 2-4x.
    """

    POOL_BYTES = 8 * 1024 * 1024
    _ACTIONS = ("page_view", "add_to_cart", "checkout", "search", "login", "logout", "click", "scroll")
    _PATHS = ("/shop/item/", "/shop/cart", "/search?q=", "/account/orders/", "/help/article/", "/")

    def __init__(self, seed: int = 0) -> None:
        rnd = random.Random(seed)
        events: list[bytes] = []
        size = 0
        while size < self.POOL_BYTES:
            event = (
                b'{"ts":%d,"user":"u%07d","session":"%016x","action":"%s","path":"%s%d","status":%d,'
                b'"latency_ms":%d,"bytes":%d,"region":"%s","client":"%s/%d.%d"}\n'
                % (
                    1_764_000_000_000 + rnd.randrange(10**9),
                    rnd.randrange(10**7),
                    rnd.getrandbits(64),
                    rnd.choice(self._ACTIONS).encode(),
                    rnd.choice(self._PATHS).encode(),
                    rnd.randrange(10**6),
                    rnd.choice((200, 200, 200, 201, 204, 301, 404, 500)),
                    rnd.randrange(2000),
                    rnd.randrange(10**6),
                    rnd.choice((b"eu-west-1", b"us-east-1", b"ap-south-1")),
                    rnd.choice((b"ios", b"android", b"web")),
                    rnd.randrange(30),
                    rnd.randrange(10),
                )
            )
            events.append(event)
            size += len(event)
        self._pool = b"".join(events)

    def body(self, seq: int, size: int) -> bytes:
        """`size` bytes of the pool, from a place that depends on seq (a multiplicative hash spreads neighbours)."""
        span = len(self._pool) - size
        if span <= 0:
            raise ValueError(f"record size {size} is larger than the pool ({len(self._pool)} bytes)")
        start = (seq * 2_654_435_761) % span
        return self._pool[start : start + size]


def add_run_options(parser: argparse.ArgumentParser, peers: Sequence[str], *, repeat_help: str) -> None:
    """The options every side-by-side benchmark shares: partitions, peers, repeats, existing clusters, JSON out."""
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--peers", default=",".join(peers), help=f"comma-separated [{','.join(peers)}]")
    parser.add_argument("--repeat", type=int, default=3, help=f"{repeat_help} [3]")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path, help="also write every run here")


def in_turn(peers: Sequence[str], repeat: int) -> list[str]:
    """The peers in the order of run `repeat` (0-based): as given, then reversed, and so on, so that every pair runs
    in both orders (the peer that runs first is often slower: a cache, a JIT, the broker's page cache)."""
    return list(peers) if repeat % 2 == 0 else list(reversed(peers))


def chosen_peers(parser: argparse.ArgumentParser, args: argparse.Namespace, peers: Sequence[str]) -> list[str]:
    """--peers as a list; an unknown name is a usage error (exit 2) naming the known ones. A mirrorwatch peer may
    name another checkout, `python-1@../old`: that checkout's engine runs, side by side with this one's (an A/B
    of an engine change in one run, on the same clusters and records)."""
    chosen = [p for p in args.peers.split(",") if p]
    unknown = sorted({p for p in chosen if peer_kind(p) not in peers})
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)} (peers: {', '.join(peers)})")
    for peer in chosen:
        checkout = checkout_of(peer)
        if checkout is None:
            continue
        if not own_engine(peer):
            parser.error(f"{peer}: only mirrorwatch's own peers (python-N, spark) run from another checkout")
        if not (checkout / "mirrorwatch" / "cli.py").is_file():
            parser.error(f"{peer}: {checkout} is not a mirrorwatch checkout (no mirrorwatch/cli.py)")
        try:
            imported = engine_file(checkout)
        except subprocess.CalledProcessError as exc:
            lines = (exc.stderr or "").strip().splitlines() or ["(no output)"]
            parser.error(f"{peer}: python cannot import the engine from {checkout}: {lines[-1]}")
        if not imported.is_relative_to(checkout):
            parser.error(f"{peer}: python imports the engine from {imported}, not from {checkout}")
    return chosen


def own_engine(peer: str) -> bool:
    """Whether the peer is one of mirrorwatch's own engines (python-N, spark): the peers that may run from another
    checkout."""
    kind = peer_kind(peer)
    return kind.startswith("python-") or kind == "spark"


def checkout_at(revision: str, work: Path) -> Path:
    """The tree of `revision` (a commit, tag or branch of this repository) written under `work`, to run beside this
    checkout (`python-1@` that path: the A/B of `--against`). A name git does not know ends the run, saying so."""
    repo = Path(__file__).resolve().parents[1]
    found = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise SystemExit(f"--against {revision}: not a commit of {repo}")
    commit = found.stdout.strip()
    tree = work / f"against-{commit[:7]}"
    tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", commit], stdout=subprocess.PIPE)
    unpacked = subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=False)
    if archive.stdout is not None:
        archive.stdout.close()
    if archive.wait() != 0 or unpacked.returncode != 0:
        raise SystemExit(f"--against {revision}: could not write out its tree into {tree} (git archive | tar -x)")
    return tree


def python_for(checkout: Path | None) -> list[str]:
    """The python command that imports mirrorwatch from `checkout` (None: this one). `-P`: `python -m` would put
    the working directory (this checkout, where the benchmarks run) ahead of PYTHONPATH."""
    if checkout is None:
        return [sys.executable]
    return ["env", f"PYTHONPATH={checkout}", sys.executable, "-P"]


def engine_file(checkout: Path | None) -> Path:
    """The engine module that `python_for(checkout)` imports."""
    code = "import mirror.engine; print(mirror.engine.__file__)"
    out = subprocess.run([*python_for(checkout), "-c", code], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()).resolve()


def peer_kind(peer: str) -> str:
    """`python-1@../old` -> `python-1`."""
    return peer.split("@", 1)[0]


def checkout_of(peer: str) -> Path | None:
    """`python-1@../old` -> the checkout ../old (resolved); None for this checkout."""
    _kind, at, where = peer.partition("@")
    return Path(where).resolve() if at else None


def topic_label(peer: str) -> str:
    """The peer's name as it may appear in a topic name."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", peer).strip("-")


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100) of values sorted ascending; nan when there are none."""
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(round(q * len(ordered) / 100, 9)))  # round: 99.9 * 1000 / 100 is 999.0000000000001
    return float(ordered[rank - 1])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def wait_seconds(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def load_groups(source: ClusterConfig, topic: str, groups: int, partitions: int, records: int) -> None:
    """A topic with `records` records on each of its `partitions`, and `groups` groups committed on all of them
    (`<topic>-<n>`): caught up, but every tenth 10 records behind (the monitor benchmarks' fleet)."""
    admin = new_admin(source, "source")
    create_topics(admin, {topic: partitions})
    producer = new_producer(source, "source")
    for p in range(partitions):
        for _ in range(records):
            producer.produce(topic, b"x", partition=p)
    producer.flush(60)
    for first in range(0, groups, 2_000):  # in slices, so the coordinator's queue stays reasonable
        futures: list[Future[None]] = []
        for g in range(first, min(groups, first + 2_000)):  # one request per group (the API's limit)
            end = records - (10 if g % 10 == 0 else 0)
            offsets = [TopicPartition(topic, p, end) for p in range(partitions)]
            futures += admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(f"{topic}-{g}", offsets)]
            ).values()
        for future in futures:
            future.result(timeout=300)


def total_records(cluster: ClusterConfig, alias: str, topic: str, partitions: int) -> int:
    consumer = new_consumer(cluster, alias, "mirrorwatch-bench-watermarks")
    try:
        total = 0
        for p in range(partitions):
            try:
                total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            except KafkaException:
                return total  # not created yet
        return total
    finally:
        consumer.close()
