"""The surveyor: topic refresh rounds on a thread of their own, taken by an engine loop that never waits on them.

A keeper whose rounds block until the test lets them finish stands in for clusters that hang (the real-broker side:
tests/mirror/test_engine.py, a refresh under way when a broker froze)."""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException

from kernel.wait import wait_until
from mirror.failure import MirrorFailure
from mirror.topic_keeper import Survey, Surveyor, TopicKeeper
from mirror.topics import TopicPlan

LONG_S = 3600.0  # an interval that never elapses in a test: rounds start on request()


def survey(n: int) -> Survey:
    return Survey(
        plan=TopicPlan(mapping={f"t{n}": f"t{n}"}, source_partitions={f"t{n}": 1}),
        selected=(f"t{n}",),
        target_partitions={f"t{n}": 1},
        target_limits=(),
        refused=(),
    )


class HangingKeeper:
    """survey() blocks until `release` is given an outcome: a Survey, or an exception to raise."""

    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.rounds = 0
        self._outcomes: list[Survey | BaseException] = []
        self._ready = threading.Condition()

    def survey(self) -> Survey:
        self.rounds += 1
        self.started.release()
        with self._ready:
            self._ready.wait_for(lambda: bool(self._outcomes))
            outcome = self._outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def release(self, outcome: Survey | BaseException) -> None:
        with self._ready:
            self._outcomes.append(outcome)
            self._ready.notify_all()

    def wait_started(self) -> None:
        assert self.started.acquire(timeout=30), "no survey round started"


@pytest.fixture
def keeper() -> HangingKeeper:
    return HangingKeeper()


@pytest.fixture
def surveyor(keeper: HangingKeeper) -> Any:
    s = Surveyor(cast(TopicKeeper, keeper), LONG_S, name="link")
    s.start()
    yield s
    keeper.release(survey(-1))  # a round still hanging ends
    s.close()


def test_take_never_waits_for_a_hanging_round_and_hands_over_its_outcome_once(
    keeper: HangingKeeper, surveyor: Surveyor
) -> None:
    surveyor.request()
    keeper.wait_started()
    assert surveyor.take() is None  # the round hangs; the loop goes on
    keeper.release(survey(1))
    taken = wait_until(surveyor.take, timeout_s=30, description="the round's outcome")
    assert taken == survey(1)
    assert surveyor.take() is None  # once


def test_the_next_round_starts_only_after_the_last_outcome_was_taken(keeper: HangingKeeper, surveyor: Surveyor) -> None:
    """A survey plans from what the last one adopted (known source partitions, the selection): never two ahead."""
    surveyor.request()
    keeper.wait_started()
    surveyor.request()  # asked for again while the first round runs
    keeper.release(survey(1))
    assert not keeper.started.acquire(timeout=0.5), "a second round started before the first was taken"
    assert keeper.rounds == 1
    assert wait_until(surveyor.take, timeout_s=30, description="the first outcome") == survey(1)
    keeper.wait_started()  # the request made during the first round is served now
    keeper.release(survey(2))
    assert wait_until(surveyor.take, timeout_s=30, description="the second outcome") == survey(2)


def test_a_plan_with_problems_is_raised_in_the_loop_by_take(keeper: HangingKeeper, surveyor: Surveyor) -> None:
    surveyor.request()
    keeper.wait_started()
    keeper.release(MirrorFailure("link link: orders has 3 partitions on the target, 6 on the source"))

    def raised() -> MirrorFailure | None:
        try:
            surveyor.take()
        except MirrorFailure as exc:
            return exc
        return None

    failure = wait_until(raised, timeout_s=30, description="the failure")
    assert "6 on the source" in str(failure)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller")),
            "waiting for controller",
        ),
        # a request's future that gave up waiting (a loaded target during a fault: it ended a mirror, issue #69's run)
        (TimeoutError(), "no answer in time"),
    ],
)
def test_a_round_failing_on_a_kafka_error_or_no_answer_is_logged_and_the_next_one_runs(
    keeper: HangingKeeper, surveyor: Surveyor, caplog: pytest.LogCaptureFixture, error: Exception, said: str
) -> None:
    caplog.set_level(logging.WARNING, logger="mirrorwatch.mirror")
    surveyor.request()
    keeper.wait_started()
    keeper.release(error)
    wait_until(lambda: "topic refresh failed" in caplog.text, timeout_s=30, description="the warning")
    assert said in caplog.text
    assert surveyor.take() is None  # nothing to adopt
    surveyor.request()
    keeper.wait_started()
    keeper.release(survey(2))
    assert wait_until(surveyor.take, timeout_s=30, description="the next outcome") == survey(2)


def test_rounds_start_every_interval_without_a_request(keeper: HangingKeeper) -> None:
    s = Surveyor(cast(TopicKeeper, keeper), 0.05, name="link")
    s.start()
    try:
        for n in range(3):
            keeper.wait_started()
            keeper.release(survey(n))
            assert wait_until(s.take, timeout_s=30, description=f"round {n}") == survey(n)
    finally:
        keeper.release(survey(-1))
        s.close()


def test_close_returns_while_a_round_hangs(keeper: HangingKeeper) -> None:
    s = Surveyor(cast(TopicKeeper, keeper), LONG_S, name="link")
    s.start()
    s.request()
    keeper.wait_started()
    s.close(timeout_s=0.2)  # the round is left to its own timeout (a daemon thread)
    keeper.release(survey(1))
    wait_until(lambda: not s._thread.is_alive(), timeout_s=30, description="the thread to end after its round")
