"""What a worker commits, and its last commit when it leaves the group.

A worker commits, per partition, the offset after the last record the target acknowledged in order
(`PartitionProgress.offset_to_commit`), with the leader epoch of its position (KIP-320). Its last commit before it
leaves may meet a rebalance under way (another worker joined or left at the same moment): the coordinator refuses a
member whose generation is behind (REJOIN_FIRST) until it has rejoined, and the rebalance waits for the stopping
worker's poll. The last commit is then taken after polling (`commit_before_leaving`): without it the next owner
mirrored again everything after the commit before (seen: 2,083 records twice over a rolling restart while a fourth
worker joined)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kernel.clock import Clock
from mirror.progress import PartitionProgress

__all__ = [
    "REJOIN_FIRST",
    "SHUTDOWN_REJOIN_S",
    "acked_offsets",
    "commit_before_leaving",
    "refused",
    "with_leader_epochs",
]

log = logging.getLogger("mirrorwatch.mirror")

REJOIN_FIRST = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS})
SHUTDOWN_REJOIN_S = 15.0  # how long a stopping worker polls to rejoin a rebalance for its last commit


def acked_offsets(
    progress: Mapping[tuple[str, int], PartitionProgress], keys: set[tuple[str, int]] | None
) -> list[TopicPartition]:
    """The offsets to commit: of `keys` (else every partition), those with something acknowledged not committed."""
    offsets = []
    for key, p in progress.items():
        if keys is None or key in keys:
            offset = p.offset_to_commit()
            if offset is not None:
                offsets.append(TopicPartition(key[0], key[1], offset))
    return offsets


def refused(exc: KafkaException) -> int:
    """The error code of a refused commit."""
    return exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else KafkaError._FAIL


def with_leader_epochs(consumer: Consumer, offsets: list[TopicPartition]) -> list[TopicPartition]:
    """The offsets to commit, each with the leader epoch of the consumer's position (that of the last record it read,
    never older than the committed offset's own), kept by whoever reads the partition from this commit: when the
    partition's leader changes (an unclean election), librdkafka checks the position against the source log by it
    (KIP-320) and says where the old log ends (`mirror.gaps.truncated_at`). Without an epoch where the position has
    none. librdkafka checks nothing when the epoch stays (one broker restarted)."""
    epochs = {(tp.topic, tp.partition): tp.leader_epoch for tp in consumer.position(offsets)}
    out = []
    for tp in offsets:
        epoch = epochs.get((tp.topic, tp.partition))
        out.append(
            tp if epoch is None or epoch < 0 else TopicPartition(tp.topic, tp.partition, tp.offset, leader_epoch=epoch)
        )
    return out


def commit_before_leaving(consumer: Consumer, commit: Callable[[], int | None], clock: Clock, name: str) -> None:
    """The last commit (`commit`: synchronous, the refusal's code or None), taken once the worker has rejoined a
    rebalance under way: it polls, its partitions paused and a record handed out dropped unread, for at most
    SHUTDOWN_REJOIN_S."""
    code = commit()
    if code not in REJOIN_FIRST:
        return
    log.info(
        "link %s: the group is rebalancing (%s); committing once this worker has rejoined (at most %gs)",
        name,
        KafkaError(code).name(),
        SHUTDOWN_REJOIN_S,
    )
    deadline = clock.monotonic_s() + SHUTDOWN_REJOIN_S
    while code in REJOIN_FIRST and clock.monotonic_s() < deadline:
        consumer.poll(0.2)  # the rebalance's callbacks run here (a revoked partition commits in its callback)
        assignment = consumer.assignment()
        if assignment:
            consumer.pause(assignment)  # a partition assigned meanwhile is not read: its next owner reads it
        code = commit()
    if code is not None:
        log.warning(
            "link %s: the last commit was refused (%s); the next owners mirror again what followed the one before",
            name,
            KafkaError(code).name(),
        )
