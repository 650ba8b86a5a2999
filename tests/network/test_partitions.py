"""Across a real network (issue #44): the source and the target each on a host of its own (bench.netns: a network
namespace behind a router namespace, the faults made in the router), `mirrorwatch mirror` and `mirrorwatch monitor`
on this host (or the mirror on a host of its own, by doors of its own into the clusters' hosts, so that the monitor
alone can be cut off), the truth's producers beside the source and its reader beside the target (never cut off with
the mirror). The harness is B5's (bench.truth_harness), with the network's faults.

Facts, as in tests/monitor/test_truth.py: every acknowledged source record on the target; how many arrived twice,
within the bound at-least-once allows (below); the engine and the monitor alive throughout and the link's group OK
after each recovery; every monitor sample with a figure, or — cut off from the source — none with the reason; none
reading 0 while the truth is more than 2 s behind. How close the figures are and how soon the link resumes are
printed here and measured by `python -m bench.monitor_truth --network` (the README's table), not timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.netns import Apart
from bench.truth_harness import CANNOT_SEE, SLOW_KBIT, run_truth
from bench.truth_judge import TruthRun
from tests.monitor.test_truth import assert_truthful

pytestmark = [pytest.mark.integration, pytest.mark.alone]

RATE = 500


def run_apart(
    apart: Apart, work: Path, faults: tuple[str, ...], *, fault_s: float, mirror_apart: bool = False
) -> TruthRun:
    """B5's harness at RATE over 6 partitions on the clusters apart, `faults` one after another; `mirror_apart`: the
    mirror on the client host, by its doors (its network apart from the monitor's)."""
    return run_truth(
        apart.clusters,
        work,
        rate=RATE,
        partitions=6,
        steady_s=8,
        fault_s=fault_s,
        recover_s=4,
        tie_to_parent=True,
        progress=lambda _line: None,
        faults=faults,
        network=apart.hosts,
        mirror_host=apart.client if mirror_apart else None,
    )


def assert_duplicates_bounded(run: TruthRun, losses: int) -> None:
    """At least once across a network: the idempotent producer retries a request whose answer was lost without
    writing it twice, so a record arrives twice only when the link's group loses its partitions (a source cut longer
    than the session timeout) and the next owner reads again from the last commit: what the worker had read and
    copied before the cut and could not commit (its commits go to the source too). It reads nothing during the cut,
    so that is at most what the source took before it and after the last commit the coordinator answered, bounded
    here by a session timeout's worth of traffic per loss (measured: 2,156 records, 4.3 s of it, in one run)."""
    assert run.duplicates <= losses * RATE * 10, f"{run.duplicates} records arrived twice after {losses} losses"
    if losses == 0:
        assert run.duplicates == 0, f"{run.duplicates} records arrived twice, with no partition lost"


@pytest.mark.alone(seconds=157)  # its time in the alone phase (tests/conftest.py shares them out)
def test_the_link_rides_out_a_minute_cut_off_from_the_target_and_from_the_source(apart: Apart, tmp_path: Path) -> None:
    """Every packet between this host and the target dropped for 60 s (connections hang: nothing is refused), then the
    same between this host and the source. The mirror neither exits nor needs a restart; cut off from the target the
    monitor still measures the link from the worker's positions; cut off from the source it says it cannot see it."""
    run = run_apart(apart, tmp_path, ("target-cut", "source-cut"), fault_s=60)
    source, target = "network to the source cut 60 s", "network to the target cut 60 s"
    # Cut off from the source, the monitor cannot evaluate the link's group: its Burrow API says so (503, "cannot see
    # cluster source since ..."), which the harness notes as CANNOT_SEE: not OK, as the WARN-or-worse rule asks.
    assert_truthful(run, ["steady", target, source], blind=lambda name: name == source, brief=lambda _name: False)
    statuses = next(row for row in run.report() if row["phase"] == source)["group_statuses"]
    assert CANNOT_SEE in statuses, statuses
    lost = sum(row["engine_lost_partitions"] > 0 for row in run.report())
    assert_duplicates_bounded(run, lost)
    assert_target_silence_said(run, target)


def assert_target_silence_said(run: TruthRun, name: str) -> None:
    """Cut off from its target, the link says so: its view's `target_silent_since_ms` names the moment it was last
    heard, which the stopwatch around the cut puts at the cut (the records before it were acknowledged within
    moments); nothing said so while the link was healthy, and nothing still says so at the phase's end."""
    phase = next(p for p in run.phases if p.name == name)
    cut_ms = phase.events_ms[0]
    said = {s.target_silent_since_ms for s in run.judged() if s.target_silent_since_ms is not None}
    assert said, f"{name}: no sample said the target was silent"
    assert all(cut_ms - 2_000 <= since <= cut_ms + 1_000 for since in said), (cut_ms, said)
    steady = run.phases[0]
    assert all(s.target_silent_since_ms is None for s in run.judged() if s.observed_ms < steady.ended_ms)
    last = [s for s in run.judged() if s.observed_ms <= phase.ended_ms][-1]
    assert last.target_silent_since_ms is None, f"{name}: still said silent at the phase's end: {last}"


@pytest.mark.alone(seconds=125)  # its time in the alone phase (tests/conftest.py shares them out)
def test_the_link_rides_out_a_slow_and_a_flapping_link_to_the_target(apart: Apart, tmp_path: Path) -> None:
    """The network to the target rate-limited to 100 kbit/s for 30 s (far below the traffic: the link falls behind and
    the lag says so), then down 2 s / up 2 s for 30 s."""
    run = run_apart(apart, tmp_path, ("target-slow", "target-flap"), fault_s=30)
    flapping = "network to the target flapping (2 s down, 2 s up) 30 s"
    phases = ["steady", f"network to the target slowed to {SLOW_KBIT} kbit/s for 30 s", flapping]
    assert_truthful(run, phases, blind=lambda _name: False, brief=lambda name: name == flapping)
    assert_duplicates_bounded(run, 0)


@pytest.mark.alone(seconds=66)  # its time in the alone phase (tests/conftest.py shares them out)
def test_the_monitor_cut_off_from_the_target_measures_the_link_throughout_and_says_it_cannot_see_the_target(
    apart: Apart, tmp_path: Path
) -> None:
    """The mirror on a host of its own (its doors into both clusters' hosts), the monitor on this one: every packet
    between the monitor and the target dropped for 30 s while the mirror copies on. The link's figures need the
    source and the workers' positions, not the target: every sample has one and it is true; the monitor says the
    target is down (`mirrorwatch_cluster_up`) from within the cut, never before it, and up again after."""
    run = run_apart(apart, tmp_path, ("monitor-target-cut",), fault_s=30, mirror_apart=True)
    name = "monitor cut off from the target 30 s"
    assert_truthful(
        run, ["steady", name], blind=lambda _name: False, brief=lambda n: n == name, held=lambda n: n != name
    )
    assert_duplicates_bounded(run, 0)
    steady, cut = run.phases
    assert steady.target_up and all(up for _at, up in steady.target_up), steady.target_up
    cut_ms, healed_ms = cut.events_ms
    down = [at for at, up in cut.target_up if not up]
    assert down, f"the monitor never said the target down: {cut.target_up}"
    assert all(cut_ms <= at for at in down), (cut_ms, cut.target_up)
    assert cut.target_up[-1][1], f"still down at the phase's end: {cut.target_up}"
    assert any(at < healed_ms for at in down), (healed_ms, cut.target_up)
    said_up = min(at for at, up in cut.target_up if up and at > healed_ms)
    print(f"the monitor said the target down {(min(down) - cut_ms) / 1000:.1f} s into the cut, up again "
          f"{(said_up - healed_ms) / 1000:.1f} s after it ended")  # fmt: skip
