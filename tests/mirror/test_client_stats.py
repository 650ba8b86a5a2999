"""Summaries of librdkafka statistics, from documents shaped like librdkafka's STATISTICS.md."""

from __future__ import annotations

import json

from mirror.client_stats import summarize

PRODUCER = {
    "type": "producer",
    "msg_cnt": 12,
    "msg_size": 3400,
    "brokers": {
        "127.0.0.1:9092/bootstrap": {"nodeid": -1, "txretries": 99, "txerrs": 99, "rtt": {"avg": 999999, "cnt": 9}},
        "127.0.0.1:9092/1": {"nodeid": 1, "txretries": 2, "txerrs": 1, "rtt": {"avg": 3000, "cnt": 10}},
        "127.0.0.1:9093/2": {"nodeid": 2, "txretries": 1, "txerrs": 0, "rtt": {"avg": 6000, "cnt": 20}},
        "127.0.0.1:9094/3": {"nodeid": 3, "txretries": 0, "txerrs": 0, "rtt": {"avg": 0, "cnt": 0}},
    },
    "topics": {
        "orders": {"batchsize": {"avg": 1000, "cnt": 1}, "batchcnt": {"avg": 10, "cnt": 1}, "partitions": {}},
        "payments": {"batchsize": {"avg": 4000, "cnt": 3}, "batchcnt": {"avg": 30, "cnt": 3}, "partitions": {}},
        "idle": {"batchsize": {"avg": 0, "cnt": 0}, "batchcnt": {"avg": 0, "cnt": 0}, "partitions": {}},
    },
}

CONSUMER = {
    "type": "consumer",
    "msg_cnt": 0,
    "msg_size": 0,
    "brokers": {
        "b/1": {"nodeid": 1, "rxbytes": 30000, "req": {"Fetch": 10, "Heartbeat": 5}},
        "b/2": {"nodeid": 2, "rxbytes": 10000, "req": {"Fetch": 30}},
    },
    "topics": {
        "orders": {
            "partitions": {
                "0": {"partition": 0, "fetchq_size": 100},
                "1": {"partition": 1, "fetchq_size": 50},
                "-1": {"partition": -1, "fetchq_size": 7},
            }
        }
    },
    "cgrp": {"rebalance_cnt": 3},
}


def test_producer_summary() -> None:
    s = summarize(json.dumps(PRODUCER))
    assert (s.role, s.queued_records, s.queued_bytes) == ("producer", 12, 3400)
    assert (s.requests_retried_total, s.request_errors_total) == (3, 1)  # the bootstrap pseudo-broker is left out
    assert s.rtt_avg_ms == (3000 * 10 + 6000 * 20) / 30 / 1000  # weighted by samples; idle brokers do not count
    assert s.batch_size_avg_bytes == (1000 + 4000 * 3) / 4
    assert s.batch_records_avg == (10 + 30 * 3) / 4


def test_consumer_summary() -> None:
    s = summarize(json.dumps(CONSUMER))
    assert (s.role, s.fetch_queue_bytes, s.rebalances_total) == (
        "consumer",
        150,
        3,
    )  # the UA partition (-1) is left out
    assert s.fetch_size_avg_bytes == 40000 / 40
    assert s.rtt_avg_ms is None and s.batch_size_avg_bytes is None  # no samples: unknown, not 0
    assert summarize(json.dumps(PRODUCER)).fetch_size_avg_bytes is None


def test_the_consumer_says_how_long_every_broker_leading_its_partitions_has_been_up() -> None:
    """A worker that lost a source broker vouches for its cached high-watermarks again once every leader of its
    partitions has been up since (`mirror.worker`): the shortest `stateage` (microseconds) of those leaders, None while
    one is not UP. A broker leading none of them does not count."""
    brokers = {
        "b/1": {"nodeid": 1, "state": "UP", "stateage": 9_000_000},
        "b/2": {"nodeid": 2, "state": "UP", "stateage": 2_500_000},
        "b/3": {"nodeid": 3, "state": "DOWN", "stateage": 1_000},  # leads nothing of ours
    }
    partitions = {
        "0": {"partition": 0, "leader": 1},
        "1": {"partition": 1, "leader": 2},
        "-1": {"partition": -1, "leader": -1},
    }
    document = {**CONSUMER, "brokers": brokers, "topics": {"orders": {"partitions": partitions}}}
    assert summarize(json.dumps(document)).leaders_up_for_ms == 2_500
    brokers["b/2"] |= {"state": "CONNECT"}
    assert summarize(json.dumps(document)).leaders_up_for_ms is None
    assert summarize(json.dumps(CONSUMER)).leaders_up_for_ms is None  # no leader known: nothing said


def test_the_consumer_says_how_long_since_the_quietest_leader_of_its_partitions_sent_anything() -> None:
    """`rxidle` (microseconds, -1: nothing since it connected) of the brokers leading its partitions, the longest: a
    connection hanging in a network partition shows here before any timeout (`mirror.highs.SeenHighs.silent_since`)."""
    brokers = {
        "b/1": {"nodeid": 1, "state": "UP", "rxidle": 200_000},
        "b/2": {"nodeid": 2, "state": "UP", "rxidle": 2_600_000},
        "b/3": {"nodeid": 3, "state": "UP", "rxidle": 90_000_000},  # leads nothing of ours
    }
    partitions = {"0": {"partition": 0, "leader": 1}, "1": {"partition": 1, "leader": 2}}
    document = {**CONSUMER, "brokers": brokers, "topics": {"orders": {"partitions": partitions}}}
    assert summarize(json.dumps(document)).leaders_rx_idle_ms == 2_600
    brokers["b/2"] |= {"rxidle": -1}
    assert summarize(json.dumps(document)).leaders_rx_idle_ms is None
    assert summarize(json.dumps(CONSUMER)).leaders_rx_idle_ms is None
