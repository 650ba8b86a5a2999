"""How the truth harness judges a figure (bench.truth_judge): the tolerance around phase changes, and what a
micro-batch engine may read while a batch runs (above the truth only, bounded by the truth when the batch started)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.truth_harness import check_alive, spark_batches
from bench.truth_judge import FOLLOWER_LATENCY_MS, Phase, Sample, Truth, TruthRun

T0 = 1_800_000_000_000


def run(*samples: Sample) -> TruthRun:
    phases = [
        Phase("steady", T0),
        Phase("target broker SIGSTOP 15 s", T0 + 10_000, events_ms=[T0 + 10_000, T0 + 25_000]),
    ]
    return TruthRun(phases, list(samples), acked=0, missing_on_target=0)


def sample(at_ms: int, seconds: float, truth: float, low: float | None = None, bound: float | None = None) -> Sample:
    return Sample(
        poll_ms=at_ms,
        observed_ms=at_ms,
        seconds=seconds,
        records=0,
        truth_seconds=truth,
        truth_low_seconds=truth if low is None else low,
        running_batch_bound_seconds=bound,
    )


def test_a_figure_is_judged_within_one_second_and_an_interval_more_near_a_phase_change() -> None:
    steady_off = sample(T0 + 5_000, 2.2, 1.0)
    near_start = sample(T0 + 11_000, 3.5, 1.0)  # 1 s after the fault began: 1 s + 3 s allowed
    mid_fault = sample(T0 + 18_000, 9.0, 8.0)
    r = run(steady_off, near_start, mid_fault)
    assert [r.is_outside(s) for s in (steady_off, near_start, mid_fault)] == [True, False, False]


def test_while_a_micro_batch_runs_the_figure_may_read_high_up_to_the_truth_at_its_start_aged_but_never_low() -> None:
    # The batch held up by the target's freeze started at T0 + 10 s with the truth 0.5 s: at T0 + 25.7 s the most an
    # honest figure can say is 0.5 + 15.7 s; the batch is on the target, the truth 0.55 s.
    high = sample(T0 + 25_700, 15.6, 0.55, bound=16.2)
    too_high = sample(T0 + 25_700, 21.0, 0.55, bound=16.2)  # more than the bound and 1 s + 3 s (a phase change)
    low = sample(T0 + 25_700, 0.0, 10.0, bound=16.2)
    no_batch = sample(T0 + 25_700, 15.6, 0.55)  # the python engine reports per record: no batch, no allowance
    r = run(high, too_high, low, no_batch)
    assert [r.is_outside(s) for s in (high, too_high, low, no_batch)] == [False, True, True, True]
    assert r.report()[1]["outside_tolerance"] == 3
    assert r.report()[1]["held_by_running_batch"] == 1


def test_a_figure_is_also_judged_as_read_and_a_missing_one_must_say_why() -> None:
    """A figure served 300 ms after the moment it states is compared with the truth then too (what a scrape sees);
    a sample with a partition that has no figure counts as unexplained only when that partition gives no reason."""
    stated = Sample(T0 + 5_300, T0 + 5_000, 4.0, 10, truth_seconds=4.0, truth_low_seconds=4.0)
    stated.served_truth_seconds = stated.served_truth_low_seconds = 0.2  # the target caught up meanwhile
    assert (stated.error_s(), stated.served_error_s()) == (0.0, 3.8)
    blind = Sample(T0 + 6_000, T0 + 6_000, None, None, unknown=[{"partition": 0, "reason": "cannot see the source"}])
    silent = Sample(T0 + 7_000, T0 + 7_000, None, None, unknown=[{"partition": 0, "reason": None}])
    assert (blind.unexplained, silent.unexplained) == (False, True)
    row = run(stated, blind, silent).report()[0]
    assert (row["no_figure"], row["unexplained"], row["served_within_1s_share"]) == (2, 1, 0.0)


def test_a_figure_read_during_a_drain_is_also_judged_against_the_truth_over_its_request() -> None:
    """A backlog of 30 s lands on the target 5 ms after the poll asked and 10 ms before its answer was in: the figure
    the monitor stated in between (30 s) is the truth of a moment of the request, exact there, 30 s off as read; a
    figure higher than the truth at any moment of the request is off by its distance to the highest."""
    truth = Truth(2)
    truth.acked_ms[0] = [T0, T0 + 30_000]
    truth.arrived_ms[0] = {0: T0 + 30_005, 1: T0 + 30_005}
    truth.acked_ms[1] = [T0 + 20_000]
    truth.arrived_ms[1] = {0: T0 + 20_001}
    truth.freeze()
    asked, answered = T0 + 30_000, T0 + 30_015
    low, high = truth.over([0, 1], asked, answered)
    assert (low, high) == (0.0, 30.004)  # the lower bound: noted late by up to the follower's latency
    assert truth.over([0, 1], answered, answered) == (0.0, 0.0)
    drained = Sample(answered, asked + 3, 30.0, 1, [(0, asked + 3), (1, asked + 3)], asked_ms=asked)
    too_high = Sample(answered, asked + 3, 33.5, 1, [(0, asked + 3), (1, asked + 3)], asked_ms=asked)
    for sample in (drained, too_high):
        truth.judge(sample)
    assert (drained.error_s(), drained.served_error_s(), drained.request_error_s()) == (0.0, 30.0, 0.0)
    assert too_high.request_error_s() == pytest.approx(3.496)
    row = run(drained, too_high).report()[1]  # the target SIGSTOP phase
    assert (row["served_within_1s_share"], row["request_within_1s_share"]) == (0.0, 0.5)
    assert row["request_error_max_seconds"] == pytest.approx(3.496)


def test_spark_batches_are_read_from_the_checkpoints_write_ahead_log(tmp_path: Path) -> None:
    import os

    for folder, n, at_ms in (
        ("offsets", 0, 1_000),
        ("commits", 0, 1_900),
        ("offsets", 1, 2_400),
        ("offsets", 2, 3_000),
    ):
        (tmp_path / folder).mkdir(exist_ok=True)
        path = tmp_path / folder / str(n)
        path.write_text("v1")
        os.utime(path, ns=(at_ms * 1_000_000, at_ms * 1_000_000))
    (tmp_path / "offsets" / ".1.crc").write_text("x")  # Spark's checksum files are not batches
    (tmp_path / "commits" / "1.tmp").write_text("x")
    assert spark_batches(tmp_path) == [(1_000, 1_900), (2_400, 2**62), (3_000, 2**62)]


def test_the_truth_is_a_range_as_wide_as_the_followers_own_latency() -> None:
    """A backlog lands on the target at once: the follower notes it a few tens of ms later, so at a moment inside
    that gap the true lag is anywhere between ~0 and the backlog's age; a figure in that range is exact."""
    truth = Truth(1)
    truth.acked_ms[0] = [T0, T0 + 1_000, T0 + 2_000]  # acknowledged by the source, one a second
    truth.arrived_ms[0] = {0: T0 + 9_950, 1: T0 + 9_950, 2: T0 + 9_950}  # all noted at once, 9.95 s after the first
    truth.freeze()
    at = T0 + 9_900  # 50 ms before the follower noted them
    assert truth.at(0, at) == (9.9, 3)
    assert truth.at(0, at, FOLLOWER_LATENCY_MS) == (0.0, 0)
    caught_up = sample(at, 0.03, 9.9, low=0.0)
    assert caught_up.error_s() == 0.0
    assert not run(caught_up).is_outside(caught_up)
    assert sample(at, 12.0, 9.9, low=0.0).error_s() == 12.0 - 9.9
    assert sample(at + 500, 0.0, 10.4, low=10.4).error_s() == -10.4  # later than that, 0 is wrong


