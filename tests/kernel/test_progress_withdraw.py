"""A worker's clean stop on the progress topic (its tombstone) is its last word: a full queue is waited on, never
dropped like a status a newer one replaces (a stopped worker whose tombstone was dropped read "gone", not "stopped",
on every monitor that read that topic). A stand-in producer: the queue is full twice, then takes it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kernel.config import ClusterConfig, ProgressConfig
from kernel.progress_topic import ProgressPublisher


class FullThenFree:
    def __init__(self, full: int) -> None:
        self.full, self.polls = full, 0
        self.produced: list[tuple[str, bytes, bytes | None]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes, **_kwargs: Any) -> None:
        if self.full > 0:
            self.full -= 1
            raise BufferError("Local: Queue full")
        self.produced.append((topic, key, value))

    def poll(self, _timeout: float = 0) -> int:
        self.polls += 1
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return 0


def publisher(producer: FullThenFree) -> ProgressPublisher:
    out = ProgressPublisher(ClusterConfig(bootstrap_servers="127.0.0.1:9"), "target", ProgressConfig(), "link l")
    out._producer = producer  # type: ignore[assignment]
    out._ready.set()
    return out


def test_a_withdrawal_waits_for_room_in_a_full_queue_and_is_sent() -> None:
    producer = FullThenFree(full=2)
    publisher(producer).withdraw("mirror", "l", 0, 123)
    assert [(topic, value) for topic, _key, value in producer.produced] == [("mirrorwatch.progress", None)]
    assert producer.polls >= 2


def test_a_withdrawal_that_finds_no_room_says_so(caplog: pytest.LogCaptureFixture) -> None:
    producer = FullThenFree(full=10**9)
    with caplog.at_level(logging.WARNING, logger="mirrorwatch"):
        publisher(producer).withdraw("mirror", "l", 0, 123, timeout_s=0.3)
    assert producer.produced == []
    assert "its stop was not published on the progress topic (its queue stayed full)" in caplog.text
