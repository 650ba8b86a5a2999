"""The python mirror engine: one at-least-once worker of one link (the loop, rebalances and commits; the parts it
composes: `mirror.worker` its life, `mirror.delivery` the producer side, `mirror.routes`, `mirror.topic_keeper`,
`mirror.settings`).

Consume from the source with the link's consumer group (cooperative-sticky by default, batched `consume()`),
produce to the target (acks=all, idempotent), and commit to the source group only offsets below which the target
acknowledged every record (`PartitionProgress.acked`): on a timer, on revocation and at shutdown.

What can go wrong, and what the worker does:
- a cluster is unreachable at start: retried with a log line and back-off until it answers or the worker is stopped;
- the target is down mid-stream: librdkafka retries for ever (message.timeout.ms=0); in-flight records pile up to
  the producer's memory cap, then the worker reads nothing more (back-pressure) and, when the producer stays full,
  pauses the source partitions until the target drains;
- the target refuses a record (too large, policy, authorization): the record goes to the dead-letter topic if the
  link has one, else its partition stops alone with the reason while the others go on (issue #42: failed, in its
  status); the committed offset stays below that record either way until it is safe, so nothing is lost;
- SIGTERM/SIGINT: stop fetching, flush (bounded), commit what the target acknowledged, leave the group.

Sparse delivery reports (links without a handler, `partitioning: preserve`, not exactly-once): asking the producer
for a report on every record costs more than producing it, so only the last record of each run of a partition's
records in a consumed batch carries one. One report proves the whole run, because the producer is idempotent with
`enable.gapless.guarantee`: the target writes a partition's records in the order they were produced or not at all, a
refused record makes the producer fail for good instead of leaving a gap, and records never time out
(message.timeout.ms=0). A sparse report does not say which record was refused, so on any delivery error the worker
goes back to the offsets the target acknowledged and mirrors on with a report per record
(`LinkWorker._replay_exactly`): the refusal is then handled exactly as above, naming the record. Records between the
acknowledged offset and the refused one may be written twice, as after a restart.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from kernel.kafka import error_text
from kernel.worker_status import PartitionPosition
from mirror.commits import REJOIN_FIRST, acked_offsets, commit_before_leaving, refused, with_leader_epochs
from mirror.delivery import Delivery
from mirror.flow import FlowWindow
from mirror.identity import IdentityWorker
from mirror.progress import STATUS_REST_S, PartitionProgress
from mirror.settings import PRODUCER_DEFAULTS
from mirror.topic_keeper import Survey
from mirror.topics import TopicPlan
from mirror.worker import SHUTDOWN_FLUSH_S, STATUS_EVERY_S

__all__ = ["LinkWorker"]

log = logging.getLogger("mirrorwatch.mirror")

PROGRESS_EVERY_S = 10.0
# How long the producer may stay full before the source partitions are paused. A full producer is normal flow control
# on a busy link (we read faster than the target writes): reading nothing more is back-pressure enough, and librdkafka
# stops prefetching at queued.max.messages.kbytes on its own. Pausing purges what librdkafka already fetched for those
# partitions, to be fetched again on resume, so it is kept for a target that stays full (slow or down), where
# consume() must go on being called (max.poll.interval.ms) without handing out records.
PAUSE_AFTER_FULL_S = 10.0
# A hold this long (or longer) leaves librdkafka's queue full and its fetches stopped: the source's silence from then
# to the next read is the worker's own (`_fetching_since_ms`). Shorter holds (a bandwidth budget's bucket refilling,
# a window's worth waiting for its acknowledgement) leave the fetcher refetching as the loop drains its queue.
HOLD_STOPS_FETCHING_S = 1.0


class LinkWorker(IdentityWorker):
    """One at-least-once worker of a link: the consumer group, the loop, rebalances and commits; its records go
    through a `Delivery`."""

    SPARSE_REPORTS = True  # whether this kind of worker may use sparse delivery reports (see the module docstring)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._earlier_progress: dict[tuple[str, int], PartitionProgress] = {}  # of partitions revoked or lost
        self._subscribed: tuple[str, ...] | None = None

    # -- positions --------------------------------------------------------------------------------------------------

    def _note_high_watermarks(self) -> None:
        """The high-watermarks the consumer saw, noted by the loop for the status (`mirror.highs`)."""
        self._note_highs(self._progress)

    def _partition_positions(self) -> tuple[PartitionPosition, ...]:
        return owned_positions(
            self._progress, self._earlier_progress, self._stated_highs(), self._stopped, self._target_topic
        )

    def _released_positions(self) -> tuple[PartitionPosition, ...]:
        return released_positions(self._progress, self._earlier_progress, self._target_topic)

    # -- set-up -----------------------------------------------------------------------------------------------------

    def _start(self) -> None:
        assert self._router is not None
        super()._start()
        self._delivery = Delivery(
            self.link,
            self.name,
            self._router,
            self.stats,
            fail=self._fail,
            consumer_error=self._consumer_error,
            stop_alone=self._stop_alone,
            acked_waited=self._status_due.set,  # a backlog drains: the status says so at once
        )
        self._delivery.sparse = (
            self.SPARSE_REPORTS and self._router.handler is None and self.link.partitioning == "preserve"
        )

    def _producer_overrides(self) -> dict[str, Any]:
        overrides = super()._producer_overrides()
        if self._delivery is not None and self._delivery.sparse:
            overrides["enable.gapless.guarantee"] = True  # what makes one report prove a run (module docstring)
        return overrides

    def _new_producer(self) -> Producer:
        assert self._delivery is not None
        self._delivery.producer = producer = super()._new_producer()
        return producer

    def _adopt(self, survey: Survey) -> TopicPlan:
        """The keeper's new topics and partition counts; (re)subscribe when the selection changed."""
        assert self._keeper is not None and self._router is not None
        plan = super()._adopt(survey)
        if self._producer is not None:
            for grown in plan.add_partitions:  # the producer's metadata cache would otherwise learn this in 5 minutes
                self._producer.list_topics(grown.topic, timeout=10)
            smallest = self._keeper.smallest_target_limit
            if smallest is not None and smallest < self._batch_bytes:
                log.warning(
                    "link %s: a target topic takes at most %d bytes per batch but the producer batches up to "
                    "%d; restart the link so that one refused record cannot fail its neighbours",
                    self.name,
                    smallest,
                    self._batch_bytes,
                )
        self._router.clear()  # target topics or partition counts may have changed
        if self._consumer is not None and self._delivery is not None:
            self._recreated_while_owned()
            self._lost_targets_owned()
            self._target_created()
            self._note_target_ids()
        if self._keeper.selected != self._subscribed:
            self._subscribe(self._keeper.selected)
        return plan

    def _subscribe(self, topics: tuple[str, ...]) -> None:
        assert self._consumer is not None
        if topics:
            self._consumer.subscribe(
                list(topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            log.info("link %s: mirroring %d topic(s): %s", self.name, len(topics), ", ".join(topics))
        else:
            self._consumer.unsubscribe()
            log.warning(
                "link %s: no source topic matches %s yet; checking again every %gs",
                self.name,
                [p.pattern for p in self.link.topics.include],
                self.link.refresh_topics_interval_seconds,
            )
        self._subscribed = topics

    # -- rebalance callbacks (run inside consume()) -----------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assert self._keeper is not None and self._router is not None
        if self._stop.is_set():
            # Assigned while leaving the group (another worker left first and close() joined the rebalance): nothing
            # will be read, and asking the coordinator for committed offsets from a closing consumer waits out its
            # timeout and raises out of close() (seen: 30 s, then the worker exited 1 on SIGTERM).
            if partitions:
                log.info("link %s: assigned %s while stopping; not reading them", self.name, _tps(partitions))
            return
        try:
            committed = consumer.committed(partitions, timeout=30)
        except KafkaException as exc:  # never out of a rebalance callback: the positions start unknown instead
            log.warning(
                "link %s: reading the committed offsets of %s failed (%s); their positions are known from the first "
                "record read",
                self.name,
                _tps(partitions),
                error_text(exc),
            )
            committed = [TopicPartition(tp.topic, tp.partition) for tp in partitions]  # offset -1001: unknown
        else:
            # Where each partition starts, said explicitly: its commit, or (none) where the link begins. The consumer
            # resets nothing by itself (auto.offset.reset=error): a commit the source no longer has is a gap the
            # worker decides on (`_out_of_range`), never a silent move.
            begin = OFFSET_BEGINNING if self.link.start_from == "earliest" else OFFSET_END
            now = self._topic_ids_now({tp.topic for tp in committed})
            committed = self._generations.assigned(committed, now, self._recreated, self._target_ends)
            committed = [self._lost_target_start(tp) for tp in committed]
            starts = [_start(tp, begin) for tp in committed]
            if self._cooperative:
                consumer.incremental_assign(starts)
            else:
                consumer.assign(starts)
            held = set(self._hold.assigned((tp.topic, tp.partition) for tp in starts))  # paused by the operator
            stopped = [
                tp
                for tp in starts
                if (key := (tp.topic, tp.partition)) in self._stopped or key in self._awaiting_target or key in held
            ]
            if stopped:
                consumer.pause(stopped)
        for tp in committed:
            start = tp.offset if tp.offset >= 0 else None
            self._progress[(tp.topic, tp.partition)] = PartitionProgress(start_offset=start, committed=start)
            self._router.forget((tp.topic, tp.partition))
            target_partitions = self._keeper.target_partitions.get(self._keeper.topic_map.get(tp.topic, ""), 0)
            if self.link.partitioning == "preserve" and tp.partition >= target_partitions:
                self._request_refresh()  # a new source partition: the target must grow first
        self._write_notes([(tp.topic, tp.partition) for tp in committed])
        log.info("link %s: assigned %s", self.name, _tps(partitions))
        self._topics_readable({tp.topic for tp in partitions})

    def _stop_alone(self, key: tuple[str, int], reason: str) -> None:
        """A partition with a record that cannot be mirrored (the target refused it, or it cannot be read) stops alone
        with its reason while the others go on (its status says failed; the monitor and the alerts say so). The record
        stays in flight, so nothing past it is committed; a restart, or its next owner, tries it again. From the
        loop's thread (delivery reports are served there)."""
        if key in self._stopped:
            return
        self._stopped[key] = f"link {self.name}: {reason}"
        log.error("%s", self._stopped[key])
        if self._consumer is not None:
            with contextlib.suppress(KafkaException):  # revoked meanwhile: its next owner finds the record again
                self._consumer.pause([TopicPartition(*key)])
        if self._delivery is not None:
            self._delivery.forget({key})  # what it had read after the record is read again with it

    def _held_alone(self, key: tuple[str, int]) -> bool:
        """Whether the partition stays paused whatever back-pressure does: stopped alone, waiting for its target
        topic, or paused by the operator."""
        return key in self._stopped or key in self._awaiting_target or self._hold.holds(key)

    def _held_otherwise(self, key: tuple[str, int]) -> bool:
        """Whether the partition stays paused when the operator resumes it: back-pressure holds every partition, or
        it is stopped alone or waiting for its target topic."""
        return self._paused or key in self._stopped or key in self._awaiting_target

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Before another worker takes these partitions: get what we sent acknowledged, commit it, forget them."""
        assert self._delivery is not None
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self._delivery.forget(revoked)  # records not yet handed to the producer are read again by the next owner
        if self._producer is not None:
            self._delivery.flush(SHUTDOWN_FLUSH_S)
        code = self._commit(keys=revoked, asynchronous=False)
        if code is not None:
            said = f"the commit of {_tps(partitions)} was refused ({KafkaError(code).name()})"
            log.warning("link %s: %s; their next owner mirrors again what followed the last commit", self.name, said)
        self._write_notes(sorted(revoked))
        for key in revoked:
            self._forget_progress(key)
        log.info("link %s: revoked %s", self.name, _tps(partitions))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions taken away without a chance to commit (session timeout): the next owner re-reads them."""
        assert self._delivery is not None
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self._delivery.forget(lost)
        for key in lost:
            self._forget_progress(key)
        log.warning(
            "link %s: lost %s (records after the last commit will be mirrored again)", self.name, _tps(partitions)
        )

    def _forget_progress(self, key: tuple[str, int]) -> None:
        """A partition is no longer ours. Its progress is kept aside: what it had acknowledged, and what the
        producer still acknowledges for it, stays on the target, and the status says so (`_partition_positions`)
        when the partition comes back and is read again from the committed offset, below it."""
        assert self._router is not None
        progress = self._progress.pop(key, None)
        if progress is not None:
            self._earlier_progress[key] = progress
        self._expiry_ends(key)
        self._stopped.pop(key, None)  # its next owner finds the gap again (the ledger counts it once)
        self._awaiting_target.discard(key)
        self._hold.forget(key)
        self._generations.forget(key)
        self._router.forget(key)

    # -- the loop ---------------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self._consumer is not None and self._delivery is not None
        consumer, delivery, clock = self._consumer, self._delivery, self._clock
        window = FlowWindow(int(PRODUCER_DEFAULTS["queue.buffering.max.kbytes"]) * 1024)
        commit_every_s = self.link.offset_commit_interval_ms / 1000
        now = clock.monotonic_s()
        next_commit, next_progress, next_high, noted = now + commit_every_s, now + PROGRESS_EVERY_S, now, now
        last_progress = (0, now)  # records mirrored, and when, at the last progress line
        full_since: float | None = None  # when the producer last became full
        while not self._stop.is_set() and self._failure is None:
            if delivery.sparse_failure is not None and delivery.sparse:
                self._replay_exactly()
            if delivery.refresh_wanted:
                delivery.refresh_wanted = False
                self._request_refresh()
            self._take_survey()
            self._hold.apply(consumer, self._progress, self._held_otherwise)  # `mirrorwatch link pause|resume`
            delivery.drain()
            room = self._window_room(window)  # a window's worth on its way is full too (mirror.flow)
            if delivery.outbox or room <= 0:
                full_since = self._back_pressure(full_since)
            else:
                full_since = None
                if self._reading_since_ms is None:
                    self._reading_since_ms = clock.now_ms()
                if self._paused:  # all but the partitions stopped alone, waiting for their target, or paused
                    held = self._held_alone
                    consumer.resume([tp for tp in consumer.assignment() if not held((tp.topic, tp.partition))])
                    self._paused = False
                # What librdkafka already fetched, without waiting (consume() with a timeout waits for a full batch:
                # at a low rate, every record the whole timeout); nothing there: wait for the first record only.
                messages = consumer.consume(num_messages=min(2000, room), timeout=0)
                delivery.handle(messages or consumer.consume(num_messages=1, timeout=0.1))
                delivery.serve_reports(0)
            now = clock.monotonic_s()
            if now >= next_commit:
                self._commit()
                next_commit = now + commit_every_s
            if now >= next_progress:
                last_progress = self._log_progress(now, *last_progress)
                next_progress = now + PROGRESS_EVERY_S
            if now >= next_high or (self._status_due.is_set() and now - noted >= STATUS_REST_S):
                self._note_high_watermarks()  # also for a status asked at once: it states what a drain reached
                noted = now
                if now >= next_high:
                    self._check_expiry()
                    next_high = now + STATUS_EVERY_S

    def _back_pressure(self, full_since: float | None) -> float:
        """The producer is full (or its window, or the budget): read nothing more until it takes records again;
        pause the source (and keep the group alive) only when it stays full (PAUSE_AFTER_FULL_S). Returns since when
        it is full."""
        assert self._consumer is not None and self._delivery is not None
        consumer, delivery = self._consumer, self._delivery
        now = self._clock.monotonic_s()
        if full_since is None:
            full_since = now
        if now - full_since >= HOLD_STOPS_FETCHING_S:
            self._reading_since_ms = None
        if not self._paused and now - full_since >= PAUSE_AFTER_FULL_S:
            consumer.pause(consumer.assignment())
            self._paused = True
        delivery.serve_reports(0.05)
        if self._paused:
            delivery.handle(consumer.consume(num_messages=500, timeout=0))
        return full_since

    def _fetching_since_ms(self) -> int | None:
        """Since when the loop reads (None: back-pressure holds it, and librdkafka stops fetching once its queue is
        full, or the consumer is paused): a silence of the source before then says nothing (`mirror.highs`)."""
        return self._reading_since_ms

    def _log_progress(self, now: float, last_records: int, last_at: float) -> tuple[int, float]:
        rate = (self.stats.records_out_total - last_records) / max(now - last_at, 1e-9)
        in_flight = sum(p.in_flight_records for p in self._progress.values())
        log.info(
            "link %s: %d records mirrored (%.0f/s), %d in flight, %d partition(s)%s",
            self.name,
            self.stats.records_out_total,
            rate,
            in_flight,
            len(self._progress),
            " [paused: target not keeping up]" if self._paused else "",
        )
        return self.stats.records_out_total, now

    def _replay_exactly(self) -> None:
        """After a delivery error in sparse mode: let the old producer finish, go back to what the target acknowledged
        and mirror on with a report per record, so that the refused record is named (and dead-lettered or stops the
        link) exactly as without sparse reports."""
        assert self._delivery is not None
        failure = self._delivery.sparse_failure
        log.warning(
            "link %s: the target refused a record among %s; going back to the last acknowledged offsets to find it "
            "(delivery reports per record from now on; records after those offsets may be written twice)",
            self.name,
            failure,
        )
        self._back_to_acked(set(), f"after the target refused a record among {failure}")

    def _back_to_acked(self, skip: set[tuple[str, int]], why: str) -> None:
        """Give up on what the producer holds and read every partition but `skip` again from the offsets the target
        acknowledged (a request already sent may be written twice, never lost), with a new producer."""
        assert self._consumer is not None and self._delivery is not None and self._router is not None
        self._delivery.drop_producer()
        seeks = []
        for key, p in self._progress.items():
            if key in skip:
                continue
            acked = p.acked
            self._progress[key] = PartitionProgress(start_offset=acked, committed=p.committed)
            if acked is not None:
                seeks.append(TopicPartition(key[0], key[1], acked))
        self._router.clear()
        self._commit(asynchronous=False)
        try:
            for tp in seeks:
                self._consumer.seek(tp)
        except KafkaException as exc:
            self._fail(
                f"could not go back to the acknowledged offsets ({error_text(exc)}) {why}; nothing past them was "
                "committed, start the link again"
            )
            return
        self._producer = self._new_producer()

    # -- commits ----------------------------------------------------------------------------------------------------

    def _commit(self, keys: set[tuple[str, int]] | None = None, *, asynchronous: bool = True) -> int | None:
        """Commit what the target acknowledged (of `keys`, else of every partition); a synchronous commit refused
        returns the refusal's error code (one in REJOIN_FIRST not said here: the caller knows what comes next)."""
        offsets = acked_offsets(self._progress, keys)
        if self._consumer is None or not offsets:
            return None
        try:
            offsets = with_leader_epochs(self._consumer, offsets)
            if asynchronous:
                self._consumer.commit(offsets=offsets, asynchronous=True)  # marked in _on_commit
            else:
                self._mark_committed(self._consumer.commit(offsets=offsets, asynchronous=False))
        except KafkaException as exc:
            code = refused(exc)
            if asynchronous or code not in REJOIN_FIRST:
                said = error_text(exc)
                log.warning("link %s: commit failed (%s); it is retried at the next interval", self.name, said)
            return None if asynchronous else code
        return None

    # -- shutdown ---------------------------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        consumer, delivery = self._consumer, self._delivery
        if consumer is None or delivery is None or delivery.producer is None:
            return
        try:
            assignment = consumer.assignment()
            if assignment:
                consumer.pause(assignment)  # stop fetching
            delivery.clear()  # not handed to the producer: read again after restart
            remaining = delivery.flush(SHUTDOWN_FLUSH_S)
            if delivery.sparse_failure is not None and delivery.sparse:
                log.warning(
                    "link %s: stopped before finding which record the target refused among %s; nothing past the "
                    "acknowledged offsets is committed, and the record is named when the link runs again",
                    self.name,
                    delivery.sparse_failure,
                )
            if remaining:
                log.warning(
                    "link %s: %d record(s) not acknowledged within %gs; they will be mirrored again after restart",
                    self.name,
                    remaining,
                    SHUTDOWN_FLUSH_S,
                )
            commit_before_leaving(consumer, lambda: self._commit(asynchronous=False), self._clock, self.name)
        finally:
            consumer.close()  # leaves the group; on_revoke commits again (nothing new by now)
            delivery.flush(1)
        log.info("link %s: stopped after mirroring %d records", self.name, self.stats.records_out_total)


def owned_positions(
    progress: Mapping[tuple[str, int], PartitionProgress],
    earlier_progress: Mapping[tuple[str, int], PartitionProgress],
    seen_high: Mapping[tuple[str, int], int],
    stopped: Mapping[tuple[str, int], str],
    target_topic: Callable[[str], str],
) -> tuple[PartitionPosition, ...]:
    """The status's positions of the partitions a worker owns."""
    positions = []
    for (topic, partition), p in sorted(progress.items()):
        acked = p.acked
        earlier = earlier_progress.get((topic, partition))
        if earlier is not None and earlier.acked is not None and (acked is None or earlier.acked > acked):
            acked = earlier.acked  # durable on the target before the partition was lost and assigned again
        positions.append(
            PartitionPosition(
                topic=topic,
                partition=partition,
                target_topic=target_topic(topic),
                consumed=p.consumed,
                acked=acked,
                committed=p.committed,
                in_flight_records=p.in_flight_records,
                high_watermark=seen_high.get((topic, partition)),
                last_record_timestamp_ms=p.last_timestamp_ms,
                failed=stopped.get((topic, partition)),
            )
        )
    return tuple(positions)


def released_positions(
    progress: Mapping[tuple[str, int], PartitionProgress],
    earlier_progress: Mapping[tuple[str, int], PartitionProgress],
    target_topic: Callable[[str], str],
) -> tuple[PartitionPosition, ...]:
    """The status's positions of partitions a worker no longer owns, with what it had acknowledged of them."""
    return tuple(
        PartitionPosition(
            topic=topic,
            partition=partition,
            target_topic=target_topic(topic),
            consumed=None,
            acked=p.acked,
            committed=p.committed,
        )
        for (topic, partition), p in sorted(earlier_progress.items())
        if p.acked is not None and (topic, partition) not in progress
    )


def _start(committed: TopicPartition, begin: int) -> TopicPartition:
    """Where an assigned partition starts: its commit with the commit's leader epoch (by which librdkafka checks the
    position against the source log when the partition's leader changes, KIP-320), or `begin`."""
    if committed.offset < 0:
        return TopicPartition(committed.topic, committed.partition, begin)
    if committed.leader_epoch is None or committed.leader_epoch < 0:
        return TopicPartition(committed.topic, committed.partition, committed.offset)
    return TopicPartition(committed.topic, committed.partition, committed.offset, leader_epoch=committed.leader_epoch)


def _tps(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"
