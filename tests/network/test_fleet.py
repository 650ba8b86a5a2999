"""A fleet on many hosts (issue #45): three `mirrorwatch mirror` workers of one link, each on a host of its own
(bench.netns.ClientHost: a network namespace with doors of its own into the clusters' hosts, a UTS namespace with a
host name of its own, a state directory of its own), and `mirrorwatch monitor` on a fourth host with yet another
state directory (its API reached from here by a path home): no file and no network path is shared, so the monitor
knows the workers through the target's progress topic alone, as it would on another machine. B5's harness (bench.truth_harness) runs the truth phases: steady, the
first worker SIGKILLed and restarted, SIGSTOPped, and the target broker killed.

Facts, as in tests/monitor/test_truth.py: every acknowledged record on the target, every process alive throughout,
every monitor sample with a figure and none reading 0 while the truth is more than 2 s behind; a killed or frozen
worker on another host is known only when its progress stops, and its partitions are measured from its last word
until the others take them over. How close the figures are is printed here and measured by
`python -m bench.monitor_truth --fleet 3` (the README's table), not judged."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from bench.netns import Apart
from bench.truth_harness import FLEET_HOST, run_truth
from kernel.config import load_config
from kernel.kafka import new_consumer
from kernel.progress_format import Entry, decode
from tests.monitor.test_truth import assert_truthful

pytestmark = [pytest.mark.integration, pytest.mark.alone]

RATE = 500
WORKERS = 3


@pytest.mark.alone(seconds=132)  # its time in the alone phase (tests/conftest.py shares them out)
def test_three_workers_on_three_hosts_are_measured_truly_by_a_monitor_on_a_fourth(apart: Apart, tmp_path: Path) -> None:
    with apart.client_hosts(WORKERS + 1) as hosts:
        *fleet, monitor_host = hosts
        run = run_truth(
            apart.clusters,
            tmp_path,
            rate=RATE,
            partitions=6,
            steady_s=8,
            fault_s=15,
            recover_s=4,
            tie_to_parent=True,
            progress=lambda _line: None,
            faults=("mirror-kill", "mirror-stop", "target-kill"),
            network=apart.hosts,
            fleet=fleet,
            monitor_host=monitor_host,
        )
    phases = ["steady", "mirror SIGKILL, restarted 3 s later", "mirror SIGSTOP 15 s", "target broker SIGKILL, "
              "restarted after 15 s"]  # fmt: skip
    assert_truthful(run, phases, blind=lambda _name: False)
    # The monitor had no file of theirs: its state directory holds no worker status (nor theirs now: a clean stop
    # withdraws a status file). What they published says who they were: each worker on a host named apart, in a
    # state directory of its own. The monitor served from its own host: it listened on its path home.
    assert not list((tmp_path / "state").glob("status/links/*.json"))
    published = {(d["host"], d["instance"].split(":", 1)[1]) for d in progress_documents(apart, str(tmp_path))}
    assert published == {(f"{FLEET_HOST}{i}", f"{tmp_path / f'state-{i}'}#0") for i in range(WORKERS)}, published
    assert "HTTP API on http://10." in (tmp_path / "monitor.log").read_text()
    # Every worker took part: each owned partitions at some moment of the run (its log says what it was assigned).
    for index in range(WORKERS):
        assert "assigned" in (tmp_path / f"mirror-{index}.log").read_text(), f"worker {index} was never assigned any"


def progress_documents(apart: Apart, under: str) -> list[dict[str, Any]]:
    """Every status on the target's progress topic (from its beginning to its end) of a worker whose state directory
    is under `under` (the clusters are the network tests' own: other runs publish there too)."""
    config = load_config(apart.clusters.config_path)
    consumer = new_consumer(config.clusters["target"], "target", "mirrorwatch-test-progress")
    try:
        partition = TopicPartition(config.progress.topic, 0, 0)
        end = consumer.get_watermark_offsets(partition, timeout=10)[1]
        consumer.assign([partition])
        documents, position, deadline = [], 0, time.monotonic() + 60
        while position < end and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=5):
                if message.error() is None:
                    position = (message.offset() or 0) + 1
                    record = decode(message.key(), message.value())
                    if isinstance(record, Entry) and record.document["instance"].split(":", 1)[1].startswith(under):
                        documents.append(dict(record.document))
        return documents
    finally:
        consumer.close()
