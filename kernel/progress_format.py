"""The progress topic's records: what a mirror worker publishes for any monitor to read (pure; the shared kernel).

One record per status a worker publishes, on the compacted topic `progress.topic` of the link's target cluster
(`kernel.progress_topic`). The key names the writer, the value is the status, versioned:

    key     ["links", "<link>", <worker>, "<host>", <pid>]           compact JSON, UTF-8: one key per worker process
    value   {"format": 1, "kind": "links", "document": {...}}        the status-file document (`kernel.status_board`):
                                                                      the worker status (`kernel.worker_status`) and
                                                                      name, worker, updated_ms, host, pid
    header  mirrorwatch-progress-format: b"1"

The same topic carries each link's control document (`kernel.link_control`: paused, promoted, its budget), so that
`mirrorwatch link pause` on one host is obeyed by the link's workers on every host:

    key     ["control", "<link>"]
    value   {"format": 1, "kind": "control", "document": {...}}      the control document (`LinkControl.as_json`)

And each link's ledger of lost records (`kernel.gap_ledger`), one record per gap, so that a gap one host's worker
found is known to the link's workers on every host and to `failover plan` wherever it runs (the target survives a
lost source; the state directory of the host that found it may not):

    key     ["lost", "<link>", "<topic>", <partition>, <first_offset>, <end_offset or -1>]    the gap's key (Gap.key)
    value   {"format": 1, "kind": "lost", "document": {...}}          the gap (`kernel.worker_status.Gap`)

and the notes of the link's source topics (`kernel.topic_notes`: the topic id each partition was copied from, where
a generation restarted after the topic was created again begins on the target), for the same reasons:

    key     ["note", "<link>", "<topic>", <partition>]
    value   {"format": 1, "kind": "note", "document": {...}}          the note (`kernel.topic_notes.PartitionNote`)

A null value (a tombstone) withdraws the writer's status: it stopped cleanly. The pid is in the key for the reason it
is in a status file's name: a worker restarted after a crash does not overwrite its predecessor's last word (every
record that one had acknowledged is on the target). Compaction keeps the newest record of each key.

A reader must not trust the topic's writers more than the topic's ACLs do: a record whose key or value does not parse,
whose document does not name the key's writer, or that is bigger than `MAX_VALUE_BYTES` is refused (counted by the
reader, never raised); a record of a newer format is refused with that reason, so that an old monitor reading a fleet
upgraded first says why it sees no statuses. Only the format's own additions may be read by an older reader: a field
a reader does not know is ignored (`WorkerStatus.from_json`), a format whose meaning changed gets a new number.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel.worker_status import Gap

__all__ = [
    "FORMAT",
    "FORMAT_HEADER",
    "MAX_VALUE_BYTES",
    "Documents",
    "Entry",
    "Refused",
    "Tombstone",
    "control_key",
    "control_link_of",
    "decode",
    "decode_as",
    "decode_control",
    "decode_lost",
    "decode_note",
    "encode",
    "encode_control",
    "encode_lost",
    "encode_note",
    "lost_link_of",
    "merge_statuses",
    "note_link_of",
    "progress_key",
    "writer_of",
]

FORMAT = 1
FORMAT_HEADER = "mirrorwatch-progress-format"
# The topic's max.message.bytes when a worker creates it; a bigger record (thousands of partitions per worker with
# every client statistic) is not published, and the worker says so once.
MAX_VALUE_BYTES = 4 * 1024 * 1024

Documents = dict[str, list[dict[str, Any]]]  # name -> its writers' documents, oldest update first (StatusBoard.read)


@dataclass(frozen=True, slots=True)
class Entry:
    """A writer's status: `document` has the status-file shape (name, worker, updated_ms, host, pid and the rest)."""

    key: bytes
    kind: str
    document: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Tombstone:
    """The writer withdrew its status (a clean stop)."""

    key: bytes


@dataclass(frozen=True, slots=True)
class Refused:
    """Not a record a reader takes: why (a foreign or forged record, a newer format)."""

    reason: str


def progress_key(kind: str, name: str, worker: int, host: str, pid: int) -> bytes:
    return json.dumps([kind, name, worker, host, pid], separators=(",", ":")).encode()


