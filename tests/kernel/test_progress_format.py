"""The progress topic's record format and the merge of statuses that came two ways (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernel.link_control import LinkControl
from kernel.progress_format import (
    FORMAT,
    MAX_VALUE_BYTES,
    Entry,
    Refused,
    Tombstone,
    control_key,
    control_link_of,
    decode,
    decode_control,
    decode_lost,
    decode_note,
    encode,
    encode_control,
    encode_lost,
    encode_note,
    lost_link_of,
    merge_statuses,
    note_link_of,
    progress_key,
)
from kernel.worker_status import Gap, PartitionPosition, WorkerStatus


def _document(updated_ms: int = 1_000, *, name: str = "dr", worker: int = 0, host: str = "h1", pid: int = 7) -> Any:
    status = WorkerStatus(
        link=name,
        worker=worker,
        engine="python",
        observed_ms=updated_ms,
        publish_interval_ms=500,
        state="running",
        partitions=(PartitionPosition("orders", 0, "orders", 10, 8, 5, 2, 12, 999),),
    )
    return {**status.as_json(), "name": name, "worker": worker, "updated_ms": updated_ms, "host": host, "pid": pid}


def test_a_status_survives_the_trip_and_its_key_names_the_writer() -> None:
    document = _document()
    key, value = encode("links", document)
    assert key == progress_key("links", "dr", 0, "h1", 7)
    entry = decode(key, value)
    assert isinstance(entry, Entry)
    assert entry.kind == "links"
    status = WorkerStatus.from_json(entry.document)
    assert status is not None
    assert status.partitions[0] == PartitionPosition("orders", 0, "orders", 10, 8, 5, 2, 12, 999)
    assert json.loads(value)["format"] == FORMAT


def test_a_restarted_worker_has_a_key_of_its_own() -> None:
    assert encode("links", _document(pid=7))[0] != encode("links", _document(pid=8))[0]
    assert encode("links", _document(worker=0))[0] != encode("links", _document(worker=1))[0]


def test_a_null_value_withdraws_the_status() -> None:
    key = progress_key("links", "dr", 0, "h1", 7)
    assert decode(key, None) == Tombstone(key)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b"{}", "not a progress key"),
        (b"\xff\x00garbage", b"{}", "not a progress key"),
        (b'["links","dr",true,"h1",7]', b"{}", "not a progress key"),
        (b'["links","dr",0,"h1"]', b"{}", "not a progress key"),
        (progress_key("links", "dr", 0, "h1", 7), b"\xff\xfe", "not JSON"),
        (progress_key("links", "dr", 0, "h1", 7), b"[1,2]", "without a format number"),
        (progress_key("links", "dr", 0, "h1", 7), b'{"format":true}', "without a format number"),
        (progress_key("links", "dr", 0, "h1", 7), b'{"format":1,"kind":"canary","document":{}}', "not a status"),
        (progress_key("links", "dr", 0, "h1", 7), b'{"format":1,"kind":"links","document":{}}', "without its moment"),
    ],
)
def test_foreign_and_broken_records_are_refused_with_a_reason(key: bytes | None, value: bytes, reason: str) -> None:
    refused = decode(key, value)
    assert isinstance(refused, Refused)
    assert reason in refused.reason


def test_a_status_that_does_not_name_its_keys_writer_is_refused() -> None:
    """A writer of the topic cannot overwrite another worker's status by reusing its key with its own document."""
    _, value = encode("links", _document(pid=8))
    refused = decode(progress_key("links", "dr", 0, "h1", 7), value)
    assert isinstance(refused, Refused)
    assert "does not name" in refused.reason


def test_a_newer_format_is_refused_saying_so() -> None:
    key = progress_key("links", "dr", 0, "h1", 7)
    refused = decode(key, json.dumps({"format": FORMAT + 1, "kind": "links", "document": {}}).encode())
    assert isinstance(refused, Refused)
    assert "upgrade the monitor" in refused.reason


def test_a_value_too_big_is_refused_unread() -> None:
    refused = decode(progress_key("links", "dr", 0, "h1", 7), b" " * (MAX_VALUE_BYTES + 1))
    assert isinstance(refused, Refused)
    assert "bytes" in refused.reason


def test_fields_a_reader_does_not_know_are_ignored() -> None:
    document = {**_document(), "added_in_a_later_format": {"x": 1}}
    entry = decode(*encode("links", document))
    assert isinstance(entry, Entry)
    assert WorkerStatus.from_json(entry.document) is not None


def test_merge_keeps_each_writers_newest_status_whichever_way_it_came() -> None:
    from_files = {"dr": [_document(1_000, pid=7), _document(3_000, pid=9)]}
    from_topic = {
        "dr": [_document(2_000, pid=7), _document(1_500, host="h2", pid=7)],
        "eu": [_document(500, name="eu")],
    }
    merged = merge_statuses(from_files, from_topic)
    assert [(d["host"], d["pid"], d["updated_ms"]) for d in merged["dr"]] == [
        ("h2", 7, 1_500),
        ("h1", 7, 2_000),
        ("h1", 9, 3_000),
    ]
    assert [d["updated_ms"] for d in merged["eu"]] == [500]


