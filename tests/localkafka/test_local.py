"""The local clusters, for real: two independent KRaft clusters, their lifecycle, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kernel.config import MirrorwatchConfig, load_config
from kernel.kafka import create_topics, new_admin
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from tests.kafka_helpers import Record, produce, read_all

pytestmark = pytest.mark.integration


def _kafka_pids(state_dir: Path) -> list[int]:
    """Kafka JVMs whose command line points into `state_dir`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "kafka.Kafka" in cmdline and str(state_dir) in cmdline:
            pids.append(int(proc.name))
    return pids


def _mirrorwatch(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_two_clusters_are_distinct(local_clusters: LocalClusters, clusters_config: MirrorwatchConfig) -> None:
    ids: dict[str, str | None] = {}
    for alias in ("source", "target"):
        admin: AdminClient = new_admin(clusters_config.clusters[alias], alias)
        ids[alias] = admin.list_topics(timeout=10).cluster_id
    assert ids["source"] != ids["target"]
    assert ids == {c.alias: c.cluster_id for c in local_clusters.clusters()}


@pytest.mark.parametrize("alias", ["source", "target"])
def test_produce_and_consume_on_each_cluster(
    alias: str, clusters_config: MirrorwatchConfig, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(alias, partitions=3)
    records = [
        Record(
            value=f"v{i}".encode(),
            key=f"k{i}".encode(),
            partition=i % 3,
            headers=(("h", b"x"),),
            timestamp_ms=1_700_000_000_000 + i,
        )
        for i in range(300)
    ]
    delivered = produce(clusters_config.clusters[alias], alias, topic, records)
    assert sorted(p for p, _ in delivered.positions) == sorted(i % 3 for i in range(300))
    got = read_all(clusters_config.clusters[alias], alias, topic, expected=300)
    assert len(got) == 300
    assert {(r.key, r.value, r.partition, r.timestamp_ms) for r in got} == {
        (f"k{i}".encode(), f"v{i}".encode(), i % 3, 1_700_000_000_000 + i) for i in range(300)
    }
    assert all(r.headers == (("h", b"x"),) for r in got)


def test_topics_are_not_auto_created(clusters_config: MirrorwatchConfig) -> None:
    """The brokers refuse to create topics implicitly: a typo in a topic name must not create a topic."""
    from confluent_kafka import KafkaError, Producer

    cluster = clusters_config.clusters["source"]
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "message.timeout.ms": 3000})
    errors: list[KafkaError | None] = []
    producer.produce("no-such-topic-ever", b"x", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)


def test_cli_lifecycle_up_status_down_leaves_nothing_running(tmp_path: Path) -> None:
    state_dir = tmp_path / "x"
    up = _mirrorwatch("local", "up", "--state-dir", str(state_dir))
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        assert "source: ready at 127.0.0.1:" in up.stdout and "target: ready at 127.0.0.1:" in up.stdout
        status = _mirrorwatch("local", "status", "--state-dir", str(state_dir))
        assert status.returncode == 0
        assert status.stdout.count("running (pid") == 2
        assert len(_kafka_pids(state_dir)) == 2

        config = load_config(state_dir / "mirrorwatch.yaml")
        assert set(config.clusters) == {"source", "target"}
        for alias, cluster in config.clusters.items():
            create_topics(new_admin(cluster, alias), {"lifecycle": 2})
            produce(cluster, alias, "lifecycle", [Record(value=alias.encode(), partition=1)])
            (got,) = read_all(cluster, alias, "lifecycle", expected=1)
            assert (got.value, got.partition) == (alias.encode(), 1)
    finally:
        down = _mirrorwatch("local", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines()[0].startswith("source: stopped (pid ")
    assert _kafka_pids(state_dir) == []
    status = _mirrorwatch("local", "status", "--state-dir", str(state_dir))
    assert status.returncode == 1
    assert status.stdout.count("stopped") == 2
    assert (state_dir / "source" / "broker.log").stat().st_size > 0

    (state_dir / "notes.txt").write_text("not ours")  # purge deletes only what `up` created
    purge = _mirrorwatch("local", "down", "--purge", "--state-dir", str(state_dir))
    assert purge.returncode == 0, purge.stderr
    assert "source: not running" in purge.stdout and f"removed {state_dir / 'source'}" in purge.stdout
    assert sorted(p.name for p in state_dir.iterdir()) == ["notes.txt"]
    again = _mirrorwatch("local", "down", "--purge", "--state-dir", str(state_dir))
    assert again.returncode != 0 and "nothing to purge" in again.stderr + again.stdout


def test_brokers_tied_to_a_killed_owner_die_with_it(tmp_path: Path) -> None:
    """A test run killed with SIGKILL must not leave its brokers behind (PR_SET_PDEATHSIG)."""
    state_dir = tmp_path / "tied"
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from localkafka.local import LocalClusters
            LocalClusters({str(state_dir)!r}, progress=lambda _l: None).up(["source"], tie_to_parent=True)
            print("up", flush=True)
            time.sleep(600)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "up"
        assert len(_kafka_pids(state_dir)) == 1
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
    wait_until(lambda: not _kafka_pids(state_dir), timeout_s=45, description="the orphaned broker to stop")


def test_restart_keeps_data_and_cluster_id(tmp_path: Path) -> None:
    clusters = LocalClusters(tmp_path / "restart", progress=lambda _l: None)
    try:
        (source,) = clusters.up(["source"], tie_to_parent=True)
        cluster = source.cluster_config()
        create_topics(new_admin(cluster, "source"), {"kept": 1})
        produce(cluster, "source", "kept", [Record(value=b"before restart")])
        clusters.down(["source"])
        assert not clusters.status()[0].is_running
        (again,) = clusters.up(["source"], tie_to_parent=True)
        assert again == source
        (got,) = read_all(cluster, "source", "kept", expected=1)
        assert got.value == b"before restart"
    finally:
        clusters.down()
    assert _kafka_pids(clusters.state_dir) == []
