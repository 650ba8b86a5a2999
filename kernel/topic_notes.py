"""What a link knows of its source topics' identities, kept on the host of its workers
(`<state_dir>/topics/<link>.jsonl`, one JSON line per partition note): the topic id (KIP-516) each partition's
records were copied from; at the worker's last revocation or stop, what the target had acknowledged and the
high-watermark it saw; the id of the target topic; and where on the target a generation begins that the link
restarted after the topic was deleted and created again. Kafka forgets a group's offsets of a deleted topic, so a
topic deleted and created again under its name looks to a consumer like a new topic: these notes tell the link
(`mirror.gaps.recreated`, `mirror.topic_ledger.Generations`) and failover (which copies a group's commit is of) the
difference. Append-only, newest line per partition wins, shared by the link's workers on this host; compacted when
it grows."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

__all__ = ["PartitionNote", "TopicLedger", "topic_ids"]

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
