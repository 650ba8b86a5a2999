"""Rename policies: how a source topic is named on the target, and back (pure string functions with their inverse).

As in MirrorMaker 2's ReplicationPolicy, the inverse lets a reader of the target (the canary, the monitor, a
failover tool) find which source topic a target topic mirrors. `source_topic` returns None for a target topic this
policy could not have produced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from kernel.config import FormatRename, IdentityRename, MapRename, PrefixRename, RenameConfig

__all__ = ["RenamePolicy", "rename_policy"]


class RenamePolicy(Protocol):
    def target_topic(self, source_topic: str) -> str: ...

    def source_topic(self, target_topic: str) -> str | None: ...

    @property
    def renames_every_topic(self) -> bool:
        """True when no target name can equal its source name (what makes a same-cluster link safe)."""
        ...


@dataclass(frozen=True)
class _Identity:
    def target_topic(self, source_topic: str) -> str:
        return source_topic

    def source_topic(self, target_topic: str) -> str | None:
        return target_topic

    @property
    def renames_every_topic(self) -> bool:
        return False


@dataclass(frozen=True)
class _Prefix:
    prefix: str

    def target_topic(self, source_topic: str) -> str:
        return self.prefix + source_topic

    def source_topic(self, target_topic: str) -> str | None:
        if target_topic.startswith(self.prefix) and len(target_topic) > len(self.prefix):
            return target_topic[len(self.prefix) :]
        return None

    @property
    def renames_every_topic(self) -> bool:
        return True


@dataclass(frozen=True)
class _Format:
    template: str  # with ${source} already filled in
    _inverse: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        before, _, after = self.template.partition("${topic}")
        # The template's other ${topic} occurrences must repeat the same name: a back-reference.
        pattern = re.escape(before) + "(?P<topic>.+?)" + re.escape(after).replace(re.escape("${topic}"), "(?P=topic)")
        object.__setattr__(self, "_inverse", re.compile(pattern))

    def target_topic(self, source_topic: str) -> str:
        return self.template.replace("${topic}", source_topic)

    def source_topic(self, target_topic: str) -> str | None:
        match = self._inverse.fullmatch(target_topic)
        return match.group("topic") if match else None

    @property
    def renames_every_topic(self) -> bool:
        return self.template != "${topic}"


@dataclass(frozen=True)
class _Map:
    forward: dict[str, str]
    backward: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "backward", {dst: src for src, dst in self.forward.items()})

    def target_topic(self, source_topic: str) -> str:
        return self.forward.get(source_topic, source_topic)

    def source_topic(self, target_topic: str) -> str | None:
        if target_topic in self.backward:
            return self.backward[target_topic]
        if target_topic in self.forward:
            return None  # a mapped source topic is written under its new name, never under its own
        return target_topic

    @property
    def renames_every_topic(self) -> bool:
        return False  # unlisted topics keep their names


def rename_policy(config: RenameConfig, source_alias: str) -> RenamePolicy:
    """The policy a link's `rename` section describes; `source_alias` is the link's source cluster alias."""
    if isinstance(config, IdentityRename):
        return _Identity()
    if isinstance(config, PrefixRename):
        return _Prefix(source_alias + config.separator)
    if isinstance(config, FormatRename):
        return _Format(config.format.replace("${source}", source_alias))
    if isinstance(config, MapRename):
        return _Map(dict(config.map))
    raise TypeError(f"unknown rename config {config!r}")
