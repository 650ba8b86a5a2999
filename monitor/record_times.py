"""Timestamps of records at given offsets, for lag in seconds (the monitor's I/O).

Lag in seconds of a consumer at offset o < high-watermark is now minus the timestamp of the record at o: exact, and
fetched once per (cluster, topic, partition, offset) since a record's timestamp never changes. An offset may point
at a gap (compaction, a transaction marker): the next record's timestamp is used. A record removed by retention
comes back as None. An offset with nothing but transaction markers after it (where a consumer of a transactional
topic that commits its last record + 1, as librdkafka's applications do, stands) has no record to time: left out at once
(the partition's end is reported), not waited for, and not cached, since a record may yet come; the call lists it in
`markers_only`, and the evaluator reads a consumer committed there as caught up.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, TopicPartition

from kernel.config import ClusterConfig
from kernel.kafka import QUICK_RECONNECT, new_consumer

__all__ = ["RecordTimeFetcher"]

log = logging.getLogger("mirrorwatch.monitor")

Key = tuple[str, str, int, int]  # cluster alias, topic, partition, offset
CACHE_SIZE = 200_000
FETCH_TIMEOUT_S = 5.0


class RecordTimeFetcher:
    def __init__(self, clusters: Mapping[str, ClusterConfig]) -> None:
        self._clusters = clusters
        self._consumers: dict[str, Consumer] = {}
        self._cache: OrderedDict[Key, int | None] = OrderedDict()
        self._slow: set[str] = set()  # clusters whose last fetch left records unread
        # The wanted offsets of the last call with nothing but transaction markers from them to the partition's end:
        # no record there to time, and none to read (a consumer committed there is caught up).
        self.markers_only: set[Key] = set()

    def times(self, wanted: Iterable[Key], budget_s: float | None = None) -> dict[Key, int | None]:
        """The timestamp (ms) of each wanted record; keys that could not be read within `budget_s` per cluster
        (default FETCH_TIMEOUT_S) are left out: their lag in seconds is unknown for this round, asked again the next."""
        budget_s = FETCH_TIMEOUT_S if budget_s is None else budget_s
        self.markers_only = set()
        out: dict[Key, int | None] = {}
        missing: dict[str, list[Key]] = {}
        for key in wanted:
            if key in self._cache:
                out[key] = self._cache[key]
                self._cache.move_to_end(key)
            else:
                missing.setdefault(key[0], []).append(key)
        for alias, keys in missing.items():
            found, at_end = self._fetch(alias, keys, time.monotonic() + budget_s)
            for key, timestamp in found.items():
                out[key] = self._cache[key] = timestamp
            self.markers_only |= at_end
            self._report(alias, len(keys) - len(found) - len(at_end), len(keys), budget_s)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return out

    def _report(self, alias: str, unread: int, wanted: int, budget_s: float) -> None:
        """One warning when a cluster's records stop coming back in time, one line when they do again."""
        if unread and alias not in self._slow:
            self._slow.add(alias)
            log.warning(
                "monitor: cluster %r: %d of %d records not read within %g s; their lag in seconds is unknown until "
                "they are",
                alias,
                unread,
                wanted,
                budget_s,
            )
        elif not unread and alias in self._slow:
            self._slow.discard(alias)
            log.info("monitor: cluster %r: records are read in time again", alias)

    def _consumer(self, alias: str) -> Consumer:
        consumer = self._consumers.get(alias)
        if consumer is None:
            consumer = self._consumers[alias] = new_consumer(
                self._clusters[alias],
                alias,
                "mirrorwatch-monitor-record-times",
                # error: an offset before the log start is reported instead of silently reading another record
                {
                    "enable.auto.commit": False,
                    "auto.offset.reset": "error",
                    "fetch.wait.max.ms": 50,
                    "isolation.level": "read_uncommitted",
                    "enable.partition.eof": True,
                    **QUICK_RECONNECT,
                },
            )
        return consumer

    def _fetch(self, alias: str, keys: list[Key], deadline: float) -> tuple[dict[Key, int | None], set[Key]]:
        """Every key's timestamp read by `deadline` (monotonic): one offset per partition per pass (an assignment
        holds one position per partition), as many passes as a partition has wanted offsets (a group's and a link's,
        say). Also returns the keys with nothing but transaction markers after them."""
        found: dict[Key, int | None] = {}
        at_end: set[Key] = set()
        remaining = sorted(keys)
        while remaining and time.monotonic() < deadline:
            by_tp: dict[tuple[str, int], Key] = {}
            later: list[Key] = []
            for key in remaining:
                if (key[1], key[2]) in by_tp:
                    later.append(key)
                else:
                    by_tp[(key[1], key[2])] = key
            read, ended = self._fetch_pass(alias, by_tp, deadline)
            found.update(read)
            at_end |= ended
            remaining = later
        return found, at_end

    def _fetch_pass(
        self, alias: str, by_tp: Mapping[tuple[str, int], Key], deadline: float
    ) -> tuple[dict[Key, int | None], set[Key]]:
        consumer = self._consumer(alias)
        consumer.assign([TopicPartition(t, p, k[3]) for (t, p), k in by_tp.items()])
        found: dict[Key, int | None] = {}
        at_end: set[Key] = set()  # nothing but markers from its offset to the end: no record to time
        try:
            while len(found) + len(at_end) < len(by_tp) and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=len(by_tp), timeout=0.2):
                    key = by_tp.get((msg.topic() or "", msg.partition() or 0))
                    if key is None or key in found or key in at_end:
                        continue
                    err = msg.error()
                    if err is None:
                        found[key] = msg.timestamp()[1]
                    elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                        found[key] = None  # removed by retention
                    elif err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(key)
        finally:
            consumer.unassign()
        return found, at_end

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
