"""The ACLs each component needs, as Kafka names them, and the `kafka-acls.sh` line that grants one.

Pure: no Kafka clients, no clock. `required` lists, per link, cluster and component, every permission (operation,
resource type, name, pattern type) the component uses, with why; `mirrorwatch check` (`mirrorwatch.check`) asks the
cluster which of them the component's principal holds, and a running component that is refused one names it once
(`DenialLog`).

    mirror   source: Read + DescribeConfigs on each mirrored topic, Read on the link's group (commits)
             target: Write, Create, DescribeConfigs and Alter (new partitions) on each target topic, and
                     AlterConfigs on it with `sync.topic_configs`; with `sync.acls` Describe on the source
                     cluster, Describe and Alter on the target cluster (DescribeAcls, CreateAcls, DeleteAcls);
                     Write + Create on the dead-letter topic; exactly-once adds Write on the transactional ids
                     `mirrorwatch-<group>-` (prefixed) and Read, Write, Create on `mirrorwatch-offsets.<group>`
    monitor  both:   Describe on the link's topics and group (high-watermarks, commits), Read on the source topics
                     (record timestamps for lag in seconds); Read on `__consumer_offsets` and Describe on the
                     group `mirrorwatch-monitor-<cluster>-offsets-reader` (optional: with `commits_from: auto`
                     the monitor follows commits as they come, without them it asks the admin API)
    canary   source: Write, Create and Describe on the canary topic; target: Read on its mirrored name
    progress target (and source, with `progress.on_source`): the mirror Write, Create and Describe (and Read on the
             target: the link's control), the monitor Read and Describe on `progress.topic` (optional: without them
             a monitor sees the workers of its own host only, through their status files, and a worker obeys its
             own host's control document only)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernel.config import LinkConfig, MirrorwatchConfig, Role
from kernel.rename import rename_policy

__all__ = ["DenialLog", "Permission", "grant_line", "required"]

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class Permission:
    """One ACL a component needs on one cluster."""

    cluster: str  # the cluster's alias in the config
    role: Role
    operation: str  # as kafka-acls.sh spells it: Read, Write, Create, Describe, DescribeConfigs, Alter, AlterConfigs
    resource: str  # topic, group, transactional-id, cluster (named kafka-cluster)
    name: str
    pattern: str = "literal"  # or "prefixed"
    why: str = ""
    optional: bool = False  # the component works without it, in a slower or narrower way

    def __str__(self) -> str:
        prefixed = " (prefixed)" if self.pattern == "prefixed" else ""
        return f"{self.operation} on {self.resource} {self.name!r}{prefixed}"


def grant_line(permission: Permission, bootstrap_servers: str, principal: str) -> str:
    """The kafka-acls.sh command that grants `permission` to `principal` (run it as an operator of the cluster)."""
    pattern = " --resource-pattern-type prefixed" if permission.pattern == "prefixed" else ""
    if permission.resource == "cluster":
        resource = "--cluster"
    else:
        option = {"topic": "--topic", "group": "--group", "transactional-id": "--transactional-id"}[permission.resource]
        resource = f"{option} {_quoted(permission.name)}"
    return (
        f"kafka-acls.sh --bootstrap-server {bootstrap_servers} --command-config admin.properties --add "
        f"--allow-principal {_quoted(principal)} --operation {permission.operation} {resource}{pattern}"
    )


def _quoted(text: str) -> str:
    return text if re.fullmatch(r"[\w.:=,@/-]+", text) else "'" + text.replace("'", "'\\''") + "'"


def _mirror(config: MirrorwatchConfig, link: LinkConfig, topics: Iterable[str]) -> list[Permission]:
    rename = rename_policy(link.rename, link.source)
    source, target, group = link.source, link.target, link.consumer_group
    out: list[Permission] = []
    for topic in topics:
        renamed = rename.target_topic(topic)
        out += [
            Permission(source, "mirror", "Read", "topic", topic, why="consume it"),
            Permission(source, "mirror", "DescribeConfigs", "topic", topic, why="copy its settings"),
            Permission(target, "mirror", "Write", "topic", renamed, why="write its copy"),
            Permission(target, "mirror", "Create", "topic", renamed, why="create the copy when it is missing"),
            Permission(target, "mirror", "DescribeConfigs", "topic", renamed, why="compare the copy's settings"),
            Permission(target, "mirror", "Alter", "topic", renamed, why="add partitions when the source grows"),
        ]
        if link.sync.topic_configs:
            out.append(
                Permission(target, "mirror", "AlterConfigs", "topic", renamed, why="sync its settings from the source")
            )
        if link.sync.topic_deletions == "on":
            out.append(Permission(target, "mirror", "Delete", "topic", renamed, why="delete it after its source"))
    out.append(Permission(source, "mirror", "Read", "group", group, why="commit what the target acknowledged"))
    if link.sync.acls:
        cluster = "kafka-cluster"
        out += [
            Permission(source, "mirror", "Describe", "cluster", cluster, why="read the topic ACLs to sync"),
            Permission(target, "mirror", "Describe", "cluster", cluster, why="read the copies' ACLs"),
            Permission(target, "mirror", "Alter", "cluster", cluster, why="create and remove the synced ACLs"),
        ]
    if link.dead_letter_topic:
        for operation in ("Write", "Create"):
            out.append(Permission(target, "mirror", operation, "topic", link.dead_letter_topic, why="dead letters"))
    if link.delivery == "exactly-once":
        offsets = "mirrorwatch-offsets." + re.sub(r"[^A-Za-z0-9._-]", "_", group)
        out.append(
            Permission(
                target,
                "mirror",
                "Write",
                "transactional-id",
                f"mirrorwatch-{group}-",
                "prefixed",
                why="transactions on the target",
            )
        )
        for operation in ("Read", "Write", "Create"):
            out.append(Permission(target, "mirror", operation, "topic", offsets, why="the link's progress"))
    return out


def _monitor(config: MirrorwatchConfig, link: LinkConfig, topics: Iterable[str]) -> list[Permission]:
    rename = rename_policy(link.rename, link.source)
    source, target = link.source, link.target
    out: list[Permission] = []
    for topic in topics:
        out += [
            Permission(source, "monitor", "Describe", "topic", topic, why="high-watermarks and commits"),
            Permission(source, "monitor", "Read", "topic", topic, why="record timestamps for lag in seconds"),
            Permission(target, "monitor", "Describe", "topic", rename.target_topic(topic), why="high-watermarks"),
        ]
    out.append(Permission(source, "monitor", "Describe", "group", link.consumer_group, why="the link's commits"))
    if config.monitor.commits_from == "auto":  # else the admin API, which Describe on the group covers
        for alias in (source, target):
            why = "follow commits as they come; else the admin API every interval"
            reader = f"mirrorwatch-monitor-{alias}-offsets-reader"  # never joined: its coordinator is looked up
            out += [
                Permission(alias, "monitor", "Read", "topic", OFFSETS_TOPIC, why=why, optional=True),
                Permission(alias, "monitor", "Describe", "group", reader, why=why, optional=True),
            ]
    return out


def _canary(config: MirrorwatchConfig, link: LinkConfig) -> list[Permission]:
    if not config.canary.enabled:
        return []
    topic = config.canary.topic
    mirrored = rename_policy(link.rename, link.source).target_topic(topic)
    return [
        Permission(link.source, "canary", "Write", "topic", topic, why="send probes"),
        Permission(link.source, "canary", "Create", "topic", topic, why="create the canary topic when missing"),
        Permission(link.source, "canary", "Describe", "topic", topic, why="find its partitions"),
        Permission(link.target, "canary", "Read", "topic", mirrored, why="read probes back through the mirror"),
    ]


_PROGRESS_ROLES: tuple[tuple[Role, tuple[str, ...]], ...] = (
    ("mirror", ("Write", "Create", "Describe")),
    ("monitor", ("Read", "Describe")),
)


def _progress(config: MirrorwatchConfig, link: LinkConfig) -> list[Permission]:
    if not config.progress.enabled:
        return []
    topic, target = config.progress.topic, link.target
    why = "worker progress for monitors on other hosts (without it, the status files of one host)"
    control = "the link's control from any host (without it, this host's control document alone)"
    also = "worker progress while the target does not answer (progress.on_source)"
    clusters = [(target, why)]
    if config.progress.on_source and link.source != target:
        clusters.append((link.source, also))
    return [
        *(
            Permission(cluster, role, operation, "topic", topic, why=said, optional=True)
            for cluster, said in clusters
            for role, operations in _PROGRESS_ROLES
            for operation in operations
        ),
        Permission(target, "mirror", "Read", "topic", topic, why=control, optional=True),
    ]


def required(config: MirrorwatchConfig, link: LinkConfig, source_topics: Iterable[str]) -> list[Permission]:
    """Every permission the link's mirror, the monitor and the canary need for it, given the source's topics (the
    link's selection picks from them). Duplicates (a topic two components need the same way) are kept once."""
    canary = config.canary.topic
    present = set(source_topics)
    internal = link.exclude_internal_topics
    topics = sorted(t for t in present if link.topics.matches(t) and t != canary and not (internal and t[:2] == "__"))
    if config.canary.enabled or canary in present:
        topics.append(canary)  # the mirror carries the canary's probes whatever the link's selection says
    found = [
        *_mirror(config, link, topics),
        *_monitor(config, link, topics),
        *_canary(config, link),
        *_progress(config, link),
    ]
    return list(dict.fromkeys(found))


class DenialLog:
    """A running component's refused permissions, each said once when it starts being refused and once when it is
    allowed again: a missing ACL is one line naming the operation and the resource, not a warning per retry."""

    def __init__(self, logger: logging.Logger, who: str) -> None:
        self._log = logger
        self._who = who  # "link orders (source)"
        self._denied: dict[tuple[str, str, str], str] = {}

    def denied(self, operation: str, resource: str, name: str, reason: str) -> bool:
        """Say the refusal unless it was said already; True when this call said it."""
        key = (operation, resource, name)
        if key in self._denied:
            return False
        self._denied[key] = reason
        self._log.error(
            "%s: %s on %s %r is not allowed (%s); it is retried until an ACL grants it "
            "(`mirrorwatch check --config FILE` prints the kafka-acls.sh line)",
            self._who,
            operation,
            resource,
            name,
            reason,
        )
        return True

    def allowed(self, operation: str, resource: str, names: Iterable[str]) -> None:
        """These resources work again: say so for those that were refused."""
        for name in names:
            if self._denied.pop((operation, resource, name), None) is not None:
                self._log.warning("%s: %s on %s %r is allowed again", self._who, operation, resource, name)

    def refused(self) -> Mapping[tuple[str, str, str], str]:
        return dict(self._denied)
