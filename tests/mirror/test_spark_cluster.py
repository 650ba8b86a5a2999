"""The spark engine on a real Spark standalone cluster (a master and two workers, each its own JVM, from the
distribution the pinned pyspark wheel ships): started as the README documents, through `spark-submit` and through
`mirrorwatch mirror --master spark://...`; executors on the workers do the mirroring, the driver commits and
publishes progress; a worker lost mid-stream and a driver SIGKILLed and restarted lose nothing, and the records
written twice are counted (only a retried micro-batch writes twice)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.config import MirrorwatchConfig
from kernel.wait import wait_until
from mirror.spark_cluster import LocalSparkCluster, spark_home
from mirror.spark_engine import spark_jars
from tests.kafka_helpers import (
    ReadRecord,
    Record,
    by_partition,
    committed_offsets,
    end_offsets,
    produce,
    provenance,
    read_to_end,
    user_headers,
    wait_for_commits,
)
from tests.processes import MirrorProcess, monitor_sees_link_caught_up

# a Spark standalone cluster's start and two links on it: past the suite's 360 s under a loaded phase (seen: 366 s)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PARTITIONS = 4


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    with LocalSparkCluster(tmp_path_factory.mktemp("spark"), workers=2, cores=1, memory="1g") as cluster:
        yield cluster


def link(topic: str, group: str, tmp_path: Path, master: str, **spark: Any) -> dict[str, Any]:
    return {
        "name": "sparked",
        "source": "source",
        "target": "target",
        "engine": "spark",
        "topics": {"include": [re.escape(topic)]},
        "group_id": group,
        "refresh_topics_interval_seconds": 5,
        "spark": {
            "master": master,
            "trigger_interval_seconds": 0.5,
            "checkpoint_dir": str(tmp_path / "checkpoint"),
            "conf": {"spark.executor.memory": "768m", "spark.cores.max": "2"},
            **spark,
        },
    }


def records(start: int, count: int) -> list[Record]:
    return [
        Record(
            key=f"key-{i}".encode(),
            value=f"value-{i}".encode(),
            partition=i % PARTITIONS,
            headers=(("trace", f"t-{i}".encode()),),
        )
        for i in range(start, start + count)
    ]


def executors_on_both_workers(spark: LocalSparkCluster) -> bool:
    """The master's view: both workers give their core to the running application (the link's executors)."""
    workers = spark.state().get("workers", [])
    alive = [w for w in workers if w.get("state") == "ALIVE"]
    return len(alive) == 2 and all(w.get("coresused") == 1 for w in alive) and len(spark.state()["activeapps"]) == 1


def assert_every_record_once_at_least(got: list[ReadRecord], topic: str, high: list[int]) -> Counter[tuple[int, int]]:
    """Every source offset of every partition is on the target, in order of first appearance, key, value and headers
    as written; returns how often each (partition, source offset) was written (more than once: a retried batch)."""
    written: Counter[tuple[int, int]] = Counter()
    for partition, rows in by_partition(got).items():
        offsets = [int(provenance(r, "source.offset")) for r in rows]
        assert list(dict.fromkeys(offsets)) == list(range(high[partition])), f"partition {partition}: a gap"
        for row, offset in zip(rows, offsets, strict=True):
            i = offset * PARTITIONS + partition
            assert (row.key, row.value, user_headers(row)) == (
                f"key-{i}".encode(),
                f"value-{i}".encode(),
                (("trace", f"t-{i}".encode()),),
            )
            assert provenance(row, "source.topic") == topic.encode()
            assert provenance(row, "source.partition") == str(partition).encode()
            written[(partition, offset)] += 1
    assert sorted(by_partition(got)) == list(range(PARTITIONS))
    return written


def python_driver(session: int, script: str) -> int:
    """The python process spark-submit runs `script` in (spark-submit's JVM started it in the same session)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getsid(int(entry.name)) == session:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if script.encode() in argv and "python" in Path(argv[0].decode()).name:
                    return int(entry.name)
        except OSError:  # gone meanwhile
            continue
    raise AssertionError(f"no python driver running {script} in session {session}")


def submit_until_caught_up(
    spark: LocalSparkCluster, config: Path, tmp_path: Path, caught_up: Callable[[Callable[[], bool]], object]
) -> None:
    """The link through spark-submit exactly as the README writes it, until `caught_up(running)` returns, then
    SIGTERM to its python driver: a clean stop (exit 0, no traceback)."""
    engine = subprocess.run(
        [sys.executable, "-c", "import mirror.spark_engine as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    submit_log = tmp_path / "spark-submit.log"
    with submit_log.open("wb") as out:
        submitted = subprocess.Popen(
            [
                str(spark_home() / "bin" / "spark-submit"),
                "--master",
                spark.master_url,
                "--jars",
                ",".join(str(j) for j in spark_jars()),
                engine,
                "--config",
                str(config),
                "--link",
                "sparked",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**spark.env(), "PYSPARK_PYTHON": sys.executable},
            start_new_session=True,
            cwd=tmp_path,  # as start_mirror's: a killed driver's artifacts/ stays with the test
        )
    submitted_run = MirrorProcess(submitted, submit_log)
    try:
        wait_until(lambda: executors_on_both_workers(spark), timeout_s=180, description="executors on both")
        caught_up(submitted_run.running)
    finally:
        # SIGTERM to the python driver (the JVM that spark-submit started ends when the driver does)
        os.kill(python_driver(submitted.pid, engine), signal.SIGTERM)
        assert submitted.wait(timeout=120) == 0, submitted_run.log()[-3000:]
    assert "Traceback" not in submitted_run.log()


def test_spark_submit_then_mirror_master_run_a_link_on_the_workers_through_a_lost_worker_and_a_killed_driver(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    spark_cluster: LocalSparkCluster,
    tmp_path: Path,
) -> None:
    """One link, one checkpoint, one Spark application start per way of running it (a driver and its executors are
    what this file's time is made of): first through spark-submit exactly as the README writes it, stopped with
    SIGTERM; then through `mirrorwatch mirror --master` with small micro-batches and the monitor watching. Mid-stream
    one worker and its executors are SIGKILLed: Spark reschedules their tasks on the other and the link goes on.
    Later the driver is SIGKILLed and restarted: it resumes from its checkpoint. Every source record is on the target
    in order, progress committed and seen by the monitor; the records spark-submit mirrored before its clean stop are
    written once, and what was written twice is only what the interrupted batches wrote."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", PARTITIONS)
    submitted_total, total = 20_000, 60_000
    produce(source, "source", topic, records(0, submitted_total))
    group = unique("standalone")
    common: dict[str, Any] = {
        "canary": {"topic": unique("canary")},
        "http": {"host": "127.0.0.1", "port": 0},
        "state_dir": str(tmp_path / "state"),
    }
    config = write_config([link(topic, group, tmp_path, spark_cluster.master_url)], **common)
    submit_until_caught_up(spark_cluster, config, tmp_path, lambda running: wait_for_commits(
        source, "source", group, topic, PARTITIONS, timeout_s=300, while_running=running
    ))  # fmt: skip

    produce(source, "source", topic, records(submitted_total, total - submitted_total))
    # the same link and checkpoint, now in micro-batches of at most 1,000 records (a batch a fault interrupts)
    config = write_config(
        [link(topic, group, tmp_path, spark_cluster.master_url, max_offsets_per_trigger=1000)],
        monitor={"interval_seconds": 1},
        **common,
    )

    def committed() -> int:
        return sum(max(0, c) for c in committed_offsets(source, "source", group, topic, PARTITIONS))

    mirror = start_mirror("--config", str(config), "--link", "sparked", "--master", spark_cluster.master_url)
    monitor = start_mirror("--config", str(config), command="monitor")
    try:
        wait_until(lambda: executors_on_both_workers(spark_cluster), timeout_s=180, description="executors on both")
        wait_until(lambda: committed() >= submitted_total + 5_000, timeout_s=300, interval_s=0.2, description="going")
        spark_cluster.kill_worker(0)
        at_loss = committed()
        assert at_loss < total, "the worker was lost too late to test it"
        wait_until(lambda: committed() >= at_loss + 10_000, timeout_s=300, interval_s=0.2, description="going on")
        mirror.kill()  # the driver: the python process and its JVM, no flush, no commit
        at_kill = committed()
        assert at_kill < total, "the driver was killed too late to test it"
    finally:
        spark_cluster.restart_worker(0)
    mirror = start_mirror("--config", str(config), "--link", "sparked", "--master", spark_cluster.master_url)
    wait_for_commits(source, "source", group, topic, PARTITIONS, timeout_s=300, while_running=mirror.running)

    burrow = monitor_sees_link_caught_up(monitor.http_base(), "sparked", group, topic, PARTITIONS)
    assert burrow["partition_count"] == PARTITIONS and burrow["status"] == "OK"
    assert mirror.stop(timeout_s=120) == 0 and monitor.stop() == 0
    high = end_offsets(source, "source", topic, PARTITIONS)
    assert committed_offsets(source, "source", group, topic, PARTITIONS) == high
    got = read_to_end(target, "target", topic, PARTITIONS)
    written = assert_every_record_once_at_least(got, topic, high)
    submitted_per_partition = submitted_total // PARTITIONS
    assert {n for (_, offset), n in written.items() if offset < submitted_per_partition} == {1}, (
        "a clean stop and restart writes nothing twice"
    )
    twice = sum(n - 1 for n in written.values())
    # Only the micro-batches running when a fault hit are written again: each is at most max_offsets_per_trigger.
    assert len(got) == total + twice and twice <= 2 * 2 * 1000, f"{twice} written twice"
    print(f"worker lost at {at_loss}, driver killed at {at_kill} of {total}; {twice} records written twice")
    assert "Traceback" not in mirror.log() + monitor.log()
