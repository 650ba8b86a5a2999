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


def test_spark_submit_and_mirror_master_run_a_link_on_the_workers_and_the_monitor_sees_it(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    spark_cluster: LocalSparkCluster,
    tmp_path: Path,
) -> None:
    """First through spark-submit exactly as the README writes it, then (the same checkpoint) through `mirrorwatch
    mirror --master`, with the monitor watching: every record once, in order, progress committed and seen."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", PARTITIONS)
    produce(source, "source", topic, records(0, 20_000))
    group = unique("standalone")
    config = write_config(
        [link(topic, group, tmp_path, spark_cluster.master_url)],
        monitor={"interval_seconds": 1},
        canary={"topic": unique("canary")},
        http={"host": "127.0.0.1", "port": 0},
        state_dir=str(tmp_path / "state"),
    )
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
                spark_cluster.master_url,
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
            env={**spark_cluster.env(), "PYSPARK_PYTHON": sys.executable},
            start_new_session=True,
            cwd=tmp_path,  # as start_mirror's: a killed driver's artifacts/ stays with the test
        )
    submitted_run = MirrorProcess(submitted, submit_log)
    try:
        wait_until(lambda: executors_on_both_workers(spark_cluster), timeout_s=180, description="executors on both")
        wait_for_commits(source, "source", group, topic, PARTITIONS, timeout_s=300, while_running=submitted_run.running)
    finally:
        # SIGTERM to the python driver (the JVM that spark-submit started ends when the driver does)
        os.kill(python_driver(submitted.pid, engine), signal.SIGTERM)
        assert submitted.wait(timeout=120) == 0, submitted_run.log()[-3000:]
    assert "Traceback" not in submitted_run.log()

    produce(source, "source", topic, records(20_000, 8_000))
    mirror = start_mirror("--config", str(config), "--link", "sparked", "--master", spark_cluster.master_url)
    monitor = start_mirror("--config", str(config), command="monitor")
    base = monitor.http_base()
    wait_until(lambda: executors_on_both_workers(spark_cluster), timeout_s=180, description="executors on both")
    wait_for_commits(source, "source", group, topic, PARTITIONS, timeout_s=300, while_running=mirror.running)

    burrow = monitor_sees_link_caught_up(base, "sparked", group, topic, PARTITIONS)
    assert burrow["partition_count"] == PARTITIONS and burrow["status"] == "OK"
    assert mirror.stop(timeout_s=120) == 0 and monitor.stop() == 0
    high = end_offsets(source, "source", topic, PARTITIONS)
    assert committed_offsets(source, "source", group, topic, PARTITIONS) == high
    got = read_to_end(target, "target", topic, PARTITIONS)
    written = assert_every_record_once_at_least(got, topic, high)
    assert set(written.values()) == {1}, "a clean stop and restart writes nothing twice"
    assert "Traceback" not in mirror.log() + monitor.log()


def test_a_lost_worker_and_a_killed_driver_lose_nothing_and_the_duplicates_are_counted(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    spark_cluster: LocalSparkCluster,
    tmp_path: Path,
) -> None:
    """Mid-stream (small micro-batches), one worker and its executors are SIGKILLed: Spark reschedules their tasks on
    the other and the link goes on. Later the driver is SIGKILLed and restarted: it resumes from its checkpoint.
    Every source record is on the target; what was written twice is only what the interrupted batches wrote."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", PARTITIONS)
    total = 40_000
    produce(source, "source", topic, records(0, total))
    group = unique("faults")
    config = write_config([link(topic, group, tmp_path, spark_cluster.master_url, max_offsets_per_trigger=1000)])

    def committed() -> int:
        return sum(max(0, c) for c in committed_offsets(source, "source", group, topic, PARTITIONS))

    mirror = start_mirror("--config", str(config), "--link", "sparked", "--master", spark_cluster.master_url)
    try:
        wait_until(lambda: executors_on_both_workers(spark_cluster), timeout_s=180, description="executors on both")
        wait_until(lambda: committed() >= 5_000, timeout_s=300, interval_s=0.2, description="a quarter mirrored")
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
    assert mirror.stop(timeout_s=120) == 0
    high = end_offsets(source, "source", topic, PARTITIONS)
    got = read_to_end(target, "target", topic, PARTITIONS)
    written = assert_every_record_once_at_least(got, topic, high)
    twice = sum(n - 1 for n in written.values())
    # Only the micro-batches running when a fault hit are written again: each is at most max_offsets_per_trigger.
    assert len(got) == total + twice and twice <= 2 * 2 * 1000, f"{twice} written twice"
    print(f"worker lost at {at_loss}, driver killed at {at_kill} of {total}; {twice} records written twice")
    assert "Traceback" not in mirror.log()
