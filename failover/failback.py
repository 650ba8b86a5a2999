"""`mirrorwatch failover failback`: the way home after a promotion (issue #42), without rebuilding the old cluster.

A link promoted (`failover promote`, A -> B) recorded, per partition of its target topics, B's end at that moment:
where the records B took on its own begin. The reverse link (B -> A, in the config) is set to start there: its group
on B is committed at those offsets (only forward: a group already past one is left there), so that, run, it copies
every record written on B after the promotion and none of the copies of A's own records before it (provenance would
skip them anyway: loop prevention). The records A took after the promotion point and never had copied (`failover
diverged`) stay where they are, below what the reverse link appends, unread by any group moved home (`--diverged
skip`, the default; `diverged` lists and exports them), or are first copied to the end of their partitions on the
promoted cluster, where the applications read them once and the reverse link takes them home (`--diverged read`:
failover.redeliver). A reverse link promoted in an earlier cycle is armed again (its promotion is older than this
one).

Then: run the reverse link (`mirrorwatch mirror --link R`); once B's producers have stopped, `failover promote --link
R` moves the groups back to A exactly and stops it — the cycle can start again."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from failover.diverged import promotion_of
from failover.plan import FailoverUsageError, committed_offsets, find_link
from failover.redeliver import Delivery, deliver_tail
from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.control_store import load_control, save_control
from kernel.group_offsets import FetchError, GroupOffsetsUnknown, commit_offsets
from kernel.link_control import LinkControl
from kernel.selection import select_topics

log = logging.getLogger("mirrorwatch.failover")

__all__ = ["DIVERGED_RULES", "Failback", "failback", "reverse_of"]

DIVERGED_RULES = ("skip", "read")

Change = tuple[str, int, int | None, int]  # topic, partition, committed before (None: none), committed now


@dataclass(frozen=True)
class Failback:
    link: str
    reverse: str
    group: str  # the reverse link's group, on the promoted target
    changes: tuple[Change, ...]
    unchanged: int  # partitions already at or past the promotion point
    armed: bool  # the reverse link's own earlier promotion was lifted
    refused: str | None = None  # why the commit did not land (None: it did, or a dry run)
    delivery: Delivery | None = None  # `--diverged read`: the tail copied to the promoted cluster


def reverse_of(config: MirrorwatchConfig, link: LinkConfig, name: str | None = None) -> LinkConfig:
    """The link from `link`'s target back to its source (FailoverUsageError: none, or several and no name)."""
    if name is not None:
        reverse = find_link(config, name)
        if (reverse.source, reverse.target) != (link.target, link.source):
            raise FailoverUsageError(
                f"--reverse {name}: it goes from {reverse.source} to {reverse.target}, not from {link.target} to "
                f"{link.source}"
            )
        return reverse
    found = [r for r in config.links if (r.source, r.target) == (link.target, link.source)]
    if not found:
        raise FailoverUsageError(
            f"no link from {link.target} to {link.source} in the config: add one (source {link.target}, target "
            f"{link.source}, its topics the copies link {link.name} wrote) and run again"
        )
    if len(found) > 1:
        names = ", ".join(r.name for r in found)
        raise FailoverUsageError(f"several links from {link.target} to {link.source} ({names}): name one, --reverse")
    return found[0]


def failback(
    config: MirrorwatchConfig,
    link_name: str,
    *,
    reverse: str | None = None,
    dry_run: bool = False,
    diverged: str = "skip",
) -> Failback:
    """Commit the reverse link's group at the promotion point, the tail first delivered when `diverged` is "read"
    (see the module docstring). FailoverUsageError (exit 2): the link was never promoted, has no reverse link, or the
    reverse link was promoted after it."""
    if diverged not in DIVERGED_RULES:
        raise FailoverUsageError(f"--diverged {diverged!r}: expected one of {', '.join(DIVERGED_RULES)}")
    link = find_link(config, link_name)
    promotion = promotion_of(config, link)
    if promotion is None:
        raise FailoverUsageError(f"link {link.name} was never promoted: there is nothing to fail back from")
    back = reverse_of(config, link, reverse)
    if not promotion.target_offsets:
        raise FailoverUsageError(
            f"link {link.name}'s promotion did not record where {link.target} began to take records of its own "
            "(promoted by an older mirrorwatch): set the reverse link's start by hand (failover apply its group)"
        )
    control = load_control(config, back)
    if control.promoted is not None and control.promoted.at_ms >= promotion.at_ms:
        raise FailoverUsageError(
            f"the reverse link {back.name} was promoted after link {link.name} ({control.describe()}): fail back "
            f"link {back.name} instead"
        )
    chosen = set(select_topics({t for t, _, _ in promotion.target_offsets}, back.topics))
    start = [(t, p, o) for t, p, o in promotion.target_offsets if t in chosen]
    if not start:
        raise FailoverUsageError(f"the reverse link {back.name} selects none of the topics link {link.name} wrote")
    source = config.clusters[back.source]
    now = committed_offsets(source, back.source, [back.consumer_group], optional=back.consumer_group)
    committed = now.get(back.consumer_group, {})
    changes = tuple(
        (t, p, committed.get((t, p)), o) for t, p, o in start if committed.get((t, p)) is None or committed[(t, p)] < o
    )
    result = Failback(link.name, back.name, back.consumer_group, changes, len(start) - len(changes), False)
    delivery = deliver_tail(config, link, promotion, dry_run=dry_run) if diverged == "read" else None
    if dry_run or (delivery is not None and delivery.failed is not None):
        refused = None if delivery is None or delivery.failed is None else f"the tail's copies: {delivery.failed}"
        return dataclasses.replace(result, refused=refused, delivery=delivery)
    refused = _commit(config, back, changes)
    if refused is not None:
        return dataclasses.replace(result, refused=refused, delivery=delivery)
    armed = control.promoted is not None
    if armed:  # an earlier cycle's promotion of the reverse link: it copies again
        missed = save_control(config, back, LinkControl(back.name, since_ms=promotion.at_ms, by=promotion.by))
        if missed is not None:
            log.warning("link %s: armed on this host only (its workers on other hosts stay stopped): %s",
                        back.name, missed)  # fmt: skip
    return dataclasses.replace(result, armed=armed, delivery=delivery)


def _commit(config: MirrorwatchConfig, back: LinkConfig, changes: tuple[Change, ...]) -> str | None:
    if not changes:
        return None
    try:
        answers = commit_offsets(
            config.clusters[back.source], back.source, {back.consumer_group: [(t, p, o) for t, p, _, o in changes]}
        )
    except GroupOffsetsUnknown as exc:
        return f"no answer ({exc}): whether it landed is unknown, run it again"
    answer = answers.get(back.consumer_group, FetchError("no answer"))
    if isinstance(answer, FetchError):
        return str(answer)
    return "; ".join(answer) or None
