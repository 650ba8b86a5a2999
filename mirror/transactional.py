"""Exactly-once mirroring (`delivery: exactly-once`), after confluent-kafka's eos_transactions example.

A read_committed consumer of the target sees each source record once, across crashes and restarts:

- each worker owns a fixed share of the source partitions (`mirror.owned.owner_of`: a stable hash, not a
  consumer-group rebalance, so no partition can move to another worker in the middle of a transaction);
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
  aborts and replays the transaction, and so does a target topic found lost under the link while the transaction
  is flushed (`on_target_loss` then decides); a producer left fatally broken without being fenced is replaced by
  a new one of the same transactional.id.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, Message, TopicPartition

from kernel.kafka import error_text, new_consumer
from mirror.admin import execute_plan
from mirror.delivery import dead_letter_headers
from mirror.handler import MirrorRecord
from mirror.owned import OwnedPartitionsWorker
from mirror.topics import CreateTopic, TopicPlan

__all__ = ["TransactionalLinkWorker", "offsets_topic"]

log = logging.getLogger("mirrorwatch.mirror")

TRANSACTION_TIMEOUT_MS = 60_000
TIMEOUT_S = 60.0
# A fatal error with these means another incarnation took over the transactional.id: the link stops
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


def offsets_topic(group: str) -> str:
    return "mirrorwatch-offsets." + re.sub(r"[^A-Za-z0-9._-]", "_", group)


def _offset_key(topic: str, partition: int) -> bytes:
    return f"{topic}:{partition}".encode()  # ':' cannot occur in a topic name


class TransactionalLinkWorker(OwnedPartitionsWorker):
    """One worker of an exactly-once link: the worker's life (`WorkerBase`), its topic keeper and router, its fixed
    share of the partitions (`mirror.owned`), and a loop of its own that writes records and progress in one
    transaction (no consumer-group rebalances, no delivery side: the transaction stands for the records)."""

    ENGINE = "exactly-once"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._offsets_topic = offsets_topic(self.link.consumer_group)
        self._to_dead_letter: set[tuple[str, int, int]] = set()  # (topic, partition, offset) refused once already
        self._txn_error: tuple[MirrorRecord, KafkaError] | None = None
        self._txn_advanced: dict[tuple[str, int], int] = {}  # the open transaction's positions (its records' next)

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

    # -- generations (`mirror.generation_worker`) -------------------------------------------------------------------

    def _drop_generation(self, key: tuple[str, int]) -> int:
        """The old topic's records of the open transaction are written before the target's ends are read (the new
        generation's copies begin after them); the partition's position goes back to the new topic's beginning."""
        if self._producer is not None:
            self._producer.flush(TIMEOUT_S)
        for kept in (self._position, self._began, self._newest_ms, self._txn_advanced):
            kept.pop(key, None)
        self._stored[key] = self._reset_at[key] = 0
        return 0

    # -- the loop ---------------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self._consumer is not None and self._producer is not None
        consumer = self._consumer
        self._producer.init_transactions(TIMEOUT_S)
        transaction_s = self.link.offset_commit_interval_ms / 1000
        while not self._stop.is_set() and self._failure is None:
            self._take_survey()  # between transactions: the assignment may change
            producer = self._producer  # a new one after a fatal error (`_aborted`)
            producer.begin_transaction()
            advanced = self._txn_advanced = {}
            deadline = time.monotonic() + transaction_s
            while not self._stop.is_set() and self._txn_error is None and self._failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._hold.apply(consumer, self._assigned, self._held_alone)  # `mirrorwatch link pause`
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
        elif err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            pass  # purged by an abort (or with a replaced producer): the transaction's records are read again
        elif self._txn_error is None:
            self.stats.send_errors_total += 1
            self._txn_error = (rec, err)

    def _commit_transaction(self, advanced: dict[tuple[str, int], int]) -> None:
        assert self._producer is not None and self._consumer is not None
        producer = self._producer
        advanced = {**self._reset_at, **advanced}  # a restarted partition's first records pass its beginning
        for (topic, partition), offset in advanced.items():
            producer.produce(self._offsets_topic, key=_offset_key(topic, partition), value=str(offset).encode())
        if not self._flushed():
            log.warning(
                "link %s: a target topic this transaction writes to was lost under the link; the transaction is "
                "aborted, and the link's rule (on_target_loss) decides what its partitions do",
                self.name,
            )
            self._abort_and_replay(None)
            return
        try:
            if self._txn_error is not None:
                raise KafkaException(self._txn_error[1])
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            self._abort_and_replay(exc)
            return
        self._stored.update(advanced)
        if advanced:
            # said at once, not at the next beat: a commit moves a partition seconds at a time (a backlog's whole
            # catch-up, or the commit interval's records), and a killed worker's last status is the monitor's last word
            self._status_due.set()
        if self._reset_at:
            restarted = sorted(self._reset_at)
            self._reset_at.clear()
            self._write_notes(restarted)  # the new topic's beginning is stored: the notes may name it now
        if advanced:
            offsets = [TopicPartition(t, p, o) for (t, p), o in advanced.items()]
            try:  # for lag tools only; the transaction above is what counts
                self._consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:
                log.warning("link %s: committing to the source group failed (%s)", self.name, error_text(exc))

    def _flushed(self) -> bool:
        """The transaction's records delivered (or failed: `_txn_error`), as `flush` does, unless a topic refresh
        finished meanwhile finds the target topic of a partition it writes to lost under the link: its records then
        wait for a topic that is gone (until message.timeout.ms), and False says to abort instead."""
        assert self._producer is not None
        deadline = time.monotonic() + TIMEOUT_S
        while self._producer.flush(0.5) > 0 and time.monotonic() < deadline:
            survey = self._surveyor.peek() if self._surveyor is not None else None
            if survey is None or not survey.lost_targets:
                continue
            lost = dict(survey.lost_targets)
            if any(self._target_topic(k[0]) in lost for k in self._txn_advanced if k not in self._stopped):
                return False
        return True

    def _abort_and_replay(self, exc: KafkaException | None) -> None:
        """Abort the transaction and read its records again from the stored offsets (`exc`: why; None: a target
        topic lost, said by the caller)."""
        assert self._producer is not None and self._consumer is not None
        error: KafkaError | None = exc.args[0] if exc is not None else None
        failed = self._txn_error
        self._txn_error = None
        if not self._aborted(error):
            return
        if failed is not None:
            rec, cause = failed
            permanent = not cause.retriable() and cause.code() not in (
                KafkaError._MSG_TIMED_OUT,
                KafkaError._TIMED_OUT,
                KafkaError._TRANSPORT,
                # the target topic gone under the link: the next topic refresh finds it lost (on_target_loss)
                KafkaError._UNKNOWN_TOPIC,
                KafkaError._UNKNOWN_PARTITION,
                KafkaError.UNKNOWN_TOPIC_OR_PART,
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
            "link %s: transaction aborted (%s); replaying from the stored offsets",
            self.name,
            error_text(error) if error is not None else "a target topic lost",
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

    def _aborted(self, error: KafkaError | None) -> bool:
        """Abort the transaction (tried again while the abort fails retriably: the target away). A producer in a
        fatal state that is not fencing (librdkafka can end an abort with INVALID_TXN_STATE when no partition was
        added to the transaction yet: confluentinc/librdkafka#4849, met when the target topic was deleted under the
        link) is replaced by a new one with the same transactional.id, whose initialisation aborts whatever the old
        one left open. False: the link failed."""
        assert self._producer is not None
        while error is None or not error.fatal():
            try:
                self._producer.abort_transaction(TIMEOUT_S)
                return True
            except KafkaException as exc:
                error = exc.args[0]
                assert error is not None
                if error.retriable() and not self._stop.is_set():
                    log.warning("link %s: aborting the transaction failed (%s); trying again", self.name,
                                error_text(error))  # fmt: skip
                    continue
                if not error.fatal():
                    self._fail(f"the transaction could not be aborted: {error_text(error)}")
                    return False
        if error.code() in FENCED:
            self._fail(
                f"the transactional producer failed: {error_text(error)}; "
                "another worker with the same transactional.id may have fenced this one"
            )
            return False
        log.warning(
            "link %s: the transactional producer failed (%s); a new one takes over, fencing it",
            self.name,
            error_text(error),
        )
        old, self._producer = self._producer, self._new_producer()
        with contextlib.suppress(KafkaException):
            old.purge()  # nothing of it is waited for: its transaction is aborted by the new one's initialisation
        self._producer.init_transactions(TIMEOUT_S)
        return True

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
