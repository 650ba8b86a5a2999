"""What a link does when the offset it reads next is not on the source any more (pure, no I/O).

The python engines read with `auto.offset.reset=error`: librdkafka never moves a position silently (an offset out of
range, or a partition without a committed offset, is an `_AUTO_OFFSET_RESET` event on that partition). The worker
then reads the partition's low and high watermarks and `out_of_range` says what to do:
- no position of the link yet (no commit, nothing read): start where the link begins (`start_from`); nothing is lost;
- below the log start (retention or delete-records passed it): offsets position .. log start - 1 are lost; the link's
  `on_gap` rule stops the partition there (the default: it waits, failed, and the operator chooses) or skips to the
  log start and goes on — a `Gap` either way, counted exactly;
- above the log end (the source log was truncated below what the link read: an unclean leader election, a restore):
  the records between are on the target but no longer on the source, and new ones will take their offsets: the
  partition stops whatever the rule (going on would write records failover cannot tell from the old ones). librdkafka
  also checks a position against its leader epoch (KIP-320) and says where that epoch's log now ends
  (`truncated_at`): exact even when new records have already passed the old position;
- inside the log after all (retention ran between the fetch and the watermark request, or a leader changed): read
  the position again.

A topic deleted and created again under its name is the other silent move: Kafka drops the group's offsets of the
deleted topic, so the new topic reads as one never mirrored, and its records land in the same target topic after the
old one's. The worker notes the topic id (KIP-516) each partition's records come from (`mirror.topic_ledger`); a
partition assigned or refreshed under another id than its note's is a recreated topic, and `recreated` says what to
do per the link's `on_recreate` rule: stop the partition (the default) or restart it at the new topic's beginning.
The old topic's records the link had not copied (as far as its note knew) are a `Gap` ("recreated") either way.

The target side: a target topic deleted under the link (or deleted and created again by someone else: another id)
takes the records the link had copied into it. The worker notes the target topic id too, and `target_lost` says what
to do per the link's `on_target_loss` rule: stop the partition (the default; the topic is not created again) or copy
again, from the source's log start, what the source still has. The records the target lost that the source still
has (log start up to the link's acknowledged position) are a `Gap` ("target-deleted" or "target-recreated"): the
ones that no copy holds until they are copied again. Those the source's retention took before are gone from both
sides, as the target's own retention would have taken them, and are not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel.worker_status import Gap

__all__ = ["OutOfRange", "Recreated", "TargetLost", "out_of_range", "recreated", "target_lost", "truncated_at"]

# librdkafka's message when it validated a position against its leader epoch (KIP-320) and the log of that epoch now
# ends below it: "Partition log truncation detected at offset 100 (leader epoch 0): broker end offset is 60 ..."
_TRUNCATION = re.compile(r"log truncation detected at offset (\d+).*?broker end offset is (\d+)")


@dataclass(frozen=True)
class OutOfRange:
    action: str  # "start", "retry", "skip" or "stop"
    seek_to: int | None  # where the partition reads next ("stop": None, it waits)
    gap: Gap | None = None


def out_of_range(
    topic: str,
    partition: int,
    position: int | None,
    low: int,
    high: int,
    *,
    start_from: str,
    on_gap: str,
    now_ms: int,
    truncated_at: int | None = None,
) -> OutOfRange:
    """The decision for a partition whose position `position` (None: the link has none) the source refused, its log
    being `low` (first offset kept) .. `high` (the high-watermark) now. `truncated_at`: where the consumer found the
    log of the position's leader epoch to end (KIP-320; new records may already have taken the offsets after it, so
    it is exact where the high-watermark is not)."""
    if position is None or position < 0:
        return OutOfRange("start", low if start_from == "earliest" else high)
    if truncated_at is not None and truncated_at < position:
        return OutOfRange("stop", None, Gap(topic, partition, truncated_at, position, "truncated", "stopped", now_ms))
    if position < low:
        skip = on_gap == "skip"
        gap = Gap(topic, partition, position, low, "retention", "skipped" if skip else "stopped", now_ms)
        return OutOfRange("skip", low, gap) if skip else OutOfRange("stop", None, gap)
    if position > high:
        return OutOfRange("stop", None, Gap(topic, partition, high, position, "truncated", "stopped", now_ms))
    return OutOfRange("retry", position)


@dataclass(frozen=True)
class Recreated:
    action: str  # "stop" (the partition waits, failed) or "restart" (read the new topic from its beginning)
    gap: Gap


def recreated(
    topic: str, partition: int, position: int | None, high: int | None, *, on_recreate: str, now_ms: int
) -> Recreated:
    """The decision for a partition of a topic recreated since the link's position `position` (its commit, or what
    it read) was taken; `high`: the old topic's high-watermark as the worker last knew it (None: unknown, counted as
    nothing lost past the position)."""
    first = position if position is not None and position >= 0 else 0
    end = max(first, high if high is not None else first)
    if on_recreate == "restart":
        return Recreated("restart", Gap(topic, partition, first, end, "recreated", "restarted", now_ms))
    return Recreated("stop", Gap(topic, partition, first, end, "recreated", "stopped", now_ms))


def truncated_at(message: str) -> int | None:
    """The offset a log truncation librdkafka detected (KIP-320) ends the old log at, from its error text; None for
    any other error."""
    match = _TRUNCATION.search(message)
    return int(match.group(2)) if match else None


@dataclass(frozen=True)
class TargetLost:
    action: str  # "stop" (the partition waits, failed) or "recopy" (read again from the source's log start)
    gap: Gap


def target_lost(
    topic: str, partition: int, position: int | None, low: int, *, how: str, on_target_loss: str, now_ms: int
) -> TargetLost:
    """The decision for a source partition whose target topic was lost under the link (`how`: "deleted", or
    "recreated" with another id): `position` is what the target had acknowledged (None: nothing yet), `low` the
    source's log start now."""
    end = max(low, position if position is not None and position >= 0 else low)
    reason = f"target-{how}"
    if on_target_loss == "recopy":
        return TargetLost("recopy", Gap(topic, partition, low, end, reason, "recopied", now_ms))
    return TargetLost("stop", Gap(topic, partition, low, end, reason, "stopped", now_ms))
