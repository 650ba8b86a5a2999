"""A fleet on many hosts (issue #45): three `mirrorwatch mirror` workers of one link, each on a host of its own
(bench.netns.ClientHost: a network namespace with doors of its own into the clusters' hosts, a UTS namespace with a
host name of its own, a state directory of its own), and `mirrorwatch monitor` on this host with yet another state
directory: no file and no network path is shared, so the monitor knows the workers through the target's progress
topic alone, as it would on another machine. B5's harness (bench.truth_harness) runs the truth phases: steady, the
first worker SIGKILLed and restarted, SIGSTOPped, and the target broker killed.

Facts, as in tests/monitor/test_truth.py: every acknowledged record on the target, every process alive throughout,
every monitor sample with a figure and none reading 0 while the truth is more than 2 s behind; a killed or frozen
worker on another host is known only when its progress stops, and its partitions are measured from its last word
until the others take them over. How close the figures are is printed here and measured by
`python -m bench.monitor_truth --fleet 3` (the README's table), not judged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.netns import Apart
from bench.truth_harness import FLEET_HOST, run_truth
from tests.monitor.test_truth import assert_truthful

pytestmark = [pytest.mark.integration, pytest.mark.alone]

RATE = 500
WORKERS = 3


def test_three_workers_on_three_hosts_are_measured_truly_by_a_monitor_on_a_fourth(apart: Apart, tmp_path: Path) -> None:
    with apart.client_hosts(WORKERS) as fleet:
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
        )
    phases = ["steady", "mirror SIGKILL, restarted 3 s later", "mirror SIGSTOP 15 s", "target broker SIGKILL, "
              "restarted after 15 s"]  # fmt: skip
    assert_truthful(run, phases, blind=lambda _name: False)
    # The monitor had no file of theirs: its state directory holds no worker status, and the workers were on hosts
    # named apart, each in a state directory of its own.
    assert not list((tmp_path / "state").glob("status/links/*.json"))
    for index in range(WORKERS):
        written = [json.loads(p.read_text()) for p in (tmp_path / f"state-{index}").glob("status/links/*.json")]
        assert all(d["host"] == f"{FLEET_HOST}{index}" for d in written), written
    # Every worker took part: each owned partitions at some moment of the run (its log says what it was assigned).
    for index in range(WORKERS):
        assert "assigned" in (tmp_path / f"mirror-{index}.log").read_text(), f"worker {index} was never assigned any"
