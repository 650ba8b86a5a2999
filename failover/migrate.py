"""Take over from another mirror (I/O; the record formats are `failover.migrate_format`): where MirrorMaker 1, 2 or
Confluent Replicator got to, checked against the target's contents, and committed to the link's source group so
the link continues after the last record the previous mirror wrote; and the way back, the link's positions written
as MirrorMaker 2 offsets.

    previous mirror   its positions                                           its target topic names
    mm1               its consumer group on the source (committed offsets)    the source names
    mm2               Connect offsets, `mm2-offsets.<alias>.internal` on the   `<alias>.<topic>`
                      target (dedicated mode) or the Connect cluster's topic
    replicator        Connect offsets of the named connector                   its `topic.rename.format`

Per source partition the plan says the previous position, the source's log start and high-watermark, the target's
end, and how many records the link would copy twice or skip. That is checked on the data: the target partition's last
record against the source record just before the position (key and value equal: "exact", nothing twice
or skipped); otherwise the last target record is looked for in the source from its timestamp ("located": the
records between its source offset and the position are the ones copied twice, or skipped); otherwise "unknown".

Refused (nothing committed): the link's group has active members (exit 1); a source topic of the positions is missing
or the link's rename policy does not write the previous mirror's target names (exit 2, with the `rename:` to use); a
position below the partition's log start or beyond its high-watermark (exit 1, per partition, never clamped); the
previous mirror still running: its group has members (MirrorMaker 1) or the target topics grew while watched (exit 1).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from failover.by_time import SourceRecord, read_record_at
from failover.migrate_format import MM2_CONNECTOR, latest_positions, mm2_offset_record
from failover.plan import FailoverUsageError, committed_offsets, target_groups
from failover.scan import Watermarks, read_partitions, watermarks
from kernel.config import ClusterConfig, LinkConfig, MirrorwatchConfig
from kernel.errors import KafkaClientError, MirrorwatchError
from kernel.group_offsets import FetchError, GroupOffsetsUnknown, commit_offsets
from kernel.kafka import kafka_error, new_admin, new_consumer, new_producer
from kernel.rename import rename_policy

__all__ = [
    "KINDS",
    "Migration",
    "MigrationRefused",
    "MigrationRow",
    "apply_migration",
    "export_to_mm2",
    "plan_migration",
]

KINDS = ("mm1", "mm2", "replicator")
TIMEOUT_S = 30.0
LOCATE_SCAN = 5_000  # source records read after the target's last record's timestamp to find it


class MigrationRefused(MirrorwatchError):
    """The previous mirror's positions cannot be taken as they are: nothing was committed."""

    exit_code = 1


@dataclass
class MigrationRow:
    topic: str
    partition: int
    target_topic: str
    previous: int | None  # the next offset the previous mirror would have copied; None: it kept no position
    source_start: int
    source_end: int
    target_end: int
    check: str  # "exact", "located", "unknown", "empty target", "no position"
    twice: int | None = None  # records the link would copy again (already on the target)
    skipped: int | None = None  # records the link would never copy
    problem: str | None = None


@dataclass
class Migration:
    kind: str
    link: str
    group: str  # the link's source group the positions go to
    rows: list[MigrationRow] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Previous:
    """How to find the previous mirror: `group` (mm1), or the Connect offsets `topic` on `cluster` written by
    `connector` for source alias `alias` (mm2, replicator), and its target names (`rename_format`, `${topic}`)."""

    kind: str
    group: str | None = None
    topic: str | None = None
    cluster: str | None = None
    connector: str | None = None
    alias: str | None = None
    rename_format: str = "${topic}"


def previous_for(link: LinkConfig, kind: str, **given: str | None) -> Previous:
    """The defaults of each kind for this link, overridden by what was given."""
    if kind not in KINDS:
        raise FailoverUsageError(f"unknown previous mirror {kind!r} (choose from {', '.join(KINDS)})")
    alias = given.get("alias") or link.source
    if kind == "mm1":
        if not given.get("group"):
            raise FailoverUsageError(
                "migrate from mm1 needs --group (MirrorMaker 1's group.id, from its consumer.config)"
            )
        return Previous("mm1", group=given["group"])
    if kind == "mm2":
        return Previous(
            "mm2",
            topic=given.get("topic") or f"mm2-offsets.{alias}.internal",
            cluster=given.get("cluster") or link.target,
            connector=MM2_CONNECTOR,
            alias=alias,
            rename_format=f"{alias}.${{topic}}",
        )
    if not given.get("connector"):
        raise FailoverUsageError("migrate from replicator needs --connector (the Replicator connector's name)")
    return Previous(
        "replicator",
        topic=given.get("topic") or "connect-offsets",
        cluster=given.get("cluster") or link.target,
        connector=given["connector"],
        rename_format=given.get("rename_format") or "${topic}",
    )


