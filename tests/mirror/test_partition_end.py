"""The librdkafka behaviour the engine's commit past transaction markers rests on (`mirror.delivery.read_error`): a
partition-end event comes after every record below it, and one already fetched is dropped by a seek back (the sparse
replay, `LinkWorker._replay_exactly`) or a pause (back-pressure) with the records fetched before it, never handed
out ahead of the records read again."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, TopicPartition

from kernel.config import MirrorwatchConfig
from kernel.kafka import new_consumer
from kernel.wait import wait_until
from mirror.settings import CONSUMER_DEFAULTS, CONSUMER_FIXED
from tests.kafka_helpers import Record, produce

pytestmark = pytest.mark.integration

RECORDS = 1000


@pytest.mark.parametrize("interruption", ["none", "seek back", "pause and resume"])
def test_the_end_of_a_partition_comes_after_every_record_below_it(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    interruption: str,
) -> None:
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 1)
    produce(source, "source", topic, [Record(value=b"x") for _ in range(RECORDS)])
    settings = {k: v for k, v in {**CONSUMER_DEFAULTS, **CONSUMER_FIXED}.items() if k != "statistics.interval.ms"}
    consumer = new_consumer(source, "source", unique("end"), settings)
    partition = TopicPartition(topic, 0, 0)
    try:
        consumer.assign([partition])
        first = [m.offset() for m in consumer.consume(num_messages=10, timeout=30) if m.error() is None]
        assert first == list(range(10))
        # the rest, and the end event, fetched and queued before the interruption
        wait_until(
            lambda: consumer.get_watermark_offsets(partition, cached=True)[1] == RECORDS,
            timeout_s=30,
            description="the consumer to fetch up to the end",
        )
        time.sleep(1)
        expected_from = 10
        if interruption == "seek back":
            consumer.seek(TopicPartition(topic, 0, 5))
            expected_from = 5
        elif interruption == "pause and resume":
            consumer.pause([partition])
            consumer.resume([partition])
        events: list[int | tuple[str, int]] = []
        deadline = time.monotonic() + 30
        while not any(isinstance(e, tuple) for e in events) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=2000, timeout=0.5):
                error = message.error()
                offset = int(message.offset() or 0)
                if error is None:
                    events.append(offset)
                elif error.code() == KafkaError._PARTITION_EOF:
                    events.append(("end", offset))
        assert events == [*range(expected_from, RECORDS), ("end", RECORDS)], (interruption, events[:5], events[-3:])
    finally:
        consumer.close()
