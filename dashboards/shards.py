"""A sharded monitor fleet (`monitor.shard`) read as one HTTP API: the console's `--api URL1,URL2,...`.

Every shard serves the same API for its share (its clusters, its groups). An answer is merged from the shards that
have one: the lists of a JSON object (links, groups, consumers, clusters, events, alerts, ...) are joined, an item
two shards both serve (the same link; the same cluster and group) kept once, events newest first as each shard
serves them; anything else comes from the first shard that has it. A shard that does not answer is named in
`unreachable` and the others still show; only when none answers is the fleet unreachable.

`merge_answers` is pure; `ShardedApi` asks the shards one after the other (the console's refresh is seconds).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["ShardedApi", "merge_answers"]

# The fields that say which thing an item of a merged list is about, in the order they identify it.
_IDENTITY = ("link", "cluster", "group", "topic", "partition", "name", "kind", "subject", "at_ms", "alert")


class _Api(Protocol):
    base: str

    def get(self, path: str) -> Any | None: ...


def _identity(item: Any) -> str:
    if isinstance(item, dict):
        named = {key: item[key] for key in _IDENTITY if key in item}
        return json.dumps(named if named else item, sort_keys=True, default=str)
    return json.dumps(item, sort_keys=True, default=str)


def _join(lists: Sequence[list[Any]]) -> list[Any]:
    seen: set[str] = set()
    out: list[Any] = []
    for items in lists:
        for item in items:
            key = _identity(item)
            if key not in seen:
                seen.add(key)
                out.append(item)
    if out and all(isinstance(item, dict) and isinstance(item.get("at_ms"), int) for item in out):
        out.sort(key=lambda item: -item["at_ms"])  # events: newest first across shards
    return out


def merge_answers(answers: Sequence[Any]) -> Any:
    """One answer from the shards' answers to the same request (None: no shard had one)."""
    present = [a for a in answers if a is not None]
    if not present:
        return None
    first = present[0]
    if len(present) == 1 or not all(isinstance(a, dict) for a in present):
        return first
    merged = dict(first)
    for key, value in first.items():
        if isinstance(value, list) and all(isinstance(a.get(key), list) for a in present):
            merged[key] = _join([a[key] for a in present])
    for answer in present[1:]:  # what only a later shard says
        for key, value in answer.items():
            merged.setdefault(key, value)
    return merged


class ShardedApi:
    """The console's API over several monitors (`Api` each); `unreachable` names the shards the last request missed."""

    def __init__(self, apis: Sequence[_Api], unreachable_error: type[Exception]) -> None:
        self.apis = list(apis)
        self.base = ", ".join(api.base for api in self.apis)
        self.unreachable: list[str] = []
        self._error = unreachable_error

    def get(self, path: str) -> Any | None:
        answers: list[Any] = []
        failures: list[Exception] = []
        for api in self.apis:
            try:
                answers.append(api.get(path))
            except self._error as exc:
                failures.append(exc)
        self.unreachable = [str(exc) for exc in failures]
        if failures and len(failures) == len(self.apis):
            raise failures[0]
        return merge_answers(answers)
