"""The drift report (pure): what still differs between a link's source topics and their copies on the target, and
whether the link itself will make each the same at its next topic refresh or leaves it (and why).

`drift_of` reads a `TopicPlan` (`mirror.topics.plan_topics`, made from both clusters' topics as the link would make
it) and the two clusters' partition counts; `mirrorwatch drift` prints it. Differences, per target topic:
- `missing`: a selected source topic with no copy (created at the next refresh);
- `partitions`: the counts differ (a copy that had been in step is grown; one with more partitions is never shrunk;
  `partitioning: hash|modulo` accepts any count);
- `config <name>`: a copied config differs (synced at the next refresh, or left, with `ConfigDrift.reason`);
- `extra`: a target topic that the rename policy maps back to a topic the link would select but the source no
  longer has (deleted on the source: the link leaves it);
- `problem`: what stops the link (two source topics written to one target topic).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernel.config import TopicSelection
from kernel.rename import RenamePolicy
from mirror.topics import Partitioning, TopicPlan, is_internal_topic

__all__ = ["Difference", "drift_of", "extra_targets"]


@dataclass(frozen=True)
class Difference:
    target_topic: str
    source_topic: str | None  # None: no source topic (an extra target topic)
    what: str  # "missing", "partitions", "config <name>", "extra", "problem"
    source: str | None  # the source's value (partition count, config value); None: not there, or not set
    target: str | None
    synced: bool  # the link makes it the same at its next topic refresh
    note: str  # what the link does, or why it leaves it

    def line(self) -> str:
        values = (
            ""
            if self.what in {"missing", "extra", "problem"}
            else f": source {_v(self.source)}, target {_v(self.target)}"
        )
        return f"{self.what}{values}: {self.note}"


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


def drift_of(
    plan: TopicPlan,
    source_partitions: Mapping[str, int],
    target_partitions: Mapping[str, int],
    *,
    extras: Mapping[str, str] | None = None,
    partitioning: Partitioning = "preserve",
    refresh_s: float = 30,
) -> tuple[Difference, ...]:
    """Every difference, sorted by target topic and then as listed above."""
    when = f"at the link's next topic refresh (every {refresh_s:g} s)"
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
        out.append(
            Difference(
                target,
                None,
                "extra",
                None,
                str(target_partitions.get(target, "")) or None,
                False,
                f"a copy of {source!r}, which the source no longer has: left as it is",
            )
        )
    for problem, topic in zip(plan.problems, plan.problem_topics, strict=True):
        out.append(Difference(topic, None, "problem", None, None, False, f"stops the link: {problem}"))
    order = {"missing": 0, "partitions": 1, "extra": 3, "problem": 4}
    return tuple(sorted(out, key=lambda d: (d.target_topic, order.get(d.what.split()[0], 2), d.what)))
