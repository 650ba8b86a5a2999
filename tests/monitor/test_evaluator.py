"""The evaluator's correctness proof: the numbered table of offset windows (`tests/monitor/evaluator_table.py`), each
saying what it tests and why, with the value of every rule predicate and the final status. Then group evaluation and
properties."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.evaluator import (
    EvaluatorConfig,
    OffsetSample,
    PartitionEvaluation,
    Status,
    current_lag,
    evaluate_group,
    evaluate_partition,
    group_status,
    has_moved,
    is_lag_allowed,
    is_lag_always_above_allowed,
    is_lag_beyond_cadence,
    is_lag_not_decreasing,
    is_rewound,
    is_stalled,
    is_stopped,
    is_stuck,
    records_lost,
)
from tests.monitor.evaluator_table import CASES, CAUGHT_UP, INCOMPLETE, STEP, T0, Case, after


def predicates_of(case: Case) -> dict[str, bool]:
    samples, config = case.samples, case.config
    lag = current_lag(samples, case.hwm_now)
    gap = case.commit_gap_ms
    return {
        "lost": records_lost(samples, case.log_start) > 0,
        "allowed": is_lag_allowed(lag, case.lag_seconds, config),
        "stopped": is_stopped(samples, case.now_ms, case.lag_seconds, config, gap),
        "rewound": is_rewound(samples),
        "always_above": is_lag_always_above_allowed(samples, config),
        "stalled": is_stalled(samples, case.now_ms, config, case.lag_seconds, gap),
        "stuck": is_stuck(samples, case.now_ms, config, case.lag_seconds, gap),
        "moved": has_moved(samples) if samples else False,
        "not_decreasing": is_lag_not_decreasing(samples),
        "beyond_cadence": is_lag_beyond_cadence(samples, case.lag_seconds, gap),
    }


def test_the_table_is_numbered_and_large_enough() -> None:
    assert [c.number for c in CASES] == list(range(1, len(CASES) + 1))
    assert len(CASES) >= 25
    assert {c.expected for c in CASES} == set(Status)  # every partition status appears (ERR: records lost, rule 0)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.number:02d}-{c.tests}" for c in CASES])
def test_window(case: Case) -> None:
    actual = predicates_of(case)
    assert {k: actual[k] for k in case.predicates} == case.predicates, f"#{case.number}: {case.why}"
    result = evaluate_partition(
        "t",
        0,
        case.samples,
        high_watermark_now=case.hwm_now,
        now_ms=case.now_ms,
        config=case.config,
        lag_seconds=case.lag_seconds,
        commit_gap_ms=case.commit_gap_ms,
        nothing_to_read=case.nothing_to_read,
        log_start=case.log_start,
    )
    assert result.status == case.expected, f"#{case.number} {case.tests}: {case.why}"
    assert result.records_lost == records_lost(case.samples, case.log_start)
    assert result.current_lag == current_lag(case.samples, case.hwm_now)
    assert result.complete == min(1.0, len(case.samples) / case.config.window)


def test_partition_evaluation_reports_start_end_lag_and_completeness() -> None:
    result = evaluate_partition(
        "orders",
        3,
        INCOMPLETE,
        high_watermark_now=150,
        now_ms=after(INCOMPLETE, STEP),
        config=EvaluatorConfig(),
        lag_seconds=12.5,
    )
    assert (result.topic, result.partition, result.start, result.end) == ("orders", 3, INCOMPLETE[0], INCOMPLETE[-1])
    assert (result.current_lag, result.lag_seconds, result.complete) == (130, 12.5, 0.3)
    caught_up = evaluate_partition("orders", 3, CAUGHT_UP, high_watermark_now=100, now_ms=T0, config=EvaluatorConfig())
    assert caught_up.lag_seconds == 0.0  # no lag: 0 seconds, known


# -- groups ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], Status.NOTFOUND),
        ([Status.NOTFOUND], Status.NOTFOUND),
        ([Status.OK, Status.OK], Status.OK),
        ([Status.OK, Status.WARN], Status.WARN),
        ([Status.OK, Status.STOP], Status.ERR),
        ([Status.WARN, Status.STALL], Status.ERR),
        ([Status.REWIND, Status.OK, Status.NOTFOUND], Status.ERR),
    ],
)
def test_group_status_is_the_worst_partition_with_stop_stall_rewind_as_err(
    statuses: list[Status], expected: Status
) -> None:
    assert group_status(statuses) == expected


def _evaluation(partition: int, status: Status, lag: int, complete: float) -> PartitionEvaluation:
    return PartitionEvaluation("t", partition, status, None, None, lag, None, complete)


def test_group_evaluation() -> None:
    group = evaluate_group(
        [
            _evaluation(0, Status.OK, 5, 1.0),
            _evaluation(1, Status.WARN, 50, 1.0),
            _evaluation(2, Status.OK, 0, 0.5),
            _evaluation(3, Status.NOTFOUND, 0, 0.0),
        ]
    )
    assert group.status == Status.WARN
    assert group.complete == 2 / 3  # partitions with a full window, among those known
    assert group.max_lag is not None and group.max_lag.partition == 1
    assert group.total_lag == 55
    empty = evaluate_group([])
    assert (empty.status, empty.complete, empty.max_lag, empty.total_lag) == (Status.NOTFOUND, 0.0, None, 0)


# -- properties ------------------------------------------------------------------------------------------------------

samples_strategy = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 200), st.booleans()), min_size=1, max_size=10
).map(lambda rows: tuple(OffsetSample(o, T0 + i * STEP, o + lag, m) for i, (o, lag, m) in enumerate(rows)))


@given(
    samples=samples_strategy, extra_lag=st.integers(0, 500), allowed=st.integers(0, 300), wait=st.integers(0, 3_600_000)
)
def test_allowing_more_lag_never_makes_a_status_worse(
    samples: tuple[OffsetSample, ...], extra_lag: int, allowed: int, wait: int
) -> None:
    hwm_now = samples[-1].high_watermark + extra_lag
    now = samples[-1].observed_ms + wait
    strict = evaluate_partition("t", 0, samples, high_watermark_now=hwm_now, now_ms=now, config=EvaluatorConfig())
    lenient = evaluate_partition(
        "t",
        0,
        samples,
        high_watermark_now=hwm_now,
        now_ms=now,
        config=replace(EvaluatorConfig(), allowed_lag_records=allowed),
    )
    assert lenient.status in (strict.status, Status.OK)


@given(samples=samples_strategy, wait=st.integers(0, 3_600_000))
def test_a_caught_up_partition_is_always_ok(samples: tuple[OffsetSample, ...], wait: int) -> None:
    result = evaluate_partition(
        "t",
        0,
        samples,
        high_watermark_now=samples[-1].offset,
        now_ms=samples[-1].observed_ms + wait,
        config=EvaluatorConfig(),
    )
    assert result.status == Status.OK
