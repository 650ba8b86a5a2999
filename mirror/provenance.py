"""Provenance headers: where a mirrored record came from, and the loop check built on them (pure).

Every record the engine writes carries, as UTF-8 text headers:

    mirrorwatch.source.cluster    cluster id of the cluster it was read from
    mirrorwatch.source.topic      topic it was read from
    mirrorwatch.source.partition  partition it was read from
    mirrorwatch.source.offset     offset it had there (the upstream offset)
    mirrorwatch.path              comma-separated cluster ids of every cluster it has been on, oldest first
    mirrorwatch.hops              how many times it has been mirrored

The source.* headers describe the last hop only (a record mirrored twice carries its second source); `path`
accumulates, which is what stops loops: a record is never written to a cluster already on its path. With links A->B
and B->A on the same topic names (active-active), a record produced on A reaches B once and is not sent back.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "HEADER_PREFIX",
    "HOPS",
    "PATH",
    "SOURCE_CLUSTER",
    "SOURCE_OFFSET",
    "SOURCE_PARTITION",
    "SOURCE_TOPIC",
    "HeaderValue",
    "Headers",
    "ProvenanceStamp",
    "has_visited",
    "provenance_stamp",
    "with_provenance",
]

HEADER_PREFIX = "mirrorwatch."
SOURCE_CLUSTER = "mirrorwatch.source.cluster"
SOURCE_TOPIC = "mirrorwatch.source.topic"
SOURCE_PARTITION = "mirrorwatch.source.partition"
SOURCE_OFFSET = "mirrorwatch.source.offset"
PATH = "mirrorwatch.path"
HOPS = "mirrorwatch.hops"
_OURS = frozenset({SOURCE_CLUSTER, SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET, PATH, HOPS})

HeaderValue = str | bytes | None
Headers = Sequence[tuple[str, HeaderValue]]


def _path_of(headers: Headers | None) -> bytes:
    if headers:
        for name, value in headers:
            if name == PATH and value:
                return value.encode() if isinstance(value, str) else value
    return b""


def has_visited(headers: Headers | None, cluster_id: bytes) -> bool:
    """True when the record has already been on the cluster `cluster_id` (so writing it there would loop)."""
    path = _path_of(headers)
    return bool(path) and cluster_id in path.split(b",")


def with_provenance(
    headers: Headers | None, source_cluster: bytes, topic: bytes, partition: bytes, offset: int
) -> list[tuple[str, HeaderValue]]:
    """The record's own headers (order kept, earlier provenance replaced) followed by this hop's provenance."""
    path = _path_of(headers)
    new_path = path + b"," + source_cluster if path else source_cluster
    out: list[tuple[str, HeaderValue]] = [h for h in headers if h[0] not in _OURS] if headers else []
    out += [
        (SOURCE_CLUSTER, source_cluster),
        (SOURCE_TOPIC, topic),
        (SOURCE_PARTITION, partition),
        (SOURCE_OFFSET, str(offset).encode()),
        (PATH, new_path),
        (HOPS, str(new_path.count(b",") + 1).encode()),
    ]
    return out


ProvenanceStamp = tuple[list[tuple[str, HeaderValue]], list[tuple[str, HeaderValue]]]


def provenance_stamp(source_cluster: bytes, topic: bytes, partition: bytes) -> ProvenanceStamp:
    """The provenance of a record without headers of its own, less its offset, built once per source partition.

    `[*before, (SOURCE_OFFSET, b"%d" % offset), *after]` equals `with_provenance(None, ...)` for that offset; the
    engine's per-record path uses it so that a first hop costs one small list instead of a header scan."""
    before: list[tuple[str, HeaderValue]] = [
        (SOURCE_CLUSTER, source_cluster),
        (SOURCE_TOPIC, topic),
        (SOURCE_PARTITION, partition),
    ]
    return before, [(PATH, source_cluster), (HOPS, b"1")]