def test_a_links_control_travels_under_a_key_of_its_own_and_comes_back_whole() -> None:
    control = LinkControl("dr").pause(("orders.eu",), 5_000, "reindex", "ops@h1")
    key, value = encode_control("dr", control.as_json())
    assert key == control_key("dr") == b'["control","dr"]'
    assert control_link_of(key) == "dr"
    record = decode_control(key, value)
    assert isinstance(record, Entry) and record.kind == "control"
    assert LinkControl.from_json("dr", record.document) == control
    assert decode_control(key, None) == Tombstone(key)  # withdrawn
    # a control key is not a worker's, and a worker's key is not a control key
    assert isinstance(decode(key, value), Refused)
    assert control_link_of(progress_key("links", "dr", 0, "h1", 7)) is None


@pytest.mark.parametrize(
    "key",
    [b'["control"]', b'["control","dr","x"]', b'["control",7]', b'["control","dr"', b'["controls","dr"]', b"", None],
)
def test_a_key_that_is_not_exactly_a_control_key_names_no_link(key: bytes | None) -> None:
    assert control_link_of(key) is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\xff\xfe", "not JSON"),
        (b'{"kind": "control", "document": {}}', "format number"),
        (b'{"format": 99, "kind": "control", "document": {}}', "upgrade"),
        (b'{"format": 1, "kind": "links", "document": {}}', "not a control document"),
        (b'{"format": 1, "kind": "control", "document": []}', "not a control document"),
    ],
)
def test_a_control_value_that_is_not_one_is_refused_with_the_reason(value: bytes, reason: str) -> None:
    record = decode_control(control_key("dr"), value)
    assert isinstance(record, Refused) and reason in record.reason, record


def test_a_gap_goes_round_the_topic_as_itself_and_a_forged_or_foreign_one_is_refused() -> None:
    gap = Gap("orders", 3, 1000, 1500, "retention", "stopped", 1_800_000_000_000)
    key, value = encode_lost("dc1/to:dc2", gap)
    assert lost_link_of(key) == "dc1/to:dc2" and control_link_of(key) is None and lost_link_of(b'["lost","x"]') is None
    assert decode_lost("dc1/to:dc2", key, value) == gap
    assert decode_lost("dc1/to:dc2", key, None) == Tombstone(key)
    grown = Gap("orders", 0, 0, 700, "target-retention", "copied", 1)  # a growing gap: its key has no end
    assert decode_lost("dr", *encode_lost("dr", grown)) == grown and json.loads(encode_lost("dr", grown)[0])[-1] == -1
    body = json.loads(value)

    def refused(document: Any, *, link: str = "dc1/to:dc2", kind: str = "lost", fmt: int = FORMAT) -> str:
        forged = json.dumps({"format": fmt, "kind": kind, "document": document}).encode()
        result = decode_lost(link, key, forged)
        assert isinstance(result, Refused)
        return result.reason

    assert "not the one its key names" in refused({**body["document"], "end_offset": 2000})  # renamed
    assert "not the one its key names" in refused(body["document"], link="other")
    assert "not the one its key names" in refused({**body["document"], "first_offset": 1500, "end_offset": 1000})
    assert "without its fields" in refused({**body["document"], "partition": "3"})
    assert "without its fields" in refused({**body["document"], "partition": True})
    assert "without its fields" in refused({k: v for k, v in body["document"].items() if k != "at_ms"})
    assert "not a lost-records document" in refused(body["document"], kind="control")
    assert "newer than this reader" in refused(body["document"], fmt=FORMAT + 1)
    assert isinstance(decode_lost("dc1/to:dc2", key, b"\xff" * 10), Refused)


def test_a_note_goes_round_the_topic_as_its_fields_and_one_of_another_partition_or_shape_is_refused() -> None:
    note = {"topic": "orders", "partition": 2, "topic_id": "id-b", "acked": 30, "high": None, "target_id": "t-1",
            "target_from": {"0": 40, "1": 38}, "noted_ms": 2_000}  # fmt: skip
    key, value = encode_note("dr", note)
    assert note_link_of(key) == "dr" and lost_link_of(key) is None and note_link_of(b'["note","dr"]') is None
    entry = decode_note("dr", key, value)
    assert isinstance(entry, Entry) and entry.document == note
    assert decode_note("dr", key, None) == Tombstone(key)

    def reason(**change: Any) -> str:
        forged = json.dumps({"format": FORMAT, "kind": "note", "document": {**note, **change}}).encode()
        result = decode_note("dr", key, forged)
        assert isinstance(result, Refused)
        return result.reason

    assert "not the one its key names" in reason(partition=3)
    assert "without its fields" in reason(acked="30")
    assert "without its fields" in reason(target_from={"0": "40"})
    assert "without its fields" in reason(noted_ms=None)
    assert "not the one its key names" in decode_note("other", key, value).reason  # type: ignore[union-attr]
