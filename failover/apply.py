"""`mirrorwatch failover apply` and `verify`: commit a plan to the target groups, and check committed positions.

Apply commits, per group, the plan's offsets to the group on the target (the same id, or the one `--map` names) with
the admin API's AlterConsumerGroupOffsets, which Kafka only allows on a group without members. A group is refused
whole (nothing of it committed) when it has active members on the target, or when a committed offset there is past
the plan's and `--force` was not given (a failover never moves a group backwards on its own). Committing what is
already committed changes nothing, so apply is idempotent. Verify judges the target group's committed positions
against the source commits on a fresh scan: the records each position would miss and read twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from failover.plan import FailoverPlan, GroupPlan, committed_offsets
from failover.scan import copies_below
from failover.translate import PositionCheck, check_position
from kernel.config import MirrorwatchConfig
from kernel.errors import MirrorwatchError
from kernel.group_offsets import FetchError, GroupOffsetsUnknown, commit_offsets
from kernel.wait import WaitTimeout, wait_until

__all__ = [
    "GroupCheck",
    "GroupOutcome",
    "apply_plan",
    "mirror_behind",
    "preview_plan",
    "verify_plan",
    "wait_for_mirror",
]

TIMEOUT_S = 30.0
Change = tuple[str, int, int | None, int]  # topic, partition, committed before (None: none), committed now


@dataclass(frozen=True)
class GroupOutcome:
    group: str
    target_group: str
    outcome: Literal["committed", "unchanged", "refused", "would commit"]
    reason: str = ""
    changes: list[Change] = field(default_factory=list)


def _decide(plan: GroupPlan, force: bool, allow_rereads: bool = False) -> GroupOutcome | list[Change]:
    target = plan.target
    if not plan.translations:
        return GroupOutcome(plan.group, target.group, "refused", "none of its topics is mirrored by this link")
    if plan.read_not_mirrored and not allow_rereads:
        behind = ", ".join(
            f"{s.topic}[{s.partition}] copied to {s.mirrored_to}, committed {s.committed}"
            for s in plan.sources
            if s.read_not_mirrored
        )
        return GroupOutcome(
            plan.group,
            target.group,
            "refused",
            f"the mirror has not copied {plan.read_not_mirrored} record(s) it has read on the source ({behind}): "
            "a consumer starting now would read them again when they arrive; let the link catch up "
            "(--wait-seconds), or --allow-rereads to commit now",
        )
    if target.members:
        return GroupOutcome(
            plan.group,
            target.group,
            "refused",
            f"it has {target.members} active member(s) on the target (state {target.state}): stop them first",
        )
    changes: list[Change] = []
    backwards: list[str] = []
    for t in plan.translations:
        before = target.committed.get((t.topic, t.partition))
        if before == t.offset:
            continue
        if before is not None and before > t.offset and not force:
            backwards.append(f"{t.topic}[{t.partition}] {before} -> {t.offset}")
        changes.append((t.topic, t.partition, before, t.offset))
    if backwards:
        return GroupOutcome(
            plan.group,
            target.group,
            "refused",
            "it would move backwards on the target (" + ", ".join(backwards) + "): --force to do it anyway",
        )
    return changes


def mirror_behind(plan: FailoverPlan) -> dict[tuple[str, int], int]:
    """Per source partition where a group of the plan has read records the mirror has not copied yet: the offset the
    link's own group must commit to (after the last of those records; the highest over the groups)."""
    out: dict[tuple[str, int], int] = {}
    for g in plan.groups:
        for s in g.sources:
            if s.read_not_mirrored:
                reach = s.mirror_must_reach if s.mirror_must_reach is not None else s.committed
                out[(s.topic, s.partition)] = max(reach, out.get((s.topic, s.partition), 0))
    return out


def wait_for_mirror(
    config: MirrorwatchConfig,
    plan: FailoverPlan,
    wait_s: float,
    progress: Callable[[str], None],
) -> bool:
    """Wait (up to `wait_s`) until the link's own group has committed, on every source partition where a group of
    the plan is ahead of the mirror, at least that group's commit: the mirror commits what the target acknowledged,
    so every record those groups read is then on the target. True when it got there (re-plan then)."""
    behind = mirror_behind(plan)
    if not behind:
        return True
    link = next(ln for ln in config.links if ln.name == plan.link)
    cluster = config.clusters[link.source]
    deadline, said = time.monotonic() + wait_s, [-5.0]

    def copied() -> bool:
        found = committed_offsets(cluster, link.source, [link.consumer_group])[link.consumer_group]
        short = {sp: o - found.get(sp, 0) for sp, o in behind.items() if found.get(sp, 0) < o}
        now = time.monotonic()
        if short and now - said[0] >= 5.0:
            said[0] = now
            progress(
                f"waiting up to {max(0.0, deadline - now):.0f} s for link {link.name} (group {link.consumer_group}) "
                f"to copy {sum(short.values())} record(s) the groups have read: "
                + ", ".join(f"{t}[{p}] {n}" for (t, p), n in sorted(short.items()))
            )
        return not short

    try:
        return wait_until(copied, timeout_s=wait_s, interval_s=1.0, description=f"link {link.name} to copy")
    except WaitTimeout:
        return False
    except MirrorwatchError as exc:  # not readable (no Describe on it, say): plan again and let apply decide
        progress(f"not waiting: the commits of the link's group {link.consumer_group!r} are unknown: {exc}")
        return False


