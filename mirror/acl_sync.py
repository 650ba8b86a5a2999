"""Topic (and group) ACLs kept in step (pure): which of the source's ACLs a link writes on the target for the copies,
and what one round creates and removes (`sync.acls`).

The rules, MirrorMaker 2's (`sync.topic.acls`) made explicit: only literal ACLs on a topic the link mirrors, of a
principal `sync.acl_principals` selects; an ALLOW WRITE is not copied (nobody writes into a mirror while it is one);
an ALLOW ALL is narrowed to READ (which implies DESCRIBE); DENY entries are copied as they are. With
`sync.acl_groups` the literal ACLs on the consumer groups it selects are copied by the same rules, under the same
group name (a standby group's application may then read its offsets on the target). With `sync.acl_write` (after
a promotion: the target is no longer a mirror) ALLOW WRITE and ALLOW ALL are copied as they are. The link removes an
ACL only if it created it (`owned`, kept in `<state_dir>/acls/<link>.json`) and the source no longer has it; an ACL
made on the target by hand is never touched, even when it equals one the link would make.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernel.config import TopicSelection

__all__ = ["AclPlan", "TopicAcl", "mirrored_acls", "plan_acls"]


@dataclass(frozen=True, order=True)
class TopicAcl:
    """One literal ACL on a topic (or, `resource` "GROUP", on a consumer group named `topic`), as Kafka names its
    parts (operation READ, permission ALLOW)."""

    topic: str
    principal: str  # "User:alice"
    host: str  # "*" for any
    operation: str
    permission: str
    resource: str = "TOPIC"  # or "GROUP"

    def describe(self) -> str:
        host = "" if self.host == "*" else f" from {self.host}"
        on = f"{self.resource.lower()} {self.topic!r}"
        return f"{self.permission} {self.operation} for {self.principal}{host} on {on}"


@dataclass(frozen=True)
class AclPlan:
    create: tuple[TopicAcl, ...]
    delete: tuple[TopicAcl, ...]
    owned: frozenset[TopicAcl]  # the link's own ACLs once both are done


def mirrored_acls(
    source: Iterable[TopicAcl],
    mapping: Mapping[str, str],
    principals: TopicSelection,
    *,
    groups: TopicSelection | None = None,
    write: bool = False,
) -> frozenset[TopicAcl]:
    """The target ACLs the source's ACLs call for: for each mirrored topic's copy (`mapping`: source topic -> target
    topic) and each group `groups` selects (none by default), by the rules above (`write`: `sync.acl_write`)."""
    out = set()
    for acl in source:
        if acl.resource == "GROUP":
            target = acl.topic if groups is not None and groups.matches(acl.topic) else None
        else:
            target = mapping.get(acl.topic)
        if target is None or not principals.matches(acl.principal):
            continue
        operation = acl.operation
        if acl.permission == "ALLOW" and operation == "WRITE" and not write:
            continue
        if acl.permission == "ALLOW" and operation == "ALL" and not write:
            operation = "READ"
        out.add(TopicAcl(target, acl.principal, acl.host, operation, acl.permission, acl.resource))
    return frozenset(out)


def plan_acls(wanted: frozenset[TopicAcl], on_target: frozenset[TopicAcl], owned: frozenset[TopicAcl]) -> AclPlan:
    """What one round does: create what is wanted and missing, remove what the link created that is no longer
    wanted. `on_target`: the target's literal ACLs on the copies. An owned ACL somebody removed by hand is forgotten
    (and created again while wanted)."""
    create = wanted - on_target
    delete = (owned & on_target) - wanted
    return AclPlan(tuple(sorted(create)), tuple(sorted(delete)), frozenset(((owned & on_target) | create) - delete))
