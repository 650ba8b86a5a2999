"""Which generation of a source topic each partition a worker owns reads (`Generations`), from the link's notes on
this host (`kernel.topic_notes`): a topic deleted and created again under its name has a new topic id, and the
link's rule (`on_recreate`) says whether the partition stops or restarts from the new topic's beginning, whose
copies then begin on the target where it ended (`PartitionNote.target_from`, for failover)."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from kernel.topic_notes import PartitionNote, TopicLedger

__all__ = ["Generations", "PartitionNote", "TopicLedger"]


class Generations:
    """The topic id each partition a worker owns was read under, checked against the ids the source has now and the
    notes this host's workers left (`TopicLedger`)."""

    def __init__(self, ledger: TopicLedger) -> None:
        self.ledger = ledger
        self.of: dict[tuple[str, int], str] = {}
        self.target_of: dict[tuple[str, int], str] = {}  # the target topic id each partition's records went to
        # where the copies of each partition's generation begin on the target (PartitionNote.target_from)
        self.target_from: dict[tuple[str, int], dict[str, int]] = {}
        self._restarted: set[tuple[str, int]] = set()  # restarted on a new topic, nothing read since

    def restart(self, key: tuple[str, int], topic_id: str, target_ends: Mapping[int, int]) -> None:
        """The partition reads the new topic (`topic_id`) from its beginning from now on; its copies begin at
        `target_ends` (each target partition's end now: {} when they could not be read)."""
        self.of[key] = topic_id
        self.target_from[key] = {str(p): end for p, end in sorted(target_ends.items())}
        self._restarted.add(key)

    def restarting(self, key: tuple[str, int], consumed: int | None) -> bool:
        """Whether the partition restarted on a new topic and has read nothing since (`consumed`: the next offset it
        reads, None before its first record): a refusal of its position reported now was of the old topic's, queued
        before the restart."""
        if consumed is not None:
            self._restarted.discard(key)
        return key in self._restarted

    def forget(self, key: tuple[str, int]) -> None:
        self.of.pop(key, None)
        self.target_of.pop(key, None)
        self.target_from.pop(key, None)
        self._restarted.discard(key)

    def assigned(
        self,
        committed: list[TopicPartition],
        now: Mapping[str, str],
        recreated: Callable[[str, int, int | None, int | None], str],
        target_ends: Callable[[str], Mapping[int, int]] = lambda _topic: {},
    ) -> list[TopicPartition]:
        """Where each assigned partition starts: at its commit, unless its note names another topic id than the
        topic has now (deleted and created again, Kafka dropping its commits with it): `recreated` (the worker's rule)
        then says "restart" (from the new topic's beginning, its copies after the target's ends now: `target_ends`
        of the source topic) or stops it (it stays the old topic's)."""
        self.ledger.read()  # as this host's workers left it (another may have owned the partition)
        out = []
        for tp in committed:
            key, note, current = (tp.topic, tp.partition), self.ledger.note(tp.topic, tp.partition), now.get(tp.topic)
            self.of[key] = current or (note.topic_id if note else "")
            if note is not None and note.target_id:
                self.target_of[key] = note.target_id
            if note is not None and note.target_from:
                self.target_from[key] = dict(note.target_from)
            entry = tp
            if note is not None and note.topic_id and current and note.topic_id != current:
                if recreated(tp.topic, tp.partition, note.acked, note.high) == "restart":
                    entry = TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING)
                    self.target_from[key] = {str(p): end for p, end in sorted(target_ends(tp.topic).items())}
                else:
                    self.of[key] = note.topic_id  # still the old topic's, until the operator chooses
            out.append(entry)
        return out

    def changed(
        self, keys: Iterable[tuple[str, int]], now: Mapping[str, str], stopped: Container[tuple[str, int]] = ()
    ) -> list[tuple[str, int]]:
        """Of these owned partitions (not stopped), those whose topic has another id now than they were read under."""
        return [
            k for k in keys if k not in stopped and (was := self.of.get(k)) and (is_ := now.get(k[0])) and was != is_
        ]

    def noted_targets(self, target_topic: Callable[[str], str]) -> dict[str, str]:
        """The target topic ids this host's notes name, by target topic (a worker starting learns from them which
        target topics the link wrote to, before it creates any that is missing)."""
        self.ledger.read()
        return {target_topic(n.topic): n.target_id for n in self.ledger.notes() if n.target_id}

    def write(
        self,
        keys: Iterable[tuple[str, int]],
        acked: Mapping[tuple[str, int], int | None],
        seen_high: Mapping[tuple[str, int], int],
        stopped: Container[tuple[str, int]],
        target_ids: Mapping[str, str] | None = None,
    ) -> None:
        """Note these partitions: their topic id, what the target acknowledged, the high-watermark seen, and the id of
        the target topic they were copied into (`target_ids`, by source topic, for a partition that has none yet).
        A stopped partition's note stays as the old topic left it."""
        notes = []
        for key in keys:
            generation = self.of.get(key)
            if generation and key not in stopped:
                # the id the partition's records went to: noted once, changed only when it is copied again
                target = self.target_of.get(key) or (target_ids or {}).get(key[0], "")
                if target:
                    self.target_of[key] = target
                since = self.target_from.get(key, {})
                note = PartitionNote(key[0], key[1], generation, acked.get(key), seen_high.get(key), target, since)
                notes.append(note)
        self.ledger.write(notes)
