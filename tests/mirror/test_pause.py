"""`mirrorwatch link pause|resume|status` on a running link (issue #42, link states), on real brokers: the running
mirror obeys without a restart, a paused partition copies nothing while its lag grows and the monitor says "paused"
(not stalled: no lag alert judges it), the pause survives a restart of the mirror, and resumed, the link copies what
waited: nothing lost, nothing twice. A topic paused alone waits while the link's other topics go on (the
exactly-once engine). The truth is what the test produced and what a consumer reads on the target."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.config import MirrorwatchConfig
from kernel.processes import free_port
from kernel.wait import wait_until
from tests.kafka_helpers import Record, end_offsets, produce, read_all, read_to_end
from tests.processes import MirrorProcess, get_json

pytestmark = pytest.mark.integration

PARTITIONS = 3


def batch(prefix: str, count: int) -> list[Record]:
    return [Record(key=f"{prefix}-{i}".encode(), value=b"v", partition=i % PARTITIONS) for i in range(count)]


def link_command(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", "link", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def keys_on(clusters_config: MirrorwatchConfig, topic: str, expected: int) -> Counter[bytes]:
    """Every key on the target topic, counted (a key twice: a duplicate)."""
    found = read_all(clusters_config.clusters["target"], "target", topic, expected, partitions=PARTITIONS)
    return Counter(r.key or b"" for r in found)


def test_a_paused_link_copies_nothing_keeps_its_pause_across_a_restart_and_resumes_losing_and_repeating_nothing(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, name, port = make_topic("source", PARTITIONS), unique("link"), free_port()
    link = {"name": name, "source": "source", "target": "target", "topics": {"include": [topic]}}
    config = write_config(
        [link],
        monitor={"interval_seconds": 1},
        canary={"enabled": False},
        http={"host": "127.0.0.1", "port": port},
        state_dir=str(tmp_path / "state"),
    )

    def view() -> dict[str, Any]:
        seen: dict[str, Any] = get_json(f"http://127.0.0.1:{port}/mirror/links/{name}")
        return seen

    produce(source, "source", topic, batch("before", 300))
    mirror = start_mirror("--config", str(config), "--link", name)
    assert sum(keys_on(clusters_config, topic, 300).values()) == 300

    paused = link_command(config, "pause", "--link", name, "--reason", "drill")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert f"obeyed by 1 running worker(s) of link {name}" in paused.stdout, paused.stdout
    produce(source, "source", topic, batch("during", 600))
    monitor = start_mirror("--config", str(config), command="monitor")
    seen = wait_until(
        lambda: monitor.running() and (v := view())["replication_lag_records"] == 600 and v,
        timeout_s=60,
        ignore=(OSError,),  # not up yet, or 503 "no collection yet"
        description="the monitor to see the 600 records produced during the pause waiting",
    )
    assert seen["state"] == "paused"
    assert all(p["paused"] and "drill" in p["paused"] for p in seen["partitions"]), seen["partitions"]
    assert sum(end_offsets(target, "target", topic, PARTITIONS)) == 300  # the truth: the target took none of them
    time.sleep(2)  # a running link copies 600 records many times over in 2 s: a paused one none
    assert mirror.running() and sum(end_offsets(target, "target", topic, PARTITIONS)) == 300
    status = json.loads(link_command(config, "status", "--link", name, "--json").stdout)
    assert [(s["state"], s["paused"], s["reason"]) for s in status] == [("paused", True, "drill")]
    assert [(w["state"], len(w["paused"])) for w in status[0]["workers"]] == [("paused", PARTITIONS)]

    # the pause survives a restart: a new process reads nothing, and says why
    assert mirror.stop() == 0
    restarted = start_mirror("--config", str(config), "--link", name)
    wait_until(
        lambda: restarted.running() and "paused" in restarted.log() and view()["workers"] == 1,
        timeout_s=60,
        ignore=(OSError,),
        description="the restarted mirror to report",
    )
    time.sleep(2)
    assert sum(end_offsets(target, "target", topic, PARTITIONS)) == 300

    resumed = link_command(config, "resume", "--link", name)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    keys = keys_on(clusters_config, topic, 900)
    assert sum(keys.values()) == 900 and max(keys.values()) == 1  # every record once: none lost, none twice
    assert set(keys) == {r.key for r in batch("before", 300) + batch("during", 600)}
    wait_until(
        lambda: (v := view())["state"] == "running" and v["replication_lag_records"] == 0,
        timeout_s=60,
        description="the monitor to see the link running and caught up",
    )
    assert restarted.stop() == 0 and monitor.stop() == 0


def test_a_topic_paused_alone_waits_while_the_others_go_on_with_exactly_once(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    held, free, name = make_topic("source", PARTITIONS), make_topic("source", PARTITIONS), unique("link")
    link: dict[str, Any] = {"name": name, "source": "source", "target": "target", "topics": {"include": [held, free]}}
    link.update(delivery="exactly-once", offset_commit_interval_ms=1000)  # a transaction a second
    config = write_config([link], canary={"enabled": False})
    mirror = start_mirror("--config", str(config), "--link", name)
    produce(source, "source", held, batch("first", 90))
    assert sum(keys_on(clusters_config, held, 90).values()) == 90

    paused = link_command(config, "pause", "--link", name, "--topic", held)
    assert paused.returncode == 0, paused.stdout + paused.stderr
    produce(source, "source", held, batch("held", 300))
    produce(source, "source", free, batch("free", 300))
    assert sum(keys_on(clusters_config, free, 300).values()) == 300  # the other topic goes on
    written = end_offsets(target, "target", held, PARTITIONS)  # records and transaction markers
    time.sleep(2)  # transactions commit every second: none touches the paused topic
    assert end_offsets(target, "target", held, PARTITIONS) == written
    assert len(read_to_end(target, "target", held, PARTITIONS)) == 90
    status = json.loads(link_command(config, "status", "--link", name, "--json").stdout)
    assert [(s["state"], s["paused_topics"]) for s in status] == [("partly paused", [held])]
    assert sorted(status[0]["workers"][0]["paused"]) == [f"{held}[{p}]" for p in range(PARTITIONS)]

    resumed = link_command(config, "resume", "--link", name, "--topic", held)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    keys = keys_on(clusters_config, held, 390)
    assert sum(keys.values()) == 390 and max(keys.values()) == 1
    assert mirror.stop() == 0


def test_a_pause_on_one_host_is_obeyed_by_the_links_workers_on_every_host_and_by_one_started_later(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Issue #45: each "host" has a state directory of its own (no control file, no status file shared), so the
    link's control travels by the target's progress topic alone: the operator pauses the link on a host where no
    worker runs, the worker on another host obeys, a worker started later on a third host starts paused, and a
    resume on the worker's host lifts it everywhere. Truth: the target's end offsets and the keys read there."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, name = make_topic("source", PARTITIONS), unique("link")
    link = {"name": name, "source": "source", "target": "target", "topics": {"include": [topic]}}
    hosts = {
        host: write_config([link], canary={"enabled": False}, state_dir=str(tmp_path / host))
        for host in ("operator", "b", "c")
    }
    produce(source, "source", topic, batch("before", 300))
    on_b = start_mirror("--config", str(hosts["b"]))
    assert sum(keys_on(clusters_config, topic, 300).values()) == 300

    paused = link_command(hosts["operator"], "pause", "--link", name, "--reason", "fleet drill")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert f"obeyed by 1 running worker(s) of link {name}" in paused.stdout, paused.stdout  # b's, read on the topic
    assert "changed on this host only" not in paused.stderr, paused.stderr
    assert not (tmp_path / "b" / "control").exists()  # b obeyed the topic: no file of its own says so
    produce(source, "source", topic, batch("during", 600))
    time.sleep(2)  # a running link copies 600 records many times over in 2 s: a paused one none
    assert on_b.running() and sum(end_offsets(target, "target", topic, PARTITIONS)) == 300
    status = json.loads(link_command(hosts["b"], "status", "--link", name, "--json").stdout)
    assert [(s["state"], s["reason"], len(s["workers"])) for s in status] == [("paused", "fleet drill", 1)]

    on_c = start_mirror("--config", str(hosts["c"]))  # joins the group: some partitions move to it, still paused
    wait_until(
        lambda: "assigned" in on_c.log() and "paused" in on_c.log(),
        timeout_s=60,
        description="the worker started on the third host to be given partitions and pause them",
    )
    time.sleep(2)
    assert sum(end_offsets(target, "target", topic, PARTITIONS)) == 300

    resumed = link_command(hosts["b"], "resume", "--link", name)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"obeyed by 2 running worker(s) of link {name}" in resumed.stdout, resumed.stdout
    keys = keys_on(clusters_config, topic, 900)
    assert sum(keys.values()) == 900 and max(keys.values()) == 1  # every record once: none lost, none twice
    assert on_b.stop() == 0 and on_c.stop() == 0
