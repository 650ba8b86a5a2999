"""What an at-least-once link worker knows of its target topics' identities (KIP-516 topic ids), and what it does
when one changes under it: a target topic deleted, or deleted and created again by someone else
(`mirror.gaps.target_lost`, `on_target_loss`); and how it lets go of a source topic's generation when that topic was
deleted and created again (`mirror.generation_worker`, `on_recreate`). The ids each partition was read under and
written to are noted on this host (`mirror.topic_ledger`): Kafka forgets a deleted topic's offsets, and a target
topic created again looks like any new one."""

from __future__ import annotations

from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from mirror.delivery import Delivery
from mirror.generation_worker import GenerationWorker, lost_target
from mirror.progress import PartitionProgress
from mirror.worker import SHUTDOWN_FLUSH_S, read_from

__all__ = ["IdentityWorker"]


class IdentityWorker(GenerationWorker):
    """The topic-identity half of `mirror.engine.LinkWorker` (its loop, rebalances and commits are there)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._delivery: Delivery | None = None
        # Partitions copied again into a target topic deleted under the link, paused until the keeper has created it
        # anew (`_lost_targets_owned`): nothing of theirs may reach the new topic before its first record
        self._awaiting_target: set[tuple[str, int]] = set()

    def _commit(self, keys: set[tuple[str, int]] | None = None, *, asynchronous: bool = True) -> int | None:
        raise NotImplementedError  # `mirror.engine.LinkWorker`

    def _back_to_acked(self, skip: set[tuple[str, int]], why: str) -> None:
        """Drop what the producer holds, read every partition but `skip` again from its acknowledged offset
        (`mirror.engine.LinkWorker`)."""
        raise NotImplementedError

    def _acked_positions(self) -> dict[tuple[str, int], int | None]:
        return {k: p.acked if p.acked is not None else p.committed for k, p in self._progress.items()}

    def _consumed(self, key: tuple[str, int]) -> int | None:
        progress = self._progress.get(key)
        return progress.consumed if progress is not None else None

    def _drop_generation(self, key: tuple[str, int]) -> int:
        assert self._delivery is not None
        self._delivery.forget({key})
        if self._producer is not None:
            self._delivery.flush(SHUTDOWN_FLUSH_S)  # the old topic's records in flight land before the restart
        self._progress[key] = PartitionProgress()
        return OFFSET_BEGINNING

    def _lost_target_start(self, tp: TopicPartition) -> TopicPartition:
        """Where an assigned partition whose target topic was lost under the link starts (`_target_lost`): at its
        commit, stopped; or, copied again, at the source's log start (paused while its topic is being created)."""
        assert self._keeper is not None
        key = (tp.topic, tp.partition)
        if not lost_target(key, self._keeper, self._generations.target_of, self._stopped):
            return tp
        decision = self._target_lost(
            key,
            tp.offset if tp.offset >= 0 else None,
            self._keeper.lost_how.get(self._keeper.target_topic(tp.topic), "recreated"),
        )
        if decision is None or decision.action == "stop":
            return tp  # stopped: paused once assigned
        self._copy_again([key], pause=False)  # not assigned yet: paused once assigned
        return TopicPartition(tp.topic, tp.partition, decision.gap.first_offset)

    def _lost_targets_owned(self) -> None:
        """Owned partitions whose target topic was lost since the last refresh: stopped, or read again from the
        source's log start into the topic created anew. What the producer still holds for the old topic would land
        in the new one ahead of the copy (librdkafka retries a record to a deleted topic until it exists again), so
        the producer drops everything it holds and the other partitions read again from their acknowledged offsets."""
        assert self._keeper is not None and self._consumer is not None and self._delivery is not None
        recopied: list[tuple[tuple[str, int], int]] = []
        for key in [
            k for k in self._progress if lost_target(k, self._keeper, self._generations.target_of, self._stopped)
        ]:
            progress = self._progress[key]
            position = progress.acked if progress.acked is not None else progress.committed
            decision = self._target_lost(
                key, position, self._keeper.lost_how.get(self._keeper.target_topic(key[0]), "recreated")
            )
            if decision is None:
                continue
            progress.abandoned = True
            self._delivery.forget({key})
            if decision.action == "stop":
                self._consumer.pause([TopicPartition(*key)])
                continue
            recopied.append((key, decision.gap.first_offset))
        if recopied:
            self._recopy(recopied)
        self._release_deleted()  # deleted topics none of these wrote to

    def _recopy(self, recopied: list[tuple[tuple[str, int], int]]) -> None:
        assert self._consumer is not None and self._router is not None
        keys = {k for k, _ in recopied}
        for key, first in recopied:  # committed where the copy starts again: a crash now cannot skip it
            self._progress[key] = PartitionProgress(start_offset=first)
            self._router.forget(key)
        if self._producer is not None and len(self._producer):
            self._back_to_acked(keys, "after a target topic was deleted under the link")
        self._commit(keys, asynchronous=False)
        for key, first in recopied:
            read_from(self._consumer, TopicPartition(*key, first))
        self._copy_again(sorted(keys))  # releases the deleted topics these wrote to: before the notes take an id
        self._write_notes(sorted(keys))

    def _copy_again(self, keys: list[tuple[str, int]], *, pause: bool = True) -> None:
        """These partitions are copied again from the source's log start: into the target topic as it is now when
        someone else created it again, or, when it is gone, paused until the keeper (told that nothing of the old
        topic is left in the producer) has created it anew (`_target_created`)."""
        assert self._keeper is not None and self._consumer is not None
        for key in keys:
            target = self._keeper.target_topic(key[0])
            if self._keeper.target_partitions.get(target, 0) > 0:
                self._generations.target_of[key] = self._keeper.target_ids.get(target, "")
                continue
            self._generations.target_of[key] = ""  # the id of the topic created anew, noted at its first write
            self._awaiting_target.add(key)
            self._keeper.release(target)  # after the producer let go of it: before the notes take an id
        waiting = [TopicPartition(*key) for key in keys if key in self._awaiting_target]
        if pause and waiting:
            self._consumer.pause(waiting)

    def _note_target_ids(self) -> None:
        """Owned partitions whose target topic's id the keeper learnt only now (asked right after its creation, a
        topic may not be described yet): noted at once, so that a restart knows which topic they wrote to even if
        that one is deleted before their next note (a stopped partition's note is never written again)."""
        assert self._keeper is not None
        keys = [
            k
            for k in self._progress
            if k not in self._stopped
            and not self._generations.target_of.get(k)
            and self._keeper.target_ids.get(self._keeper.target_topic(k[0]))
        ]
        if keys:
            self._write_notes(keys)

    def _target_created(self) -> None:
        """Partitions waiting for their target topic (`_copy_again`) go on once the keeper has created it."""
        assert self._keeper is not None and self._consumer is not None
        ready = [
            k for k in self._awaiting_target if self._keeper.target_partitions.get(self._keeper.target_topic(k[0]), 0)
        ]
        if not ready:
            return
        self._awaiting_target.difference_update(ready)
        resumed = [TopicPartition(*key) for key in ready if not self._hold.holds(key)]  # paused: the operator's
        if resumed and not self._paused:  # paused for back-pressure: resumed with the others
            self._consumer.resume(resumed)
