"""The target topics of a link, for every engine (python, exactly-once, spark): select the source topics, describe
both sides, plan (`mirror.topics`), create and grow what the plan says, and remember what the engines route by.

A plan with problems stops the link with all of them named. Source and target on the same cluster are refused unless
the rename policy changes every topic name, and then the link's own output is never selected again (orders ->
source.orders -> source.source.orders)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.errors import ConfigError, ConfigProblem, KafkaClientError
from kernel.kafka import error_text, no_authorizer
from kernel.rename import RenamePolicy, rename_policy
from kernel.topic_notes import created_topic_ids
from mirror.acl_keeper import AclKeeper, acl_state
from mirror.admin import (
    alter_topic_configs,
    describe_topics,
    execute_plan,
    list_topic_partitions,
    refused_topics,
    topic_ids,
)
from mirror.deletion_keeper import DeletionKeeper, created_topics
from mirror.drift import AclState, drift_report, extra_targets, link_drift
from mirror.failure import MirrorFailure
from mirror.topics import ConfigDrift, CreateTopic, TopicPlan, plan_topics, select_topics

__all__ = ["Survey", "Surveyor", "TopicKeeper", "refuse_loop"]

log = logging.getLogger("mirrorwatch.mirror")

SYNCS_KEPT = 20
DONE = "by the refresh round that found it"  # the drift report's "when" for what a round makes the same


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


@dataclass(frozen=True, slots=True)
class Survey:
    """What one refresh round found (`TopicKeeper.survey`), for `TopicKeeper.adopt`."""

    plan: TopicPlan
    selected: tuple[str, ...]
    target_partitions: dict[str, int]  # of the target topics the plan maps to
    target_limits: tuple[int, ...]  # max.message.bytes of the target topics that set it
    refused: tuple[str, ...]  # selected until now, no longer listed, and not describable
    topic_ids: tuple[tuple[str, str], ...] = ()  # of the selected source topics (a recreated topic has a new one)
    target_ids: tuple[tuple[str, str], ...] = ()  # of the target topics (only when the keeper watches them)
    lost_targets: tuple[tuple[str, str], ...] = ()  # target topics deleted ("deleted") or recreated under the link
    synced: tuple[Mapping[str, Any], ...] = ()  # the configs this round made the source's (see TopicKeeper.synced)
    drift_report: Mapping[str, Any] | None = None  # what differed when the round began (`mirror.drift.drift_report`)
    # the target topics' retention.ms by their records' timestamps (`mirror.expiry`; TopicInfo.retention_ms)
    target_retention: tuple[tuple[str, int], ...] = ()


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
        self.topic_ids: dict[str, str] = {}  # source topic -> its topic id, as the last refresh found it
        self.target_partitions: dict[str, int] = {}
        self.target_retention: dict[str, int] = {}  # target topic -> retention.ms by timestamps (`mirror.expiry`)
        self.known_source_partitions: dict[str, int] = {}
        self.drift: tuple[ConfigDrift, ...] = ()
        # The last SYNCS_KEPT config syncs (source_topic, target_topic, config, was, now, at_ms), for the status.
        self.synced: tuple[Mapping[str, Any], ...] = ()
        # The drift report of the last round (`mirror.drift.drift_report`): every difference it found, and what it did.
        self.drift_report: Mapping[str, Any] = {}
        self.smallest_target_limit: int | None = None
        # The target topics' ids (KIP-516), for an engine that watches them (`watch_targets`): a target topic the link
        # wrote to that is gone, or has another id, was deleted under the link (`lost_targets`: topic -> "deleted" or
        # "recreated"). Under `on_target_loss: stop` a deleted one is not created again.
        self.watch_targets = False
        self.target_ids: dict[str, str] = {}
        self.lost_targets: dict[str, str] = {}
        self.lost_how: dict[str, str] = {}  # every target topic found lost so far, and how
        self.deletions = DeletionKeeper(
            link, name=name, state_dir=config.state_path, source_admin=source_admin, target_admin=target_admin
        )
        self.acls = (
            AclKeeper(
                link, name=name, state_dir=config.state_path, source_admin=source_admin, target_admin=target_admin
            )
            if link.sync.acls
            else None
        )

    def target_topic(self, topic: str) -> str:
        target = self.topic_map.get(topic)
        if target is None:
            target = self.topic_map[topic] = self.rename.target_topic(topic)
        return target

    def refresh(self) -> TopicPlan:
        """One round of select, describe, plan and execute, taken at once; MirrorFailure when the plan has problems."""
        return self.adopt(self.survey())

    def survey(self) -> Survey:
        """Select, describe, plan and execute (create and grow target topics): every request of a round, and no
        change to what the engines route by (`adopt` makes that), so that it can run on a thread of its own while
        the engine mirrors. MirrorFailure when the plan has problems."""
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
            sync=link.sync,
        )
        ids, lost = self._target_ids(plan, target_partitions) if self.watch_targets else ({}, {})
        if lost and link.on_target_loss == "stop":  # not created or grown again, and its partitions stop: no problem
            kept = [(p, t) for p, t in zip(plan.problems, plan.problem_topics, strict=True) if t not in lost]
            plan = replace(
                plan,
                create=tuple(c for c in plan.create if c.topic not in lost),
                add_partitions=tuple(a for a in plan.add_partitions if a.topic not in lost),
                problems=tuple(p for p, _ in kept),
                problem_topics=tuple(t for _, t in kept),
            )
        gone = {t for t, how in lost.items() if how == "deleted"}
        if gone and link.on_target_loss == "recopy":  # created anew once the engine has let go of it (`release`)
            plan = replace(plan, create=tuple(c for c in plan.create if c.topic not in gone))
        if plan.problems:
            raise MirrorFailure(f"link {self.name}: " + "; ".join(plan.problems))
        synced: list[Mapping[str, Any]] = []
        found_at_ms = int(time.time() * 1000)
        if plan.alter_configs:
            plan = self._sync_configs(plan, synced)
        acls, compared = self._acls(plan.mapping)
        extras = self._copies_of_deleted(source_partitions, target_partitions)
        created = created_topics(self.config.state_path, link.name)
        found = link_drift(
            plan, source_partitions, target_partitions, link, extras=extras, created=created, acls=acls, when=DONE
        )
        if plan.create or plan.add_partitions:
            execute_plan(self.target_admin, plan)
            self.deletions.note_created(c.topic for c in plan.create)
            target_partitions = list_topic_partitions(self.target_admin)
            if self.watch_targets and plan.create:
                ids.update(created_topic_ids(self.target_admin, [c.topic for c in plan.create]))
        if link.sync.topic_deletions != "off":
            self.deletions.round(extras)
        limits = [info.max_message_bytes for info in target_info.values() if info.max_message_bytes]
        limits += [int(c.configs["max.message.bytes"]) for c in plan.create if "max.message.bytes" in c.configs]
        vanished = [t for t in self.selected if t not in source_partitions]
        return Survey(
            plan=plan,
            selected=tuple(selected),
            target_partitions={t: target_partitions.get(t, 0) for t in plan.mapping.values()},
            target_limits=tuple(limits),
            refused=tuple(refused_topics(self.source_admin, vanished)),  # no request when none vanished
            topic_ids=tuple(sorted(topic_ids(self.source_admin, selected).items())),
            target_ids=tuple(sorted(ids.items())),
            lost_targets=tuple(sorted(lost.items())),
            synced=tuple(synced),
            drift_report=drift_report(found, at_ms=found_at_ms, acls=compared),
            target_retention=tuple(
                sorted((t, info.retention_ms) for t, info in target_info.items() if info.retention_ms is not None)
            ),
        )

    def _acls(self, mapping: Mapping[str, str]) -> tuple[AclState | None, str]:
        """The round's ACL sync (`sync.acls`), or a read of the ACLs for the drift report; and "compared" or why
        they were not."""
        if self.acls is not None:
            found = self.acls.sync(mapping)
            return found, "compared" if found is not None else f"not compared: {self.acls.refusal}"
        try:
            return acl_state(self.source_admin, self.target_admin, mapping, self.link, self.config.state_path), (
                "compared"
            )
        except (KafkaException, TimeoutError) as exc:
            return None, "not compared: " + ("a cluster has no authorizer" if no_authorizer(exc) else error_text(exc))

    def _copies_of_deleted(self, source: dict[str, int], target: dict[str, int]) -> dict[str, str]:
        """Target topics named as copies of topics the link would select that the source does not list."""
        ignore = [t for t in (self.link.dead_letter_topic, self.rename.target_topic(self.config.canary.topic)) if t]
        exclude_internal = self.link.exclude_internal_topics
        return extra_targets(
            target, source, self.link.topics, self.rename, exclude_internal=exclude_internal, ignore=ignore
        )

    def _sync_configs(self, plan: TopicPlan, synced: list[Mapping[str, Any]]) -> TopicPlan:
        """Apply the plan's config syncs, each said in the log and added to `synced`; a refused one is drift with
        the target's reason."""
        refused = alter_topic_configs(self.target_admin, plan.alter_configs)
        at_ms = int(time.time() * 1000)
        drift = list(plan.drift)
        for alter in plan.alter_configs:
            source_topic = next(s for s, t in plan.mapping.items() if t == alter.topic)
            for name, was in alter.was.items():
                now = alter.set.get(name)
                if alter.topic in refused:
                    reason = f"the target refused: {refused[alter.topic]}"
                    drift.append(ConfigDrift(source_topic, alter.topic, name, now, was, reason))
                else:
                    synced.append(
                        {"source_topic": source_topic, "target_topic": alter.topic, "config": name, "was": was}
                        | {"now": now, "at_ms": at_ms}
                    )
                    log.info(
                        "link %s: synced topic config of %r: %s %s -> %s (the source's)",
                        self.name,
                        alter.topic,
                        name,
                        "unset" if was is None else repr(was),
                        "unset" if now is None else repr(now),
                    )
        kept = tuple(a for a in plan.alter_configs if a.topic not in refused)  # a refused one is drift, not a sync
        return replace(plan, drift=tuple(drift), alter_configs=kept)

    def _target_ids(self, plan: TopicPlan, target_partitions: dict[str, int]) -> tuple[dict[str, str], dict[str, str]]:
        """The ids the mapped target topics have now, and those of them lost under the link: gone ("deleted"), or
        with another id than the link wrote to ("recreated", by someone else)."""
        targets = sorted(set(plan.mapping.values()))
        ids = topic_ids(self.target_admin, [t for t in targets if t in target_partitions])
        lost = {}
        for topic in targets:
            was = self.target_ids.get(topic)
            if not was:
                continue
            if topic not in target_partitions:
                lost[topic] = "deleted"
            elif ids.get(topic) and ids[topic] != was:
                lost[topic] = "recreated"
        return ids, lost

    def adopt(self, survey: Survey) -> TopicPlan:
        """What the engines route by, from a survey; no request. Config drift is logged when it changed."""
        plan = survey.plan
        if plan.drift != self.drift:
            for d in plan.drift:
                log.warning(
                    "link %s: topic config drift %s -> %s: %s is %r on the source, %r on the target (%s)",
                    self.name,
                    d.source_topic,
                    d.target_topic,
                    d.config,
                    d.source_value,
                    d.target_value,
                    d.reason,
                )
            self.drift = plan.drift
        if survey.target_limits:
            known = self.smallest_target_limit
            smallest = min(survey.target_limits)
            self.smallest_target_limit = smallest if known is None else min(known, smallest)
        self.known_source_partitions = dict(plan.source_partitions)
        if survey.synced:
            self.synced = (*self.synced, *survey.synced)[-SYNCS_KEPT:]
        if survey.drift_report is not None:
            self.drift_report = survey.drift_report
        self.topic_map = dict(plan.mapping)
        self.target_partitions = dict(survey.target_partitions)
        self.target_retention = dict(survey.target_retention)
        self.refused = survey.refused
        self.selected = survey.selected
        self.topic_ids = dict(survey.topic_ids)
        self.lost_targets = dict(survey.lost_targets)
        self.lost_how.update(self.lost_targets)
        kept = {t: self.target_ids[t] for t in self.lost_targets if self.link.on_target_loss == "stop"}
        self.target_ids = {**self.target_ids, **dict(survey.target_ids), **kept}  # a stopped one stays lost
        return plan

    def release(self, target_topic: str) -> None:
        """A target topic deleted under a `recopy` link: the engine holds nothing more for it, and the next survey
        creates it anew (until then a survey finds it lost, and leaves it uncreated: what the producer still held
        for the old topic would have landed in the new one)."""
        self.target_ids.pop(target_topic, None)

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


