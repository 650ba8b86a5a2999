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

from kernel.config import GroupSelection, LinkConfig
from kernel.kafka import error_text
from mirror.acl_sync import TopicAcl, mirrored_acls, plan_acls
from mirror.drift import AclState

__all__ = ["AclKeeper", "acl_state", "owned_acls", "topic_acls"]

log = logging.getLogger("mirrorwatch.mirror")

TIMEOUT_S = 30.0


def _acl_of(binding: AclBinding) -> TopicAcl:
    operation, permission, resource = (_name(v) for v in (binding.operation, binding.permission_type, binding.restype))
    return TopicAcl(binding.name, binding.principal, binding.host, operation, permission, resource)


def _name(value: Enum | str | int) -> str:
    return value.name if isinstance(value, Enum) else str(value)


def _parts(acl: TopicAcl) -> tuple[Any, ...]:
    return (
        ResourceType[acl.resource],
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


def topic_acls(admin: AdminClient, topics: Iterable[str], groups: GroupSelection | None = None) -> frozenset[TopicAcl]:
    """The cluster's literal ACLs on these topics, and on the groups `groups` selects (one DescribeAcls request
    each); KafkaException when refused."""
    wanted = set(topics)
    found = {a for a in _literal_acls(admin, ResourceType.TOPIC) if a.topic in wanted}
    if groups is not None:
        found |= {a for a in _literal_acls(admin, ResourceType.GROUP) if groups.matches(a.topic)}
    return frozenset(found)


def _literal_acls(admin: AdminClient, resource: ResourceType) -> list[TopicAcl]:
    anything = cast(str, None)  # None matches any name, principal and host (the stubs say str)
    every = AclBindingFilter(
        resource, anything, ResourcePatternType.LITERAL, anything, anything, AclOperation.ANY, AclPermissionType.ANY
    )
    return [_acl_of(b) for b in admin.describe_acls(every, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)]


def owned_path(state_dir: Path, link: str) -> Path:
    return state_dir / "acls" / f"{link}.json"


def owned_acls(state_dir: Path, link: str) -> frozenset[TopicAcl]:
    """The ACLs the link made on the target and has not removed (none when it never synced any)."""
    try:
        document = json.loads(owned_path(state_dir, link).read_text())
        return frozenset(TopicAcl(**acl) for acl in document["acls"])
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()


def acl_state(
    source_admin: AdminClient, target_admin: AdminClient, mapping: Mapping[str, str], link: LinkConfig, state_dir: Path
) -> AclState:
    """The link's ACLs as they are now, for the drift report (KafkaException or TimeoutError when a cluster does not
    answer or refuses)."""
    wanted = _wanted(source_admin, mapping, link)
    on_target = topic_acls(target_admin, mapping.values(), link.sync.acl_groups)
    return AclState(wanted, on_target, owned_acls(state_dir, link.name))


def _wanted(source_admin: AdminClient, mapping: Mapping[str, str], link: LinkConfig) -> frozenset[TopicAcl]:
    """The ACLs the source's call for on the target (`mirrored_acls`, by the link's `sync` rules)."""
    sync = link.sync
    found = topic_acls(source_admin, mapping, sync.acl_groups)
    return mirrored_acls(found, mapping, sync.acl_principals, groups=sync.acl_groups, write=sync.acl_write)


class AclKeeper:
    """One link's ACL rounds (see the module docstring)."""

    def __init__(
        self, link: LinkConfig, *, name: str, state_dir: Path, source_admin: AdminClient, target_admin: AdminClient
    ) -> None:
        self.link, self.name, self.state_dir = link, name, state_dir
        self.source_admin, self.target_admin = source_admin, target_admin
        self.owned = owned_acls(state_dir, link.name)
        self._said = ""  # the last refusal said, so that a lasting one is said once
        self.refusal = ""  # what the last refused request was, and the cluster's answer

    def sync(self, mapping: Mapping[str, str]) -> AclState | None:
        """One round for the mirrored topics (`mapping`: source topic -> target topic); the ACLs as the round found
        them (before its changes), None when a cluster refused to say them."""
        self.refusal = ""  # this round's, if any
        try:
            wanted = _wanted(self.source_admin, mapping, self.link)
        except (KafkaException, TimeoutError) as exc:
            self._refused("reading the source's topic ACLs", exc)
            return None
        try:
            on_target = topic_acls(self.target_admin, mapping.values(), self.link.sync.acl_groups)
        except (KafkaException, TimeoutError) as exc:
            self._refused("reading the target's topic ACLs", exc)
            return None
        found = AclState(wanted, on_target, self.owned)
        plan = plan_acls(wanted, on_target, self.owned)
        made, removed = self._apply(plan.create, plan.delete)
        owned = (plan.owned - set(plan.create) | made) | (set(plan.delete) - removed)
        if owned != self.owned:
            self._save(frozenset(owned))
        if not (set(plan.create) - made or set(plan.delete) - removed):
            self._said = ""
        return found

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
        self.refusal = f"{what} failed ({error_text(exc)})"
        said = f"link {self.name}: ACL sync: {self.refusal}; mirroring on, tried again next round"
        if said != self._said:
            log.warning("%s", said)
            self._said = said