def _connect_positions(config: MirrorwatchConfig, previous: Previous) -> dict[tuple[str, int], int]:
    assert previous.topic is not None and previous.cluster is not None and previous.connector is not None
    if previous.cluster not in config.clusters:
        raise FailoverUsageError(f"no cluster {previous.cluster!r} in the config (the offsets topic's cluster)")
    cluster = config.clusters[previous.cluster]
    admin = new_admin(cluster, previous.cluster)
    meta = admin.list_topics(previous.topic, timeout=TIMEOUT_S).topics.get(previous.topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise FailoverUsageError(f"no offsets topic {previous.topic!r} on {previous.cluster}")
    ends = watermarks(admin, [(previous.topic, p) for p in meta.partitions])
    records: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in meta.partitions}

    def on_record(tp: tuple[str, int], _offset: int, msg: Message) -> None:
        records[tp[1]].append((msg.key(), msg.value()))

    read_partitions(
        cluster,
        previous.cluster,
        ends,
        dict.fromkeys(ends, 0),
        on_record=on_record,
        on_done=lambda _: None,
        progress=None,
    )
    found: dict[tuple[str, int], int] = {}
    for partition in sorted(records):  # a key always lands on one partition: per-partition order is the order
        found.update(latest_positions(records[partition], connector=previous.connector, cluster=previous.alias))
    return found


def _same(a: SourceRecord, b: SourceRecord) -> bool:
    """The same record on both sides: key and value (a mirror may have set its own timestamps)."""
    return (a.key, a.value) == (b.key, b.value)


def _locate(cluster: ClusterConfig, alias: str, topic: str, partition: int, record: SourceRecord) -> int | None:
    """The source offset of a record copied to the target: found from its timestamp, then by key, value and time."""
    consumer = new_consumer(
        cluster,
        alias,
        "mirrorwatch-migrate-reader",  # assigned, never joined nor committed
        {"enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed"},
    )
    try:
        (start,) = consumer.offsets_for_times([TopicPartition(topic, partition, record.timestamp_ms)], TIMEOUT_S)
        if start.offset < 0:
            return None
        consumer.assign([start])
        for _ in range(LOCATE_SCAN):
            msg = consumer.poll(5.0)
            if msg is None:
                return None
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return None
                raise kafka_error(err, f"reading {alias}:{topic}[{partition}]")
            here = SourceRecord(msg.offset() or 0, msg.timestamp()[1], msg.key(), msg.value())
            if here.timestamp_ms > record.timestamp_ms:
                return None
            if _same(here, record) and here.timestamp_ms == record.timestamp_ms:
                return here.offset
        return None
    finally:
        consumer.close()


def _check(config: MirrorwatchConfig, link: LinkConfig, row: MigrationRow) -> None:
    """Fill in `check`, `twice` and `skipped` from the data (see the module docstring)."""
    if row.previous is None:
        row.check = "no position"
        return
    if row.target_end == 0:
        row.check = "empty target"
        row.twice, row.skipped = 0, row.previous - row.source_start
        return
    source, target = config.clusters[link.source], config.clusters[link.target]
    last = read_record_at(target, link.target, row.target_topic, row.partition, row.target_end - 1)
    if last is None:
        row.check = "unknown"
        return
    if row.previous > row.source_start:
        before = read_record_at(source, link.source, row.topic, row.partition, row.previous - 1)
        if before is not None and before.offset == row.previous - 1 and _same(before, last):
            row.check, row.twice, row.skipped = "exact", 0, 0
            return
    found = _locate(source, link.source, row.topic, row.partition, last)
    if found is None:
        row.check = "unknown"
        return
    row.check = "located"
    row.twice, row.skipped = max(0, found + 1 - row.previous), max(0, row.previous - (found + 1))


def _target_names(previous: Previous, link: LinkConfig, topics: list[str]) -> tuple[dict[str, str], str | None]:
    """The previous mirror's target name per topic, and a refusal when the link's rename policy writes others."""
    policy = rename_policy(link.rename, link.source)
    theirs = {t: previous.rename_format.replace("${topic}", t) for t in topics}
    wrong = [t for t in topics if policy.target_topic(t) != theirs[t]]
    if not wrong:
        return theirs, None
    if previous.rename_format == "${topic}":
        hint = "rename: {policy: identity}"
    elif previous.alias == link.source and previous.rename_format == f"{link.source}.${{topic}}":
        hint = "rename: {policy: prefix}"
    else:
        hint = f"rename: {{policy: format, format: '{previous.rename_format}'}}"
    example = wrong[0]
    return theirs, (
        f"the link writes {example!r} to {policy.target_topic(example)!r}, the {previous.kind} mirror wrote it to "
        f"{theirs[example]!r}: give the link `{hint}`"
    )


