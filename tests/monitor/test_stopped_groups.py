"""Consumer groups that stop, on the real clusters with the monitor at its default settings (interval 10 s, window
10): a consumer that closes with lag and one that stays in its group but stops committing read WARN soon after they
stop, never OK again, and STOP / STALL within 60 s, while producers go on. A consumer committing every 60 s (as
MirrorMaker 1 did) and an idle caught-up group read OK throughout. Two monitors watch side by side, one following
`__consumer_offsets` and one asking the admin API for each group's offsets: both must see the same.

Marked `alone`: the statuses are judged against a clock (observations every 10 s, a healthy committer's cadence of
1 s), so `make test` runs it beside one other such test at most, never beside the main phase's fault injection."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, TopicPartition

from kernel.config import MirrorwatchConfig
from kernel.kafka import new_consumer
from kernel.wait import wait_until
from monitor.evaluator import PartitionEvaluation, Status
from monitor.service import MonitorService
from tests.kafka_helpers import Record, produce
from tests.processes import session_config

pytestmark = [pytest.mark.integration, pytest.mark.alone]

INTERVAL_S = 10  # the default monitor.interval_seconds
WARMUP_S = 45  # long enough for the monitor to see the committing groups' offsets move several times
AFTER_STOP_S = 60  # STOP / STALL must come within this


@dataclass
class Committer:
    """A consumer of one partition that reads everything and commits every `every_s`; `stop` ends it by closing
    (leaving the group) or by going quiet (no reading, no commits: it stays a member, its heartbeats go on)."""

    consumer: Consumer
    group: str
    topic: str
    every_s: float
    close_on_stop: bool
    stop: threading.Event = field(default_factory=threading.Event)
    joined: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """Only this thread touches the consumer (librdkafka's calls from two threads can wait on each other)."""
        last_commit, position, committed = 0.0, -1, -1
        while not self.stop.is_set():
            message = self.consumer.poll(0.2)
            if not self.joined.is_set() and self.consumer.assignment():
                self.joined.set()
            if message is not None and message.error() is None and message.offset() is not None:
                position = int(message.offset() or 0) + 1
            if position > committed and time.monotonic() - last_commit >= self.every_s:
                self.consumer.commit(offsets=[TopicPartition(self.topic, 0, position)], asynchronous=False)
                last_commit, committed = time.monotonic(), position
        if self.close_on_stop:
            self.consumer.close()


@pytest.mark.alone(seconds=154)  # its time in the alone phase (tests/conftest.py shares them out)
def test_stopped_consumers_are_never_ok_and_stop_within_a_minute_while_a_60s_committer_and_an_idle_group_are_ok(
    clusters_config: MirrorwatchConfig, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:
    source = clusters_config.clusters["source"]
    topic, idle_topic = make_topic("source", 1), make_topic("source", 1)
    produce(source, "source", idle_topic, [Record(value=b"i") for _ in range(20)])
    stop_traffic = threading.Event()

    def traffic() -> None:  # 20 records/s, as long as the test runs
        while not stop_traffic.wait(0.5):
            produce(source, "source", topic, [Record(value=b"x") for _ in range(10)])

    def committer(name: str, subscribed: str, every_s: float, *, close_on_stop: bool = False) -> Committer:
        group = unique(name)
        made = new_consumer(source, "source", group, {"enable.auto.commit": False, "auto.offset.reset": "earliest"})
        made.subscribe([subscribed])
        return Committer(made, group, subscribed, every_s, close_on_stop)

    groups = {
        "closes": committer("closes", topic, 1.0, close_on_stop=True),
        "goes quiet": committer("quiet", topic, 1.0),
        "commits every 60 s": committer("mm1", topic, 60.0),
        "idle, caught up": committer("idle", idle_topic, 1.0),
    }
    threads = [threading.Thread(target=c.run, name=f"test-{n}", daemon=True) for n, c in groups.items()]
    producer = threading.Thread(target=traffic, name="test-traffic", daemon=True)
    config = session_config(clusters_config)
    services = {  # the default monitor settings, committed offsets read either way
        mode: MonitorService(config.monitor.model_copy(update={"commits_from": mode}), config.clusters, config.links)
        for mode in ("auto", "admin_api")
    }
    assert config.monitor.interval_seconds == INTERVAL_S and config.monitor.commits_from == "auto"
    seen: dict[str, dict[str, list[tuple[float, PartitionEvaluation]]]] = {
        mode: {name: [] for name in groups} for mode in services
    }
    read_from: dict[str, set[str]] = {mode: set() for mode in services}
    producer.start()
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: all(c.joined.is_set() for c in groups.values()), timeout_s=60, description="all to join")
        started = time.monotonic()

        def collect_until(deadline: float) -> None:
            while time.monotonic() < deadline:
                at = time.monotonic()
                for mode, service in services.items():
                    state = service.collect()
                    read_from[mode].add(state.clusters["source"].commits_from)
                    for name, c in groups.items():
                        view = state.groups.get(("source", c.group))
                        if view is not None and view.evaluation.partitions:
                            seen[mode][name].append((at, view.evaluation.partitions[0]))
                time.sleep(max(0.0, INTERVAL_S - (time.monotonic() - at)))

        collect_until(started + WARMUP_S)
        stopped_at = time.monotonic()
        groups["closes"].stop.set()
        groups["goes quiet"].stop.set()
        collect_until(stopped_at + AFTER_STOP_S + 1)
        collect_until(started + 135)  # the 60 s committer through two full commit intervals
    finally:
        stop_traffic.set()
        for running in groups.values():
            running.stop.set()
        for thread in (*threads, producer):
            thread.join(timeout=30)
        for name in ("goes quiet", "commits every 60 s", "idle, caught up"):
            groups[name].consumer.close()
        for service in services.values():
            service.stop()
    assert "offsets-topic" in read_from["auto"] and read_from["admin_api"] == {"admin-api"}, read_from
    for mode in services:
        assert_statuses(mode, seen[mode], started, stopped_at)


def assert_statuses(
    mode: str, evaluations: dict[str, list[tuple[float, PartitionEvaluation]]], started: float, stopped_at: float
) -> None:
    seen = {name: [(at, p.status) for at, p in each] for name, each in evaluations.items()}
    report = {  # each observation: seconds since the start, status, lag in records and in seconds
        "mode": mode,
        **{
            name: [(round(at - started), p.status.name, p.current_lag, p.lag_seconds) for at, p in each]
            for name, each in evaluations.items()
        },
    }
    for name in ("commits every 60 s", "idle, caught up"):
        assert seen[name] and all(status == Status.OK for _, status in seen[name]), report
    for name, final in (("closes", Status.STOP), ("goes quiet", Status.STALL)):
        before = [status for at, status in seen[name] if at < stopped_at]
        assert before and all(status == Status.OK for status in before), report  # healthy while it consumed
        # After the stop: WARN within three intervals (the first ones cannot tell a stop from a pause between two
        # commits), never OK from then on, and STOP / STALL within 60 s.
        after = [(at - stopped_at, status) for at, status in seen[name] if at >= stopped_at]
        assert all(status != Status.OK for since, status in after if since > 3 * INTERVAL_S), (name, report)
        reached = [since for since, status in after if status == final]
        assert reached and reached[0] <= AFTER_STOP_S, (name, report)
        assert all(status == final for since, status in after if since >= reached[0]), (name, report)
