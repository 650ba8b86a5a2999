"""Reading what a target partition holds (failover's I/O shell): every record's position and provenance, fed to a
`TargetLog` (the pure core) in offset order, from the partition's log start to its last stable offset.

One scan per target partition answers every group at once, so translating thousands of groups costs one read of
the partitions they committed on, not one per group. The scan reads read_committed (what a failed-over consumer
reads by default in librdkafka; the transactional engine's aborted records are never seen) up to the last stable
offset taken when it starts; records arriving during the scan are left for the next one. A record whose headers
cannot be read or whose provenance does not parse counts as another writer's: it is never trusted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, IsolationLevel, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from failover.translate import SourcePartition, TargetLog
from mirrorwatch.config import ClusterConfig
from mirrorwatch.errors import KafkaClientError
from mirrorwatch.kafka import error_text, kafka_error, new_consumer
from mirrorwatch.provenance import provenance_source

__all__ = ["TargetScans", "Watermarks", "scan_target", "watermarks"]

log = logging.getLogger("mirrorwatch.failover")

TIMEOUT_S = 30.0
STALL_S = 60.0  # no record for this long while a partition is short of its end: the scan fails
PROGRESS_EVERY_S = 5.0
SCAN_GROUP = "mirrorwatch-failover-scan"  # never joined, never committed: the consumer is assigned


@dataclass(frozen=True)
class Watermarks:
    start: int  # the log start offset
    end: int  # the last stable offset (read_committed end)


def watermarks(admin: AdminClient, tps: list[tuple[str, int]]) -> dict[tuple[str, int], Watermarks]:
    """Log start and read_committed end of each partition, two batched ListOffsets requests."""
    if not tps:
        return {}
    found: dict[str, dict[tuple[str, int], int]] = {}
    for name, spec in (("start", OffsetSpec.earliest()), ("end", OffsetSpec.latest())):  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): spec for t, p in tps}
        futures = admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=TIMEOUT_S)
        offsets: dict[tuple[str, int], int] = {}
        for tp, future in futures.items():
            try:
                offsets[(tp.topic, tp.partition)] = int(future.result(timeout=TIMEOUT_S).offset)
            except KafkaException as exc:
                raise kafka_error(exc, f"listing offsets of {tp.topic}[{tp.partition}]") from None
        found[name] = offsets
    return {tp: Watermarks(found["start"][tp], found["end"][tp]) for tp in tps}


def scan_target(
    cluster: ClusterConfig,
    alias: str,
    ends: Mapping[tuple[str, int], Watermarks],
    source_cluster_id: str,
    floors: Mapping[SourcePartition, int],
    *,
    progress: Callable[[str], None] | None = None,
    resume: Mapping[tuple[str, int], TargetLog] | None = None,
) -> dict[tuple[str, int], TargetLog]:
    """Every record of each partition in `ends`, from its log start to its end: a finished TargetLog per partition
    holding what `source_cluster_id` wrote there (by each record's provenance, last hop). A log in `resume` is
    continued from where it ended instead."""
    logs = {tp: (resume or {}).get(tp) or TargetLog(tp[0], tp[1], floors) for tp in ends}
    starts = {tp: log.end if log.end is not None else OFFSET_BEGINNING for tp, log in logs.items()}
    todo = {tp for tp, w in ends.items() if w.end > max(w.start, starts[tp])}
    for tp, w in ends.items():
        if tp not in todo:
            logs[tp].finish(w.end)
    if not todo:
        return logs
    source_id = source_cluster_id.encode()
    total = sum(ends[tp].end - max(ends[tp].start, starts[tp]) for tp in todo)
    consumer = new_consumer(
        cluster,
        alias,
        SCAN_GROUP,
        {
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
        },
    )
    try:
        consumer.assign([TopicPartition(t, p, starts[(t, p)]) for t, p in sorted(todo)])
        scanned, last_progress, last_record = 0, time.monotonic(), time.monotonic()
        while todo:
            batch = consumer.consume(num_messages=10_000, timeout=1.0)
            now = time.monotonic()
            if batch:
                last_record = now
            elif now - last_record > STALL_S:
                short = ", ".join(f"{t}[{p}]" for t, p in sorted(todo))
                raise KafkaClientError(
                    f"scanning {alias}: no record for {STALL_S:.0f} s while {short} not read to its end"
                )
            for msg in batch:
                tp = (msg.topic() or "", msg.partition() or 0)
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        _done(tp, todo, logs, ends)
                        continue
                    raise KafkaClientError(f"scanning {alias}:{tp[0]}[{tp[1]}]: {error_text(err)}")
                if tp not in todo:
                    continue
                offset = msg.offset() or 0
                if offset >= ends[tp].end:
                    _done(tp, todo, logs, ends)
                    continue
                scanned += 1
                _feed(logs[tp], offset, msg, source_id)
                if offset + 1 >= ends[tp].end:
                    _done(tp, todo, logs, ends)
            if progress is not None and now - last_progress >= PROGRESS_EVERY_S:
                last_progress = now
                progress(f"scanned {scanned:,} of about {total:,} records on {alias}")
    except KafkaException as exc:
        raise kafka_error(exc, f"scanning {alias}") from None
    finally:
        consumer.close()
    return logs


def _done(
    tp: tuple[str, int],
    todo: set[tuple[str, int]],
    logs: dict[tuple[str, int], TargetLog],
    ends: Mapping[tuple[str, int], Watermarks],
) -> None:
    if tp in todo:
        todo.discard(tp)
        logs[tp].finish(ends[tp].end)


def _feed(log: TargetLog, offset: int, msg: Message, source_id: bytes) -> None:
    try:
        found = provenance_source(cast(list[tuple[str, bytes | None]] | None, msg.headers()))  # a consumer's list
    except (SystemError, ValueError, UnicodeDecodeError):  # header names that are not UTF-8
        found = None
    if found is None or found[0] != source_id:
        log.add(offset, None)
    else:
        log.add(offset, (found[1], found[2]), found[3])


class TargetScans:
    """Target logs kept from one round to the next (a standby's): a round reads only what arrived since the last.
    A partition is read again from its start when the groups' floors went below what its log kept, or when its
    log start passed where the last round ended (retention, a recreated topic)."""

    def __init__(self, cluster: ClusterConfig, alias: str) -> None:
        self.cluster, self.alias = cluster, alias
        self.logs: dict[tuple[str, int], TargetLog] = {}
        self.rescans = 0

    def update(
        self, ends: Mapping[tuple[str, int], Watermarks], source_cluster_id: str, floors: Mapping[SourcePartition, int]
    ) -> dict[tuple[str, int], TargetLog]:
        resume: dict[tuple[str, int], TargetLog] = {}
        for tp, w in ends.items():
            log = self.logs.get(tp)
            if log is None or log.end is None:
                continue
            if log.keeps_enough_for(floors) and log.end <= w.end and w.start <= log.end:
                log.raise_floors(floors)
                resume[tp] = log
            else:
                self.rescans += 1
        self.logs = scan_target(self.cluster, self.alias, ends, source_cluster_id, floors, resume=resume)
        return self.logs