class Surveyor:
    """The keeper's survey rounds on a thread of their own, for an engine loop that must never wait on an admin
    request: a round asks both clusters (and their controllers, to create or grow topics) and may wait up to
    mirror.admin.TIMEOUT_S on one that hangs, and the loop meanwhile serves delivery reports, reads and commits.
    (Seen before this: a round that began during a 30-s target freeze held the loop 30 s past the thaw.)

    A round starts every `interval_s`, or at once on `request()`; the loop takes its outcome with `take()`, which
    never waits, and adopts it; the next round starts only after that, since a survey plans from what the last one
    adopted. A round that fails on a Kafka error is logged and tried again at the next; one whose plan has problems
    (MirrorFailure), or that fails unexpectedly, is raised by `take()` in the loop, as if the loop had run it."""

    def __init__(self, keeper: TopicKeeper, interval_s: float, *, name: str) -> None:
        self.keeper, self.interval_s, self.name = keeper, interval_s, name
        self._changed = threading.Condition()  # guards the three below
        self._wanted = False  # a round is wanted now
        self._stopped = False
        self._outcome: Survey | BaseException | None = None  # of a finished round, until taken
        self._thread = threading.Thread(target=self._run, name=f"topics-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        """A round as soon as the current one (if any) was taken."""
        with self._changed:
            self._wanted = True
            self._changed.notify_all()

    def take(self) -> Survey | None:
        """The outcome of a finished round, once; None while none finished (never waits)."""
        if self._outcome is None:  # the loop's every turn: no lock
            return None
        with self._changed:
            outcome, self._outcome = self._outcome, None
            self._changed.notify_all()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def peek(self) -> Survey | None:
        """The finished round waiting to be taken, left there (None: none, or it failed); never waits."""
        outcome = self._outcome
        return outcome if isinstance(outcome, Survey) else None

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop; a round waiting on a cluster is left to its timeout (the thread is a daemon)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        changed = self._changed
        while True:
            with changed:
                changed.wait_for(lambda: self._stopped or self._wanted, timeout=self.interval_s)
                if self._stopped:
                    return
                self._wanted = False
            outcome: Survey | BaseException
            try:
                outcome = self.keeper.survey()
            except (KafkaException, KafkaClientError, TimeoutError) as exc:  # TimeoutError: a future gave up waiting
                log.warning(
                    "link %s: topic refresh failed (%s); the link keeps mirroring what it has",
                    self.name,
                    error_text(exc),
                )
                continue
            except Exception as exc:  # MirrorFailure, or a bug: the loop raises it
                outcome = exc
            with changed:
                self._outcome = outcome
                changed.wait_for(lambda: self._stopped or self._outcome is None)
                if self._stopped:
                    return
