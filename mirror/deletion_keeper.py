"""A link's target topics it created, and the copies of deleted source topics it deletes (`sync.topic_deletions`),
one round per topic refresh; the decision is `mirror.deletions` (pure).

Kept in `<state_dir>/created/<link>.json`: the topics the link created (noted whatever the setting, so that turning
deletions on later still knows them; topics created before this note existed are never deleted) and since when each
candidate's source topic has been gone. The file is read again just before each write and merged, so that the
workers of one link on a host do not drop each other's notes. `dry-run` says what would be deleted, once per topic,
and deletes nothing; a copy the link did not create is said once and left.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from kernel.config import LinkConfig
from kernel.kafka import error_of, error_text
from mirror.deletions import plan_deletions

__all__ = ["DeletionKeeper", "created_topics", "unknown_topics"]

log = logging.getLogger("mirrorwatch.mirror")

TIMEOUT_S = 30.0


def unknown_topics(admin: AdminClient, topics: Iterable[str]) -> set[str]:
    """Of `topics`, those the cluster says it does not know (deleted): not those it refuses to describe, nor any
    when it does not answer."""
    names = sorted(set(topics))
    if not names:
        return set()
    gone = set()
    for name, future in admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S).items():
        try:
            future.result(timeout=TIMEOUT_S)
        except (KafkaException, TimeoutError) as exc:
            error = error_of(exc)
            if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                gone.add(name)
    return gone


def _path(state_dir: Path, link: str) -> Path:
    return state_dir / "created" / f"{link}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
        return {"created": set(document["created"]), "gone_since": dict(document["gone_since"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {"created": set(), "gone_since": {}}


def created_topics(state_dir: Path, link: str) -> set[str]:
    """The target topics the link created (as far as its notes on this host go)."""
    return set(_read(_path(state_dir, link))["created"])


class DeletionKeeper:
    """One link's notes of created topics and its deletion rounds (see the module docstring)."""

    def __init__(
        self, link: LinkConfig, *, name: str, state_dir: Path, source_admin: AdminClient, target_admin: AdminClient
    ) -> None:
        self.link, self.name, self.path = link, name, _path(state_dir, link.name)
        self.source_admin, self.target_admin = source_admin, target_admin
        self._said: set[tuple[str, str]] = set()  # (topic, what) said once

    def note_created(self, topics: Iterable[str]) -> None:
        topics = set(topics)
        if topics:
            self._write(add=topics)

    def round(self, candidates: Mapping[str, str]) -> list[str]:
        """One round over the copies whose source topic the source no longer lists (`candidates`: target topic ->
        source topic); the topics deleted."""
        mode = self.link.sync.topic_deletions
        if mode == "off":
            return []
        gone_sources = unknown_topics(self.source_admin, candidates.values()) if candidates else set()
        gone = [t for t, s in candidates.items() if s in gone_sources]
        notes = _read(self.path)
        grace_ms = int(self.link.sync.topic_deletion_grace_seconds * 1000)
        plan = plan_deletions(
            gone, notes["created"], notes["gone_since"], now_ms=int(time.time() * 1000), grace_ms=grace_ms
        )
        for topic in plan.not_ours:
            self._say_once(topic, "not ours", "%s: left on the target: the link did not create it", topic)
        deleted: list[str] = []
        if mode == "dry-run":
            for topic in plan.delete:
                self._say_once(topic, "dry-run", "%s: would be deleted (dry-run: sync.topic_deletions)", topic)
        else:
            deleted = self._delete(plan.delete)
        gone_since = {t: since for t, since in plan.gone_since.items() if t not in deleted}
        if gone_since != notes["gone_since"] or deleted:
            self._write(remove=set(deleted), gone_since=gone_since)
        return deleted

    def _delete(self, topics: Iterable[str]) -> list[str]:
        topics = list(topics)
        if not topics:
            return []
        deleted = []
        for topic, future in self.target_admin.delete_topics(
            topics, operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S
        ).items():
            try:
                future.result(timeout=TIMEOUT_S)
            except (KafkaException, TimeoutError) as exc:
                self._say_once(topic, "refused", "%s: deleting it failed (%s); tried again next round", topic,
                               error_text(exc))  # fmt: skip
                continue
            deleted.append(topic)
            log.info(
                "link %s: deleted target topic %r: its source topic was deleted %g s ago or more",
                self.name,
                topic,
                self.link.sync.topic_deletion_grace_seconds,
            )
        return deleted

    def _write(
        self, *, add: set[str] | None = None, remove: set[str] | None = None, gone_since: dict[str, int] | None = None
    ) -> None:
        notes = _read(self.path)  # merged with what another worker wrote meanwhile
        created = (notes["created"] | (add or set())) - (remove or set())
        document = {
            "link": self.link.name,
            "created": sorted(created),
            "gone_since": notes["gone_since"] if gone_since is None else gone_since,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        part = self.path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps(document, indent=1))
        part.replace(self.path)

    def _say_once(self, topic: str, what: str, message: str, *args: object) -> None:
        if (topic, what) not in self._said:
            self._said.add((topic, what))
            log.warning("link %s: topic deletion sync: " + message, self.name, *args)
