"""Which generation of its source topics a link worker reads, for both python engines: a topic deleted and created
again under its name has a new topic id (KIP-516), and Kafka forgets the group's offsets of the old one, so to a
consumer it is simply a topic never read. The worker notes the id each owned partition is read under on this host
(`mirror.topic_ledger.Generations`, `<state_dir>/topics/<link>.jsonl`) and compares it with the source's when a
partition is taken, at every topic refresh and when the source refuses a position (`mirror.gaps.recreated`, the
link's `on_recreate`): the partition stops (the default) or restarts at the new topic's beginning, its copies then
beginning on the target where it ended (failover reads past the old generation's copies). And the target topics it
wrote to, watched from the start (`lost_target`: a target topic deleted, or created again by someone else, under the
link; `on_target_loss`)."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import asdict
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kernel.kafka import error_text
from kernel.progress_format import encode_note
from kernel.sharing import PER_BEAT
from mirror.admin import topic_ids
from mirror.gap_worker import GapWorker
from mirror.topic_keeper import TopicKeeper
from mirror.topic_ledger import Generations, TopicLedger
from mirror.worker import log, read_from

__all__ = ["GenerationWorker", "lost_target"]


class GenerationWorker(GapWorker):
    """`GapWorker` with the source topics' generations; the engine says what its partitions acknowledged and how one
    lets go of a generation (`_acked_positions`, `_consumed`, `_drop_generation`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The topic id each owned partition's position belongs to, and the notes of it this link's workers keep on
        # this host (Kafka forgets a deleted topic's offsets)
        notes = TopicLedger(self.config.state_path / "topics", self.link.name, self._clock.now_ms)
        self._generations = Generations(notes)

    # -- the engine's -----------------------------------------------------------------------------------------------

    def _acked_positions(self) -> Mapping[tuple[str, int], int | None]:
        """Per owned partition, the offset below which the target has every record (None: not known)."""
        raise NotImplementedError

    def _consumed(self, key: tuple[str, int]) -> int | None:
        """The next offset the partition reads (None: nothing read since it was taken or restarted)."""
        raise NotImplementedError

    def _drop_generation(self, key: tuple[str, int]) -> int:
        """Let go of what the partition holds of the old generation (nothing of it may follow the restart); returns
        the offset to read the new topic from."""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------------------------------

    def _share_facts(self, limit: int | None = PER_BEAT) -> None:
        """The gaps (`WorkerBase`), and the notes of the link's source topics the same way (`kernel.topic_notes`):
        those the link's workers wrote on other hosts learnt (the target topics they name watched from now on, as
        this host's are from the start), this host's handed over."""
        super()._share_facts(limit)
        ledger = self._generations.ledger
        if self._controls is not None and (learnt := ledger.learn(self._controls.notes(self.link.name))):
            log.info("link %s: %d note(s) of its source topics learnt from the link's workers elsewhere", self.name,
                     len(learnt))  # fmt: skip
            if (keeper := self._keeper) is not None:
                for note in learnt:
                    if note.target_id:
                        keeper.target_ids.setdefault(keeper.target_topic(note.topic), note.target_id)
        self._offer(ledger, ledger.unshared(limit), lambda note: encode_note(self.link.name, asdict(note)))

    def _start(self) -> None:
        """The target topics this host's notes say the link wrote to are watched from before any is created: one
        lost under the link is found (`lost_target`), not created anew as if it were new."""
        assert self._keeper is not None
        self._keeper.watch_targets = True
        self._keeper.target_ids.update(self._generations.noted_targets(self._keeper.target_topic))

    def _topic_ids_now(self, topics: Iterable[str]) -> dict[str, str]:
        assert self._keeper is not None  # asked now: the consumer may learn of a new topic before the refresh does
        return topic_ids(self._keeper.source_admin, topics, timeout_s=10, known=self._keeper.topic_ids)

    def _write_notes(self, keys: list[tuple[str, int]]) -> None:
        assert self._keeper is not None
        targets = {t: self._keeper.target_ids.get(self._keeper.target_topic(t), "") for t, _p in keys}
        self._generations.write(keys, self._acked_positions(), self._highs.noted, self._stopped, targets)

    def _topic_recreated(self, topic: str, partition: int) -> bool:
        """A refused position may be the old topic's (deleted and created again faster than a rebalance or a refresh):
        asked of the source before it is read as a gap; one queued before the partition restarted is passed over."""
        assert self._keeper is not None
        if self._generations.restarting((topic, partition), self._consumed((topic, partition))):
            return True
        now, was = self._topic_ids_now([topic])[topic], self._generations.of.get((topic, partition))
        if not now or not was or now == was:
            return False
        self._keeper.topic_ids[topic] = now
        self._recreated_while_owned()
        return True

    def _recreated_while_owned(self) -> None:
        """A topic this worker reads has a new id (recreated between two refreshes): the rule, from what was acked."""
        assert self._keeper is not None and self._consumer is not None and self._router is not None
        acked = self._acked_positions()
        for key in self._generations.changed(acked, self._keeper.topic_ids, self._stopped):
            if self._recreated(key[0], key[1], acked.get(key), self._highs.noted.get(key)) != "restart":
                self._consumer.pause([TopicPartition(*key)])
                continue
            start = self._drop_generation(key)
            self._generations.restart(key, self._keeper.topic_ids[key[0]], self._target_ends(key[0]))
            self._router.forget(key)
            read_from(self._consumer, TopicPartition(key[0], key[1], start))
            self._write_notes([key])

    def _target_ends(self, topic: str) -> dict[int, int]:
        """Each partition's end now of the target topic of source topic `topic`: where the copies of a generation
        restarted now begin (failover reads past what is below; {} when they cannot be read, said)."""
        assert self._keeper is not None and self._target_admin is not None
        target = self._keeper.target_topic(topic)
        count = self._keeper.target_partitions.get(target, 0)
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        try:
            futures = self._target_admin.list_offsets({TopicPartition(target, p): latest for p in range(count)})
            return {tp.partition: int(f.result(timeout=30).offset) for tp, f in futures.items()}
        except (KafkaException, TimeoutError) as exc:
            why = error_text(exc) if isinstance(exc, KafkaException) else "no answer in 30 s"
            log.warning(
                "link %s: the ends of %r could not be read (%s): a failover plan cannot tell the copies of %r's new "
                "generation from the old one's",
                self.name, target, why, topic,
            )  # fmt: skip
            return {}

    def _release_deleted(self) -> None:
        """Under `recopy`, once the engine has let go of every owned partition of a deleted target topic (nothing of
        it is left in the producer): the keeper may create every deleted one anew."""
        assert self._keeper is not None
        if self.link.on_target_loss == "recopy":
            for target, how in list(self._keeper.lost_targets.items()):
                if how == "deleted":
                    self._keeper.release(target)


def lost_target(
    key: tuple[str, int], keeper: TopicKeeper, target_of: Mapping[tuple[str, int], str], stopped: Container[Any]
) -> bool:
    """Whether a partition's target topic was lost under the link: under `on_target_loss: stop` while the keeper
    finds it lost; under `recopy`, while the partition's records went to a topic now gone, or to another id than the
    target topic has now."""
    if key in stopped:
        return False
    target = keeper.target_topic(key[0])
    if keeper.link.on_target_loss == "stop":
        return target in keeper.lost_targets
    was, now = target_of.get(key), keeper.target_ids.get(target)
    if not was:
        return False  # nothing written yet (or copied again into a topic not created yet)
    if keeper.lost_targets.get(target) == "deleted" and (not now or now == was):
        return True  # gone, with what this partition wrote to it
    return bool(now and was != now)
