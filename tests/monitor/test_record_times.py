"""Record timestamps for lag in seconds, on the real local clusters."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition

from mirrorwatch.config import MirrorwatchConfig
from mirrorwatch.kafka import new_admin
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
