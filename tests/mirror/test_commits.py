"""The last commit before a worker leaves its group (`mirror.commits.commit_before_leaving`), with a stand-in consumer
and clock: a rebalance under way refuses it until the worker has rejoined, which takes polls."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, TopicPartition

from mirror.commits import SHUTDOWN_REJOIN_S, commit_before_leaving


class _Clock:
    def __init__(self) -> None:
        self.seconds = 0.0

    def now_ms(self) -> int:
        return int(self.seconds * 1000)

    def now_ns(self) -> int:
        return int(self.seconds * 1e9)

    def monotonic_s(self) -> float:
        return self.seconds


class _Consumer:
    """Each poll takes 0.2 s; after `assigned_at` polls the rebalance hands it a partition (not to be read)."""

    def __init__(self, clock: _Clock, assigned_at: int = 1) -> None:
        self.clock, self.assigned_at = clock, assigned_at
        self.polls = 0
        self.paused: list[TopicPartition] = []

    def poll(self, timeout: float) -> None:
        self.polls += 1
        self.clock.seconds += timeout

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("orders", 3)] if self.polls >= self.assigned_at else []

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.extend(partitions)


def _commits(*codes: int | None) -> tuple[list[int | None], Callable[[], int | None]]:
    answers = list(codes)
    asked: list[int | None] = []

    def commit() -> int | None:
        asked.append(answers.pop(0) if answers else None)
        return asked[-1]

    return asked, commit


def test_a_commit_taken_at_once_does_not_poll() -> None:
    clock = _Clock()
    consumer = _Consumer(clock)
    asked, commit = _commits(None)
    commit_before_leaving(consumer, commit, clock, "l")  # type: ignore[arg-type]
    assert asked == [None] and consumer.polls == 0


def test_a_rebalance_under_way_is_rejoined_by_polling_with_the_partitions_paused_then_the_commit_is_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    consumer = _Consumer(clock)
    refused = (KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS)
    asked, commit = _commits(*refused, None)
    with caplog.at_level(logging.INFO, logger="mirrorwatch.mirror"):
        commit_before_leaving(consumer, commit, clock, "l")  # type: ignore[arg-type]
    assert asked == [*refused, None]
    assert consumer.polls == 2 and consumer.paused == [TopicPartition("orders", 3)] * 2
    assert "the group is rebalancing (ILLEGAL_GENERATION)" in caplog.text
    assert "the last commit was refused" not in caplog.text


def test_a_rebalance_that_does_not_end_in_time_is_given_up_and_said(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    consumer = _Consumer(clock)
    asked, commit = _commits(*[KafkaError.REBALANCE_IN_PROGRESS] * 1000)
    commit_before_leaving(consumer, commit, clock, "l")  # type: ignore[arg-type]
    assert "the last commit was refused (REBALANCE_IN_PROGRESS)" in caplog.text
    assert consumer.polls == pytest.approx(SHUTDOWN_REJOIN_S / 0.2, abs=1)
    assert asked[-1] == KafkaError.REBALANCE_IN_PROGRESS


def test_another_refusal_is_not_waited_for() -> None:
    clock = _Clock()
    consumer = _Consumer(clock)
    asked, commit = _commits(KafkaError.GROUP_AUTHORIZATION_FAILED)
    commit_before_leaving(consumer, commit, clock, "l")  # type: ignore[arg-type]
    assert asked == [KafkaError.GROUP_AUTHORIZATION_FAILED] and consumer.polls == 0