def encode(kind: str, document: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The key and value of a status-file document (it names its writer: name, worker, host, pid)."""
    key = progress_key(kind, document["name"], document["worker"], document["host"], document["pid"])
    value = json.dumps({"format": FORMAT, "kind": kind, "document": document}, separators=(",", ":"), default=str)
    return key, value.encode()


Writer = tuple[str, str, int, str, int]  # kind, name, worker, host, pid


CONTROL = "control"


def control_key(link: str) -> bytes:
    return json.dumps([CONTROL, link], separators=(",", ":")).encode()


def encode_control(link: str, document: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The key and value of a link's control document."""
    value = json.dumps({"format": FORMAT, "kind": CONTROL, "document": document}, separators=(",", ":"))
    return control_key(link), value.encode()


def _link_of(key: bytes | None, kind: str, length: int) -> str | None:
    """The link a key of a link's own record names (`[kind, link, ...]`, `length` parts); None: not such a key."""
    if not key or not key.startswith(b'["' + kind.encode() + b'"'):
        return None
    try:
        parts = json.loads(key)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parts, list) or len(parts) != length or parts[0] != kind or not isinstance(parts[1], str):
        return None
    return parts[1]


def control_link_of(key: bytes | None) -> str | None:
    """The link a control record's key names; None: not a control key."""
    return _link_of(key, CONTROL, 2)


def decode_control(key: bytes, value: bytes | None) -> Entry | Tombstone | Refused:
    """A control record whose key names a link (`control_link_of`): its document, to be read by
    `LinkControl.from_json`, which refuses one that is not a control document of that link."""
    body = _body(key, value)
    if not isinstance(body, dict):
        return body
    if body.get("kind") != CONTROL or not isinstance(body.get("document"), dict):
        return Refused("a value that is not a control document")
    return Entry(key, CONTROL, body["document"])


LOST = "lost"
_GAP_TYPES = {
    "topic": str,
    "partition": int,
    "first_offset": int,
    "end_offset": int,
    "reason": str,
    "action": str,
    "at_ms": int,
}


def _lost_key(link: str, gap_key: tuple[str, int, int, int]) -> bytes:
    return json.dumps([LOST, link, *gap_key], separators=(",", ":")).encode()


def encode_lost(link: str, gap: Gap) -> tuple[bytes, bytes]:
    """The key and value of a gap in the link's ledger of lost records."""
    document = {name: getattr(gap, name) for name in _GAP_TYPES}
    value = json.dumps({"format": FORMAT, "kind": LOST, "document": document}, separators=(",", ":"))
    return _lost_key(link, gap.key), value.encode()


def lost_link_of(key: bytes | None) -> str | None:
    """The link a lost-records key names; None: not such a key."""
    return _link_of(key, LOST, 6)


def decode_lost(link: str, key: bytes, value: bytes | None) -> Gap | Tombstone | Refused:
    """A gap of `link` (its key named the link: `lost_link_of`), or why not: a document that is not a gap, or a
    gap that is not the one its key names, is refused (a forged record cannot rename another gap)."""
    fields = _typed_document(key, value, LOST, _GAP_TYPES, "a lost-records document")
    if not isinstance(fields, dict):
        return fields
    gap = Gap(**fields)
    if _lost_key(link, gap.key) != key or gap.end_offset < gap.first_offset:
        return Refused("a gap that is not the one its key names")
    return gap


NOTE = "note"
_NOTE_TYPES: dict[str, Any] = {
    "topic": str,
    "partition": int,
    "topic_id": str,
    "acked": (int, type(None)),
    "high": (int, type(None)),
    "target_id": str,
    "target_from": dict,
    "noted_ms": int,
}


def _note_key(link: str, topic: str, partition: int) -> bytes:
    return json.dumps([NOTE, link, topic, partition], separators=(",", ":")).encode()


def encode_note(link: str, document: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The key and value of a note of the link's source topics (`document`: the note's fields)."""
    body = {name: document[name] for name in _NOTE_TYPES}
    value = json.dumps({"format": FORMAT, "kind": NOTE, "document": body}, separators=(",", ":"))
    return _note_key(link, document["topic"], document["partition"]), value.encode()


def note_link_of(key: bytes | None) -> str | None:
    """The link a note's key names; None: not such a key."""
    return _link_of(key, NOTE, 4)


