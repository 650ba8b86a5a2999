"""Admin I/O for the mirror: read topics and their configs, apply a `TopicPlan`, learn a cluster's id."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.cimpl import NewPartitions, NewTopic

from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.kafka import already_exists, error_text, kafka_error
from kernel.topic_notes import topic_ids
from mirror.cluster_notes import claim_notes
from mirror.topics import AlterConfigs, TopicInfo, TopicPlan

__all__ = [
    "alter_topic_configs",
    "cluster_id",
    "describe_topics",
    "execute_plan",
    "link_cluster_ids",
    "list_topic_partitions",
    "retention_by_timestamps",
    "topic_ids",
]

log = logging.getLogger("mirrorwatch.mirror.admin")

TIMEOUT_S = 30.0
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
CONNECT_BACKOFF_MAX_S = 30.0


def cluster_id(admin: AdminClient, timeout_s: float = 10.0) -> str:
    """The cluster's id (raises KafkaException when it cannot be reached in time)."""
    metadata = admin.list_topics(timeout=timeout_s)
    if not metadata.cluster_id:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "the cluster returned no cluster id"))
    return metadata.cluster_id


def link_cluster_ids(
    config: MirrorwatchConfig,
    link: LinkConfig,
    admins: tuple[AdminClient, AdminClient],
    stop: threading.Event,
    *,
    name: str,
    checkpoint: Path | None = None,
) -> tuple[str, str] | None:
    """The source's and the target's cluster ids, retrying each cluster (a log line and a doubling back-off, never a
    traceback) until it answers; None when `stop` is set first. Every engine starts with this; the link's notes are
    then claimed for these clusters (`mirror.cluster_notes`: notes of others set aside, a spark `checkpoint` too)."""
    ids: list[str] = []
    for side, alias, admin in (("source", link.source, admins[0]), ("target", link.target, admins[1])):
        backoff_s = 1.0
        while True:
            try:
                ids.append(cluster_id(admin))
                break
            except KafkaException as exc:
                log.warning(
                    "link %s: cannot reach %s cluster %r at %s (%s); retrying in %.0fs",
                    name,
                    side,
                    alias,
                    config.clusters[alias].bootstrap_servers,
                    error_text(exc),
                    backoff_s,
                )
                if stop.wait(backoff_s):
                    return None
                backoff_s = min(backoff_s * 2, CONNECT_BACKOFF_MAX_S)
    log.info(
        "link %s: source %r is cluster %s, target %r is cluster %s", name, link.source, ids[0], link.target, ids[1]
    )
    claim_notes(config.state_path, link.name, ids[0], ids[1], checkpoint=checkpoint)
    return ids[0], ids[1]


def list_topic_partitions(admin: AdminClient, timeout_s: float = TIMEOUT_S) -> dict[str, int]:
    """Every topic of the cluster with its partition count (topics in error are left out)."""
    metadata = admin.list_topics(timeout=timeout_s)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def refused_topics(admin: AdminClient, topics: Iterable[str], timeout_s: float = TIMEOUT_S) -> list[str]:
    """Of `topics`, those the cluster refuses to describe to this principal (a listing hides them as if they were
    gone). DescribeTopics, which never creates a topic, unlike a metadata request for it by name."""
    names = list(topics)
    if not names:
        return []
    futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout_s)
    refused = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except TimeoutError as exc:  # not known: the round fails and the next one asks again
            raise kafka_error(exc, f"describing topic {name!r}") from None
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                refused.append(name)
    return refused


def describe_topics(admin: AdminClient, topics: Iterable[str], partitions: dict[str, int]) -> dict[str, TopicInfo]:
    """Partition counts and explicitly set configs of `topics` (one batched DescribeConfigs request)."""
    names = [t for t in topics if t in partitions]
    if not names:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    out: dict[str, TopicInfo] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=TIMEOUT_S).items():
        try:
            entries = future.result(timeout=TIMEOUT_S)
        except (KafkaException, TimeoutError) as exc:
            raise kafka_error(exc, f"describing topic {resource.name!r}") from None
        configs = {
            name: entry.value
            for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and entry.value is not None
        }
        limit = entries.get("max.message.bytes")
        max_bytes = int(limit.value) if limit is not None and limit.value and limit.value.isdigit() else None
        values = {name: entries[name].value for name in _RETENTION_CONFIGS if name in entries}
        out[resource.name] = TopicInfo(partitions[resource.name], configs, max_bytes, retention_by_timestamps(values))
    return out


_RETENTION_CONFIGS = ("retention.ms", "cleanup.policy", "message.timestamp.type")


def retention_by_timestamps(values: Mapping[str, str | None]) -> int | None:
    """A topic's effective retention.ms by its records' own timestamps (see TopicInfo.retention_ms)."""
    policy = (values.get("cleanup.policy") or "delete").replace(" ", "").split(",")
    if "delete" not in policy or values.get("message.timestamp.type") == "LogAppendTime":
        return None
    retention = values.get("retention.ms")
    try:
        ms = int(retention) if retention is not None else None
    except ValueError:
        return None
    return ms if ms is not None and ms >= 0 else None


def alter_topic_configs(admin: AdminClient, alters: Iterable[AlterConfigs]) -> dict[str, str]:
    """Make target topics' configs the source's (one IncrementalAlterConfigs request); what each refused topic's
    broker said (an ACL, a value it will not take), by topic. The link goes on either way: a refusal is drift."""
    alters = list(alters)
    if not alters:
        return {}
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            a.topic,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in a.set.items()
            ]
            + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in a.delete],
        )
        for a in alters
    ]
    refused: dict[str, str] = {}
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=TIMEOUT_S).items():
        try:
            future.result(timeout=TIMEOUT_S)
        except (KafkaException, TimeoutError) as exc:
            refused[resource.name] = error_text(exc) if isinstance(exc, KafkaException) else "no answer"
    return refused


def execute_plan(admin: AdminClient, plan: TopicPlan) -> None:
    """Create and grow target topics as planned. A topic somebody else created meanwhile is fine. (Configs are
    synced apart, by `alter_topic_configs`: a refusal there stops nothing.)"""
    if plan.create:
        new = [
            NewTopic(
                c.topic,
                num_partitions=c.partitions,
                replication_factor=c.replication_factor or -1,
                config=dict(c.configs),
            )
            for c in plan.create
        ]
        for name, future in admin.create_topics(new, operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S).items():
            try:
                future.result(timeout=TIMEOUT_S)
                log.info("created target topic %r", name)
            except (KafkaException, TimeoutError) as exc:
                if already_exists(exc):
                    continue
                raise kafka_error(exc, f"creating target topic {name!r}") from None
    if plan.add_partitions:
        grow = [NewPartitions(a.topic, a.total) for a in plan.add_partitions]
        for name, future in admin.create_partitions(
            grow, operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S
        ).items():
            try:
                future.result(timeout=TIMEOUT_S)
                log.info(
                    "grew target topic %r to %d partitions",
                    name,
                    next(a.total for a in plan.add_partitions if a.topic == name),
                )
            except (KafkaException, TimeoutError) as exc:
                raise kafka_error(exc, f"adding partitions to target topic {name!r}") from None
