"""Provenance headers: where a mirrored record came from, and the loop check built on them (pure).

Every record the engine writes says where it was read, in one of two forms (the link's `provenance`):

compact (the default), one UTF-8 text header:

    mirrorwatch.provenance   <path>;<topic>;<partition>;<offset>, e.g. `A1b2,C3d4;orders;3;1200`

full, six UTF-8 text headers:

    mirrorwatch.source.cluster    cluster id of the cluster it was read from
    mirrorwatch.source.topic      topic it was read from
    mirrorwatch.source.partition  partition it was read from
    mirrorwatch.source.offset     offset it had there (the upstream offset)
    mirrorwatch.path              comma-separated cluster ids of every cluster it has been on, oldest first
    mirrorwatch.hops              how many times it has been mirrored

Both say the same: the path's last cluster is the one it was read from, and hops is the path's length. The compact
form costs one header instead of six: about 60 bytes on the target per record instead of about 200, and less of
the python engine's time per record (the producer copies every header; measured ~8 % of its CPU on 100-byte
records). Kafka topic names have no `;` or `,`, and partition and offset are digits, so the compact header is read
from the right: its last three fields are topic, partition and offset, and everything before them is the path,
whatever bytes a producer put in a path it forged (a `;` in a full-form `mirrorwatch.path` survives being written
compact and read back). A compact value with fewer fields is read as a path as a whole: a header that does not
parse never reads as "not visited" for a cluster it names.

The source fields describe the last hop only (a record mirrored twice carries its second source); `path`
accumulates, which is what stops loops: a record is never written to a cluster already on its path, whichever form
wrote it. With links A->B and B->A on the same topic names (active-active), a record produced on A reaches B once
and is not sent back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

__all__ = [
    "HEADER_PREFIX",
    "HOPS",
    "PATH",
    "PROVENANCE",
    "SOURCE_CLUSTER",
    "SOURCE_OFFSET",
    "SOURCE_PARTITION",
    "SOURCE_TOPIC",
    "HeaderValue",
    "Headers",
    "ProvenanceForm",
    "ProvenanceStamp",
    "has_visited",
    "provenance_source",
    "provenance_stamp",
    "read_provenance",
    "with_provenance",
]

HEADER_PREFIX = "mirrorwatch."
PROVENANCE = "mirrorwatch.provenance"
SOURCE_CLUSTER = "mirrorwatch.source.cluster"
SOURCE_TOPIC = "mirrorwatch.source.topic"
SOURCE_PARTITION = "mirrorwatch.source.partition"
SOURCE_OFFSET = "mirrorwatch.source.offset"
PATH = "mirrorwatch.path"
HOPS = "mirrorwatch.hops"
_WITH_PATH = frozenset({PATH, PROVENANCE})
_OURS = frozenset({PROVENANCE, SOURCE_CLUSTER, SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET, PATH, HOPS})

HeaderValue = str | bytes | None
Headers = Sequence[tuple[str, HeaderValue]]
ProvenanceForm = Literal["compact", "full"]


def _path_of(headers: Headers | None) -> bytes:
    if headers:
        for name, value in headers:
            if value and name in _WITH_PATH:
                raw = value.encode() if isinstance(value, str) else value
                if name == PATH:
                    return raw
                fields = _compact_fields(raw)
                return fields[0] if len(fields) == 4 else raw
    return b""


def _compact_fields(raw: bytes) -> list[bytes]:
    """`<path>;<topic>;<partition>;<offset>` split from the right (the path may hold any byte); fewer than four
    fields when the value is not in that form."""
    return raw.rsplit(b";", 3)


def has_visited(headers: Headers | None, cluster_id: bytes) -> bool:
    """True when the record has already been on the cluster `cluster_id` (so writing it there would loop)."""
    path = _path_of(headers)
    if not path:
        return False
    # A forged path may hold `;` (a compact value that does not parse is all path): either separates cluster ids.
    return cluster_id in path.replace(b";", b",").split(b",")


def _stamped(path: bytes, topic: bytes, partition: bytes, offset: int, form: ProvenanceForm) -> list[tuple[str, bytes]]:
    if form == "compact":
        return [(PROVENANCE, b"%s;%s;%s;%d" % (path, topic, partition, offset))]
    return [
        (SOURCE_CLUSTER, path.rsplit(b",", 1)[-1]),
        (SOURCE_TOPIC, topic),
        (SOURCE_PARTITION, partition),
        (SOURCE_OFFSET, b"%d" % offset),
        (PATH, path),
        (HOPS, b"%d" % (path.count(b",") + 1)),
    ]


def with_provenance(
    headers: Headers | None,
    source_cluster: bytes,
    topic: bytes,
    partition: bytes,
    offset: int,
    *,
    form: ProvenanceForm = "compact",
) -> list[tuple[str, HeaderValue]]:
    """The record's own headers (order kept, earlier provenance of either form replaced) followed by this hop's."""
    path = _path_of(headers)
    new_path = path + b"," + source_cluster if path else source_cluster
    out: list[tuple[str, HeaderValue]] = [h for h in headers if h[0] not in _OURS] if headers else []
    out.extend(_stamped(new_path, topic, partition, offset, form))
    return out


# (before, name, prefix, after): the provenance of a record without headers of its own at `offset` is
# [*before, (name, prefix + b"%d" % offset), *after].
ProvenanceStamp = tuple[list[tuple[str, HeaderValue]], str, bytes, list[tuple[str, HeaderValue]]]


def provenance_stamp(
    source_cluster: bytes, topic: bytes, partition: bytes, *, form: ProvenanceForm = "compact"
) -> ProvenanceStamp:
    """The provenance of a record without headers of its own, less its offset, built once per source partition
    (the engine's per-record path: a first hop costs one small list instead of a header scan); equal to
    `with_provenance(None, ...)` for every offset."""
    if form == "compact":
        return [], PROVENANCE, b"%s;%s;%s;" % (source_cluster, topic, partition), []
    before: list[tuple[str, HeaderValue]] = [
        (SOURCE_CLUSTER, source_cluster),
        (SOURCE_TOPIC, topic),
        (SOURCE_PARTITION, partition),
    ]
    return before, SOURCE_OFFSET, b"", [(PATH, source_cluster), (HOPS, b"1")]


def read_provenance(headers: Headers | None) -> dict[str, bytes] | None:
    """A mirrored record's provenance in the full form's names less the prefix (`source.cluster`, `source.topic`,
    `source.partition`, `source.offset`, `path`, `hops`), whichever form it was written in; None when the record
    carries none. For tools and tests reading what the mirror wrote."""
    found: dict[str, bytes] = {}
    for name, value in headers or ():
        raw = value.encode() if isinstance(value, str) else value
        if raw is None or name not in _OURS:
            continue
        if name == PROVENANCE:
            fields = _compact_fields(raw)
            if len(fields) != 4 or not fields[3].isdigit():
                raise ValueError(f"{PROVENANCE} is not <path>;<topic>;<partition>;<offset>: {raw!r}")
            path, topic, partition, offset = fields
            return {n.removeprefix(HEADER_PREFIX): v for n, v in _stamped(path, topic, partition, int(offset), "full")}
        found[name.removeprefix(HEADER_PREFIX)] = raw
    return found or None


def provenance_source(headers: Headers | None) -> tuple[bytes, str, int, int] | None:
    """Where a mirrored record was read on its last hop, `(cluster id, topic, partition, offset)`, whichever form
    wrote it; None when it carries no provenance or one that does not parse (a record is never trusted to be well
    formed: this is what failover reads on every target record)."""
    if not headers:
        return None
    full: dict[str, bytes] = {}
    try:
        for name, value in headers:
            if value is None or name not in _OURS:
                continue
            raw = value.encode() if isinstance(value, str) else value
            if name == PROVENANCE:
                path, topic, partition, offset = _compact_fields(raw)
                return path.rsplit(b",", 1)[-1], topic.decode(), int(partition), int(offset)
            full[name] = raw
        if not full:
            return None
        return (
            full[PATH].rsplit(b",", 1)[-1] if PATH in full else full[SOURCE_CLUSTER],
            full[SOURCE_TOPIC].decode(),
            int(full[SOURCE_PARTITION]),
            int(full[SOURCE_OFFSET]),
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