def test_a_process_that_died_during_a_phase_is_named_with_its_signal() -> None:
    """The truth test once failed on stale statuses while the real cause, the monitor's segfault, was only in dmesg."""
    crashed = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        crashed.wait(30)
        check_alive({"engine": running, "monitor": None}, "steady")  # alive, or not ours to watch: fine
        with pytest.raises(RuntimeError, match=r"the monitor process ended \(SIGSEGV\) during 'target broker SIGSTOP'"):
            check_alive({"engine": running, "monitor": crashed}, "target broker SIGSTOP")
    finally:
        running.kill()
        running.wait(30)


def test_a_phase_is_judged_on_the_truths_peak_between_samples_and_the_live_figure_is_the_oldest_record_waiting() -> (
    None
):
    """One process down with its monitor: no sample while the mirror was behind, but the truth's own timeline says
    how far behind it was (the precondition a fault's phase is judged on, issue #40)."""
    truth = Truth(2)
    truth.acked_ms[0] = [T0, T0 + 1_000, T0 + 2_000, T0 + 3_000]
    truth.acked_ms[1] = [T0 + 500]
    truth.arrived_ms[0] = {0: T0 + 100}
    truth.arrived_ms[1] = {0: T0 + 600}
    assert truth.behind_s(T0 + 900) == 0.0  # record 1 not acknowledged yet: nothing waits
    assert truth.behind_s(T0 + 3_500) == 2.5  # as the run goes on: record 1 of partition 0, acknowledged at T0 + 1 s
    truth.arrived_ms[0] |= {1: T0 + 4_000, 2: T0 + 4_000}  # record 3 still on its way at the end
    assert truth.behind_s(T0 + 4_100) == 1.1
    truth.freeze()
    assert truth.peak(T0, T0 + 3_950) == 2.95  # just before records 1 and 2 arrived at T0 + 4 s
    assert truth.peak(T0 + 4_000, T0 + 4_000) == 1.0  # then record 3, acknowledged at T0 + 3 s, is the oldest
    assert truth.peak(T0, T0) == 0.0