def _previous_positions(
    config: MirrorwatchConfig, link: LinkConfig, previous: Previous, migration: Migration
) -> dict[tuple[str, int], int]:
    if previous.kind != "mm1":
        return _connect_positions(config, previous)
    assert previous.group is not None
    source = config.clusters[link.source]
    positions = committed_offsets(source, link.source, [previous.group])[previous.group]
    if not positions:
        raise FailoverUsageError(f"MirrorMaker 1's group {previous.group!r} has no commits on {link.source}")
    (theirs,) = target_groups(source, link.source, [previous.group]).values()
    if theirs.members:
        migration.refusals.append(
            f"MirrorMaker 1's group {previous.group!r} has {theirs.members} active member(s): stop it first"
        )
    return positions


def plan_migration(
    config: MirrorwatchConfig,
    link_name: str,
    previous: Previous,
    *,
    settle_s: float = 5.0,
    progress: Callable[[str], None] = lambda _line: None,
) -> Migration:
    """What taking over from `previous` would do, checked on the data; refusals listed, nothing written."""
    link = config.link(link_name)
    source_admin = new_admin(config.clusters[link.source], link.source)
    target_admin = new_admin(config.clusters[link.target], link.target)
    migration = Migration(previous.kind, link.name, link.consumer_group)
    positions = _previous_positions(config, link, previous, migration)
    progress(f"{previous.kind}: {len(positions)} position(s) found")
    outside = sorted({t for t, _ in positions if not link.topics.matches(t)})
    if outside:
        migration.notes.append(f"not selected by link {link.name}, left alone: {', '.join(outside)}")
    positions = {tp: o for tp, o in positions.items() if link.topics.matches(tp[0])}
    if not positions:
        raise FailoverUsageError(f"no position of the {previous.kind} mirror for a topic link {link.name} selects")
    on_source = source_admin.list_topics(timeout=TIMEOUT_S).topics
    missing = sorted({t for t, _ in positions if t not in on_source})
    if missing:
        raise FailoverUsageError(
            f"the {previous.kind} mirror has positions for topics missing on {link.source}: {missing}"
        )
    topics = sorted({t for t, _ in positions if t in on_source})
    names, wrong = _target_names(previous, link, topics)
    if wrong:
        raise FailoverUsageError(wrong)
    tps = [(t, p) for t in topics for p in sorted(on_source[t].partitions)]
    ours = target_groups(config.clusters[link.source], link.source, [link.consumer_group])[link.consumer_group]
    if ours.members:
        migration.refusals.append(f"the link's group {link.consumer_group!r} has {ours.members} active member(s)")
    src = watermarks(source_admin, tps)
    on_target = target_admin.list_topics(timeout=TIMEOUT_S).topics
    ttps = [(names[t], p) for t, p in tps if names[t] in on_target and p in on_target[names[t]].partitions]
    dst = watermarks(target_admin, ttps)
    for topic, partition in tps:
        w = src[(topic, partition)]
        row = MigrationRow(
            topic,
            partition,
            names[topic],
            positions.get((topic, partition)),
            w.start,
            w.end,
            dst.get((names[topic], partition), Watermarks(0, 0)).end,
            "no position",
        )
        if row.previous is not None and row.previous < w.start:
            row.problem = f"position {row.previous} is below the log start {w.start} (records removed by retention)"
        elif row.previous is not None and row.previous > w.end:
            row.problem = f"position {row.previous} is beyond the high-watermark {w.end}"
        if row.problem:
            migration.refusals.append(f"{topic}[{partition}]: {row.problem}")
        else:
            _check(config, link, row)
        migration.rows.append(row)
    if ttps and not migration.refusals:
        time.sleep(settle_s)  # the previous mirror stopped? then the target topics stand still
        grown = sum(dst[tp].end < w.end for tp, w in watermarks(target_admin, ttps).items())
        if grown:
            migration.refusals.append(
                f"{grown} target partition(s) grew in {settle_s:g} s: the previous mirror is still running; "
                "stop it first"
            )
    return migration


