"""What an at-least-once link worker knows of its topics' identities (KIP-516 topic ids), and what it does when one
changes under it: a source topic deleted and created again (`mirror.gaps.recreated`, the link's `on_recreate`), a
target topic deleted, or deleted and created again by someone else (`mirror.gaps.target_lost`, `on_target_loss`).
The ids each partition was read under and written to are noted on this host (`mirror.topic_ledger`): Kafka forgets
a deleted topic's offsets, and a target topic created again looks like any new one."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from mirror.admin import topic_ids
from mirror.delivery import Delivery
from mirror.progress import PartitionProgress
from mirror.topic_keeper import TopicKeeper
from mirror.topic_ledger import Generations, TopicLedger
from mirror.worker import SHUTDOWN_FLUSH_S, WorkerBase, read_from

__all__ = ["IdentityWorker", "lost_target"]


class IdentityWorker(WorkerBase):
    """The topic-identity half of `mirror.engine.LinkWorker` (its loop, rebalances and commits are there)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seen_high: dict[tuple[str, int], int] = {}  # high-watermarks the consumer saw (`_note_high_watermarks`)
        self._delivery: Delivery | None = None
        # The topic id each owned partition's position belongs to (`mirror.gaps`: a recreated topic has a new one),
        # and the notes of it this link's workers keep on this host (Kafka forgets a deleted topic's offsets)
        self._generations = Generations(TopicLedger(self.config.state_path / "topics", self.link.name))

    def _topic_ids_now(self, topics: Iterable[str]) -> dict[str, str]:
        assert self._keeper is not None  # asked now: the consumer may learn of a new topic before the refresh does
        return topic_ids(self._keeper.source_admin, topics, timeout_s=10, known=self._keeper.topic_ids)

    def _write_notes(self, keys: list[tuple[str, int]]) -> None:
        assert self._keeper is not None
        targets = {t: self._keeper.target_ids.get(self._keeper.target_topic(t), "") for t, _p in keys}
        self._generations.write(keys, self._progress, self._seen_high, self._stopped, targets)

    def _topic_recreated(self, topic: str, partition: int) -> bool:
        """A refused position may be the old topic's (deleted and created again faster than a rebalance or a refresh):
        asked of the source before it is read as a gap; one queued before the partition restarted is passed over."""
        assert self._keeper is not None
        if self._generations.restarting((topic, partition), self._progress.get((topic, partition))):
            return True
        now, was = self._topic_ids_now([topic])[topic], self._generations.of.get((topic, partition))
        if not now or not was or now == was:
            return False
        self._keeper.topic_ids[topic] = now
        self._recreated_while_owned()
        return True

    def _recreated_while_owned(self) -> None:
        """A topic this worker reads has a new id (recreated between two rebalances): the rule, from what was acked."""
        assert self._keeper is not None and self._consumer is not None and self._delivery is not None
        for key in self._generations.changed(self._progress, self._keeper.topic_ids, self._stopped):
            progress = self._progress[key]
            position = progress.acked if progress.acked is not None else progress.committed
            if self._recreated(key[0], key[1], position, self._seen_high.get(key)) != "restart":
                self._consumer.pause([TopicPartition(*key)])
                continue
            self._delivery.forget({key})
            if self._producer is not None:
                self._delivery.flush(SHUTDOWN_FLUSH_S)  # the old topic's records in flight land before the restart
            self._progress[key] = PartitionProgress()
            self._generations.restart(key, self._keeper.topic_ids[key[0]])
            assert self._router is not None
            self._router.forget(key)
            read_from(self._consumer, TopicPartition(key[0], key[1], OFFSET_BEGINNING))
            self._write_notes([key])

    def _lost_target_start(self, tp: TopicPartition) -> TopicPartition:
        """Where an assigned partition whose target topic was lost under the link starts (`_target_lost`): at its
        commit, stopped; or, copied again, at the source's log start."""
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
        self._generations.target_of[key] = self._keeper.target_ids.get(self._keeper.target_topic(tp.topic), "")
        return TopicPartition(tp.topic, tp.partition, decision.gap.first_offset)

    def _lost_targets_owned(self) -> None:
        """Owned partitions whose target topic was lost since the last refresh: stopped, or read again from the
        source's log start into the topic created anew (what was in flight to the old one is abandoned)."""
        assert self._keeper is not None and self._consumer is not None and self._delivery is not None
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
            self._progress[key] = PartitionProgress()
            self._generations.target_of[key] = self._keeper.target_ids.get(self._keeper.target_topic(key[0]), "")
            assert self._router is not None
            self._router.forget(key)
            read_from(self._consumer, TopicPartition(*key, decision.gap.first_offset))
            self._write_notes([key])


def lost_target(
    key: tuple[str, int], keeper: TopicKeeper, target_of: Mapping[tuple[str, int], str], stopped: Container[Any]
) -> bool:
    """Whether a partition's target topic was lost under the link: under `on_target_loss: stop` while the keeper
    finds it lost; under `recopy`, while the partition's records went to another id than the target topic has now."""
    if key in stopped:
        return False
    target = keeper.target_topic(key[0])
    if keeper.link.on_target_loss == "stop":
        return target in keeper.lost_targets
    was, now = target_of.get(key), keeper.target_ids.get(target)
    return bool(was and now and was != now)
