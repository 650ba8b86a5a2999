"""Records the target takes already older than its topic's retention (issue #43, pure: the worker hands in the time).

A broker deletes a log segment once its newest record's timestamp is older than the topic's `retention.ms` (records
keep their source timestamps on a target topic of `message.timestamp.type=CreateTime`, the default). A link that lags
by more than the target keeps records writes records its broker deletes at the next retention check (every
`log.retention.check.interval.ms`, 5 minutes by default), before most of the target's consumers read them: every
mirror in use today copies them without a word. The worker checks every status interval, per partition, the records
the target acknowledged since the last check: when the newest record it has read is older than the target topic's
retention then, every one of them is (a partition's timestamps rise with its offsets, as producers stamp them; a
record stamped out of order is judged by the newest before it, as its segment would be). They are a `Gap` of reason
"target-retention", action "copied", that grows while the lag stays beyond the retention: one per incident and
partition, counted once per offset however many owners find it (`kernel.worker_status.records_by_partition`).
Records copied in an interval whose newest record is younger are not counted: their segment's newest timestamp keeps
them for now."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kernel.worker_status import Gap

__all__ = ["WRITE_EVERY_MS", "Expired", "TargetExpiry"]

WRITE_EVERY_MS = 10_000  # a growing gap is written to the link's ledger this often (the status says it every check)

Key = tuple[str, int]


@dataclass(frozen=True)
class Expired:
    gap: Gap
    new: bool  # the incident's first interval (said once in the log)
    durable: bool  # write it to the link's ledger now (new, grown for WRITE_EVERY_MS, or ended)
    ended: bool = False  # the lag is within the target's retention again, or the partition went to another owner


class TargetExpiry:
    """Per partition of a worker: where its last check stood, and the incident (a growing gap) going on, if any."""

    def __init__(self) -> None:
        self._marks: dict[Key, int] = {}  # the acknowledged position at the last check
        self._open: dict[Key, tuple[Gap, int]] = {}  # the incident going on, and when it was last written

    def check(
        self,
        key: Key,
        *,
        began: int | None,
        acked: int | None,
        newest_ms: int | None,
        retention_ms: int | None,
        now_ms: int,
    ) -> Expired | None:
        """One partition's check: `began`, where its owner began reading it; `acked`, where the target's
        acknowledgements stand; `newest_ms`, the timestamp of the newest record read; `retention_ms`, the target
        topic's (None: it keeps records by their timestamps forever, or stamps its own). The incident grown or ended
        (its last word, durable), or None."""
        mark = self._marks.get(key, began)
        if acked is None:
            return None
        self._marks[key] = acked
        if mark is None or acked <= mark:
            return None  # nothing acknowledged since (or read again from below: the next interval says)
        if retention_ms is None or newest_ms is None or newest_ms >= now_ms - retention_ms:
            return self._end(key)
        going = self._open.get(key)
        if going is not None and going[0].end_offset == mark:
            gap, written_ms = replace(going[0], end_offset=acked), going[1]
            due = now_ms - written_ms >= WRITE_EVERY_MS
            self._open[key] = (gap, now_ms if due else written_ms)
            return Expired(gap, new=False, durable=due)
        gap = Gap(key[0], key[1], mark, acked, "target-retention", "copied", now_ms)
        self._open[key] = (gap, now_ms)
        return Expired(gap, new=True, durable=True)

    def _end(self, key: Key) -> Expired | None:
        going = self._open.pop(key, None)
        return Expired(going[0], new=False, durable=True, ended=True) if going is not None else None

    def forget(self, key: Key) -> Expired | None:
        """The partition is no longer this worker's: its incident ends here (its last word, durable), and a next
        assignment checks from its new position."""
        self._marks.pop(key, None)
        return self._end(key)
