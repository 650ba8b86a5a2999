"""Message handlers (MirrorMaker 1's `--message.handler`): Python callables that see each record before it is written.

A link's `handler: "package.module:factory"` names a factory; mirrorwatch calls `factory(handler_args)` once per
worker and then the returned function once per record. The function receives a `MirrorRecord` (already renamed by
the link's policy, provenance headers included) and returns it changed, re-targeted, several records, or None to
write nothing. Records it returns are written; the source offset is committed only when all of them are acknowledged.

RenameTopicHandler from MirrorMaker 1 days, in mirrorwatch (shipped as `mirror.handler:rename_topics`):

    def rename_topics(args: str | None) -> Handler:
        pairs = dict(pair.split(",", 1) for pair in (args or "").split(";") if pair)
        return lambda record: record.retarget(pairs.get(record.source_topic, record.topic))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from kernel.errors import ConfigError, ConfigProblem

__all__ = ["Handler", "HandlerResult", "MirrorRecord", "load_handler", "rename_topics", "run_handler"]

HeaderList = list[tuple[str, str | bytes | None]]


@dataclass(slots=True)
class MirrorRecord:
    """A record on its way to the target. `partition` None lets the producer's partitioner (murmur2 by key) choose."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: HeaderList
    timestamp_ms: int
    source_topic: str
    source_partition: int
    source_offset: int

    def retarget(self, topic: str, partition: int | None = None) -> MirrorRecord:
        """The same record for another topic; keeps the partition unless one is given."""
        return replace(self, topic=topic, partition=self.partition if partition is None else partition)


HandlerResult = MirrorRecord | Iterable[MirrorRecord] | None
Handler = Callable[[MirrorRecord], HandlerResult]

# MirrorMaker 1 users pass Java class names; the well-known ones have a Python equivalent here.
JAVA_HANDLERS = {"com.opencore.RenameTopicHandler": "mirror.handler:rename_topics"}


def load_handler(ref: str, args: str | None, *, path: str = "handler") -> Handler:
    """Import `module:factory` and call `factory(args)`; a clear `ConfigError` when that is impossible."""
    ref = JAVA_HANDLERS.get(ref, ref)
    module_name, _, attr = ref.partition(":")
    if not attr:
        raise ConfigError([ConfigProblem(path, f"{ref!r} is not 'package.module:callable'")])
    try:
        target: object = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError([ConfigProblem(path, f"cannot load handler {ref!r}: {exc}")]) from None
    if not callable(target):
        raise ConfigError([ConfigProblem(path, f"handler {ref!r} is not callable")])
    handler = target(args)
    if not callable(handler):
        raise ConfigError([ConfigProblem(path, f"handler factory {ref!r} returned {handler!r}, not a function")])
    return handler  # type: ignore[no-any-return]


def run_handler(handler: Handler, record: MirrorRecord) -> list[MirrorRecord]:
    """The records to write for one source record, whatever shape the handler returned."""
    result = handler(record)
    if result is None:
        return []
    if isinstance(result, MirrorRecord):
        return [result]
    out = list(result)
    for item in out:
        if not isinstance(item, MirrorRecord):
            raise TypeError(f"a handler returned {type(item).__name__}, expected MirrorRecord")
    return out


def rename_topics(args: str | None) -> Handler:
    """MirrorMaker 1's RenameTopicHandler: args `source,target;source2,target2` rename those topics on the target."""
    pairs = dict(pair.split(",", 1) for pair in (args or "").split(";") if pair)
    return lambda record: record.retarget(pairs.get(record.source_topic, record.topic))
