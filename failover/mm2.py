"""MirrorMaker 2's own translations (I/O; the record format is `failover.mm2_format`): the checkpoints its
MirrorCheckpointConnector writes to
`<source alias>.checkpoints.internal` on the target, read for `failover plan --mm2-checkpoints TOPIC` (method
`mm2-checkpoint`), so an operator moving off MirrorMaker 2 can compare its answer with mirrorwatch's.

The newest checkpoint of each (group, topic, partition) wins; a record that does not parse is skipped.
"""

from __future__ import annotations

from confluent_kafka import Message

from failover.mm2_format import Checkpoint, parse_checkpoint
from failover.scan import Watermarks, read_partitions, watermarks
from kernel.config import ClusterConfig
from kernel.kafka import new_admin

__all__ = ["read_checkpoints"]


def read_checkpoints(cluster: ClusterConfig, alias: str, topic: str) -> dict[tuple[str, str, int], Checkpoint]:
    """The newest checkpoint per (group, topic, partition) in `topic` (read from its start to its end)."""
    admin = new_admin(cluster, alias)
    metadata = admin.list_topics(topic, timeout=30).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return {}
    ends: dict[tuple[str, int], Watermarks] = watermarks(admin, [(topic, p) for p in metadata.partitions])
    found: dict[tuple[str, str, int], Checkpoint] = {}

    def on_record(_tp: tuple[str, int], _offset: int, msg: Message) -> None:
        checkpoint = parse_checkpoint(msg.key(), msg.value())
        if checkpoint is not None:
            found[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint

    starts = dict.fromkeys(ends, 0)
    read_partitions(cluster, alias, ends, starts, on_record=on_record, on_done=lambda _tp: None, progress=None)
    return found
