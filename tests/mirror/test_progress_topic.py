"""Worker progress on the target's progress topic (issue #45), on real brokers: a monitor that shares no file with
the workers (each process has a state directory of its own, as on another host) sees each live worker's exact
positions, keeps a killed worker's last word, forgets a cleanly stopped one, and is not fooled or stopped by records
someone else wrote to the topic; a second monitor beside it (monitors in pairs) says the same. The truth is the
target's own high-watermarks."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_producer
from kernel.processes import free_port
from kernel.progress_format import encode
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from tests.kafka_helpers import Record, end_offsets, produce
from tests.processes import MirrorProcess, get_json

pytestmark = pytest.mark.integration

PARTITIONS = 4


def forge(target: ClusterConfig, topic: str, name: str) -> None:
    """Garbage, and a forged status under another writer's key, written to the progress topic."""
    failed: list[str] = []
    forger = new_producer(target, "target", {"on_delivery": lambda err, _msg: failed.extend([str(err)] if err else [])})
    forged_key, _ = encode("links", {"name": name, "worker": 0, "host": "elsewhere", "pid": 1})
    _, forged_value = encode("links", {"name": name, "worker": 0, "host": "elsewhere", "pid": 2, "updated_ms": 1})
    for key, value in ((b"\xff\xfe", os.urandom(64)), (forged_key, forged_value), (forged_key, b"{not json")):
        forger.produce(topic, value, key)
    assert forger.flush(30) == 0 and not failed, failed


