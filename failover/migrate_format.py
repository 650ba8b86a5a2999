"""Where another mirror got to, in the records it keeps its progress in (pure): Kafka Connect source offsets as
MirrorMaker 2 and Confluent Replicator write them, read and written back.

Both keep one record per source partition in a compacted Connect offsets topic (JsonConverter, schemas off):

    MirrorMaker 2   key   ["MirrorSourceConnector",{"cluster":"<source alias>","partition":P,"topic":"T"}]
                    value {"offset":N}
    Replicator      key   ["<connector name>",{"topic":"T","partition":P}]
                    value {"offset":N}

N is the offset of the last record the task copied: it resumes at N + 1 (MirrorSourceTask.loadOffset). Replicator
is read the same way (its documentation shows the same shape; `migrate` checks the target's last record against the
source record before the position either way). The newest record of a key wins (the topic is compacted and may hold
many versions); a tombstone (no value) deletes the position. Records of other connectors, other source clusters or
another shape are skipped.

Positions here are *next* offsets, as a consumer group commits them: everything below was copied.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["MM2_CONNECTOR", "TopicPartition", "latest_positions", "mm2_offset_record", "parse_offset_record"]

MM2_CONNECTOR = "MirrorSourceConnector"
TopicPartition = tuple[str, int]


def _json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None


def parse_offset_record(
    key: bytes | None, value: bytes | None, *, connector: str, cluster: str | None
) -> tuple[TopicPartition, int | None] | None:
    """`((topic, partition), next offset)` of one Connect offsets record of `connector` (with MirrorMaker 2, for the
    source cluster alias `cluster`); next offset None for a tombstone; None when the record is not one of those."""
    parsed = _json(key)
    if not (isinstance(parsed, list) and len(parsed) == 2 and parsed[0] == connector and isinstance(parsed[1], dict)):
        return None
    where = parsed[1]
    topic, partition = where.get("topic"), where.get("partition")
    if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        return None
    if cluster is not None and where.get("cluster") != cluster:
        return None
    if value is None:
        return (topic, partition), None
    body = _json(value)
    offset = body.get("offset") if isinstance(body, dict) else None
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < -1:
        return None
    return (topic, partition), offset + 1


def latest_positions(
    records: Iterable[tuple[bytes | None, bytes | None]], *, connector: str, cluster: str | None
) -> dict[TopicPartition, int]:
    """The newest position per source partition, records given in the order they were written (per partition of
    the offsets topic; a key always lands on the same one); tombstones delete."""
    found: dict[TopicPartition, int] = {}
    for key, value in records:
        parsed = parse_offset_record(key, value, connector=connector, cluster=cluster)
        if parsed is None:
            continue
        tp, position = parsed
        if position is None:
            found.pop(tp, None)
        else:
            found[tp] = position
    return found


def mm2_offset_record(cluster: str, topic: str, partition: int, position: int) -> tuple[bytes, bytes]:
    """The MirrorMaker 2 offsets record saying that everything below `position` of topic[partition] was copied
    (its value is the last copied offset, `position - 1`; -1 when nothing was: MirrorMaker 2 then starts at 0)."""
    key = json.dumps(
        [MM2_CONNECTOR, {"cluster": cluster, "partition": partition, "topic": topic}], separators=(",", ":")
    )
    value = json.dumps({"offset": position - 1}, separators=(",", ":"))
    return key.encode(), value.encode()
