"""The worker-status contract: what a mirror worker of any engine tells the monitor (pure; the shared kernel).

One document per worker, written by the python, exactly-once and spark engines and read by the monitor, whether it
comes from a worker in the monitor's own process (`mirrorwatch run`) or from a status file. Its figures describe one
moment, `observed_ms`: the positions of every partition the worker owns and the source high-watermark the worker saw
with its last fetch, so that the monitor compares a position with the high-watermark *of its time*, not with one read
a second later (which shows a healthy busy link a second behind).

A worker promises to rewrite its status at least every `publish_interval_ms` while it runs; a status older than
`stale_after_ms()` belongs to a worker that is frozen or gone. Such a status is still evidence: every record below its
`acked` is durable on the target, so the monitor keeps measuring the partition from there instead of showing nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["GROWING", "Gap", "PartitionPosition", "WorkerStatus", "records_by_partition", "stale_after_ms"]


@dataclass(frozen=True, slots=True)
class PartitionPosition:
    topic: str
    partition: int
    target_topic: str
    consumed: int | None  # next offset the worker will read
    acked: int | None  # first offset not yet acknowledged by the target: every record below it is durable there
    committed: int | None  # last offset committed to the link's group
    in_flight_records: int = 0
    high_watermark: int | None = None  # the source high-watermark the worker's consumer saw last (None: unknown)
    last_record_timestamp_ms: int | None = None
    failed: str | None = None  # why the worker stopped mirroring this partition alone (the others go on)
    paused: str | None = None  # why the operator paused it (`mirrorwatch link pause`; kernel.link_control)


# Gaps that grow while their cause lasts: one per incident, its end moving (see Gap).
GROWING = frozenset({"target-retention"})


@dataclass(frozen=True, slots=True)
class Gap:
    """Records of a source partition the link will never copy: offsets `first_offset` up to (not including)
    `end_offset` were gone from the source when the link came to read them (`reason` "retention": the log start had
    passed the link's position; "truncated": the log ends below it; "recreated": the topic was deleted and created
    again, and these are the old topic's records the link had not copied, as far as its last commit knew;
    "target-deleted" / "target-recreated": the target topic was deleted (and created again by someone else) under
    the link, and these are the records it had copied there that the source still has; "target-retention": the
    target took them already older than its topic's retention.ms, and its broker deletes them at its next retention
    check, before most consumers read them — the target's retention is shorter than the link's lag).
    `action`: "stopped" (the partition waits, failed, at `first_offset`), "skipped" (it went on from `end_offset`) or
    "restarted" (a recreated topic: the link mirrors the new one from its beginning) or "recopied" (a lost target
    topic: the link copies them again) or "copied" (target-retention: written, and going). Counted in offsets: a
    transaction marker among them counts as one. A gap of a GROWING reason grows while its cause lasts (its end
    moves, its key does not); two of them may overlap (a partition read again by its next owner): count them with
    `records_by_partition`, never by adding them up."""

    topic: str
    partition: int
    first_offset: int
    end_offset: int
    reason: str
    action: str
    at_ms: int

    @property
    def records(self) -> int:
        return max(0, self.end_offset - self.first_offset)

    @property
    def key(self) -> tuple[str, int, int, int]:
        """The same gap, whoever found it and however often (a stopped partition is found again after a restart);
        a growing one is the same gap whatever its end."""
        return (self.topic, self.partition, self.first_offset, -1 if self.reason in GROWING else self.end_offset)

    def describe(self, link: str) -> str:
        where = f"{self.topic}[{self.partition}]"
        lost = f", offsets {self.first_offset} to {self.end_offset - 1}" if self.records else ""
        if self.reason == "target-retention":
            return (
                f"link {link}: {self.records} records of {where} (offsets {self.first_offset} to "
                f"{self.end_offset - 1}) were older than the target topic's retention.ms when the target took them "
                "(the link lags by more than the target keeps records): its broker deletes them at its next retention "
                "check, unless newer records share their segment; the link goes on"
            )
        if self.reason.startswith("target-"):
            how = "deleted" if self.reason == "target-deleted" else "deleted and created again (another topic id)"
            then = (
                "the partition is stopped and the topic not created again (on_target_loss: stop)"
                if self.action == "stopped"
                else "the link copies them again from the source's log start (on_target_loss: recopy)"
            )
            return (
                f"link {link}: the target topic of {where} was {how} under the link: {self.records} records the "
                f"link had copied there are gone from the target and still on the source{lost}; {then}"
            )
        if self.reason == "recreated":
            then = (
                "its new partition is stopped (on_recreate: stop)"
                if self.action == "stopped"
                else "the link mirrors the new topic from its beginning (on_recreate: restart)"
            )
            return (
                f"link {link}: source topic {self.topic!r} was deleted and created again (a new topic id): "
                f"{self.records} records of the old {where} were not copied{lost}; {then}"
            )
        what = {
            "retention": "the source's log start had passed them (retention or delete-records) before the link "
            "copied them",
            "truncated": "the source's log ends below the link's position (truncated: an unclean leader election, "
            "a restore)",
        }.get(self.reason, self.reason)
        then = "the partition is stopped (on_gap: stop)" if self.action == "stopped" else "the link went on after them"
        return (
            f"link {link}: {self.records} records of {where} lost, offsets {self.first_offset} to "
            f"{self.end_offset - 1}: {what}; {then}"
        )


@dataclass(frozen=True)
class WorkerStatus:
    link: str
    worker: int
    engine: str  # "python", "exactly-once" or "spark"
    observed_ms: int  # the moment every figure below describes
    publish_interval_ms: int  # the worker rewrites its status at least this often while it runs
    # "running"; "paused" (the operator paused every partition it owns); "throttled" (back-pressure: the target
    # takes records slower than the source gives them, and the worker reads nothing until it catches up); "failed"
    state: str
    partitions: tuple[PartitionPosition, ...]
    failure: str | None = None
    host: str = ""
    pid: int = 0
    pids: str = ""  # the host and PID namespace its pid is of (`kernel.status_board.PIDS`; "" from an older version)
    # The worker across restarts (host, state directory, number; `mirror.worker.writer_fields`): a dead worker whose
    # instance a live one carries again was restarted, any other is gone ("" from a status of an older version).
    instance: str = ""
    source: str = ""
    target: str = ""
    consumer_group: str = ""
    delivery: str = ""
    source_cluster_id: str | None = None
    target_cluster_id: str | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    clients: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    config_drift: tuple[Mapping[str, Any], ...] = ()
    # The link's last config syncs (`sync.topic_configs`): source_topic, target_topic, config, was, now, at_ms.
    config_synced: tuple[Mapping[str, Any], ...] = ()
    # Partitions this worker no longer owns (revoked, or lost in a session timeout) with what it had acknowledged of
    # them: every record below `acked` is on the target whoever owns the partition now. For the best position known
    # while nobody reports the partition (between a loss and the next assignment), never as ownership.
    released: tuple[PartitionPosition, ...] = ()
    # Records this link will never copy, as the worker found them (and the link's ledger of earlier ones, so that a
    # restarted worker still says them): see Gap.
    gaps: tuple[Gap, ...] = ()
    # When the worker's consumer last lost a source broker, while the high-watermarks of some partitions are not
    # fetched since (`mirror.progress.vouched_highs` leaves them out of the status): a partition stated without one
    # then is not known to be caught up, whatever the monitor read (the source may have taken records after any read
    # and before it went). None: every stated high-watermark is fetched since, or the consumer never lost one.
    highs_stale_since_ms: int | None = None
    # What differs between the link's source topics and their copies as its last topic refresh found them, and what
    # that round did about each (`mirror.drift.drift_report`: at_ms, count, counts, differences, acls); {}: no round.
    drift_report: Mapping[str, Any] = field(default_factory=dict)
    # Since when the target has acknowledged nothing while records wait on their way to it (the worker cannot reach
    # it, or it is down or frozen), once that has lasted a few seconds (mirror.flow.Silence); None: it answers.
    target_silent_since_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["partitions"] = [asdict(p) for p in self.partitions]
        body["released"] = [asdict(p) for p in self.released]
        body["config_drift"] = [dict(d) for d in self.config_drift]
        body["config_synced"] = [dict(d) for d in self.config_synced]
        body["gaps"] = [asdict(g) for g in self.gaps]
        body["drift_report"] = dict(self.drift_report)
        return body

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> WorkerStatus | None:
        """The status a document holds, or None when it is not one (a truncated or foreign file is not news)."""
        try:
            partitions, released = (
                tuple(
                    PartitionPosition(**{k: v for k, v in p.items() if k in _POSITION_FIELDS})
                    for p in document.get(name, ())
                )
                for name in ("partitions", "released")
            )
            known = {k: v for k, v in document.items() if k in _STATUS_FIELDS}
            status = cls(
                **{
                    **known,
                    "partitions": partitions,
                    "released": released,
                    "config_drift": tuple(document.get("config_drift", ())),
                    "config_synced": tuple(document.get("config_synced", ())),
                    "gaps": tuple(
                        Gap(**{k: v for k, v in g.items() if k in _GAP_FIELDS}) for g in document.get("gaps", ())
                    ),
                    "drift_report": _mapping(document.get("drift_report")),
                }
            )
        except (TypeError, AttributeError):
            return None
        if not isinstance(status.observed_ms, int) or not isinstance(status.publish_interval_ms, int):
            return None
        if not isinstance(status.highs_stale_since_ms, int | None) or not isinstance(
            status.target_silent_since_ms, int | None
        ):  # moments the monitor subtracts from or serves
            return None
        return status

    def age_ms(self, now_ms: int) -> int:
        return max(0, now_ms - self.observed_ms)

    def is_stale(self, now_ms: int) -> bool:
        """Not rewritten when promised: the worker is frozen, dead or cut off."""
        return self.age_ms(now_ms) > stale_after_ms(self.publish_interval_ms)


def _mapping(value: object) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError("not a mapping")
    return value


def stale_after_ms(publish_interval_ms: int) -> int:
    """Two missed rewrites and a second for a busy disk or a slow scheduler."""
    return 2 * publish_interval_ms + 1_000


_POSITION_FIELDS = frozenset(PartitionPosition.__dataclass_fields__)
_GAP_FIELDS = frozenset(Gap.__dataclass_fields__)
_STATUS_FIELDS = frozenset(WorkerStatus.__dataclass_fields__) - {
    "partitions",
    "config_drift",
    "config_synced",
    "released",
    "gaps",
    "drift_report",
}


def records_by_partition(gaps: Iterable[Gap]) -> dict[tuple[str, int, str], int]:
    """The records of distinct gaps (each once, by key) per topic, partition and reason. Those of a GROWING reason are
    counted once per offset: a partition read again by its next owner, after a crash or a rebalance, is found again
    from its commit, over offsets the first owner's gap already holds."""
    counts: dict[tuple[str, int, str], int] = {}
    ranges: dict[tuple[str, int, str], list[tuple[int, int]]] = {}
    distinct: dict[tuple[str, int, int, int], Gap] = {}
    for g in gaps:  # a growing gap as far as it has grown, whatever order its sightings come in
        known = distinct.get(g.key)
        distinct[g.key] = g if known is None or g.end_offset >= known.end_offset else known
    for gap in distinct.values():
        where = (gap.topic, gap.partition, gap.reason)
        if gap.reason in GROWING:
            ranges.setdefault(where, []).append((gap.first_offset, gap.end_offset))
        else:
            counts[where] = counts.get(where, 0) + gap.records
    for where, spans in ranges.items():
        total, reached = 0, None
        for first, end in sorted(spans):
            start = first if reached is None else max(first, reached)
            if end > start:
                total += end - start
            reached = end if reached is None else max(reached, end)
        counts[where] = counts.get(where, 0) + total
    return counts