def view_with_the_target_frozen(
    clusters: LocalClusters, source: ClusterConfig, topic: str, view: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """The target frozen: the workers' statuses still reach the monitor, through the progress topic on the source
    (progress.on_source). The link's view once both workers read a new record on each partition, which waits."""
    clusters.freeze("target")
    try:
        produce(source, "source", topic, [Record(key=b"f", value=b"v", partition=p) for p in range(PARTITIONS)])
        time.sleep(4)  # twice a status' staleness: workers heard only through the target would read gone by now

        def both_waiting() -> dict[str, Any] | None:
            seen = view()
            return seen if seen["workers"] == 2 and all(p["consumed"] == 1001 for p in seen["partitions"]) else None

        return wait_until(both_waiting, timeout_s=30, description="the workers' statuses during the target's freeze")
    finally:
        clusters.thaw("target")


def test_a_monitor_on_another_host_reads_every_workers_exact_positions_from_the_progress_topic(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
    local_clusters: LocalClusters,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, name, progress = make_topic("source", PARTITIONS), unique("link"), unique("progress")
    port, pair_port = free_port(), free_port()
    link = {"name": name, "source": "source", "target": "target", "topics": {"include": [topic]}}
    common: dict[str, Any] = {"canary": {"enabled": False}, "progress": {"topic": f"mirrorwatch.{progress}"}}
    worker_configs = [write_config([link], state_dir=str(tmp_path / f"host-{i}"), **common) for i in range(2)]
    monitor_config, pair_config = (
        write_config(
            [link],
            state_dir=str(tmp_path / host),
            monitor={"interval_seconds": 1},
            http={"host": "127.0.0.1", "port": at},
            **common,
        )
        for host, at in (("monitor-host", port), ("pair-host", pair_port))
    )

    workers = [start_mirror("--config", str(path), "--link", name) for path in worker_configs]
    monitor = start_mirror("--config", str(monitor_config), command="monitor")
    pair = start_mirror("--config", str(pair_config), command="monitor")  # a second monitor, for availability
    produce(source, "source", topic, [Record(key=b"%d" % i, value=b"v", partition=i % PARTITIONS) for i in range(4000)])

    def view(at: int = port) -> dict[str, Any]:
        seen: dict[str, Any] = get_json(f"http://127.0.0.1:{at}/mirror/links/{name}")
        return seen

    def figures(seen: dict[str, Any]) -> list[Any]:
        parts = sorted(seen["partitions"], key=lambda p: p["partition"])
        fields = ("acked", "committed", "replication_lag_records", "position_from")
        return [seen["workers"], seen["workers_gone"], [[p[f] for f in fields] for p in parts]]

    def pair_agrees() -> None:
        """Monitors in pairs: once the link stands still, the second says what the first does (the same rules on
        the same inputs), and so does its Burrow view of the link's group."""
        group = f"/v3/kafka/source/consumer/mirrorwatch-{name}/status"

        def burrow(at: int) -> str:
            return str(get_json(f"http://127.0.0.1:{at}{group}")["status"]["status"])

        wait_until(
            lambda: figures(view(pair_port)) == figures(view()) and burrow(pair_port) == burrow(port),
            timeout_s=15,
            ignore=(OSError,),  # a group not committed yet: 404 from both
            description=f"the pair to agree: {figures(view())}",
        )

    def caught_up() -> dict[str, Any] | None:
        seen = view()
        truth = end_offsets(target, "target", topic, PARTITIONS)  # what the target holds: every record mirrored
        if seen["workers"] != 2 or truth != [1000] * PARTITIONS:
            return None
        acked = [p["acked"] for p in sorted(seen["partitions"], key=lambda p: p["partition"])]
        # Each partition's position from a live worker's status, which reached the monitor only through the topic
        # (just after the second worker joined, a moved partition is measured from what its last owner released
        # until the new owner's first status with it arrives)
        owned = {p["position_from"] for p in seen["partitions"]} == {"worker"}
        return seen if owned and acked == truth and seen["replication_lag_records"] == 0 else None

    seen = wait_until(
        caught_up, timeout_s=90, ignore=(OSError,), description="the monitor to see both workers' positions"
    )
    assert all(p["consumed"] == 1000 for p in seen["partitions"]), seen["partitions"]
    assert not list((tmp_path / "monitor-host").glob("status/links/*.json"))
    pair_agrees()

    frozen = view_with_the_target_frozen(local_clusters, source, topic, view)
    assert frozen["workers_gone"] == 0 and all(p["acked"] == 1000 for p in frozen["partitions"]), frozen
    assert {p["position_from"] for p in frozen["partitions"]} == {"worker"}

    # Someone else's records on the topic: garbage, and a forged status under another writer's key.
    forge(target, f"mirrorwatch.{progress}", name)
    wait_until(lambda: "not a worker's status" in monitor.log(), timeout_s=30, description="the monitor to refuse them")
    assert view()["workers"] == 2  # the forged status counts no worker

    # A worker killed: its last word stands (its partitions move to the other worker); a clean stop withdraws one.
    wait_until(  # once committed (every 5 s): what a killed worker had not committed is copied again, by design
        lambda: all(p["committed"] == 1001 for p in view()["partitions"]),
        timeout_s=30,
        description="the workers' commits",
    )
    workers[0].kill()
    wait_until(
        lambda: (v := view())["workers_gone"] == 1 and v["workers"] == 1,
        timeout_s=60,
        description="the monitor to know the killed worker gone",
    )
    produce(source, "source", topic, [Record(key=b"x", value=b"v", partition=p) for p in range(PARTITIONS)])
    wait_until(
        lambda: [p["acked"] for p in sorted(view()["partitions"], key=lambda p: p["partition"])] == [1002] * PARTITIONS,
        timeout_s=60,
        description="the survivor's positions past the new records",
    )
    assert end_offsets(target, "target", topic, PARTITIONS) == [1002] * PARTITIONS
    pair_agrees()
    assert workers[1].stop() == 0
    wait_until(
        lambda: (v := view())["workers"] == 0 and v["workers_gone"] == 1,
        timeout_s=30,
        description="the cleanly stopped worker withdrawn (the killed one's last word kept)",
    )
    pair_agrees()
    assert monitor.stop() == 0 and pair.stop() == 0
