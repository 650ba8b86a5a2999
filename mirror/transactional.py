"""Exactly-once mirroring (`delivery: exactly-once`), after confluent-kafka's eos_transactions example.

A read_committed consumer of the target sees each source record once, across crashes and restarts:

- each worker owns a fixed share of the source partitions (`owner_of`: a stable hash, not a consumer-group
  rebalance, so no partition can move to another worker in the middle of a transaction);
- records and the link's progress are written in one transaction on the target. The progress goes to a compacted
  topic on the target, `mirrorwatch-offsets.<group>` (as MirrorMaker 2 keeps its offsets on the target), because a
  transaction cannot span two clusters;
- at start the worker reads that topic back and seeks the source there; `transactional.id` is stable per worker, so
  a restarted worker fences its previous incarnation's unfinished transaction;
- after each commit the same offsets are committed to the source consumer group, so Burrow, kafka_exporter and the
  monitor see the link's progress as for any other link (that commit is for visibility only; the target's copy is
  the truth);
- a record the target refuses aborts the transaction; with a dead-letter topic it is sent there when the
  transaction is replayed, otherwise the link stops. A timeout (target down longer than transaction.timeout.ms)
  aborts and replays the transaction.
"""

from __future__ import annotations

import functools
import logging
import re
import time
import zlib
from collections.abc import Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, Message, TopicPartition

from kernel.kafka import error_text, new_consumer
from kernel.worker_status import PartitionPosition
from mirror.admin import execute_plan
from mirror.delivery import dead_letter_headers
from mirror.generation_worker import GenerationWorker
from mirror.handler import MirrorRecord
from mirror.topic_keeper import Survey
from mirror.topics import CreateTopic, TopicPlan
from mirror.worker import STATUS_EVERY_S

__all__ = ["TransactionalLinkWorker", "offsets_topic", "owner_of"]

log = logging.getLogger("mirrorwatch.mirror")

TRANSACTION_TIMEOUT_MS = 60_000
TIMEOUT_S = 60.0
NOTES_EVERY_S = 5.0  # the owned partitions' notes on this host (`mirror.topic_ledger`)


def owner_of(topic: str, partition: int, workers: int) -> int:
    """The worker (0..workers-1) that owns a source partition; the same answer on every worker, every time."""
    return zlib.crc32(f"{topic}:{partition}".encode()) % workers


def offsets_topic(group: str) -> str:
    return "mirrorwatch-offsets." + re.sub(r"[^A-Za-z0-9._-]", "_", group)


def _offset_key(topic: str, partition: int) -> bytes:
    return f"{topic}:{partition}".encode()  # ':' cannot occur in a topic name


