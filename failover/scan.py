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
from kernel.config import ClusterConfig
from kernel.errors import KafkaClientError
from kernel.kafka import consume_ready, error_text, headers_of, kafka_error, new_consumer
from kernel.provenance import provenance_source

__all__ = [
    "Echo",
    "TargetScans",
    "Watermarks",
    "copies_below",
    "echo_offsets",
    "last_copies",
    "read_partitions",
    "scan_target",
    "watermarks",
]

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
            except (KafkaException, TimeoutError) as exc:
                raise kafka_error(exc, f"listing offsets of {tp.topic}[{tp.partition}]") from None
        found[name] = offsets
    return {tp: Watermarks(found["start"][tp], found["end"][tp]) for tp in tps}


Echo = dict[tuple[str, int], dict[int, tuple[str, int, int]]]


def scan_target(
    cluster: ClusterConfig,
    alias: str,
    ends: Mapping[tuple[str, int], Watermarks],
    source_cluster_id: str,
    floors: Mapping[SourcePartition, int],
    *,
    progress: Callable[[str], None] | None = None,
    resume: Mapping[tuple[str, int], TargetLog] | None = None,
    echo: Echo | None = None,
    older: Mapping[tuple[str, int], Mapping[SourcePartition, int]] | None = None,
) -> dict[tuple[str, int], TargetLog]:
    """Every record of each partition in `ends`, from its log start to its end: a finished TargetLog per partition
    holding what `source_cluster_id` wrote there (by each record's provenance, last hop). A log in `resume` is
    continued from where it ended instead. With `echo` (`echo_offsets`), a record written here first whose copy is
    on the source counts as that copy (failback: the originals of what the group read on the other side). `older`:
    per target partition, where each recreated source partition's current generation begins (`TargetLog.older`)."""
    generations = older or {}
    logs = {tp: (resume or {}).get(tp) or TargetLog(tp[0], tp[1], floors, dict(generations.get(tp, {}))) for tp in ends}
    starts = {tp: log.end if log.end is not None else OFFSET_BEGINNING for tp, log in logs.items()}
    source_id = source_cluster_id.encode()
    echoes = echo or {}

    def on_record(tp: tuple[str, int], offset: int, msg: Message) -> None:
        _feed(logs[tp], offset, msg, source_id, echoes.get(tp))

    def on_done(tp: tuple[str, int]) -> None:
        logs[tp].finish(ends[tp].end)

    read_partitions(cluster, alias, ends, starts, on_record=on_record, on_done=on_done, progress=progress)
    return logs


def copies_below(
    cluster: ClusterConfig,
    alias: str,
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    source_cluster_id: str,
    commits: Mapping[SourcePartition, int],
) -> dict[tuple[str, int], int]:
    """Per target partition, the copies in its range [from, to) of records below `commits` that `source_cluster_id`
    wrote (by provenance, last hop): what a group committed at `from` reads again there. For the stretch before a
    TargetLog's first kept record, which a scan does not keep (`failover verify` of a position below it)."""
    source_id = source_cluster_id.encode()
    counts = dict.fromkeys(ranges, 0)

    def on_record(tp: tuple[str, int], _offset: int, msg: Message) -> None:
        found = _source_of(msg)
        if found is not None and found[0] == source_id:
            commit = commits.get((found[1], found[2]))
            if commit is not None and found[3] < commit:
                counts[tp] += 1

    ends = {tp: Watermarks(start, end) for tp, (start, end) in ranges.items()}
    starts = {tp: start for tp, (start, _end) in ranges.items()}
    read_partitions(cluster, alias, ends, starts, on_record=on_record, on_done=lambda _tp: None, progress=None)
    return counts


def echo_offsets(
    cluster: ClusterConfig, alias: str, ends: Mapping[tuple[str, int], Watermarks], other_cluster_id: str
) -> Echo:
    """Per partition of the other cluster, its offsets whose copies are on these partitions (by provenance, last
    hop the other cluster): other offset -> (topic, partition, offset of the first copy here)."""
    other = other_cluster_id.encode()
    echo: Echo = {}

    def on_record(tp: tuple[str, int], offset: int, msg: Message) -> None:
        found = _source_of(msg)
        if found is not None and found[0] == other:
            copies = echo.setdefault((found[1], found[2]), {})
            copies.setdefault(found[3], (tp[0], tp[1], offset))

    starts = dict.fromkeys(ends, OFFSET_BEGINNING)
    read_partitions(cluster, alias, ends, starts, on_record=on_record, on_done=lambda _tp: None, progress=None)
    return echo


