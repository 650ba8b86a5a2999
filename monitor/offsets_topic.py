"""The records of `__consumer_offsets`, read as the group coordinator writes them (pure: bytes in, values out).

A record's key starts with an int16 type: 0 and 1 are an offset commit (group, topic, partition), 2 a classic group's
metadata; Kafka 3.7+ writes further types for consumer groups of the new protocol and share groups (3 and up), which
carry no committed offsets and are skipped. An offset commit's value starts with an int16 version:

    v0   offset int64, metadata string, commit_timestamp int64
    v1   offset int64, metadata string, commit_timestamp int64, expire_timestamp int64
    v2   offset int64, metadata string, commit_timestamp int64
    v3   offset int64, leader_epoch int32, metadata string, commit_timestamp int64
    v4   as v3 with a compact string and tagged fields (the first flexible version, Kafka 4)

A null value (a tombstone) deletes the commit: the group or the offset was deleted or expired. Strings are int16
length-prefixed (-1: null); compact strings unsigned-varint (length + 1) prefixed. Anything that does not parse is
reported as `None`, never raised: the topic is written by brokers, but a reader must not die on a version it does not
know yet.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["CommitKey", "CommitValue", "parse_commit_key", "parse_commit_value"]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
OFFSET_COMMIT_KEY_TYPES = (0, 1)


@dataclass(frozen=True, slots=True)
class CommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class CommitValue:
    offset: int
    commit_timestamp_ms: int
    leader_epoch: int = -1


class _Truncated(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self._at + n > len(self._data):
            raise _Truncated
        chunk = self._data[self._at : self._at + n]
        self._at += n
        return chunk

    def int16(self) -> int:
        value: int = _INT16.unpack(self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _INT32.unpack(self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _INT64.unpack(self._take(8))[0]
        return value

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:  # more than 5 bytes: not an int32 varint
                raise _Truncated

    def string(self) -> str | None:
        length = self.int16()
        return None if length < 0 else self._take(length).decode("utf-8", errors="replace")

    def compact_string(self) -> str | None:
        length = self.uvarint() - 1
        return None if length < 0 else self._take(length).decode("utf-8", errors="replace")

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


def parse_commit_key(key: bytes | None) -> CommitKey | None:
    """The group, topic and partition of an offset commit record; None for any other record type or a bad key."""
    if not key:
        return None
    reader = _Reader(key)
    try:
        if reader.int16() not in OFFSET_COMMIT_KEY_TYPES:
            return None
        group, topic, partition = reader.string(), reader.string(), reader.int32()
    except _Truncated:
        return None
    if group is None or topic is None or partition < 0:
        return None
    return CommitKey(group, topic, partition)


def parse_commit_value(value: bytes) -> CommitValue | None:
    """An offset commit's value (not a tombstone: the caller deletes on a null value); None when it does not parse."""
    reader = _Reader(value)
    try:
        version = reader.int16()
        offset = reader.int64()
        if version in (0, 1, 2):
            reader.string()
            commit_ms = reader.int64()
            if version == 1:
                reader.int64()  # expire_timestamp
            return CommitValue(offset, commit_ms)
        if version == 3:
            epoch = reader.int32()
            reader.string()
            return CommitValue(offset, reader.int64(), epoch)
        if version == 4:
            epoch = reader.int32()
            reader.compact_string()
            commit_ms = reader.int64()
            reader.tagged_fields()
            return CommitValue(offset, commit_ms, epoch)
    except _Truncated:
        return None
    return None