class TransactionalLinkWorker(GenerationWorker):
    """One worker of an exactly-once link: the worker's life (`WorkerBase`), its topic keeper and router, and a loop
    of its own that writes records and progress in one transaction (no consumer-group rebalances, no delivery side:
    the transaction stands for the records)."""

    ENGINE = "exactly-once"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._offsets_topic = offsets_topic(self.link.consumer_group)
        self._stored: dict[tuple[str, int], int] = {}  # committed in the target: the truth
        self._position: dict[tuple[str, int], int] = {}  # next offset to read, this transaction included
        self._assigned: set[tuple[str, int]] = set()
        self._to_dead_letter: set[tuple[str, int, int]] = set()  # (topic, partition, offset) refused once already
        self._txn_error: tuple[MirrorRecord, KafkaError] | None = None
        self._next_high = 0.0
        # per owned partition, for `mirror.expiry`: the first offset this ownership read, the newest record's time
        self._began: dict[tuple[str, int], int] = {}
        self._newest_ms: dict[tuple[str, int], int] = {}
        self._txn_advanced: dict[tuple[str, int], int] = {}  # the open transaction's positions (its records' next)
        # Partitions restarted on a source topic deleted and created again: the new topic's beginning goes into the
        # next transaction's offsets, and only once it committed do the notes name the new topic (a crash before then
        # finds the old one noted and decides again, never the old position read on the new topic)
        self._restarted_at: dict[tuple[str, int], int] = {}
        self._next_notes = 0.0

    # -- set-up -----------------------------------------------------------------------------------------------------

    def _prepare(self) -> None:
        plan = TopicPlan(
            mapping={},
            source_partitions={},
            create=(CreateTopic(self._offsets_topic, 1, self.link.replication_factor, {"cleanup.policy": "compact"}),),
        )
        assert self._target_admin is not None
        execute_plan(self._target_admin, plan)
        self._stored = self._read_stored_offsets()
        log.info(
            "link %s: exactly-once; %d stored offset(s) read back from %s",
            self.name,
            len(self._stored),
            self._offsets_topic,
        )

    def _read_stored_offsets(self) -> dict[tuple[str, int], int]:
        target = self.config.clusters[self.link.target]
        reader = new_consumer(
            target,
            self.link.target,
            f"{self.link.consumer_group}-offsets-reader",
            {"enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed"},
        )
        stored: dict[tuple[str, int], int] = {}
        try:
            reader.assign([TopicPartition(self._offsets_topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                for msg in reader.consume(num_messages=1000, timeout=0.5):
                    err = msg.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        return stored
                    if err is not None:
                        raise KafkaException(err)
                    topic, _, partition = (msg.key() or b"").decode().rpartition(":")
                    stored[(topic, int(partition))] = int(msg.value() or b"0")
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"reading {self._offsets_topic} took too long"))
        finally:
            reader.close()

    def _producer_overrides(self) -> dict[str, Any]:
        overrides = super()._producer_overrides()
        overrides.update(
            {
                "transactional.id": f"mirrorwatch-{self.link.consumer_group}-{self.worker}",
                # A transaction cannot wait for ever: a target down longer than this aborts and replays it.
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
            }
        )
        return overrides

    # -- partitions -------------------------------------------------------------------------------------------------

    def _adopt(self, survey: Survey) -> TopicPlan:
        """The keeper's new topics, then this worker's share of the partitions (no group membership: owner_of)."""
        plan = super()._adopt(survey)
        assert self._consumer is not None
        workers = self.link.num_streams
        owned = {
            (t, p)
            for t, n in plan.source_partitions.items()
            for p in range(n)
            if owner_of(t, p, workers) == self.worker
        }
        new, gone = owned - self._assigned, self._assigned - owned
        if gone:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in sorted(gone)])
            self._write_notes(sorted(gone))  # a deleted topic's: what the target has of it, its high-watermark seen
            for key in gone:
                self._generations.forget(key)
                self._restarted_at.pop(key, None)
                self._position.pop(key, None)
                self._stopped.pop(key, None)
                self._hold.forget(key)
                self._began.pop(key, None)
                self._newest_ms.pop(key, None)
                self._expiry_ends(key)
        if new:
            self._consumer.incremental_assign(self._starts(sorted(new)))
            held = set(self._hold.assigned(new))  # paused by the operator: from the start
            if held or new & self._stopped.keys():
                paused = sorted(held | (new & self._stopped.keys()))  # stopped: the topic was created again
                self._consumer.pause([TopicPartition(*key) for key in paused])
            log.info("link %s: owns %s", self.name, ", ".join(f"{t}[{p}]" for t, p in sorted(new)))
            self._topics_readable({t for t, _ in new})
        self._assigned = owned
        if new:
            self._write_notes(sorted(new))
        if self._router is not None:
            self._recreated_while_owned()  # deleted and created again between two refreshes
        return plan

    def _starts(self, keys: list[tuple[str, int]]) -> list[TopicPartition]:
        """Where newly owned partitions start: at the offset stored on the target, unless this host's notes say it
        was taken on a topic deleted and created again since (`Generations.assigned`: the link's rule stops the
        partition, or restarts it at the new topic's beginning)."""
        default = OFFSET_BEGINNING if self.link.start_from == "earliest" else OFFSET_END
        restarted: set[tuple[str, int]] = set()

        def rule(topic: str, partition: int, position: int | None, high: int | None) -> str:
            action = self._recreated(topic, partition, position, high)
            if action == "restart":
                restarted.add((topic, partition))
            return action

        stored = [TopicPartition(t, p, self._stored.get((t, p), default)) for t, p in keys]
        now = self._topic_ids_now(sorted({t for t, _ in keys}))
        starts = []
        for tp in self._generations.assigned(stored, now, rule, self._target_ends):
            key = (tp.topic, tp.partition)
            if key in restarted:  # offset 0, not OFFSET_BEGINNING: a new topic's records retention took are a gap
                self._stored[key] = self._restarted_at[key] = 0
            starts.append(TopicPartition(tp.topic, tp.partition, 0) if key in restarted else tp)
        return starts

    # -- generations (`mirror.generation_worker`) -------------------------------------------------------------------

    def _acked_positions(self) -> dict[tuple[str, int], int | None]:
        return {key: self._stored.get(key) for key in self._assigned}

    def _consumed(self, key: tuple[str, int]) -> int | None:
        return self._position.get(key)

    def _drop_generation(self, key: tuple[str, int]) -> int:
        """The old topic's records of the open transaction are written before the target's ends are read (the new
        generation's copies begin after them); the partition's position goes back to the new topic's beginning."""
        if self._producer is not None:
            self._producer.flush(TIMEOUT_S)
        for kept in (self._position, self._began, self._newest_ms, self._txn_advanced):
            kept.pop(key, None)
        self._stored[key] = self._restarted_at[key] = 0
        return 0

    def _write_notes(self, keys: list[tuple[str, int]]) -> None:
        super()._write_notes([key for key in keys if key not in self._restarted_at])

    def _note_high_watermarks(self) -> None:
        """Every status interval, in the loop (the consumer is the loop's alone), what the consumer's last fetch
        responses said of each owned partition's high-watermark: the status carries it, as the at-least-once
        worker's does, so the monitor measures the worker at its own moment."""
        now = time.monotonic()
        if now < self._next_high:
            return
        self._next_high = now + STATUS_EVERY_S
        self._note_highs(self._assigned)
        self._check_expiry()
        if now >= self._next_notes:  # what the target has and the highs seen: a recreated topic's gap counts from them
            self._next_notes = now + NOTES_EVERY_S
            self._write_notes(sorted(self._assigned))

    def _expiry_positions(self) -> Iterator[tuple[tuple[str, int], int | None, int | None, int | None]]:
        """Records count as acknowledged when their transaction committed (see GapWorker._check_expiry)."""
        for key in self._assigned:
            yield key, self._began.get(key), self._stored.get(key), self._newest_ms.get(key)

    def _skipped(self, key: tuple[str, int], to: int) -> None:
        """Records below `to` given up: the next transaction commits from there on (with its next record)."""
        self._position[key] = to

    def _partition_positions(self) -> tuple[PartitionPosition, ...]:
        """Records count as acknowledged only when their transaction committed."""
        seen_high = self._stated_highs()
        return tuple(
            PartitionPosition(
                topic=t,
                partition=p,
                target_topic=self._target_topic(t),
                consumed=self._position.get((t, p), self._stored.get((t, p))),
                acked=self._stored.get((t, p)),
                committed=self._stored.get((t, p)),
                in_flight_records=self._position.get((t, p), 0) - self._stored.get((t, p), 0)
                if (t, p) in self._position
                else 0,
                high_watermark=seen_high.get((t, p)),
                failed=self._stopped.get((t, p)),
            )
            for t, p in sorted(self._assigned)
        )

    # -- the loop ---------------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self._consumer is not None and self._producer is not None
        consumer, producer = self._consumer, self._producer
        producer.init_transactions(TIMEOUT_S)
        transaction_s = self.link.offset_commit_interval_ms / 1000
        while not self._stop.is_set() and self._failure is None:
            self._take_survey()  # between transactions: the assignment may change
            producer.begin_transaction()
            advanced = self._txn_advanced = {}
            deadline = time.monotonic() + transaction_s
            while not self._stop.is_set() and self._txn_error is None and self._failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._hold.apply(consumer, self._assigned, self._stopped.__contains__)  # `mirrorwatch link pause`
                room = self._budget_room()  # the bandwidth budget's (mirror.flow)
                if room == 0:  # none left: delivery reports served while the bucket fills
                    producer.poll(min(0.05, remaining))
                    continue
                for msg in consumer.consume(num_messages=min(2000, room or 2000), timeout=min(0.1, remaining)):
                    self._mirror_one(msg, advanced)
                producer.poll(0)
                self._note_high_watermarks()
            if self._failure is not None:
                producer.abort_transaction(TIMEOUT_S)
                return
            self._commit_transaction(advanced)

    def _owned(self) -> int:
        return len(self._assigned)

    def _mirror_one(self, msg: Message, advanced: dict[tuple[str, int], int]) -> None:
        err = msg.error()
        if err is not None:
            self._consumer_error(err, msg.topic(), msg)
            return
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        if (topic, partition) not in self._assigned:
            return
        assert self._router is not None
        records = self._router.records_for(msg, topic, partition, offset)
        if records is None:
            return
        for record in records:
            if (topic, partition, offset) in self._to_dead_letter:
                cause = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "refused by the target in an earlier transaction")
                headers = dead_letter_headers(record.headers, record.topic, record.partition, cause)
                self._produce(record, self.link.dead_letter_topic or "", headers, None)
            else:
                self._produce(record, record.topic, record.headers, record.partition)
        key = (topic, partition)
        advanced[key] = offset + 1
        self._position[key] = offset + 1
        self._began.setdefault(key, offset)
        timestamp = msg.timestamp()[1]
        if timestamp > 0:
            self._newest_ms[key] = timestamp

    def _produce(self, rec: MirrorRecord, topic: str, headers: list[Any], partition: int | None) -> None:
        assert self._producer is not None
        while True:
            try:
                self._producer.produce(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    partition=-1 if partition is None else partition,
                    timestamp=rec.timestamp_ms,
                    headers=headers,
                    on_delivery=functools.partial(self._txn_delivered, rec),
                )
                return
            except BufferError:
                self._producer.poll(0.1)  # no group membership to keep alive: waiting here is fine

    def _txn_delivered(self, rec: MirrorRecord, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            size = (len(rec.value) if rec.value else 0) + (len(rec.key) if rec.key else 0)
            self.stats.count_out(1, size, rec.timestamp_ms, time.time())
        elif self._txn_error is None:
            self.stats.send_errors_total += 1
            self._txn_error = (rec, err)

    def _commit_transaction(self, advanced: dict[tuple[str, int], int]) -> None:
        assert self._producer is not None and self._consumer is not None
        producer = self._producer
        advanced = {**self._restarted_at, **advanced}  # a restarted partition's first records pass its beginning
        for (topic, partition), offset in advanced.items():
            producer.produce(self._offsets_topic, key=_offset_key(topic, partition), value=str(offset).encode())
        try:
            producer.flush(TIMEOUT_S)
            if self._txn_error is not None:
                raise KafkaException(self._txn_error[1])
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            self._abort_and_replay(exc)
            return
        self._stored.update(advanced)
        if self._restarted_at:
            restarted = sorted(self._restarted_at)
            self._restarted_at.clear()
            self._write_notes(restarted)  # the new topic's beginning is stored: the notes may name it now
        if advanced:
            offsets = [TopicPartition(t, p, o) for (t, p), o in advanced.items()]
            try:  # for lag tools only; the transaction above is what counts
                self._consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:
                log.warning("link %s: committing to the source group failed (%s)", self.name, error_text(exc))

    def _abort_and_replay(self, exc: KafkaException) -> None:
        """Abort the transaction and read its records again from the stored offsets."""
        assert self._producer is not None and self._consumer is not None
        error: KafkaError = exc.args[0]
        failed = self._txn_error
        self._txn_error = None
        if error.fatal():
            self._fail(
                f"the transactional producer failed: {error_text(error)}; "
                "another worker with the same transactional.id may have fenced this one"
            )
            return
        self._producer.abort_transaction(TIMEOUT_S)
        if failed is not None:
            rec, cause = failed
            permanent = not cause.retriable() and cause.code() not in (
                KafkaError._MSG_TIMED_OUT,
                KafkaError._TIMED_OUT,
                KafkaError._TRANSPORT,
            )
            where = f"{rec.source_topic}[{rec.source_partition}]@{rec.source_offset}"
            if permanent and not self.link.dead_letter_topic:
                self._fail(
                    f"the target refused {where} for topic {rec.topic!r}: {error_text(cause)}. "
                    "The transaction was aborted, so nothing is lost; fix the target (e.g. the topic's "
                    "max.message.bytes) or set the link's dead_letter_topic, then start it again"
                )
                return
            if permanent:
                log.error(
                    "link %s: the target refused %s: %s; it goes to %r when the transaction is replayed",
                    self.name,
                    where,
                    error_text(cause),
                    self.link.dead_letter_topic,
                )
                self._to_dead_letter.add((rec.source_topic, rec.source_partition, rec.source_offset))
        log.warning(
            "link %s: transaction aborted (%s); replaying from the stored offsets", self.name, error_text(error)
        )
        for topic, partition in sorted(self._assigned):
            stored = self._stored.get((topic, partition))
            start = (
                stored
                if stored is not None
                else (OFFSET_BEGINNING if self.link.start_from == "earliest" else OFFSET_END)
            )
            self._consumer.seek(TopicPartition(topic, partition, start))
            self._position.pop((topic, partition), None)

    def _shutdown(self) -> None:
        consumer, producer = self._consumer, self._producer
        if consumer is None:
            return
        try:
            if producer is not None:
                producer.flush(5)
            self._write_notes(sorted(self._assigned))
        finally:
            consumer.close()
        log.info("link %s: stopped after mirroring %d records", self.name, self.stats.records_out_total)