def preview_plan(plan: FailoverPlan) -> list[GroupOutcome]:
    """What `apply_plan` would do, committing nothing (`failover promote --dry-run`)."""
    outcomes = []
    for group_plan in plan.groups:
        decided = _decide(group_plan, force=False)
        if isinstance(decided, GroupOutcome):
            outcomes.append(decided)
        else:
            target = group_plan.target.group
            outcomes.append(
                GroupOutcome(group_plan.group, target, "would commit", changes=decided)
                if decided
                else GroupOutcome(group_plan.group, target, "unchanged")
            )
    return outcomes


def apply_plan(
    config: MirrorwatchConfig, plan: FailoverPlan, *, force: bool = False, allow_rereads: bool = False
) -> list[GroupOutcome]:
    """Commit each group's plan on the target; one outcome per group."""
    link = next(ln for ln in config.links if ln.name == plan.link)
    outcomes: list[GroupOutcome | None] = []
    commits: dict[str, list[Change]] = {}
    for group_plan in plan.groups:
        decided = _decide(group_plan, force, allow_rereads)
        if isinstance(decided, GroupOutcome):
            outcomes.append(decided)
        elif not decided:
            outcomes.append(GroupOutcome(group_plan.group, group_plan.target.group, "unchanged"))
        else:
            outcomes.append(None)  # committed below, every group at once
            commits[group_plan.target.group] = decided
    # in the child of `kernel.group_offsets`: a coordinator request can abort the asking process (librdkafka#4605),
    # and standby groups commit from inside the monitor and `mirrorwatch run`
    try:
        answers = commit_offsets(
            config.clusters[link.target], link.target, {g: [(t, p, a) for t, p, _, a in d] for g, d in commits.items()}
        )
    except GroupOffsetsUnknown as exc:
        answers = {g: FetchError(f"no answer ({exc}): whether it landed is unknown, run it again") for g in commits}
    for i, group_plan in enumerate(plan.groups):
        if outcomes[i] is not None:
            continue
        target = group_plan.target.group
        answer = answers.get(target, FetchError("no answer"))
        failed = [str(answer)] if isinstance(answer, FetchError) else answer
        outcomes[i] = (
            GroupOutcome(group_plan.group, target, "refused", "the target refused: " + "; ".join(failed))
            if failed
            else GroupOutcome(group_plan.group, target, "committed", changes=commits[target])
        )
    return [o for o in outcomes if o is not None]


@dataclass(frozen=True)
class GroupCheck:
    group: str
    target_group: str
    checks: list[PositionCheck]
    uncommitted: list[tuple[str, int]]  # target partitions the plan covers with no commit in the target group
    lost: int = 0  # records the group had not read that the link never copied (the plan's `lost`): never on the target

    @property
    def exact(self) -> bool:
        return not self.uncommitted and all(c.missed == 0 and c.committed == c.exact for c in self.checks)

    @property
    def missed(self) -> int:
        return sum(c.missed for c in self.checks)


def verify_plan(config: MirrorwatchConfig, plan: FailoverPlan) -> list[GroupCheck]:
    """The target groups' committed positions against the source commits the plan read, on the plan's scan. A
    position below the first record the scan kept (a group committed too low) has the stretch up to it read again,
    so that the copies it would read twice there are counted too."""
    link = next(ln for ln in config.links if ln.name == plan.link)
    out: list[GroupCheck] = []
    for g in plan.groups:
        checks: list[PositionCheck] = []
        uncommitted: list[tuple[str, int]] = []
        below: dict[tuple[str, int], tuple[int, int]] = {}
        for t in g.translations:
            tp = (t.topic, t.partition)
            committed = g.target.committed.get(tp)
            if committed is None:
                uncommitted.append(tp)
                continue
            log = plan.logs[tp]
            checks.append(check_position(log, g.commits, committed))
            first_kept = log.first_kept
            if t.method == "exact" and first_kept is not None and committed < first_kept:
                below[tp] = (max(committed, log.start or 0), first_kept)
        if below and plan.source_id:
            extra = copies_below(config.clusters[link.target], link.target, below, plan.source_id, g.commits)
            checks = [replace(c, read_twice=c.read_twice + extra.get((c.topic, c.partition), 0)) for c in checks]
        out.append(GroupCheck(g.group, g.target.group, checks, uncommitted, g.records_lost))
    return out