def last_copies(
    cluster: ClusterConfig, alias: str, ends: Mapping[tuple[str, int], Watermarks], window: int = 1000
) -> dict[tuple[str, int], dict[bytes, dict[tuple[str, int], int]]]:
    """Per partition, per last-hop cluster id, per source partition the furthest source offset copied on it (by
    provenance; `failover.copied` reads the source's from it), in the stretch read: from the end backwards, `window`
    offsets first and four times as many each time a stretch holds no copy, down to the log start. The cost is the
    partition's tail unless the target took many records of its own since the last copy."""
    found: dict[tuple[str, int], dict[bytes, dict[tuple[str, int], int]]] = {tp: {} for tp in ends}
    upto = {tp: w.end for tp, w in ends.items() if w.end > w.start}

    def on_record(tp: tuple[str, int], _offset: int, msg: Message) -> None:
        source = _source_of(msg)
        if source is not None:
            furthest = found[tp].setdefault(source[0], {})
            key = (source[1], source[2])
            furthest[key] = max(furthest.get(key, source[3]), source[3])

    while upto:
        starts = {tp: max(ends[tp].start, end - window) for tp, end in upto.items()}
        stretch = {tp: Watermarks(ends[tp].start, end) for tp, end in upto.items()}
        read_partitions(cluster, alias, stretch, starts, on_record=on_record, on_done=lambda _tp: None, progress=None)
        upto = {tp: starts[tp] for tp in upto if not found[tp] and starts[tp] > ends[tp].start}
        window *= 4
    return found


def read_partitions(
    cluster: ClusterConfig,
    alias: str,
    ends: Mapping[tuple[str, int], Watermarks],
    starts: Mapping[tuple[str, int], int],
    *,
    on_record: Callable[[tuple[str, int], int, Message], None],
    on_done: Callable[[tuple[str, int]], None],
    progress: Callable[[str], None] | None,
) -> None:
    """Each partition of `ends` read_committed from `starts` to its end: `on_record` per record, `on_done` once per
    partition (also one with nothing to read)."""
    todo = {tp for tp, w in ends.items() if w.end > max(w.start, starts[tp])}
    for tp in ends:
        if tp not in todo:
            on_done(tp)
    if not todo:
        return
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

    def done(tp: tuple[str, int]) -> None:
        if tp in todo:
            todo.discard(tp)
            on_done(tp)

    try:
        consumer.assign([TopicPartition(t, p, starts[(t, p)]) for t, p in sorted(todo)])
        scanned, last_progress, last_record = 0, time.monotonic(), time.monotonic()
        while todo:
            batch = consume_ready(consumer, 10_000, 1.0)
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
                        done(tp)
                        continue
                    raise KafkaClientError(f"scanning {alias}:{tp[0]}[{tp[1]}]: {error_text(err)}")
                if tp not in todo:
                    continue
                offset = msg.offset() or 0
                if offset >= ends[tp].end:
                    done(tp)
                    continue
                scanned += 1
                on_record(tp, offset, msg)
                if offset + 1 >= ends[tp].end:
                    done(tp)
            if progress is not None and now - last_progress >= PROGRESS_EVERY_S:
                last_progress = now
                progress(f"scanned {scanned:,} of about {total:,} records on {alias}")
    except (KafkaException, TimeoutError) as exc:
        raise kafka_error(exc, f"scanning {alias}") from None
    finally:
        consumer.close()


def _source_of(msg: Message) -> tuple[bytes, str, int, int] | None:
    try:
        return provenance_source(cast(list[tuple[str, bytes | None]] | None, headers_of(msg)))  # kernel.kafka
    except (SystemError, ValueError, UnicodeDecodeError):  # header names that are not UTF-8
        return None


def _feed(
    log: TargetLog, offset: int, msg: Message, source_id: bytes, echo: dict[int, tuple[str, int, int]] | None
) -> None:
    found = _source_of(msg)
    if found is not None and found[0] == source_id:
        log.add(offset, (found[1], found[2]), found[3])
        return
    copy = echo.get(offset) if echo else None
    if copy is not None:
        log.add(offset, (copy[0], copy[1]), copy[2])
    else:
        log.add(offset, None)


class TargetScans:
    """Target logs kept from one round to the next (a standby's): a round reads only what arrived since the last.
    A partition is read again from its start when the groups' floors went below what its log kept, or when its
    log start passed where the last round ended (retention, a recreated topic)."""

    def __init__(self, cluster: ClusterConfig, alias: str) -> None:
        self.cluster, self.alias = cluster, alias
        self.logs: dict[tuple[str, int], TargetLog] = {}
        self.rescans = 0

    def update(
        self,
        ends: Mapping[tuple[str, int], Watermarks],
        source_cluster_id: str,
        floors: Mapping[SourcePartition, int],
        older: Mapping[tuple[str, int], Mapping[SourcePartition, int]] | None = None,
    ) -> dict[tuple[str, int], TargetLog]:
        resume: dict[tuple[str, int], TargetLog] = {}
        for tp, w in ends.items():
            log = self.logs.get(tp)
            if log is None or log.end is None:
                continue
            same_generations = dict(log.older) == dict((older or {}).get(tp, {}))  # else read again from the start
            if same_generations and log.keeps_enough_for(floors) and log.end <= w.end and w.start <= log.end:
                log.raise_floors(floors)
                resume[tp] = log
            else:
                self.rescans += 1
        self.logs = scan_target(self.cluster, self.alias, ends, source_cluster_id, floors, resume=resume, older=older)
        return self.logs
