"""MirrorMaker 2's checkpoint records (pure): Kafka's `Checkpoint`, schema version 0, big-endian, strings as int16
length + UTF-8. Key `group, topic, partition (int32)`; value `version (int16), upstream offset (int64), downstream
offset (int64), metadata`. The topic is the target-side name. Parsing never trusts the bytes."""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["Checkpoint", "parse_checkpoint"]


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    partition: int
    upstream: int
    downstream: int


def _string(data: bytes, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, at)
    if length < 0 or at + 2 + length > len(data):
        raise ValueError("string runs past the record")
    return data[at + 2 : at + 2 + length].decode(), at + 2 + length


def parse_checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint | None:
    """A checkpoint record's fields, None when it is not one (or not version 0)."""
    if not key or not value:
        return None
    try:
        group, at = _string(key, 0)
        topic, at = _string(key, at)
        (partition,) = struct.unpack_from(">i", key, at)
        version, upstream, downstream = struct.unpack_from(">hqq", value, 0)
        _string(value, 18)  # metadata: must be there, not used
    except (struct.error, ValueError, UnicodeDecodeError):
        return None
    if version != 0:
        return None
    return Checkpoint(group, topic, partition, upstream, downstream)
