"""What the link knows of its source topics' identities (`<state_dir>/topics/<link>.jsonl`, one JSON line per
partition note): the topic id (KIP-516) each partition's records were copied from, and, at the worker's last
revocation or stop, what the target had acknowledged and the high-watermark it saw. Kafka forgets a group's offsets
of a deleted topic, so a topic deleted and created again under its name looks to a consumer like a new topic: this
ledger is what tells the link the difference (`mirror.gaps.recreated`). Append-only, newest line per partition wins,
shared by the link's workers on this host; compacted when it grows."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from mirror.progress import PartitionProgress

__all__ = ["Generations", "PartitionNote", "TopicLedger"]

log = logging.getLogger("mirrorwatch.mirror")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
COMPACT_AFTER = 10_000  # lines; then rewritten with the newest note per partition


@dataclass(frozen=True)
class PartitionNote:
    topic: str
    partition: int
    topic_id: str
    acked: int | None = None  # the target had every record below it
    high: int | None = None  # the source high-watermark the worker last saw
    target_id: str = ""  # the id of the target topic the records were copied into ("": not noted)


class TopicLedger:
    def __init__(self, directory: Path, link: str) -> None:
        self.path = directory / f"{_UNSAFE.sub('_', link)}.jsonl"
        self._notes: dict[tuple[str, int], PartitionNote] = {}
        self._lines = 0

    def read(self) -> None:
        """The notes as written by this link's workers on this host until now."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("cannot read the link's topic ledger %s: %s", self.path, exc)
            return
        self._lines = len(lines)
        for line in lines:
            try:
                note = PartitionNote(**json.loads(line))
            except (ValueError, TypeError):
                continue  # a line cut short by a crash
            self._notes[(note.topic, note.partition)] = note

    def note(self, topic: str, partition: int) -> PartitionNote | None:
        return self._notes.get((topic, partition))

    def notes(self) -> list[PartitionNote]:
        return list(self._notes.values())

    def write(self, notes: list[PartitionNote]) -> None:
        """Note these partitions (unchanged notes are not written again)."""
        fresh = [n for n in notes if self._notes.get((n.topic, n.partition)) != n]
        if not fresh:
            return
        for n in fresh:
            self._notes[(n.topic, n.partition)] = n
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._lines + len(fresh) > COMPACT_AFTER:
                tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text("".join(_line(n) for n in self._notes.values()), encoding="utf-8")
                tmp.replace(self.path)
                self._lines = len(self._notes)
                return
            with self.path.open("a", encoding="utf-8") as out:
                out.write("".join(_line(n) for n in fresh))
            self._lines += len(fresh)
        except OSError as exc:
            log.warning("cannot write the link's topic ledger %s: %s", self.path, exc)


def _line(note: PartitionNote) -> str:
    return json.dumps(asdict(note), separators=(",", ":")) + "\n"


class Generations:
    """The topic id each partition a worker owns was read under, checked against the ids the source has now and the
    notes this host's workers left (`TopicLedger`)."""

    def __init__(self, ledger: TopicLedger) -> None:
        self.ledger = ledger
        self.of: dict[tuple[str, int], str] = {}
        self.target_of: dict[tuple[str, int], str] = {}  # the target topic id each partition's records went to
        self._restarted: set[tuple[str, int]] = set()  # restarted on a new topic, nothing read since

    def restart(self, key: tuple[str, int], topic_id: str) -> None:
        """The partition reads the new topic (`topic_id`) from its beginning from now on."""
        self.of[key] = topic_id
        self._restarted.add(key)

    def restarting(self, key: tuple[str, int], progress: PartitionProgress | None) -> bool:
        """Whether the partition restarted on a new topic and has read nothing since: a refusal of its position
        reported now was of the old topic's, queued before the restart."""
        if progress is not None and progress.consumed is not None:
            self._restarted.discard(key)
        return key in self._restarted

    def forget(self, key: tuple[str, int]) -> None:
        self.of.pop(key, None)
        self.target_of.pop(key, None)
        self._restarted.discard(key)

    def assigned(
        self,
        committed: list[TopicPartition],
        now: Mapping[str, str],
        recreated: Callable[[str, int, int | None, int | None], str],
    ) -> list[TopicPartition]:
        """Where each assigned partition starts: at its commit, unless its note names another topic id than the
        topic has now (deleted and created again, Kafka dropping its commits with it): `recreated` (the worker's rule)
        then says "restart" (from the new topic's beginning) or stops it (it stays the old topic's)."""
        self.ledger.read()  # as this host's workers left it (another may have owned the partition)
        out = []
        for tp in committed:
            key, note, current = (tp.topic, tp.partition), self.ledger.note(tp.topic, tp.partition), now.get(tp.topic)
            self.of[key] = current or (note.topic_id if note else "")
            if note is not None and note.target_id:
                self.target_of[key] = note.target_id
            entry = tp
            if note is not None and note.topic_id and current and note.topic_id != current:
                if recreated(tp.topic, tp.partition, note.acked, note.high) == "restart":
                    entry = TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING)
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
        progress: Mapping[tuple[str, int], PartitionProgress],
        seen_high: Mapping[tuple[str, int], int],
        stopped: Container[tuple[str, int]],
        target_ids: Mapping[str, str] | None = None,
    ) -> None:
        """Note these partitions: their topic id, what the target acknowledged, the high-watermark seen, and the id of
        the target topic they were copied into (`target_ids`, by source topic, for a partition that has none yet).
        A stopped partition's note stays as the old topic left it."""
        notes = []
        for key in keys:
            generation, p = self.of.get(key), progress.get(key)
            if generation and key not in stopped:
                acked = None if p is None else (p.acked if p.acked is not None else p.committed)
                # the id the partition's records went to: noted once, changed only when it is copied again
                target = self.target_of.get(key) or (target_ids or {}).get(key[0], "")
                if target:
                    self.target_of[key] = target
                notes.append(PartitionNote(key[0], key[1], generation, acked, seen_high.get(key), target))
        self.ledger.write(notes)
