"""The partitions an exactly-once worker owns (`mirror.transactional`): a fixed share of the source partitions
(`owner_of`: a stable hash, not a consumer-group rebalance, so no partition can move to another worker in the
middle of a transaction), where each starts (the offset stored on the target, unless the source topic was deleted
and created again since: `mirror.generation_worker`), what each has stored, read and seen, as the worker's status
states it, and what happens to one whose target topic was lost under the link (`on_target_loss`)."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

from kernel.worker_status import PartitionPosition
from mirror.generation_worker import GenerationWorker, lost_target
from mirror.topic_keeper import Survey
from mirror.topics import TopicPlan
from mirror.worker import STATUS_EVERY_S, log, read_from

__all__ = ["OwnedPartitionsWorker", "owner_of"]

NOTES_EVERY_S = 5.0  # the owned partitions' notes on this host (`mirror.topic_ledger`)


def owner_of(topic: str, partition: int, workers: int) -> int:
    """The worker (0..workers-1) that owns a source partition; the same answer on every worker, every time."""
    return zlib.crc32(f"{topic}:{partition}".encode()) % workers


class OwnedPartitionsWorker(GenerationWorker):
    """The exactly-once worker's partitions (its transactions are `mirror.transactional.TransactionalLinkWorker`'s)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stored: dict[tuple[str, int], int] = {}  # committed in the target: the truth
        self._position: dict[tuple[str, int], int] = {}  # next offset to read, this transaction included
        self._assigned: set[tuple[str, int]] = set()
        self._next_high = 0.0
        # per owned partition, for `mirror.expiry`: the first offset this ownership read, the newest record's time
        self._began: dict[tuple[str, int], int] = {}
        self._newest_ms: dict[tuple[str, int], int] = {}
        # Partitions restarted on a source topic deleted and created again, or copied again into a target topic lost
        # under the link: where they read from now goes into the next transaction's offsets, and only once it
        # committed do the notes name the new topic (a crash before then finds the old one noted and decides again,
        # never the old position read on the new topic)
        self._reset_at: dict[tuple[str, int], int] = {}
        self._awaiting_target: set[tuple[str, int]] = set()  # copied again: paused until its target topic exists
        self._next_notes = 0.0

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
                self._reset_at.pop(key, None)
                self._awaiting_target.discard(key)
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
            self._lost_targets_owned()
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
                self._stored[key] = self._reset_at[key] = 0
            starts.append(TopicPartition(tp.topic, tp.partition, 0) if key in restarted else tp)
        return starts

    def _acked_positions(self) -> dict[tuple[str, int], int | None]:
        return {key: self._stored.get(key) for key in self._assigned}

    def _consumed(self, key: tuple[str, int]) -> int | None:
        return self._position.get(key)

    def _write_notes(self, keys: list[tuple[str, int]]) -> None:
        super()._write_notes([key for key in keys if key not in self._reset_at])

    def _held_alone(self, key: tuple[str, int]) -> bool:
        """Whether the partition stays paused when the operator resumes it: stopped, or waiting for its target topic."""
        return key in self._stopped or key in self._awaiting_target

    def _lost_targets_owned(self) -> None:
        """Owned partitions whose target topic was lost under the link (`lost_target`), found between two
        transactions: stopped (the topic is not created again), or read again from the source's log start into the
        topic created anew (its first transaction stores that start). Between transactions the producer holds
        nothing, and a transaction that wrote to the deleted topic was aborted and is replayed, so no record for
        the old topic can land in the new one ahead of the copy."""
        assert self._keeper is not None and self._consumer is not None and self._router is not None
        keeper = self._keeper
        for key in sorted(self._assigned):
            if not lost_target(key, keeper, self._generations.target_of, self._stopped):
                continue
            decision = self._target_lost(
                key, self._stored.get(key), keeper.lost_how.get(keeper.target_topic(key[0]), "recreated")
            )
            if decision is None:
                continue  # the source's log start not read: asked again at the next refresh
            if decision.action == "stop":
                self._consumer.pause([TopicPartition(*key)])
                continue
            first = decision.gap.first_offset
            for kept in (self._position, self._began, self._newest_ms):
                kept.pop(key, None)
            self._stored[key] = self._reset_at[key] = first
            self._router.forget(key)
            read_from(self._consumer, TopicPartition(*key, first))
            target = keeper.target_topic(key[0])
            if keeper.target_partitions.get(target):  # someone else created it again: into it as it is now
                self._generations.target_of[key] = keeper.target_ids.get(target, "")
                continue
            self._generations.target_of[key] = ""  # the topic created anew: its id noted with the next notes
            self._awaiting_target.add(key)  # paused until it exists: a producer would have the broker auto-create it
            self._consumer.pause([TopicPartition(*key)])
        self._release_deleted()
        ready = [k for k in self._awaiting_target if keeper.target_partitions.get(keeper.target_topic(k[0]))]
        self._awaiting_target.difference_update(ready)
        if resumed := [TopicPartition(*k) for k in sorted(ready) if k in self._assigned and not self._hold.holds(k)]:
            self._consumer.resume(resumed)

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

    def _newest_read_ms(self) -> dict[tuple[str, int], int | None]:
        return {key: self._newest_ms.get(key) for key in list(self._assigned)}

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

    def _owned(self) -> int:
        return len(self._assigned)
