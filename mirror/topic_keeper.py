"""The target topics of a link, for every engine (python, exactly-once, spark): select the source topics, describe
both sides, plan (`mirror.topics`), create and grow what the plan says, and remember what the engines route by.

A plan with problems stops the link with all of them named. Source and target on the same cluster are refused unless
the rename policy changes every topic name, and then the link's own output is never selected again (orders ->
source.orders -> source.source.orders)."""

from __future__ import annotations

import logging
import threading

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from mirror.admin import describe_topics, execute_plan, list_topic_partitions, refused_topics
from mirror.failure import MirrorFailure
from mirror.topics import ConfigDrift, CreateTopic, TopicPlan, plan_topics, select_topics
from mirrorwatch.config import LinkConfig, MirrorwatchConfig
from mirrorwatch.errors import ConfigError, ConfigProblem, KafkaClientError
from mirrorwatch.kafka import error_text
from mirrorwatch.rename import RenamePolicy, rename_policy

__all__ = ["TopicKeeper", "refuse_loop"]

log = logging.getLogger("mirrorwatch.mirror")


def refuse_loop(config: MirrorwatchConfig, link: LinkConfig, source_id: str, target_id: str) -> None:
    """Source and target are one cluster and some topic would keep its name: every record would be mirrored onto
    itself. A config error naming the link's rename."""
    if source_id != target_id or rename_policy(link.rename, link.source).renames_every_topic:
        return
    raise ConfigError(
        [
            ConfigProblem(
                f"links[{config.links.index(link)}].rename",
                f"source {link.source!r} and target {link.target!r} are the same cluster (id {source_id}): every "
                "record would be mirrored onto itself; use a rename policy that changes every topic name (prefix, "
                "or format with more than ${topic})",
            )
        ]
    )


class TopicKeeper:
    """What the last refresh found: the target topic of each selected source topic, target partition counts, the
    source partition counts the plan knew, config drift, and the smallest max.message.bytes among the target topics."""

    def __init__(
        self,
        config: MirrorwatchConfig,
        link: LinkConfig,
        *,
        name: str,
        source_admin: AdminClient,
        target_admin: AdminClient,
        same_cluster: bool = False,
    ) -> None:
        self.config, self.link, self.name = config, link, name
        self.source_admin, self.target_admin = source_admin, target_admin
        self.same_cluster = same_cluster
        self.rename: RenamePolicy = rename_policy(link.rename, link.source)
        self.selected: tuple[str, ...] = ()
        # Topics mirrored until the last refresh that the listing now hides because this principal may no longer
        # Describe them (a lost ACL; Read implies Describe), not because they were deleted
        self.refused: tuple[str, ...] = ()
        self.topic_map: dict[str, str] = {}
        self.target_partitions: dict[str, int] = {}
        self.known_source_partitions: dict[str, int] = {}
        self.drift: tuple[ConfigDrift, ...] = ()
        self.smallest_target_limit: int | None = None

    def target_topic(self, topic: str) -> str:
        target = self.topic_map.get(topic)
        if target is None:
            target = self.topic_map[topic] = self.rename.target_topic(topic)
        return target

    def refresh(self) -> TopicPlan:
        """One round of select, describe, plan and execute; MirrorFailure when the plan has problems."""
        link = self.link
        source_partitions = list_topic_partitions(self.source_admin)
        selected = select_topics(
            source_partitions,
            link.topics,
            exclude_internal=link.exclude_internal_topics,
            always=(self.config.canary.topic,),
        )
        if self.same_cluster:  # never mirror our own output again
            selected = [t for t in selected if self.rename.source_topic(t) is None]
        target_partitions = list_topic_partitions(self.target_admin)
        source_info = describe_topics(self.source_admin, selected, source_partitions)
        target_info = describe_topics(
            self.target_admin, [self.rename.target_topic(t) for t in selected], target_partitions
        )
        plan = plan_topics(
            source_info,
            target_info,
            selected,
            self.rename,
            partitioning=link.partitioning,
            replication_factor=link.replication_factor,
            known_source_partitions=self.known_source_partitions,
            dead_letter_topic=link.dead_letter_topic,
        )
        if plan.problems:
            raise MirrorFailure(f"link {self.name}: " + "; ".join(plan.problems))
        if plan.changes_target:
            execute_plan(self.target_admin, plan)
            target_partitions = list_topic_partitions(self.target_admin)
        if plan.drift != self.drift:
            for d in plan.drift:
                log.warning(
                    "link %s: topic config drift %s -> %s: %s is %r on the source, %r on the target",
                    self.name,
                    d.source_topic,
                    d.target_topic,
                    d.config,
                    d.source_value,
                    d.target_value,
                )
            self.drift = plan.drift
        limits = [info.max_message_bytes for info in target_info.values() if info.max_message_bytes]
        limits += [int(c.configs["max.message.bytes"]) for c in plan.create if "max.message.bytes" in c.configs]
        if limits:
            known = self.smallest_target_limit
            self.smallest_target_limit = min(limits) if known is None else min(known, *limits)
        self.known_source_partitions = dict(plan.source_partitions)
        self.topic_map = dict(plan.mapping)
        self.target_partitions = {t: target_partitions.get(t, 0) for t in plan.mapping.values()}
        vanished = [t for t in self.selected if t not in source_partitions]
        self.refused = tuple(refused_topics(self.source_admin, vanished))  # no request when none vanished
        self.selected = tuple(selected)
        return plan

    def create_like(self, target_topic: str, like_source_topic: str) -> None:
        """A handler sent a record to a topic the plan does not know: create it like its source topic (MirrorMaker 1
        relied on the target's auto-creation for this; these brokers, rightly, do not auto-create)."""
        partitions = self.known_source_partitions.get(like_source_topic, 1)
        existing = list_topic_partitions(self.target_admin)
        if target_topic not in existing:
            create = (CreateTopic(target_topic, partitions, self.link.replication_factor, {}),)
            execute_plan(self.target_admin, TopicPlan(mapping={}, source_partitions={}, create=create))
            existing = list_topic_partitions(self.target_admin)
            log.info(
                "link %s: created %r for the handler's records (%d partitions, like %r)",
                self.name,
                target_topic,
                partitions,
                like_source_topic,
            )
        self.target_partitions[target_topic] = existing.get(target_topic, partitions)

    def keep(self, stop: threading.Event) -> None:
        """Refresh every `refresh_topics_interval_seconds` until `stop` (the spark engine's topic thread); a failed
        round is logged and tried again at the next."""
        while not stop.wait(self.link.refresh_topics_interval_seconds):
            try:
                self.refresh()
            except (KafkaException, KafkaClientError, MirrorFailure) as exc:
                log.warning("link %s: topic refresh failed (%s); retrying", self.name, error_text(exc))