def apply_migration(config: MirrorwatchConfig, migration: Migration) -> list[tuple[str, int, int]]:
    """Commit the previous positions to the link's source group; the (topic, partition, offset) committed."""
    if migration.refusals:
        raise MigrationRefused("; ".join(migration.refusals))
    link = config.link(migration.link)
    chosen = [(r.topic, r.partition, r.previous) for r in migration.rows if r.previous is not None]
    context = f"committing to group {link.consumer_group!r} on {link.source}"
    try:  # in the child of `kernel.group_offsets`: a coordinator request can abort the asker (librdkafka#4605)
        answer = commit_offsets(config.clusters[link.source], link.source, {link.consumer_group: chosen}, TIMEOUT_S)
    except GroupOffsetsUnknown as exc:
        raise GroupOffsetsUnknown(f"{context}: {exc}; whether it landed is unknown, run it again") from None
    refused = answer.get(link.consumer_group, FetchError("no answer"))
    if isinstance(refused, FetchError):
        raise refused.exception(context)
    if refused:
        raise KafkaClientError(f"{context}: the coordinator refused {'; '.join(refused)}")
    return chosen


def export_to_mm2(
    config: MirrorwatchConfig, link_name: str, *, alias: str | None, topic: str | None, apply: bool
) -> Migration:
    """The link's committed positions as MirrorMaker 2 offsets in `mm2-offsets.<alias>.internal` on the target
    (written with `apply`), so that MirrorMaker 2 continues where the link stopped."""
    link = config.link(link_name)
    previous = previous_for(link, "mm2", alias=alias, topic=topic)
    migration = Migration("to-mm2", link.name, link.consumer_group)
    positions = committed_offsets(config.clusters[link.source], link.source, [link.consumer_group])[link.consumer_group]
    if not positions:
        raise FailoverUsageError(f"the link's group {link.consumer_group!r} has no commits on {link.source}")
    ours = target_groups(config.clusters[link.source], link.source, [link.consumer_group])[link.consumer_group]
    if ours.members:
        migration.refusals.append(f"the link's group {link.consumer_group!r} has {ours.members} active member(s)")
    names, wrong = _target_names(previous, link, sorted({t for t, _ in positions}))
    if wrong:
        raise FailoverUsageError(wrong.replace("give the link", "MirrorMaker 2 would need the link to have had"))
    assert previous.topic is not None and previous.alias is not None
    target = config.clusters[link.target]
    meta = new_admin(target, link.target).list_topics(previous.topic, timeout=TIMEOUT_S).topics.get(previous.topic)
    if meta is None or meta.error is not None:
        raise FailoverUsageError(
            f"no offsets topic {previous.topic!r} on {link.target}: start MirrorMaker 2 once (it creates it), stop it, "
            "then run this again"
        )
    for (t, p), o in sorted(positions.items()):
        migration.rows.append(MigrationRow(t, p, names[t], o, 0, 0, 0, "exported"))
    if apply and migration.refusals:
        raise MigrationRefused("; ".join(migration.refusals))
    if apply:
        producer: Producer = new_producer(target, link.target, {"acks": "all", "partitioner": "murmur2_random"})
        errors: list[str] = []
        for row in migration.rows:
            assert row.previous is not None
            key, value = mm2_offset_record(previous.alias, row.topic, row.partition, row.previous)
            producer.produce(
                previous.topic,
                key=key,
                value=value,
                on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
            )
        if producer.flush(TIMEOUT_S) or errors:
            raise MigrationRefused(f"writing MirrorMaker 2 offsets to {previous.topic}: {errors or 'timed out'}")
    return migration


def migration_lines(migration: Migration) -> list[str]:
    """The plan as text, one line per partition and a summary."""
    lines = []
    for r in migration.rows:
        if r.check == "exported":
            lines.append(f"{r.topic}[{r.partition}]: MirrorMaker 2 continues at {r.previous} (target {r.target_topic})")
            continue
        where = "no position" if r.previous is None else f"at {r.previous}"
        detail = r.problem or (f"{r.check}: {r.twice} twice, {r.skipped} skipped" if r.twice is not None else r.check)
        lines.append(
            f"{r.topic}[{r.partition}]: previous mirror {where} (source {r.source_start}..{r.source_end}); "
            f"target {r.target_topic}[{r.partition}] ends at {r.target_end}; {detail}"
        )
    twice = sum(r.twice or 0 for r in migration.rows)
    skipped = sum(r.skipped or 0 for r in migration.rows)
    lines.extend(f"note: {n}" for n in migration.notes)
    lines.extend(f"refused: {r}" for r in migration.refusals)
    lines.append(
        f"link {migration.link} (group {migration.group}): {len(migration.rows)} partition(s), {twice} record(s) "
        f"copied twice, {skipped} skipped" + (", refused" if migration.refusals else "")
    )
    return lines


def migration_json(migration: Migration) -> str:
    return json.dumps(migration.to_json(), indent=2)
