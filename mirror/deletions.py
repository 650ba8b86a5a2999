"""Topic deletions kept in step (pure): which copies of deleted source topics a link deletes on the target, and when
(`sync.topic_deletions`).

A copy is deleted only if the link created it (the keeper notes every topic it creates) and only once its source
topic has been seen deleted for `sync.topic_deletion_grace_seconds` (measured from the first round that saw it gone,
kept across restarts). A source topic that reappears within the grace period cancels it. A copy the link did not
create is reported, never deleted. "Deleted" means the source says the topic is unknown: a topic the link's
principal may no longer describe is not gone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

__all__ = ["DeletionPlan", "plan_deletions"]


@dataclass(frozen=True)
class DeletionPlan:
    delete: tuple[str, ...]  # target topics to delete now
    waiting: Mapping[str, int]  # target topic -> when its grace period ends (ms)
    not_ours: tuple[str, ...]  # copies of deleted topics the link did not create: reported, left
    gone_since: Mapping[str, int]  # target topic -> the first round that saw its source gone (ms), every one


def plan_deletions(
    gone: Collection[str], created: Collection[str], gone_since: Mapping[str, int], *, now_ms: int, grace_ms: int
) -> DeletionPlan:
    """`gone`: copies whose source topic the source says it does not know, this round."""
    since = {t: gone_since.get(t, now_ms) for t in gone}  # a source topic back again is forgotten
    ours = sorted(t for t in gone if t in created)
    delete = tuple(t for t in ours if now_ms - since[t] >= grace_ms)
    return DeletionPlan(
        delete=delete,
        waiting={t: since[t] + grace_ms for t in ours if t not in delete},
        not_ours=tuple(sorted(t for t in gone if t not in created)),
        gone_since=since,
    )
