"""Committed offsets read the way Burrow reads them: by following `__consumer_offsets`, so each commit arrives once,
with its commit timestamp, at a cost proportional to commits rather than groups x interval.

A consumer without a group (nothing is ever committed for it) reads every partition of the topic from its start,
read_committed (offsets committed in an aborted transaction never count), on a thread of its own, and keeps the
newest commit per group, topic and partition; a tombstone (a deleted group, an expired offset) deletes it. Records
it cannot parse are skipped and counted (`monitor.offsets_topic`): the topic is written by brokers of any version.

`table(until)` answers once the follower has read everything the topic held when the collection began (its last
stable offsets, asked at that moment), so a collection never reads commits older than the admin API would have
returned. Until the follower has read the topic's history once, a collection does not wait for it (the admin API
answers those rounds). A principal without READ on the topic makes the follower fail with the reason; the
collector then falls back to one OffsetFetch per group, and `/readyz` and the log say which mode runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from kernel.config import ClusterConfig
from kernel.kafka import DENIED, QUICK_RECONNECT, error_text, new_consumer
from monitor.offsets_topic import CommitValue, parse_commit_key, parse_commit_value

__all__ = ["OFFSETS_TOPIC", "CommitFollower", "CommitTable"]

log = logging.getLogger("mirrorwatch.monitor")

OFFSETS_TOPIC = "__consumer_offsets"
# group -> (topic, partition) -> its newest commit
CommitTable = Mapping[str, Mapping[tuple[str, int], CommitValue]]


class CommitFollower:
    def __init__(self, cluster: ClusterConfig, alias: str) -> None:
        self.alias = alias
        self._consumer: Consumer = new_consumer(
            cluster,
            alias,
            f"mirrorwatch-monitor-{alias}-offsets-reader",  # never joins, never commits: no group appears
            {
                "client.id": f"mirrorwatch-monitor-{alias}-offsets",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
                **QUICK_RECONNECT,
            },
        )
        self._lock = threading.Lock()
        self._commits: dict[str, dict[tuple[str, int], CommitValue]] = {}
        self._positions: dict[int, int] = {}  # partition of the offsets topic -> next offset to read
        self._assigned: int | None = None  # partitions of the offsets topic once assigned
        self.failure: str | None = None  # why the follower cannot read the topic (then the admin API is used)
        self.caught_up = False  # has read a whole history once: until then collections do not wait for it
        self._started = time.monotonic()
        self.records = 0
        self.unparsed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mirrorwatch-commits-{alias}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            self._assign()
            assigned = self._consumer.assignment()
            while not self._stop.is_set() and self.failure is None:
                self._read(self._consumer.consume(num_messages=10_000, timeout=0.2))
                # the fetch position, past control records and aborted transactions too
                positions = {tp.partition: tp.offset for tp in self._consumer.position(assigned) if tp.offset >= 0}
                with self._lock:
                    self._positions.update(positions)
        except Exception as exc:  # a bug or an unexpected client failure: fall back, say why
            self.failure = f"following {OFFSETS_TOPIC} failed: {exc}"
            log.exception("monitor: cluster %r: following %s failed", self.alias, OFFSETS_TOPIC)
        finally:
            self._consumer.close()

    def _assign(self) -> None:
        while not self._stop.is_set():
            try:
                metadata = self._consumer.list_topics(OFFSETS_TOPIC, timeout=10)
            except KafkaException as exc:
                log.warning(
                    "monitor: cluster %r: reading %s's metadata: %s", self.alias, OFFSETS_TOPIC, error_text(exc)
                )
                self._stop.wait(2)
                continue
            topic = metadata.topics.get(OFFSETS_TOPIC)
            if topic is not None and topic.error is not None and topic.error.code() in DENIED:
                self.failure = f"not allowed to read {OFFSETS_TOPIC}: {error_text(topic.error)}"
                return
            if topic is None or topic.error is not None or not topic.partitions:
                self._stop.wait(2)  # no group has committed yet: the topic does not exist
                continue
            self._consumer.assign([TopicPartition(OFFSETS_TOPIC, p, OFFSET_BEGINNING) for p in topic.partitions])
            self._assigned = len(topic.partitions)
            return

    def _read(self, messages: list[Message]) -> None:
        with self._lock:
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() in DENIED:
                        self.failure = f"not allowed to read {OFFSETS_TOPIC}: {error_text(error)}"
                    continue
                self.records += 1
                key = parse_commit_key(message.key())
                if key is None:
                    continue
                value = message.value()
                commits = self._commits.setdefault(key.group, {})
                if value is None:
                    commits.pop((key.topic, key.partition), None)
                    if not commits:
                        del self._commits[key.group]
                    continue
                commit = parse_commit_value(value)
                if commit is None:
                    self.unparsed += 1
                    continue
                commits[(key.topic, key.partition)] = commit

    def table(self, admin: AdminClient, timeout_s: float) -> CommitTable | None:
        """Every group's newest commits once everything committed before now has been read; None when the follower
        failed or did not catch up within `timeout_s` (the collector then asks the admin API)."""
        if self.failure is not None or self._assigned is None:
            return None
        wanted = {TopicPartition(OFFSETS_TOPIC, p): OffsetSpec.latest() for p in range(self._assigned)}  # type: ignore[no-untyped-call]
        futures = admin.list_offsets(wanted, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s)
        try:
            stable = {tp.partition: int(f.result(timeout=timeout_s).offset) for tp, f in futures.items()}
        except (KafkaException, TimeoutError):
            return None
        # Reading the history the first time can take minutes on a big cluster: until it is done, a collection asks
        # the admin API at once instead of waiting `timeout_s` for the follower every round.
        deadline = time.monotonic() + (timeout_s if self.caught_up else 0.0)
        while self.failure is None:
            with self._lock:
                if all(self._positions.get(p, 0) >= end for p, end in stable.items() if end > 0):
                    if not self.caught_up:
                        self.caught_up = True
                        log.info(
                            "monitor: cluster %r: read %s's history (%d records, %d groups) in %.1f s; commits "
                            "come from it from now on",
                            self.alias,
                            OFFSETS_TOPIC,
                            self.records,
                            len(self._commits),
                            time.monotonic() - self._started,
                        )
                    return {group: dict(commits) for group, commits in self._commits.items()}
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)
        return None
