"""Where a link had copied each source partition up to, read off its copies on the target (pure, no I/O).

When the source is lost (`mirrorwatch failover promote --source-lost`), neither its high-watermarks nor the link's
commits can be read; the copies on the target still say where they came from (provenance: the last hop's cluster id,
source topic, partition and offset). The link copies a source partition in order, so its furthest copy says the link
had copied every record of it below that offset + 1. The copies are read from the target partitions' ends backwards
(`failover.scan.last_copies`) until one is found; a furthest copy further back than that (a mirror killed while it
wrote a replayed stretch again) makes the offset lower than it could be: more is listed as the tail, never less.
What the source took after it is the disaster's tail (`failover diverged`).

The source is the one cluster whose copies the link's target topics hold; copies from two clusters in the same
topics (a hub mirroring several sources under one name) cannot be told apart without the source, and are refused.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["AmbiguousSource", "LastCopies", "copied_up_to"]

# per target partition: per last-hop cluster id, per source partition, the furthest source offset copied there
LastCopies = Mapping[tuple[str, int], Mapping[bytes, Mapping[tuple[str, int], int]]]


class AmbiguousSource(ValueError):
    """The target's copies come from more than one cluster."""


def copied_up_to(found: LastCopies, target_id: bytes) -> tuple[bytes | None, dict[tuple[str, int], int]]:
    """The source cluster's id (None: no copy found) and per source partition the offset below which every record
    was copied (the furthest copy's offset + 1, over every target partition holding copies of it). Raises
    AmbiguousSource naming the clusters when copies of more than one are found."""
    ids = sorted({cluster for last in found.values() for cluster in last if cluster != target_id})
    if len(ids) > 1:
        named = ", ".join(i.decode(errors="replace") for i in ids)
        raise AmbiguousSource(f"the link's target topics hold copies from {len(ids)} clusters ({named})")
    if not ids:
        return None, {}
    source = ids[0]
    copied: dict[tuple[str, int], int] = {}
    for last in found.values():
        for key, offset in last.get(source, {}).items():
            copied[key] = max(copied.get(key, 0), offset + 1)
    return source, copied
