"""What an operator asked of a link (`mirrorwatch link pause|resume`): the link's control document (the shared kernel;
no Kafka).

A link is `active` unless the operator paused it: the whole link, or some of its source topics alone. A paused
partition consumes nothing and keeps its group and its position (what was read before the pause is still written
and committed); it resumes where it stopped. The document lives under `<state_dir>/control/<link>.json`, written
atomically (a temporary file renamed over the old one), so that it survives restarts and every worker of the link
on this host reads it within a status interval (`mirror.worker`). A link with no document is active. A document that
cannot be read is never taken as "active": the worker keeps what it obeyed last and says why (`ControlUnreadable`).

A link promoted (`mirrorwatch failover promote`: its target took over) is stopped: it copies nothing until it is
reversed, and no resume lifts that. The promotion records where the link stood: per source partition the last offset
copied (every record below it is on the target), the point a failback starts from.

The states a partition can be in beside `active`/`paused` come from the workers, not from here: `failed` (stopped
alone with its reason, e.g. a gap under `on_gap: stop`).

Where it lives: under `<state_dir>/control/<link>.json` on the host where the operator changed it, and on the link
target's progress topic (`kernel.progress_format`, `kernel.control_store`), from which the link's workers on every
host read it; a worker obeys whichever was changed last (`newest`).

The operator may also change the link's bandwidth budget at run time (`mirrorwatch link budget`, issue #44):
`max_bytes_per_second` here overrides the config's `max_bytes_per_second` (0: no budget) until it is cleared (None:
the config's again). Pausing, resuming and promoting keep it.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "CONTROL_VERSION",
    "ControlUnreadable",
    "LinkControl",
    "Promotion",
    "control_path",
    "newest",
    "read_control",
    "write_control",
]

CONTROL_VERSION = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class ControlUnreadable(ValueError):
    """The control document exists but is not one (a hand edit, a truncated copy): said, never taken as active."""


@dataclass(frozen=True)
class Promotion:
    """The link's target took over (`mirrorwatch failover promote`): when, by whom, and per source partition the
    offset the link had copied up to (every record below it is on the target)."""

    at_ms: int
    by: str
    offsets: tuple[tuple[str, int, int], ...]  # (source topic, partition, offset), sorted
    # (target topic, partition, end offset) when promoted, sorted: where the records the target took on its own begin
    # (the reverse link's start: `mirrorwatch failover failback`); () when not recorded
    target_offsets: tuple[tuple[str, int, int], ...] = ()
    # promoted without reading the source (`--source-lost`): `offsets` are where the copies on the target end (their
    # provenance), not the link's commits checked against the source's high-watermarks
    source_lost: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "at_ms": self.at_ms,
            "by": self.by,
            "offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in self.offsets],
            "target_offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in self.target_offsets],
            "source_lost": self.source_lost,
        }

    @classmethod
    def from_json(cls, document: object) -> Promotion:
        """Raises ControlUnreadable naming what is wrong."""
        if not isinstance(document, dict):
            raise ControlUnreadable(f"promoted: expected an object, got {type(document).__name__}")
        at, by, offsets = document.get("at_ms"), document.get("by", ""), document.get("offsets")
        if not isinstance(at, int) or isinstance(at, bool) or not isinstance(by, str) or not isinstance(offsets, list):
            raise ControlUnreadable("promoted: at_ms (milliseconds), by (text) and offsets (a list) are required")
        targets = document.get("target_offsets", [])
        if not isinstance(targets, list):
            raise ControlUnreadable("promoted: target_offsets must be a list")
        lost = document.get("source_lost", False)
        if not isinstance(lost, bool):
            raise ControlUnreadable("promoted: source_lost must be true or false")
        return cls(at, by, _offsets("offsets", offsets), _offsets("target_offsets", targets), lost)


def _offsets(name: str, entries: list[Any]) -> tuple[tuple[str, int, int], ...]:
    parsed = []
    for entry in entries:
        fields = [entry.get(k) for k in ("topic", "partition", "offset")] if isinstance(entry, dict) else []
        match fields:
            case [str(topic), int(partition), int(offset)] if min(partition, offset) >= 0 and not any(
                isinstance(n, bool) for n in fields
            ):
                parsed.append((topic, partition, offset))
            case _:
                raise ControlUnreadable(f"promoted: {name}: {entry!r} is not a topic, partition and offset")
    return tuple(sorted(parsed))


@dataclass(frozen=True)
class LinkControl:
    link: str
    paused: bool = False  # the whole link
    paused_topics: tuple[str, ...] = ()  # source topics paused alone (the link otherwise active)
    since_ms: int = 0  # when the operator last changed it
    reason: str = ""  # the operator's words, if any
    by: str = field(default="", compare=False)  # who changed it (user@host), for the log and the status
    promoted: Promotion | None = None  # the target took over: the link copies nothing until it is reversed
    # the operator's bandwidth budget in bytes/s (`mirrorwatch link budget`): 0 none; None: the config's
    max_bytes_per_second: int | None = None

    def holds(self, topic: str) -> bool:
        """Whether the partitions of this source topic are paused (all of them, once the link is promoted)."""
        return self.paused or self.promoted is not None or topic in self.paused_topics

    @property
    def holding(self) -> bool:
        """Whether it holds anything: the link, some of its topics, or all of it promoted."""
        return self.paused or bool(self.paused_topics) or self.promoted is not None

    @property
    def state(self) -> str:
        """`promoted` (stopped for good), `paused` (the whole link), `partly paused` (some topics) or `active`."""
        if self.promoted is not None:
            return "promoted"
        if self.paused:
            return "paused"
        return "partly paused" if self.paused_topics else "active"

    def describe(self) -> str:
        """Why a partition is paused, as the status and the monitor say it."""
        if self.promoted is not None:
            by = f" by {self.promoted.by}" if self.promoted.by else ""
            lost = " with its source lost" if self.promoted.source_lost else ""
            return f"promoted{by}{lost} (mirrorwatch failover promote): its target took over"
        said = f": {self.reason}" if self.reason else ""
        by = f" by {self.by}" if self.by else ""
        return f"paused{by} (mirrorwatch link pause){said}"

    def pause(self, topics: tuple[str, ...], now_ms: int, reason: str, by: str) -> LinkControl:
        """The whole link (no topics) or these topics besides those paused already (ValueError: it is promoted)."""
        self._not_promoted()
        if not topics:
            return replace(self, paused=True, paused_topics=(), since_ms=now_ms, reason=reason, by=by)
        merged = tuple(sorted({*self.paused_topics, *topics}))
        return replace(self, paused_topics=merged, since_ms=now_ms, reason=reason or self.reason, by=by)

    def resume(self, topics: tuple[str, ...], now_ms: int, by: str) -> LinkControl:
        """The whole link (no topics: every pause lifted), or these topics. A topic cannot be resumed alone while the
        whole link is paused (ValueError: resume the link, then pause what should stay paused), nor anything of a
        promoted link (ValueError: it is reversed, not resumed)."""
        self._not_promoted()
        if not topics:
            return replace(self, paused=False, paused_topics=(), since_ms=now_ms, reason="", by=by)
        if self.paused:
            raise ValueError(
                f"link {self.link} is paused as a whole: resume the link (without --topic), then pause the topics "
                "that should stay paused"
            )
        left = tuple(t for t in self.paused_topics if t not in topics)
        return replace(self, paused_topics=left, since_ms=now_ms, reason=self.reason if left else "", by=by)

    def promote(self, promotion: Promotion) -> LinkControl:
        return replace(self, since_ms=promotion.at_ms, by=promotion.by, promoted=promotion)

    def budget(self, max_bytes_per_second: int | None, now_ms: int, by: str) -> LinkControl:
        """The link's bandwidth budget from now on: bytes/s, 0 for none, None for the config's again."""
        if max_bytes_per_second is not None and max_bytes_per_second < 0:
            raise ValueError(f"a budget of {max_bytes_per_second} bytes/s: use 0 for none")
        return replace(self, max_bytes_per_second=max_bytes_per_second, since_ms=now_ms, by=by)

    def budget_of(self, configured: int | None) -> int | None:
        """The budget the link's workers obey: the operator's, else the config's (None: none)."""
        chosen = configured if self.max_bytes_per_second is None else self.max_bytes_per_second
        return chosen or None

    def _not_promoted(self) -> None:
        if self.promoted is not None:
            raise ValueError(
                f"link {self.link} was promoted by {self.promoted.by or '?'}: its target took over, and it copies "
                "nothing until it is reversed (mirrorwatch failover failback)"
            )

    def as_json(self) -> dict[str, Any]:
        return {
            "version": CONTROL_VERSION,
            "link": self.link,
            "state": self.state,
            "paused": self.paused,
            "paused_topics": list(self.paused_topics),
            "since_ms": self.since_ms,
            "reason": self.reason,
            "by": self.by,
            "promoted": self.promoted.as_json() if self.promoted is not None else None,
            "max_bytes_per_second": self.max_bytes_per_second,
        }

    @classmethod
    def from_json(cls, link: str, document: object) -> LinkControl:
        """Raises ControlUnreadable naming what is wrong."""
        if not isinstance(document, dict):
            raise ControlUnreadable(f"expected a JSON object, got {type(document).__name__}")
        if document.get("version") != CONTROL_VERSION:
            raise ControlUnreadable(f"version {document.get('version')!r} is not {CONTROL_VERSION}")
        if document.get("link") != link:
            raise ControlUnreadable(f"it is link {document.get('link')!r}'s, not {link!r}'s")
        paused, topics = document.get("paused"), document.get("paused_topics")
        since, reason, by = document.get("since_ms"), document.get("reason", ""), document.get("by", "")
        if not isinstance(paused, bool):
            raise ControlUnreadable(f"paused: {paused!r} is not true or false")
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            raise ControlUnreadable(f"paused_topics: {topics!r} is not a list of topic names")
        if not isinstance(since, int) or isinstance(since, bool):
            raise ControlUnreadable(f"since_ms: {since!r} is not a time in milliseconds")
        if not isinstance(reason, str) or not isinstance(by, str):
            raise ControlUnreadable("reason and by must be text")
        promoted, budget = document.get("promoted"), document.get("max_bytes_per_second")
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 0):
            raise ControlUnreadable(f"max_bytes_per_second: {budget!r} is not a rate in bytes per second")
        return cls(
            link,
            paused,
            tuple(sorted(set(topics))),
            since,
            reason,
            by,
            Promotion.from_json(promoted) if promoted is not None else None,
            budget,
        )


def newest(local: LinkControl, published: LinkControl | None) -> LinkControl:
    """The control a worker obeys: this host's document or the one published on the progress topic (another host's
    operator), whichever was changed last; this host's on a tie (the same change, written both ways)."""
    if published is None or published.since_ms <= local.since_ms:
        return local
    return published


def control_path(state_dir: Path, link: str) -> Path:
    return state_dir / "control" / f"{_UNSAFE.sub('_', link)}.json"


def read_control(state_dir: Path, link: str) -> LinkControl:
    """The link's control document; a link without one is active. Raises ControlUnreadable (naming the file)."""
    path = control_path(state_dir, link)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return LinkControl(link)
    except OSError as exc:
        raise ControlUnreadable(f"{path}: {exc.strerror or exc}") from exc
    try:
        return LinkControl.from_json(link, json.loads(text))
    except (ValueError, ControlUnreadable) as exc:
        raise ControlUnreadable(f"{path}: {exc}") from exc


def write_control(state_dir: Path, control: LinkControl) -> Path:
    """Replace the link's control document atomically (readers never see half of one). Raises OSError."""
    path = control_path(state_dir, control.link)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(control.as_json(), indent=1) + "\n")
    tmp.replace(path)
    return path
