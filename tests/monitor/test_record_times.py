"""Record timestamps for lag in seconds, on the real local clusters."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition

from kernel.config import MirrorwatchConfig
from kernel.kafka import new_admin, new_producer
from monitor import record_times
from monitor.record_times import RecordTimeFetcher
from tests.kafka_helpers import Record, produce

pytestmark = pytest.mark.integration


def test_timestamps_of_records_at_offsets_and_of_records_that_are_gone(
    clusters_config: MirrorwatchConfig, make_topic: Callable[..., str]
) -> None:
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 2)
    produce(
        source,
        "source",
        topic,
        [Record(value=b"x", partition=i % 2, timestamp_ms=1_700_000_000_000 + i * 1000) for i in range(10)],
    )
    fetcher = RecordTimeFetcher(clusters_config.clusters)
    try:
        got = fetcher.times([("source", topic, 0, 2), ("source", topic, 1, 0)])
        assert got == {("source", topic, 0, 2): 1_700_000_004_000, ("source", topic, 1, 0): 1_700_000_001_000}
        # the same again comes from the cache (and a second key of the same partition works too)
        assert fetcher.times([("source", topic, 0, 2), ("source", topic, 0, 4)]) == {
            ("source", topic, 0, 2): 1_700_000_004_000,
            ("source", topic, 0, 4): 1_700_000_008_000,
        }
        # records removed from the log (as retention does): None, not some other record's time
        admin = new_admin(source, "source")
        for future in admin.delete_records([TopicPartition(topic, 1, 3)]).values():
            future.result(timeout=30)
        assert fetcher.times([("source", topic, 1, 1)]) == {("source", topic, 1, 1): None}
    finally:
        fetcher.close()


def test_an_offset_with_only_transaction_markers_after_it_is_answered_at_once_not_waited_for(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read_committed consumer of a transactional topic that commits its last record + 1 (librdkafka's
    applications, as the python engine did) stands at the last commit marker: no record follows it. The fetcher must say so at the partition's end instead of waiting for a record
    (it once waited FETCH_TIMEOUT_S on every round, which stretched every collection of that cluster by 5 s)."""
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 1)
    producer = new_producer(source, "source", {"transactional.id": unique("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"x", timestamp=1_700_000_000_000)
    producer.commit_transaction(30)  # offset 0: the record, offset 1: the commit marker; the end is 2
    monkeypatch.setattr(record_times, "FETCH_TIMEOUT_S", 3600.0)  # a wait would now outlast the test's timeout
    fetcher = RecordTimeFetcher(clusters_config.clusters)
    try:
        assert fetcher.times([("source", topic, 0, 1)]) == {}
        assert fetcher.markers_only == {("source", topic, 0, 1)}  # a consumer committed there has nothing to read
        assert fetcher.times([("source", topic, 0, 0), ("source", topic, 0, 1)]) == {
            ("source", topic, 0, 0): 1_700_000_000_000
        }
        assert fetcher.markers_only == {("source", topic, 0, 1)}
        assert fetcher.times([("source", topic, 0, 0)]) == {("source", topic, 0, 0): 1_700_000_000_000}  # cached
        assert fetcher.markers_only == set()  # each call says it anew
    finally:
        fetcher.close()


def test_records_that_do_not_come_back_in_time_are_left_out_within_the_budget(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The monitor's round waits for record times: a cluster that answers slowly (a broker just thawed from a
    freeze) must cost the round at most the budget, not FETCH_TIMEOUT_S per pass, and say so once."""
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 1)
    produce(source, "source", topic, [Record(value=b"x", partition=0, timestamp_ms=1_700_000_000_000)])
    monkeypatch.setattr(record_times, "FETCH_TIMEOUT_S", 3600.0)  # without the budget the test would hang
    fetcher = RecordTimeFetcher(clusters_config.clusters)
    never = ("source", topic, 7, 0)  # a partition the topic does not have: nothing ever comes back for it
    readable = ("source", topic, 0, 0)
    try:
        with caplog.at_level("INFO", logger="mirrorwatch.monitor"):
            assert fetcher.times([never, readable], budget_s=0.5) == {readable: 1_700_000_000_000}
            assert fetcher.times([never], budget_s=0.5) == {}
            warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            assert warnings == [
                "monitor: cluster 'source': 1 of 2 records not read within 0.5 s; their lag in seconds is unknown "
                "until they are"
            ]
            assert fetcher.times([readable], budget_s=0.5) == {readable: 1_700_000_000_000}  # cached
            assert fetcher.times([("source", topic, 0, 1)], budget_s=0.5) == {}  # the end: not unread, not waited
            assert "monitor: cluster 'source': records are read in time again" in caplog.messages
    finally:
        fetcher.close()
