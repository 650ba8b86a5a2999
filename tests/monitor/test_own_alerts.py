"""The shipped rules' thresholds judged on the monitor's own history (pure): a rule fires only once its condition
held at every round for its `for` duration, and the history reaches back that far."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monitor.evaluator import Status
from monitor.history import History
from monitor.own_alerts import duration_ms, firing
from tests.monitor.test_history import T0, _group, _link, _state

ROUND_MS = 10_000


def _history(
    rounds: int,
    *,
    lag: int = 0,
    grow: int = 0,
    out_step: int = 100,
    workers: int = 1,
    up: bool = True,
    status: Status = Status.OK,
) -> History:
    history = History(span_ms=3_600_000, interval_ms=ROUND_MS)
    for i in range(rounds):
        link = _link(lag + grow * i, out_step * i, running=workers > 0, workers=workers)
        history.record(_state(T0 + i * ROUND_MS, link, _group(status, 0), up=up))
    return history


def _now(rounds: int) -> int:
    return T0 + (rounds - 1) * ROUND_MS


def _names(history: History, rounds: int) -> set[str]:
    return {a.name for a in firing(history, _now(rounds))}


def test_a_healthy_history_fires_nothing() -> None:
    assert _names(_history(60), 60) == set()


def test_replication_lag_fires_after_its_for_duration_only() -> None:
    # 200 s behind (threshold 120 s) for 5 min 10 s: fires; for 4 min 50 s: not yet
    assert "MirrorwatchReplicationLagHigh" in _names(_history(32, lag=2000), 32)
    assert "MirrorwatchReplicationLagHigh" not in _names(_history(30, lag=2000), 30)
    [alert] = [a for a in firing(_history(32, lag=2000), _now(32)) if a.name == "MirrorwatchReplicationLagHigh"]
    assert alert.labels == {"link": "dr"} and alert.since_ms == T0 and alert.severity == "warning"


def test_a_lag_the_bandwidth_budget_makes_is_said_as_such() -> None:
    """A link whose budget held its two workers back 7.5 s of every 10 s round (75 %) is behind on purpose: the lag
    alert names the budget (as the shipped rules do); held 1 s of 10 (10 %), the lag is not the budget's."""

    def history(held_per_round_s: float) -> History:
        history = History(span_ms=3_600_000, interval_ms=ROUND_MS)
        for i in range(32):
            link = _link(2000, 100 * i, workers=2)
            held = {"budget_bytes_per_second": 100_000, "budget_throttled_seconds_total": 2 * held_per_round_s * i}
            link = replace(link, stats={**link.stats, **held})
            history.record(_state(T0 + i * ROUND_MS, link, _group(Status.OK, 0)))
        return history

    [alert] = [a for a in firing(history(7.5), _now(32)) if "ReplicationLag" in a.name]
    assert alert.name == "MirrorwatchReplicationLagHighByBudget" and alert.labels == {"link": "dr"}
    assert alert.summary.endswith("held back by its bandwidth budget")
    assert str(alert.as_dict()["runbook_url"]).endswith("/docs/runbooks/MirrorwatchReplicationLagHighByBudget.md")
    assert "MirrorwatchReplicationLagHigh" in _names(history(1.0), 32)
    assert "MirrorwatchReplicationLagHighByBudget" not in _names(history(1.0), 32)


def test_a_history_shorter_than_the_duration_never_fires() -> None:
    """The monitor started 1 min ago with the mirror already down: unknown for how long, so not (yet) firing."""
    assert _names(_history(7, workers=0, up=False), 7) == set()


def test_mirror_down_cluster_down_and_group_error() -> None:
    names = _names(_history(40, workers=0, up=False, status=Status.ERR), 40)  # 6.5 min
    assert {"MirrorwatchMirrorDown", "MirrorwatchClusterDown", "KafkaConsumerGroupError"} <= names
    assert "KafkaConsumerGroupError" not in _names(_history(40, status=Status.WARN), 40)


def test_a_stalled_mirror_fires_only_while_lag_grows_and_nothing_is_written() -> None:
    assert "MirrorwatchMirrorStalled" in _names(_history(70, lag=10, grow=5, out_step=0), 70)  # 11.5 min
    assert "MirrorwatchMirrorStalled" not in _names(_history(70, lag=10, grow=5, out_step=100), 70)  # writing
    assert "MirrorwatchMirrorStalled" not in _names(_history(70, lag=10, grow=0, out_step=0), 70)  # not growing


def test_thresholds_can_be_changed_like_the_rules() -> None:
    history = _history(10, lag=2000)
    assert {a.name for a in firing(history, _now(10), {"replication_lag_for": "1m"})} == {
        "MirrorwatchReplicationLagHigh"
    }


@pytest.mark.parametrize(("text", "ms"), [("90s", 90_000), ("1h30m", 5_400_000), ("250ms", 250), ("2d", 172_800_000)])
def test_prometheus_durations(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "5", "5 m", "m5", "1.5h"])
def test_what_is_not_a_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        duration_ms(text)


def test_a_paused_partitions_growing_lag_fires_no_lag_alert_and_a_lasting_pause_is_said() -> None:
    """Partition 0 paused by an operator, 200 s behind and growing (nothing written): not a lag, not a stall; the
    partition beside it is judged as ever, and a pause of an hour is MirrorwatchMirrorPaused."""
    history = History(span_ms=7_200_000, interval_ms=ROUND_MS)
    rounds = 380  # 63 min
    for i in range(rounds):
        link = _link(2000 + 100 * i, 0)
        paused = replace(link.partitions[0], paused="paused by ops@h (mirrorwatch link pause): drill")
        behind = replace(link.partitions[0], partition=1, replication_lag_records=0, replication_lag_seconds=0.0)
        history.record(_state(T0 + i * ROUND_MS, replace(link, partitions=(paused, behind)), _group(Status.OK, 0)))
    assert _names(history, rounds) == {"MirrorwatchMirrorPaused"}
    assert _names(history, 350) == set()  # 58 min: not yet an hour
    assert history.link("dr")["replication_lag_seconds"][-1][1] > 200  # the chart keeps the real lag
    assert history.link("dr")["unpaused_lag_seconds"][-1][1] == 0.0
