"""librdkafka's statistics (the JSON of `statistics.interval.ms`), reduced to what a mirror operator reads (pure).

Times in librdkafka's statistics are microseconds; here they are milliseconds. Histogram averages of windows with
no samples (`cnt` 0) are left out instead of being counted as 0.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ClientStats", "summarize"]


@dataclass(frozen=True)
class ClientStats:
    role: str  # "producer" or "consumer"
    queued_records: int  # records in librdkafka's queues (producer: not yet acknowledged)
    queued_bytes: int
    requests_retried_total: int  # requests librdkafka sent again (txretries over all brokers)
    request_errors_total: int  # transmission errors (txerrs over all brokers)
    rtt_avg_ms: float | None  # broker round trip, averaged over brokers that had requests
    batch_size_avg_bytes: float | None  # producer: bytes per batch (MessageSet)
    batch_records_avg: float | None  # producer: records per batch
    fetch_queue_bytes: int  # consumer: fetched but not yet consumed
    fetch_size_avg_bytes: float | None  # consumer: bytes received per Fetch request (approximate: all responses count)
    rebalances_total: int  # consumer group rebalances
    # consumer: how long every broker leading one of its partitions has been up (the shortest; None: one is not up)
    leaders_up_for_ms: int | None = None
    # consumer: how long since the quietest broker leading one of its partitions last sent anything (`rxidle`; None:
    # one has not since it connected, or none leads). A fetching consumer hears from each at least every
    # fetch.wait.max.ms; much longer is a connection hanging in a network partition, before any timeout says so.
    leaders_rx_idle_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _weighted_avg(windows: list[dict[str, Any]]) -> float | None:
    samples = [(w.get("avg", 0), w.get("cnt", 0)) for w in windows if w.get("cnt", 0) > 0]
    total = sum(cnt for _, cnt in samples)
    return sum(avg * cnt for avg, cnt in samples) / total if total else None


def _per_fetch(brokers: list[dict[str, Any]]) -> float | None:
    fetches = sum(int(b.get("req", {}).get("Fetch", 0)) for b in brokers)
    return sum(int(b.get("rxbytes", 0)) for b in brokers) / fetches if fetches else None


def summarize(stats_json: str) -> ClientStats:
    doc: dict[str, Any] = json.loads(stats_json)
    brokers = [b for b in doc.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]  # bootstrap entries are -1
    topics = list(doc.get("topics", {}).values())
    rtt = _weighted_avg([b.get("rtt", {}) for b in brokers])
    partitions = [p for t in topics for p in t.get("partitions", {}).values() if p.get("partition", -1) >= 0]
    return ClientStats(
        role=str(doc.get("type", "")),
        queued_records=int(doc.get("msg_cnt", 0)),
        queued_bytes=int(doc.get("msg_size", 0)),
        requests_retried_total=sum(int(b.get("txretries", 0)) for b in brokers),
        request_errors_total=sum(int(b.get("txerrs", 0)) for b in brokers),
        rtt_avg_ms=rtt / 1000 if rtt is not None else None,
        batch_size_avg_bytes=_weighted_avg([t.get("batchsize", {}) for t in topics]),
        batch_records_avg=_weighted_avg([t.get("batchcnt", {}) for t in topics]),
        fetch_queue_bytes=sum(int(p.get("fetchq_size", 0)) for p in partitions),
        fetch_size_avg_bytes=_per_fetch(brokers),
        rebalances_total=int(doc.get("cgrp", {}).get("rebalance_cnt", 0)),
        leaders_up_for_ms=_leaders_up_for_ms(brokers, partitions),
        leaders_rx_idle_ms=_leaders_rx_idle_ms(brokers, partitions),
    )


def _leaders_rx_idle_ms(brokers: list[dict[str, Any]], partitions: list[dict[str, Any]]) -> int | None:
    """The longest time since a broker leading these partitions last sent anything (`rxidle`, microseconds, -1: not
    since it connected)."""
    by_id = {b.get("nodeid"): b for b in brokers}
    leaders = [by_id.get(p.get("leader")) for p in partitions if int(p.get("leader", -1)) >= 0]
    idle = [int(b.get("rxidle", -1)) for b in leaders if b is not None]
    if not idle or any(i < 0 for i in idle):
        return None
    return max(idle) // 1000


def _leaders_up_for_ms(brokers: list[dict[str, Any]], partitions: list[dict[str, Any]]) -> int | None:
    """How long the brokers leading these partitions have been up (`stateage` is in microseconds)."""
    by_id = {b.get("nodeid"): b for b in brokers}
    leaders = [by_id.get(p.get("leader")) for p in partitions if int(p.get("leader", -1)) >= 0]
    if not leaders or any(b is None or b.get("state") != "UP" for b in leaders):
        return None
    return min(int(b.get("stateage", 0)) for b in leaders if b is not None) // 1000
