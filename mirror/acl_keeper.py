"""A link's topic ACLs kept in step on the target (`sync.acls`), one round per topic refresh: read the source's and
the target's literal topic ACLs, plan (`mirror.acl_sync`, pure), create and remove, remember what the link made.

What the link made is kept in `<state_dir>/acls/<link>.json` (written whole, then renamed), so that a restarted link
still removes only its own. A cluster that refuses (the principal may not describe or create
ACLs) is said once and the link goes on mirroring; the next round tries again. A cluster without an authorizer
answers with no ACLs: nothing to sync.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import Any, cast

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kernel.config import LinkConfig
from kernel.kafka import error_text
from mirror.acl_sync import TopicAcl, mirrored_acls, plan_acls

__all__ = ["AclKeeper", "owned_acls", "topic_acls"]

log = logging.getLogger("mirrorwatch.mirror")

TIMEOUT_S = 30.0


def _acl_of(binding: AclBinding) -> TopicAcl:
    return TopicAcl(
        binding.name, binding.principal, binding.host, _name(binding.operation), _name(binding.permission_type)
    )


def _name(value: Enum | str | int) -> str:
    return value.name if isinstance(value, Enum) else str(value)


def _parts(acl: TopicAcl) -> tuple[Any, ...]:
    return (
        ResourceType.TOPIC,
        acl.topic,
        ResourcePatternType.LITERAL,
        acl.principal,
        acl.host,
        AclOperation[acl.operation],
        AclPermissionType[acl.permission],
    )


def _binding_of(acl: TopicAcl) -> AclBinding:
    return AclBinding(*_parts(acl))


def _filter_of(acl: TopicAcl) -> AclBindingFilter:
    """Exactly this ACL, to remove it."""
    return AclBindingFilter(*_parts(acl))


def topic_acls(admin: AdminClient, topics: Iterable[str]) -> frozenset[TopicAcl]:
    """The cluster's literal ACLs on these topics (one DescribeAcls request); KafkaException when refused."""
    wanted = set(topics)
    anything = cast(str, None)  # None matches any name, principal and host (the stubs say str)
    every = AclBindingFilter(
        ResourceType.TOPIC,
        anything,
        ResourcePatternType.LITERAL,
        anything,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = admin.describe_acls(every, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    return frozenset(_acl_of(b) for b in found if b.name in wanted)


def owned_path(state_dir: Path, link: str) -> Path:
    return state_dir / "acls" / f"{link}.json"


def owned_acls(state_dir: Path, link: str) -> frozenset[TopicAcl]:
    """The ACLs the link made on the target and has not removed (none when it never synced any)."""
    try:
        document = json.loads(owned_path(state_dir, link).read_text())
        return frozenset(TopicAcl(**acl) for acl in document["acls"])
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()


class AclKeeper:
    """One link's ACL rounds (see the module docstring)."""

    def __init__(
        self, link: LinkConfig, *, name: str, state_dir: Path, source_admin: AdminClient, target_admin: AdminClient
    ) -> None:
        self.link, self.name, self.state_dir = link, name, state_dir
        self.source_admin, self.target_admin = source_admin, target_admin
        self.owned = owned_acls(state_dir, link.name)
        self._said = ""  # the last refusal said, so that a lasting one is said once

    def sync(self, mapping: Mapping[str, str]) -> None:
        """One round for the mirrored topics (`mapping`: source topic -> target topic)."""
        try:
            wanted = mirrored_acls(topic_acls(self.source_admin, mapping), mapping, self.link.sync.acl_principals)
        except (KafkaException, TimeoutError) as exc:
            self._refused("reading the source's topic ACLs", exc)
            return
        try:
            on_target = topic_acls(self.target_admin, mapping.values())
        except (KafkaException, TimeoutError) as exc:
            self._refused("reading the target's topic ACLs", exc)
            return
        plan = plan_acls(wanted, on_target, self.owned)
        made, removed = self._apply(plan.create, plan.delete)
        owned = (plan.owned - set(plan.create) | made) | (set(plan.delete) - removed)
        if owned != self.owned:
            self._save(frozenset(owned))
        if not (set(plan.create) - made or set(plan.delete) - removed):
            self._said = ""

    def _apply(self, create: tuple[TopicAcl, ...], delete: tuple[TopicAcl, ...]) -> tuple[set[TopicAcl], set[TopicAcl]]:
        made: set[TopicAcl] = set()
        removed: set[TopicAcl] = set()
        if create:
            for binding, future in self.target_admin.create_acls(
                [_binding_of(a) for a in create], request_timeout=TIMEOUT_S
            ).items():
                acl = _acl_of(binding)
                try:
                    future.result(timeout=TIMEOUT_S)
                except (KafkaException, TimeoutError) as exc:
                    self._refused(f"creating {acl.describe()}", exc)
                    continue
                made.add(acl)
                log.info("link %s: synced ACL to the target: %s (the source's)", self.name, acl.describe())
        if delete:
            filters = {_filter_of(a): a for a in delete}
            for found, future in self.target_admin.delete_acls(list(filters), request_timeout=TIMEOUT_S).items():
                acl = filters[found]
                try:
                    future.result(timeout=TIMEOUT_S)
                except (KafkaException, TimeoutError) as exc:
                    self._refused(f"removing {acl.describe()}", exc)
                    continue
                removed.add(acl)
                log.info("link %s: removed ACL from the target: %s (gone from the source)", self.name, acl.describe())
        return made, removed

    def _save(self, owned: frozenset[TopicAcl]) -> None:
        path = owned_path(self.state_dir, self.link.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {"link": self.link.name, "acls": [asdict(a) for a in sorted(owned)]}
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps(document, indent=1))
        part.replace(path)
        self.owned = owned

    def _refused(self, what: str, exc: KafkaException | TimeoutError) -> None:
        said = f"link {self.name}: ACL sync: {what} failed ({error_text(exc)}); mirroring on, tried again next round"
        if said != self._said:
            log.warning("%s", said)
            self._said = said
