"""The topic planner (pure): which source topics a link mirrors, and what the target needs for them.

plan -> review -> execute: `plan_topics` looks at both clusters' topics and returns a `TopicPlan` (topics to create,
partitions to add, configs to sync, problems that stop the link, config drift to report); `mirror.admin.execute_plan`
applies it.

Partition counts, with `partitioning: preserve` (target partition = source partition):
- a target topic that does not exist is created with the source's partition count;
- a target we saw in step with its source whose source then grew is grown to match (new source partitions must
  have somewhere to go);
- a target that already had fewer partitions than its source when we first saw it is a problem: mirrorwatch does not
  silently reshape a topic somebody else created. `partitioning: hash|modulo` accepts any count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from kernel.config import SyncOptions
from kernel.rename import RenamePolicy
from kernel.selection import INTERNAL_TOPIC_PATTERNS, is_internal_topic, select_topics

__all__ = [
    "INTERNAL_TOPIC_PATTERNS",
    "NOT_COPIED_CONFIGS",
    "AddPartitions",
    "AlterConfigs",
    "ConfigDrift",
    "CreateTopic",
    "Partitioning",
    "TopicInfo",
    "TopicPlan",
    "config_verdict",
    "copyable_configs",
    "is_internal_topic",
    "plan_topics",
    "select_topics",
]

# Topic configs that describe the source cluster rather than the data (MirrorMaker 2 leaves out the same ones):
# throttles and ISR settings depend on the target's brokers; timestamp rules would make the target refuse or rewrite
# the CreateTime the mirror preserves; tiered-storage settings depend on the target's storage.
NOT_COPIED_CONFIGS = frozenset(
    {
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "message.timestamp.type",
        "message.timestamp.difference.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "remote.storage.enable",
        "local.retention.ms",
        "local.retention.bytes",
    }
)

Partitioning = Literal["preserve", "hash", "modulo"]


@dataclass(frozen=True)
class TopicInfo:
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)  # explicitly set (non-default) topic configs
    max_message_bytes: int | None = None  # effective limit for one record batch (topic setting or broker default)
    # effective retention.ms by the records' own timestamps (cleanup.policy delete, message.timestamp.type CreateTime);
    # None: records are kept forever, by compaction only, or by the broker's append time (`mirror.expiry`)
    retention_ms: int | None = None


@dataclass(frozen=True)
class CreateTopic:
    topic: str
    partitions: int
    replication_factor: int | None  # None: the target broker's default
    configs: Mapping[str, str]


@dataclass(frozen=True)
class AddPartitions:
    topic: str
    current: int
    total: int


@dataclass(frozen=True)
class AlterConfigs:
    """A target topic's configs made the source's (`sync.topic_configs`): set these, delete those (the target's
    default then applies, as the source's does)."""

    topic: str
    set: Mapping[str, str]
    delete: tuple[str, ...]
    was: Mapping[str, str | None]  # the target's values before, for the log


@dataclass(frozen=True)
class ConfigDrift:
    """A copied config that differs and that the link leaves so, with the reason."""

    source_topic: str
    target_topic: str
    config: str
    source_value: str | None  # None: not set (broker default)
    target_value: str | None
    reason: str = "sync.topic_configs is off for this link"


@dataclass(frozen=True)
class TopicPlan:
    mapping: Mapping[str, str]  # selected source topic -> target topic
    source_partitions: Mapping[str, int]  # what the plan saw: the next plan's `known_source_partitions`
    create: tuple[CreateTopic, ...] = ()
    add_partitions: tuple[AddPartitions, ...] = ()
    problems: tuple[str, ...] = ()  # each stops the link until fixed
    problem_topics: tuple[str, ...] = ()  # the target topic each problem is about, in the same order
    drift: tuple[ConfigDrift, ...] = ()
    alter_configs: tuple[AlterConfigs, ...] = ()

    @property
    def changes_target(self) -> bool:
        return bool(self.create or self.add_partitions or self.alter_configs)


def copyable_configs(configs: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in configs.items() if k not in NOT_COPIED_CONFIGS and not k.startswith("confluent.")}


def config_verdict(name: str, sync: SyncOptions | None) -> str | None:
    """Why the link leaves a differing copied config as it is; None when it syncs it."""
    if sync is None or not sync.topic_configs:
        return "sync.topic_configs is off for this link"
    pattern = next((p for p in sync.topic_configs_exclude if p.fullmatch(name)), None)
    if pattern is not None:
        return f"excluded by sync.topic_configs_exclude '{pattern.pattern}'"
    return None


def plan_topics(
    source: Mapping[str, TopicInfo],
    target: Mapping[str, TopicInfo],
    selected: Iterable[str],
    rename: RenamePolicy,
    *,
    partitioning: Partitioning = "preserve",
    replication_factor: int | None = None,
    known_source_partitions: Mapping[str, int] | None = None,
    dead_letter_topic: str | None = None,
    sync: SyncOptions | None = None,
) -> TopicPlan:
    """What the target needs so that every selected source topic can be mirrored, and its copies' configs made the
    source's where `sync` says so (the others that differ are drift)."""
    known = known_source_partitions or {}
    mapping: dict[str, str] = {}
    create: list[CreateTopic] = []
    grow: list[AddPartitions] = []
    problems: list[str] = []
    problem_topics: list[str] = []
    drift: list[ConfigDrift] = []
    alter: list[AlterConfigs] = []
    claimed: dict[str, str] = {}  # target topic -> the source topic written there
    for topic in selected:
        info = source[topic]
        target_topic = rename.target_topic(topic)
        if target_topic in claimed:
            # e.g. map {a: b} while a source topic is itself named b: two topics would merge into one.
            problems.append(
                f"source topics {claimed[target_topic]!r} and {topic!r} would both be written to target "
                f"topic {target_topic!r}: exclude one of them or rename it elsewhere"
            )
            problem_topics.append(target_topic)
            continue
        claimed[target_topic] = topic
        mapping[topic] = target_topic
        existing = target.get(target_topic)
        if existing is None:
            create.append(
                CreateTopic(target_topic, info.partitions, replication_factor, copyable_configs(info.configs))
            )
            continue
        if partitioning == "preserve" and existing.partitions < info.partitions:
            if known.get(topic) == existing.partitions:  # was in step, then the source grew
                grow.append(AddPartitions(target_topic, existing.partitions, info.partitions))
            else:
                problems.append(
                    f"target topic {target_topic!r} has {existing.partitions} partition(s) but source topic "
                    f"{topic!r} has {info.partitions}: add partitions to the target, or set the link's "
                    "partitioning to hash or modulo"
                )
                problem_topics.append(target_topic)
        differ = _config_drift(topic, target_topic, info.configs, existing.configs, sync)
        drift.extend(d for d in differ if d.reason)
        synced = [d for d in differ if not d.reason]
        if synced:
            alter.append(
                AlterConfigs(
                    target_topic,
                    {d.config: d.source_value for d in synced if d.source_value is not None},
                    tuple(d.config for d in synced if d.source_value is None),
                    {d.config: d.target_value for d in synced},
                )
            )
    if dead_letter_topic is not None and dead_letter_topic not in target:
        create.append(CreateTopic(dead_letter_topic, 1, replication_factor, {}))
    return TopicPlan(
        mapping=mapping,
        source_partitions={t: source[t].partitions for t in mapping},
        create=tuple(create),
        add_partitions=tuple(grow),
        problems=tuple(problems),
        problem_topics=tuple(problem_topics),
        drift=tuple(drift),
        alter_configs=tuple(alter),
    )


def _config_drift(
    source_topic: str,
    target_topic: str,
    source: Mapping[str, str],
    target: Mapping[str, str],
    sync: SyncOptions | None,
) -> list[ConfigDrift]:
    """Every copied config that differs; those the link syncs have no reason."""
    src, dst = copyable_configs(source), copyable_configs(target)
    return [
        ConfigDrift(source_topic, target_topic, name, src.get(name), dst.get(name), config_verdict(name, sync) or "")
        for name in sorted(src.keys() | dst.keys())
        if src.get(name) != dst.get(name)
    ]