def decode_note(link: str, key: bytes, value: bytes | None) -> Entry | Tombstone | Refused:
    """A note of `link` (its key named the link: `note_link_of`) as the note's fields, or why not: a document that
    is not a note, or a note of another partition than its key names, is refused."""
    fields = _typed_document(key, value, NOTE, _NOTE_TYPES, "a note document")
    if not isinstance(fields, dict):
        return fields
    since = fields["target_from"]
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in since.items()):
        return Refused("a note document without its fields")
    if _note_key(link, fields["topic"], fields["partition"]) != key:
        return Refused("a note that is not the one its key names")
    return Entry(key, NOTE, fields)


def _typed_document(
    key: bytes, value: bytes | None, kind: str, types: Mapping[str, Any], what: str
) -> dict[str, Any] | Tombstone | Refused:
    """The fields of a record's document of `kind`, each of its type (`types`; a bool is no int), or a tombstone, or
    why not."""
    body = _body(key, value)
    if not isinstance(body, dict):
        return body
    document = body.get("document")
    if body.get("kind") != kind or not isinstance(document, dict):
        return Refused(f"a value that is not {what}")
    fields = {name: document.get(name) for name in types}
    if not all(isinstance(fields[n], t) and not isinstance(fields[n], bool) for n, t in types.items()):
        return Refused(f"{what} without its fields")
    return fields


def _body(key: bytes, value: bytes | None) -> dict[str, Any] | Tombstone | Refused:
    """A record's value as its versioned body, a tombstone (no value), or why not."""
    if value is None:
        return Tombstone(key)
    if len(value) > MAX_VALUE_BYTES:
        return Refused(f"a value of {len(value)} bytes (at most {MAX_VALUE_BYTES})")
    try:
        body = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return Refused("a value that is not JSON")
    if not isinstance(body, dict) or not isinstance(body.get("format"), int) or isinstance(body["format"], bool):
        return Refused("a value without a format number")
    if body["format"] > FORMAT:
        return Refused(f"format {body['format']}, newer than this reader's {FORMAT}: upgrade the monitor")
    return body


def decode(key: bytes | None, value: bytes | None) -> Entry | Tombstone | Refused:
    return decode_as(writer_of(key), key, value)


def decode_as(writer: Writer | None, key: bytes | None, value: bytes | None) -> Entry | Tombstone | Refused:
    """`decode` with `writer_of(key)` already read (by a reader that filters records by their key first)."""
    if writer is None or key is None:
        return Refused("a key that is not a progress key")
    body = _body(key, value)
    if not isinstance(body, dict):
        return body
    document = body.get("document")
    if body.get("kind") != writer[0] or not isinstance(document, dict):
        return Refused("a value that is not a status")
    if not isinstance(document.get("updated_ms"), int):
        return Refused("a status without its moment")
    named = (document.get("name"), document.get("worker"), document.get("host"), document.get("pid"))
    if named != writer[1:]:
        return Refused("a status that does not name its key's writer")
    return Entry(key, writer[0], document)


def writer_of(key: bytes | None) -> Writer | None:
    """Who a key names (kind, name, worker, host, pid), without reading the value; None: not a progress key."""
    if not key:
        return None
    try:
        parts = json.loads(key)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parts, list) or len(parts) != 5:
        return None
    kind, name, worker, host, pid = parts
    if not (isinstance(kind, str) and isinstance(name, str) and isinstance(host, str)):
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (worker, pid)):
        return None
    return kind, name, worker, host, pid


def merge_statuses(*sources: Documents) -> Documents:
    """Statuses from the files and the progress topics as one: one document per writer (name, worker, host, pid),
    the newest; oldest update first per name."""
    newest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for source in sources:
        for documents in source.values():
            for document in documents:
                writer = (document.get("name"), document.get("worker"), document.get("host"), document.get("pid"))
                known = newest.get(writer)
                if known is None or document["updated_ms"] > known["updated_ms"]:
                    newest[writer] = document
    found: Documents = {}
    for document in sorted(newest.values(), key=lambda d: d["updated_ms"]):
        found.setdefault(str(document.get("name")), []).append(document)
    return found
