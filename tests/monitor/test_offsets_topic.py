"""`__consumer_offsets` records, encoded here byte by byte from the coordinator's schemas (OffsetCommitKey,
OffsetCommitValue v0-v4), parsed back; anything else is None, never an exception."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.offsets_topic import CommitKey, CommitValue, parse_commit_key, parse_commit_value


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _key(key_type: int, group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", key_type) + _string(group) + _string(topic) + struct.pack(">i", partition)


@pytest.mark.parametrize("key_type", [0, 1])
def test_an_offset_commit_key(key_type: int) -> None:
    assert parse_commit_key(_key(key_type, "billing", "orders", 7)) == CommitKey("billing", "orders", 7)


@pytest.mark.parametrize("key_type", [2, 3, 5, 8, 11, -1])
def test_other_record_types_are_not_commits(key_type: int) -> None:
    """2: a classic group's metadata; 3 and up: consumer and share group records (Kafka 3.7+)."""
    assert parse_commit_key(struct.pack(">h", key_type) + _string("billing")) is None


def test_a_truncated_or_empty_key_is_not_a_commit() -> None:
    assert parse_commit_key(_key(1, "billing", "orders", 7)[:-2]) is None
    assert parse_commit_key(b"") is None and parse_commit_key(None) is None


OFFSET, COMMITTED_MS = 1_234_567, 1_700_000_000_123
VALUES = {
    0: struct.pack(">hq", 0, OFFSET) + _string("meta") + struct.pack(">q", COMMITTED_MS),
    1: struct.pack(">hq", 1, OFFSET) + _string("") + struct.pack(">qq", COMMITTED_MS, COMMITTED_MS + 86_400_000),
    2: struct.pack(">hq", 2, OFFSET) + _string("meta") + struct.pack(">q", COMMITTED_MS),
    3: struct.pack(">hqi", 3, OFFSET, 5) + _string("meta") + struct.pack(">q", COMMITTED_MS),
    # v4: compact string "meta" (varint 5), then one tagged field (tag 0, 2 bytes)
    4: struct.pack(">hqi", 4, OFFSET, 5) + b"\x05meta" + struct.pack(">q", COMMITTED_MS) + b"\x01\x00\x02ab",
}


@pytest.mark.parametrize("version", sorted(VALUES))
def test_every_offset_commit_value_version(version: int) -> None:
    epoch = 5 if version >= 3 else -1
    assert parse_commit_value(VALUES[version]) == CommitValue(OFFSET, COMMITTED_MS, epoch)


def test_an_unknown_version_or_a_truncated_value_is_none() -> None:
    assert parse_commit_value(struct.pack(">hq", 5, OFFSET) + b"\x00" * 20) is None
    for value in VALUES.values():
        assert parse_commit_value(value[:-1]) is None
        assert parse_commit_value(value[:10]) is None


def test_a_v4_value_with_a_null_metadata_string_and_no_tagged_fields() -> None:
    value = struct.pack(">hqi", 4, 9, -1) + b"\x00" + struct.pack(">q", COMMITTED_MS) + b"\x00"
    assert parse_commit_value(value) == CommitValue(9, COMMITTED_MS, -1)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    parse_commit_key(data)
    parse_commit_value(data)
