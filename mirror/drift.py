"""The drift report (pure): what still differs between a link's source topics and their copies on the target, and
whether the link itself will make each the same at its next topic refresh or leaves it (and why).

`drift_of` reads a `TopicPlan` (`mirror.topics.plan_topics`, made from both clusters' topics as the link would make
it) and the two clusters' partition counts; `mirrorwatch drift` prints it. Differences, per target topic:
- `missing`: a selected source topic with no copy (created at the next refresh);
- `partitions`: the counts differ (a copy that had been in step is grown; one with more partitions is never shrunk;
  `partitioning: hash|modulo` accepts any count);
- `config <name>`: a copied config differs (synced at the next refresh, or left, with `ConfigDrift.reason`);
- `extra`: a target topic that the rename policy maps back to a topic the link would select but the source no
  longer has (deleted on the source: deleted after the grace period with `sync.topic_deletions: on` if the link
  created it, else left);
- `problem`: what stops the link (two source topics written to one target topic);
- `acl ...`: a topic ACL the source's call for on the copy that it lacks (`mirror.acl_sync`: created with
  `sync.acls`), or one the link made that the source no longer has (removed). ACLs made on the target by hand are
  not compared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from kernel.config import LinkConfig, TopicSelection
from kernel.rename import RenamePolicy
from mirror.acl_sync import TopicAcl
from mirror.topics import Partitioning, TopicPlan, is_internal_topic

__all__ = ["AclState", "Difference", "acl_drift", "drift_of", "drift_report", "extra_targets", "link_drift"]

DIFFERENCES_KEPT = 100  # of one link's differences in its worker's status (the counts are of all)


@dataclass(frozen=True)
class Difference:
    target_topic: str
    source_topic: str | None  # None: no source topic (an extra target topic)
    what: str  # "missing", "partitions", "config <name>", "extra", "problem"
    source: str | None  # the source's value (partition count, config value); None: not there, or not set
    target: str | None
    synced: bool  # the link makes it the same at its next topic refresh
    note: str  # what the link does, or why it leaves it

    @property
    def kind(self) -> str:
        """ "missing", "partitions", "config", "extra", "problem" or "acl" (the metrics' label)."""
        return self.what.split(" ", 1)[0]

    def line(self) -> str:
        if self.what in {"missing", "extra", "problem"} or self.what.startswith("acl "):
            return f"{self.what}: {self.note}"
        return f"{self.what}: source {_v(self.source)}, target {_v(self.target)}: {self.note}"


def _v(value: str | None) -> str:
    return "unset" if value is None else repr(value) if not value.isdigit() else value


def extra_targets(
    target_topics: Iterable[str],
    source_topics: Iterable[str],
    selection: TopicSelection,
    rename: RenamePolicy,
    *,
    exclude_internal: bool = True,
    ignore: Iterable[str] = (),
) -> dict[str, str]:
    """Target topics that are copies of a topic the link would select, by their names, that the source no longer
    has: target topic -> that source topic's name."""
    source, skip = set(source_topics), set(ignore)
    out: dict[str, str] = {}
    for topic in sorted(target_topics):
        name = rename.source_topic(topic)
        if name is None or topic in skip or name in source or not selection.matches(name):
            continue
        if exclude_internal and (is_internal_topic(name) or is_internal_topic(topic)):
            continue
        out[topic] = name
    return out


def _extra_note(target: str, created: Collection[str], deletions: str, grace_s: float) -> str:
    if deletions == "off":
        return "left as it is (sync.topic_deletions is off)"
    if target not in created:
        return "left as it is: the link did not create it"
    if deletions == "dry-run":
        return f"would be deleted {grace_s:g} s after the source's deletion (sync.topic_deletions: dry-run)"
    return f"deleted {grace_s:g} s after the source's deletion"


def _acl_what(acl: TopicAcl) -> str:
    return f"acl {acl.permission} {acl.operation} for {acl.principal}" + (
        "" if acl.host == "*" else f" from {acl.host}"
    )


def _source(acl: TopicAcl, source_of: Mapping[str, str]) -> str | None:
    return source_of.get(acl.topic) if acl.resource == "TOPIC" else acl.topic  # a group has one name on both


def _acl_on(acl: TopicAcl) -> str:
    """Where a difference of this ACL is listed: under its topic's copy, or under "group <name>"."""
    return acl.topic if acl.resource == "TOPIC" else f"{acl.resource.lower()} {acl.topic}"


def acl_drift(
    wanted: frozenset[TopicAcl],
    on_target: frozenset[TopicAcl],
    owned: frozenset[TopicAcl],
    *,
    source_of: Mapping[str, str],
    synced: bool,
    refresh_s: float = 30,
    when: str | None = None,
) -> tuple[Difference, ...]:
    """The copies' ACL differences (`mirror.acl_sync.mirrored_acls` gives `wanted`); `source_of`: target topic ->
    source topic. `source`/`target` say which side has the ACL (its permission). `when`: when the link makes them
    the same (default: at its next topic refresh)."""
    when = when or f"at the link's next topic refresh (every {refresh_s:g} s)"
    off = "sync.acls is off for this link"
    out = [
        Difference(_acl_on(a), _source(a, source_of), _acl_what(a), a.permission, None, synced,
                   f"created {when}" if synced else off)
        for a in sorted(wanted - on_target)
    ]  # fmt: skip
    out += [
        Difference(_acl_on(a), _source(a, source_of), _acl_what(a), None, a.permission, synced,
                   f"made by the link, gone from the source: removed {when}" if synced else off)
        for a in sorted((owned & on_target) - wanted)
    ]  # fmt: skip
    return tuple(out)


def drift_of(
    plan: TopicPlan,
    source_partitions: Mapping[str, int],
    target_partitions: Mapping[str, int],
    *,
    extras: Mapping[str, str] | None = None,
    partitioning: Partitioning = "preserve",
    refresh_s: float = 30,
    created: Collection[str] = (),
    deletions: str = "off",
    grace_s: float = 3600,
    when: str | None = None,
) -> tuple[Difference, ...]:
    """Every difference, sorted by target topic and then as listed above. `created`: the target topics the link
    created (its notes); `deletions`, `grace_s`: the link's `sync.topic_deletions` and grace period; `when`: when the
    link makes a difference the same (default: at its next topic refresh)."""
    when = when or f"at the link's next topic refresh (every {refresh_s:g} s)"
    out: list[Difference] = []
    source_of = {target: source for source, target in plan.mapping.items()}
    for create in plan.create:
        if create.topic in source_of:
            out.append(
                Difference(create.topic, source_of[create.topic], "missing", None, None, True, f"created {when}")
            )
    for grow in plan.add_partitions:
        src = source_of.get(grow.topic)
        out.append(Difference(grow.topic, src, "partitions", str(grow.total), str(grow.current), True, f"grown {when}"))
    growing = {g.topic for g in plan.add_partitions}
    for source, target in plan.mapping.items():
        have, want = target_partitions.get(target), source_partitions.get(source)
        if have is None or want is None or have == want or target in growing:
            continue
        note = (
            f"partitioning: {partitioning} writes to any count"
            if partitioning != "preserve"
            else "the target has more partitions: never shrunk"
            if have > want
            else "the target has fewer partitions and was never seen in step: the link stops on it"
        )
        out.append(Difference(target, source, "partitions", str(want), str(have), False, note))
    for alter in plan.alter_configs:
        for name, was in alter.was.items():
            now = alter.set.get(name)
            out.append(
                Difference(alter.topic, source_of.get(alter.topic), f"config {name}", now, was, True, f"synced {when}")
            )
    for d in plan.drift:
        out.append(
            Difference(
                d.target_topic, d.source_topic, f"config {d.config}", d.source_value, d.target_value, False, d.reason
            )
        )
    for target, source in (extras or {}).items():
        deleted = deletions == "on" and target in created
        note = _extra_note(target, created, deletions, grace_s)
        out.append(
            Difference(
                target,
                None,
                "extra",
                None,
                str(target_partitions.get(target, "")) or None,
                deleted,
                f"a copy of {source!r}, which the source no longer has: {note}",
            )
        )
    for problem, topic in zip(plan.problems, plan.problem_topics, strict=True):
        out.append(Difference(topic, None, "problem", None, None, False, f"stops the link: {problem}"))
    order = {"missing": 0, "partitions": 1, "extra": 3, "problem": 4}
    return tuple(sorted(out, key=lambda d: (d.target_topic, order.get(d.what.split()[0], 2), d.what)))


@dataclass(frozen=True)
class AclState:
    """A link's topic ACLs as one round read them: the copies' ACLs the source's call for (`mirrored_acls`), the
    copies' ACLs on the target, and those of them the link made."""

    wanted: frozenset[TopicAcl]
    on_target: frozenset[TopicAcl]
    owned: frozenset[TopicAcl]


def link_drift(
    plan: TopicPlan,
    source_partitions: Mapping[str, int],
    target_partitions: Mapping[str, int],
    link: LinkConfig,
    *,
    extras: Mapping[str, str],
    created: Collection[str],
    acls: AclState | None,
    when: str | None = None,
) -> tuple[Difference, ...]:
    """One link's whole report: `drift_of` with the link's settings, and its ACL differences (`acls`: None when they
    could not be read), sorted by target topic."""
    found = drift_of(
        plan,
        source_partitions,
        target_partitions,
        extras=extras,
        partitioning=link.partitioning,
        refresh_s=link.refresh_topics_interval_seconds,
        created=created,
        deletions=link.sync.topic_deletions,
        grace_s=link.sync.topic_deletion_grace_seconds,
        when=when,
    )
    if acls is not None:
        source_of = {t: s for s, t in plan.mapping.items()}
        found += acl_drift(
            acls.wanted,
            acls.on_target,
            acls.owned,
            source_of=source_of,
            synced=link.sync.acls,
            refresh_s=link.refresh_topics_interval_seconds,
            when=when,
        )
    return tuple(sorted(found, key=lambda d: d.target_topic))


def drift_report(found: Iterable[Difference], *, at_ms: int, acls: str) -> dict[str, Any]:
    """A link's differences as its worker's status carries them (JSON): when the round found them, how many of
    each kind (`synced`: the round made them the same), the first `DIFFERENCES_KEPT`, and whether ACLs were compared
    (`acls`: "compared" or why not)."""
    found = list(found)
    counts = Counter((d.kind, d.synced) for d in found)
    return {
        "at_ms": at_ms,
        "count": len(found),
        "counts": [{"kind": k, "synced": s, "count": n} for (k, s), n in sorted(counts.items())],
        "differences": [asdict(d) for d in found[:DIFFERENCES_KEPT]],
        "acls": acls,
    }
