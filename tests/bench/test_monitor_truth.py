"""How the truth harness judges a figure (bench.monitor_truth): the tolerance around phase changes, and the settling
allowed to a micro-batch engine after a fault ends (above the truth only)."""

from __future__ import annotations

from bench.monitor_truth import FOLLOWER_LATENCY_MS, Phase, Sample, TruthRun, _Truth

T0 = 1_800_000_000_000


def run(settle_s: float, *samples: Sample) -> TruthRun:
    phases = [
        Phase("steady", T0),
        Phase("target broker SIGSTOP 15 s", T0 + 10_000, events_ms=[T0 + 10_000, T0 + 25_000]),
    ]
    return TruthRun(phases, list(samples), acked=0, missing_on_target=0, settle_s=settle_s)


def sample(at_ms: int, seconds: float, truth: float, low: float | None = None) -> Sample:
    return Sample(
        poll_ms=at_ms,
        observed_ms=at_ms,
        seconds=seconds,
        records=0,
        truth_seconds=truth,
        truth_low_seconds=truth if low is None else low,
    )


def test_a_figure_is_judged_within_one_second_and_an_interval_more_near_a_phase_change() -> None:
    steady_off = sample(T0 + 5_000, 2.2, 1.0)
    near_start = sample(T0 + 11_000, 3.5, 1.0)  # 1 s after the fault began: 1 s + 3 s allowed
    mid_fault = sample(T0 + 18_000, 9.0, 8.0)
    r = run(0.0, steady_off, near_start, mid_fault)
    assert [r.is_outside(s) for s in (steady_off, near_start, mid_fault)] == [True, False, False]


def test_right_after_a_fault_ends_a_micro_batch_engine_may_read_high_but_never_low() -> None:
    high = sample(T0 + 25_700, 15.6, 0.55)  # the held-up batch is on the target, not yet reported
    low = sample(T0 + 25_700, 0.0, 10.0)
    late_high = sample(T0 + 29_000, 15.6, 0.55)  # after the settling time: wrong
    assert not run(3.0, high).is_outside(high)
    assert run(3.0, low).is_outside(low)
    assert run(3.0, late_high).is_outside(late_high)
    assert run(0.0, high).is_outside(high)  # the python engine reports per record: no settling
    assert run(0.0, high).report()[1]["outside_tolerance"] == 1


def test_the_truth_is_a_range_as_wide_as_the_followers_own_latency() -> None:
    """A backlog lands on the target at once: the follower notes it a few tens of ms later, so at a moment inside
    that gap the true lag is anywhere between ~0 and the backlog's age; a figure in that range is exact."""
    truth = _Truth(1)
    truth.acked_ms[0] = [T0, T0 + 1_000, T0 + 2_000]  # acknowledged by the source, one a second
    truth.arrived_ms[0] = {0: T0 + 9_950, 1: T0 + 9_950, 2: T0 + 9_950}  # all noted at once, 9.95 s after the first
    truth.freeze()
    at = T0 + 9_900  # 50 ms before the follower noted them
    assert truth.at(0, at) == (9.9, 3)
    assert truth.at(0, at, FOLLOWER_LATENCY_MS) == (0.0, 0)
    caught_up = sample(at, 0.03, 9.9, low=0.0)
    assert caught_up.error_s() == 0.0
    assert not run(0.0, caught_up).is_outside(caught_up)
    assert sample(at, 12.0, 9.9, low=0.0).error_s() == 12.0 - 9.9
    assert sample(at + 500, 0.0, 10.4, low=10.4).error_s() == -10.4  # later than that, 0 is wrong
