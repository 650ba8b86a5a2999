"""`failover failback --diverged read`: the diverged tail delivered to the applications, once each (issue #42).

The records the old source (A) took after the link's last copy (`failover diverged`) lie on A below what the reverse
link appends there, so that by default (`--diverged skip`) no group moved home reads them. With `read`, before the
reverse link is set to start, each of them is copied to the end of its partition's copy on the promoted cluster (B),
where the applications read now, with one header more naming where it was taken:

    mirrorwatch.diverged   <topic>;<partition>;<offset> on the old source, UTF-8

The reverse link then copies these home like any record B took after the promotion, and the groups move back with
the same exact translation: an application reads each record of the tail once (on B, or on A if it moves home before
reaching them), after the records it read on B — out of their first order, since they were taken while the mirror
was down — and A keeps the originals below the groups' positions, unread. Run again, it copies nothing twice: a
record whose copy (the header, the last of that name on a record, on a record with the original's key and value) is
already on B after the promotion point is skipped, so a run cut short resumes. A record an application wrote to B
with a header naming a record of the tail and another key or value is not its copy: a forged or mistaken mark never
makes a record of the tail go undelivered."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import cast

from confluent_kafka import Message

from failover.diverged import CopyWriter, diverged
from failover.promote import TIMEOUT_S
from failover.scan import read_partitions, watermarks
from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.kafka import new_admin
from kernel.link_control import Promotion
from kernel.provenance import Headers
from kernel.rename import rename_policy

__all__ = ["DIVERGED_HEADER", "Delivery", "deliver_tail", "parse_mark"]

DIVERGED_HEADER = "mirrorwatch.diverged"

Origin = tuple[str, int, int]  # topic, partition, offset on the old source


@dataclass(frozen=True)
class Delivery:
    tail: int  # records of the tail on the old source now
    copied: int  # copied to the promoted cluster by this run (a dry run: would be)
    already: int  # copied by an earlier run
    failed: str | None = None  # why not every copy was acknowledged (None: all were)


def parse_mark(value: bytes | None) -> Origin | None:
    """The origin a `mirrorwatch.diverged` header names (None: not one; read from the right, as topic names have no
    `;`)."""
    if value is None:
        return None
    try:
        topic, partition, offset = value.decode().rsplit(";", 2)
        return (topic, int(partition), int(offset)) if topic else None
    except (UnicodeDecodeError, ValueError):
        return None


def _mark_of(msg: Message) -> Origin | None:
    headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
    marks = [v for k, v in headers if k == DIVERGED_HEADER]
    return parse_mark(marks[-1]) if marks else None


def _content(msg: Message) -> bytes:
    """A record's key and value, as one digest (a copy of the tail carries its original's)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (msg.key(), msg.value()):
        digest.update(b"-" if part is None else b"+%d:" % len(part) + part)
    return digest.digest()


def _delivered(config: MirrorwatchConfig, link: LinkConfig, promotion: Promotion) -> dict[Origin, set[bytes]]:
    """What an earlier run copied: the marks on the promoted cluster after the promotion point, each with the
    content of the record that carries it (`_content`)."""
    recorded = {(t, p): o for t, p, o in promotion.target_offsets}
    admin = new_admin(config.clusters[link.target], link.target)
    listing = admin.list_topics(timeout=TIMEOUT_S).topics
    # every partition of the copies; one the promotion did not record was added since: all of it came after
    keys = [(t, p) for t in sorted({t for t, _ in recorded} & set(listing)) for p in sorted(listing[t].partitions)]
    starts = {k: recorded.get(k, 0) for k in keys}
    ends = watermarks(admin, keys)
    found: dict[Origin, set[bytes]] = {}

    def seen(_key: tuple[str, int], _offset: int, msg: Message) -> None:
        if (origin := _mark_of(msg)) is not None:
            found.setdefault(origin, set()).add(_content(msg))

    read_partitions(
        config.clusters[link.target], link.target, ends, starts, on_record=seen, on_done=lambda _k: None, progress=None
    )
    return found


class _Copies:
    """Each record of the tail at the end of its partition's copy on the promoted cluster, in offset order."""

    def __init__(
        self, config: MirrorwatchConfig, link: LinkConfig, delivered: dict[Origin, set[bytes]], dry_run: bool
    ) -> None:
        self._rename = rename_policy(link.rename, link.source).target_topic
        self._delivered = delivered
        self._writer = None if dry_run else CopyWriter(config.clusters[link.target], link.target)
        self.tail = self.copied = self.already = 0

    def __call__(self, msg: Message) -> None:
        origin = (msg.topic() or "", msg.partition() or 0, msg.offset() or 0)
        self.tail += 1
        if _content(msg) in self._delivered.get(origin, ()):
            self.already += 1
            return
        self.copied += 1
        if self._writer is not None:
            mark = (DIVERGED_HEADER, f"{origin[0]};{origin[1]};{origin[2]}".encode())
            headers: Headers = [*cast(Headers, msg.headers() or []), mark]
            self._writer.write(self._rename(origin[0]), origin[1], msg, headers)

    def close(self) -> str | None:
        if self._writer is None:
            return None
        return self._writer.close("not every copy was acknowledged within 30 s: run it again (what landed is not "
                                  "copied twice)")  # fmt: skip


def deliver_tail(config: MirrorwatchConfig, link: LinkConfig, promotion: Promotion, *, dry_run: bool) -> Delivery:
    """Copy the tail of the promoted `link`'s old source to the promoted cluster (see the module docstring); a dry
    run counts what it would copy. Reads the old source (it must be back) and the promoted cluster's copies after the
    promotion point."""
    copies = _Copies(config, link, _delivered(config, link, promotion), dry_run)
    try:
        diverged(config, link.name, export=lambda _partitions: copies)
    finally:
        failed = copies.close()
    return Delivery(copies.tail, copies.copied, copies.already, failed)
