"""What a link knows of its source topics' identities, kept on the host of its workers
(`<state_dir>/topics/<link>.jsonl`, one JSON line per partition note): the topic id (KIP-516) each partition's
records were copied from; at the worker's last revocation or stop, what the target had acknowledged and the
high-watermark it saw; the id of the target topic; and where on the target a generation begins that the link
restarted after the topic was deleted and created again. Kafka forgets a group's offsets of a deleted topic, so a
topic deleted and created again under its name looks to a consumer like a new topic: these notes tell the link
(`mirror.gaps.recreated`, `mirror.topic_ledger.Generations`) and failover (which copies a group's commit is of) the
difference. Append-only, the newest note per partition wins (by `noted_ms`, then the later line), shared by the
link's workers on this host; compacted when it grows. Kept in step with the link's progress topic on its target
(`kernel.sharing`): every note written here is offered to it, and the notes the link's workers wrote on other hosts
are learnt from it (`learn`), so that a worker starting on another host, or `failover plan` run anywhere, knows which
generation of a topic the link copied."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from kernel.sharing import PER_BEAT, Sharing

__all__ = ["PartitionNote", "TopicLedger", "created_topic_ids", "topic_ids"]

log = logging.getLogger("mirrorwatch.mirror")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
COMPACT_AFTER = 10_000  # lines; then rewritten with the newest note per partition
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class PartitionNote:
    topic: str
    partition: int
    topic_id: str
    acked: int | None = None  # the target had every record below it
    high: int | None = None  # the source high-watermark the worker last saw
    target_id: str = ""  # the id of the target topic the records were copied into ("": not noted)
    # Where this generation's copies begin on the target, when the link restarted it there after the topic was
    # deleted and created again (`on_recreate: restart`): each target partition's end then, by partition number
    # (JSON keys). The records below are copies of an older generation of the same offsets: failover reads past
    # them (`failover.translate.TargetLog`). {}: the first generation the link copied, or not noted.
    target_from: dict[str, int] = field(default_factory=dict)
    # When it was written (the writer's clock, ms): of two hosts' notes of a partition, the later wins. Not part of
    # what a note says: a note written again unchanged is the same note
    noted_ms: int = field(default=0, compare=False)


class TopicLedger:
    def __init__(self, directory: Path, link: str, now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.path = directory / f"{_UNSAFE.sub('_', link)}.jsonl"
        self._notes: dict[tuple[str, int], PartitionNote] = {}
        self._lines = 0
        self._now_ms = now_ms
        self._sharing: Sharing[tuple[str, int], PartitionNote] = Sharing()  # and the progress topic
        self._lock = threading.RLock()  # a worker's loop writes and reads, its status thread learns

    def read(self) -> None:
        """The notes as written by this link's workers on this host until now."""
        with self._lock:
            self._read()

    def _read(self) -> None:
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
            key = (note.topic, note.partition)
            known = self._notes.get(key)
            if known is None or note.noted_ms >= known.noted_ms:
                self._notes[key] = note
                self._sharing.written(key, note)

    def note(self, topic: str, partition: int) -> PartitionNote | None:
        return self._notes.get((topic, partition))

    def notes(self) -> list[PartitionNote]:
        with self._lock:
            return list(self._notes.values())

    def write(self, notes: list[PartitionNote]) -> None:
        """Note these partitions (unchanged notes are not written again), stamped with the time."""
        now_ms = self._now_ms()
        with self._lock:
            fresh = [replace(n, noted_ms=now_ms) for n in notes if self._notes.get((n.topic, n.partition)) != n]
            self._append(fresh)

    def learn(self, notes: Iterable[PartitionNote]) -> list[PartitionNote]:
        """Notes the link's workers wrote on other hosts (the progress topic): those later than this host's of the
        same partition (or of a partition it has none of) are written down here, and returned. Never offered back."""
        learnt = []
        with self._lock:
            for note in notes:
                key = (note.topic, note.partition)
                self._sharing.learnt(key, note)
                known = self._notes.get(key)
                if known is None or (note.noted_ms > known.noted_ms and note != known):
                    learnt.append(note)
            self._append(learnt)
        return learnt

    def unshared(self, limit: int | None = PER_BEAT) -> list[PartitionNote]:
        """Notes written here that the progress topic does not have as they are, nor is being handed."""
        return self._sharing.unshared(limit)

    def sharing(self, note: PartitionNote) -> None:
        self._sharing.sharing((note.topic, note.partition), note)

    def shared(self, note: PartitionNote, taken: bool) -> None:
        self._sharing.shared((note.topic, note.partition), note, taken)

    def _append(self, fresh: list[PartitionNote]) -> None:
        if not fresh:
            return
        for n in fresh:
            self._notes[(n.topic, n.partition)] = n
            self._sharing.written((n.topic, n.partition), n)
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


def topic_ids(
    admin: AdminClient, topics: Iterable[str], timeout_s: float = TIMEOUT_S, known: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The topic id (KIP-516) of each of `topics` that the cluster describes: a topic deleted and created again under
    its name has a new one. Topics it does not describe (gone meanwhile, refused, the cluster not answering) are left
    out, or, with `known`, have the id known before ("" when none)."""
    names = sorted(set(topics))
    ids: dict[str, str] = {}
    try:
        futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout_s) if names else {}
        for name, future in futures.items():
            try:
                ids[name] = str(future.result(timeout=timeout_s).topic_id)
            except KafkaException:
                continue
    except KafkaException:
        pass
    if known is not None:
        return {t: ids.get(t) or known.get(t, "") for t in names}
    return ids


def created_topic_ids(
    admin: AdminClient, topics: Iterable[str], *, tries: int = 25, every_s: float = 0.2
) -> dict[str, str]:
    """The ids of topics this client has just created. The broker answering may not describe a topic yet that the
    controller has just created (its metadata follows the controller's log a moment later): asked again, 5 s at
    most; one still not described is left out (the keeper's next survey reads it with the others)."""
    wanted, ids = set(topics), dict[str, str]()
    for attempt in range(tries):
        ids.update(topic_ids(admin, wanted - ids.keys()))
        if ids.keys() >= wanted:
            break
        if attempt + 1 < tries:
            time.sleep(every_s)
    return ids
