"""How failover plans, outcomes and checks read in a terminal (pure: lines of text from the plan's values)."""

from __future__ import annotations

from failover.apply import GroupCheck, GroupOutcome
from failover.plan import FailoverPlan, GroupPlan

__all__ = ["check_lines", "outcome_lines", "plan_lines"]


def _target_state(g: GroupPlan) -> str:
    t = g.target
    if t.state == "Dead":
        return f"{t.group} does not exist on the target yet"
    committed = "with commits" if t.committed else "no commits"
    return f"{t.group} on the target: {t.state}, {t.members} member(s), {committed}"


def plan_lines(plan: FailoverPlan) -> list[str]:
    lines = [
        f"failover plan for link {plan.link} ({plan.source} -> {plan.target}): {len(plan.groups)} group(s); "
        f"scanned {plan.scanned_partitions} target partition(s), {plan.scanned_records:,} records, "
        f"in {plan.seconds:.1f} s"
    ]
    for g in plan.groups:
        lines.append("")
        lines.append(f"group {g.group} -> {_target_state(g)}")
        if g.translations:
            lines.append(
                f"  {'target partition':<32} {'offset':>10} {'method':<7} {'now':>10} {'unread':>8} {'read twice':>10}"
            )
            for t in g.translations:
                now = g.target.committed.get((t.topic, t.partition))
                twice = "?" if t.read_twice is None else t.read_twice
                lines.append(
                    f"  {t.topic + f'[{t.partition}]':<32} {t.offset:>10} {t.method:<7} "
                    f"{'-' if now is None else now:>10} {t.unread_here:>8} {twice:>10}"
                )
            lines.append(
                f"  {'source partition':<32} {'committed':>10} {'high-wm':>10} {'mirrored':>10} {'to come':>8}"
            )
            for s in g.sources:
                mirrored = "-" if s.last_on_target is None else f"..{s.last_on_target}"
                hw = "-" if s.high_watermark is None else str(s.high_watermark)
                name = f"{s.topic}[{s.partition}]"
                lines.append(f"  {name:<32} {s.committed:>10} {hw:>10} {mirrored:>10} {s.not_mirrored:>8}")
                if s.read_not_mirrored:
                    lines.append(
                        f"    ! the group has read {s.read_not_mirrored} record(s) of {s.topic}[{s.partition}] the "
                        f"mirror has not copied yet (offsets {s.mirrored_to}..{s.committed - 1}): a consumer starting "
                        "now reads them again when they arrive; `apply` waits for the link"
                    )
                if s.before_first:
                    lines.append(
                        f"    ! {s.before_first} offset(s) from {s.committed} are below the first record of "
                        f"{s.topic}[{s.partition}] on the target ({s.first_on_target}): removed there by retention "
                        "or never mirrored; they cannot be read on the target"
                    )
        for topic in g.unmirrored:
            lines.append(f"  ! {topic}: nothing of it on the target through this link; not translated")
        for topic in g.recreated:
            lines.append(
                f"  ! {topic}: deleted and created again since the link copied it (on_recreate: stop): its copies on "
                "the target are the old topic's records; not translated"
            )
        for lost in g.lost:
            how = (
                "reached the target already older than its retention.ms (target-retention): its broker deletes them"
                if lost.reason == "target-retention"
                else f"were gone from the source ({lost.reason}) before the link copied them"
            )
            lines.append(
                f"  ! LOST: {lost.records} record(s) of {lost.topic}[{lost.partition}] the group had not read, offsets "
                f"{lost.first_offset}..{lost.end_offset - 1}, {how}: no consumer reads them on the target"
            )
        ahead = (
            f" (and {g.read_not_mirrored} it has read whose copies are still to come)" if g.read_not_mirrored else ""
        )
        lines.append(
            f"  a consumer starting there reads {'an unknown number of' if g.read_twice is None else g.read_twice} "
            f"record(s) twice{ahead}; "
            f"{g.not_mirrored} offset(s) at or after its commits are not mirrored yet"
            + (f"; {g.records_lost} record(s) it had not read are LOST" if g.records_lost else "")
        )
    return lines


def outcome_lines(outcomes: list[GroupOutcome]) -> list[str]:
    lines: list[str] = []
    for o in outcomes:
        name = o.group if o.group == o.target_group else f"{o.group} -> {o.target_group}"
        if o.outcome == "refused":
            lines.append(f"{name}: refused, nothing committed: {o.reason}")
        elif o.outcome == "unchanged":
            lines.append(f"{name}: unchanged (the target group is already there)")
        else:
            lines.append(f"{name}: {o.outcome}")
            for topic, partition, before, after in o.changes:
                lines.append(f"  {topic}[{partition}]: {'none' if before is None else before} -> {after}")
    return lines


def check_lines(checks: list[GroupCheck]) -> list[str]:
    lines: list[str] = []
    for c in checks:
        name = c.group if c.group == c.target_group else f"{c.group} -> {c.target_group}"
        if c.exact and c.lost:
            lines.append(
                f"{name}: exact but for {c.lost} record(s) lost before the link copied them ({len(c.checks)} "
                "partition(s): nothing else missed, nothing read twice beyond the plan)"
            )
            continue
        if c.exact:
            lines.append(
                f"{name}: exact ({len(c.checks)} partition(s): nothing missed, nothing read twice beyond the plan)"
            )
            continue
        lines.append(f"{name}: NOT exact")
        for topic, partition in c.uncommitted:
            lines.append(f"  {topic}[{partition}]: no commit in the target group")
        for p in c.checks:
            if p.missed or p.committed != p.exact:
                lines.append(
                    f"  {p.topic}[{p.partition}]: committed {p.committed}, exact {p.exact}: "
                    f"misses {p.missed} unread record(s), reads {p.read_twice} twice"
                )
    return lines
