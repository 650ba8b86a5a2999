"""Connect offsets as MirrorMaker 2 and Replicator write them (no broker): parsed, the newest per key, tombstones,
anything else skipped; and written back for MirrorMaker 2."""

from __future__ import annotations

import json

import pytest

from failover.migrate_format import MM2_CONNECTOR, latest_positions, mm2_offset_record, parse_offset_record


def mm2_key(topic: str, partition: int, cluster: str = "source") -> bytes:
    return json.dumps([MM2_CONNECTOR, {"cluster": cluster, "partition": partition, "topic": topic}]).encode()


def replicator_key(topic: str, partition: int, connector: str = "replicator") -> bytes:
    return json.dumps([connector, {"topic": topic, "partition": partition}]).encode()


def offset(n: int) -> bytes:
    return json.dumps({"offset": n}).encode()


def test_the_position_is_the_offset_after_the_last_one_copied() -> None:
    assert parse_offset_record(mm2_key("t", 3), offset(41), connector=MM2_CONNECTOR, cluster="source") == (("t", 3), 42)
    assert parse_offset_record(replicator_key("t", 0), offset(0), connector="replicator", cluster=None) == (("t", 0), 1)
    assert parse_offset_record(mm2_key("t", 3), None, connector=MM2_CONNECTOR, cluster="source") == (("t", 3), None)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (mm2_key("t", 0, cluster="other"), offset(1)),  # another source cluster
        (replicator_key("t", 0, connector="another"), offset(1)),  # another connector
        (b"not json", offset(1)),
        (b'["MirrorSourceConnector"]', offset(1)),
        (json.dumps([MM2_CONNECTOR, {"cluster": "source", "partition": "0", "topic": "t"}]).encode(), offset(1)),
        (json.dumps([MM2_CONNECTOR, {"cluster": "source", "partition": -1, "topic": "t"}]).encode(), offset(1)),
        (json.dumps([MM2_CONNECTOR, {"cluster": "source", "partition": True, "topic": "t"}]).encode(), offset(1)),
        (mm2_key("t", 0), b'{"offset": "12"}'),
        (mm2_key("t", 0), b'{"offset": -5}'),
        (mm2_key("t", 0), b"\xff\xfe"),
        (None, offset(1)),
    ],
)
def test_records_of_another_connector_cluster_or_shape_are_skipped(key: bytes | None, value: bytes) -> None:
    records = [(mm2_key("t", 0), offset(9)), (key, value)]
    assert latest_positions(records, connector=MM2_CONNECTOR, cluster="source") == {("t", 0): 10}


def test_the_newest_version_of_a_key_wins_and_a_tombstone_deletes() -> None:
    records = [
        (replicator_key("a", 0), offset(5)),
        (replicator_key("a", 1), offset(7)),
        (replicator_key("a", 0), offset(12)),  # a newer version
        (replicator_key("a", 1), None),  # deleted
        (replicator_key("b", 0), offset(3)),
        (replicator_key("b", 0), None),
        (replicator_key("b", 0), offset(4)),  # written again after the tombstone
    ]
    assert latest_positions(records, connector="replicator", cluster=None) == {("a", 0): 13, ("b", 0): 5}


@pytest.mark.parametrize("position", [0, 1, 1234])
def test_a_written_mm2_record_reads_back_as_the_same_position(position: int) -> None:
    key, value = mm2_offset_record("source", "orders", 2, position)
    assert json.loads(key) == [MM2_CONNECTOR, {"cluster": "source", "partition": 2, "topic": "orders"}]
    assert json.loads(value) == {"offset": position - 1}
    assert parse_offset_record(key, value, connector=MM2_CONNECTOR, cluster="source") == (("orders", 2), position)
