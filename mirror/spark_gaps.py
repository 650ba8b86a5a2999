"""Records retention took before a Spark link copied them (issue #43): counted exactly, the link held failed.

Spark's Kafka source reads with `failOnDataLoss=true`: an offset the source no longer has fails the query (its
message says data may have been lost, not which records nor how many). When the query fails, the driver compares
where the checkpoint says each partition was written up to with the source's log start now (`mirror.gaps.
out_of_range`, as the python engines decide, with `on_gap: stop`): offsets position .. log start - 1 are a gap with
reason `retention`, action `stopped`, written to the link's ledger and logged once. The driver then stays up, failed,
publishing its status (the gaps, each partition's reason) so that the monitor, the API, the metrics, the alerts and
the console say it, until it is stopped (SIGTERM): a supervisor restarting a failed process does not loop (a restart
fails again at once and says the same gap once more, as noted before). A Spark query is the link's every partition:
it stops whole, not one partition alone; `on_gap: skip` is refused for the spark engine at start."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kernel.gap_ledger import GapLedger
from kernel.worker_status import Gap
from mirror.gaps import out_of_range

__all__ = ["retention_gaps", "say_gaps"]

log = logging.getLogger("mirrorwatch.mirror.spark")

_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
TIMEOUT_S = 10.0


def retention_gaps(admin: AdminClient, positions: dict[tuple[str, int], int], now_ms: int) -> list[Gap]:
    """The partitions whose position the source's log start has passed, as gaps (none when the source does not
    answer: the query's failure is then said as it is)."""
    if not positions:
        return []
    bounds: dict[tuple[str, int], list[int]] = {}
    try:
        for spec in (_EARLIEST, _LATEST):
            futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in positions}, request_timeout=TIMEOUT_S)
            for tp, future in futures.items():
                bounds.setdefault((tp.topic, tp.partition), []).append(int(future.result(timeout=TIMEOUT_S).offset))
    except (KafkaException, TimeoutError) as exc:
        log.warning("reading the source's log starts after the query failed: %s", exc)
        return []
    gaps = []
    for (topic, partition), (low, high) in sorted(bounds.items()):
        position = positions[(topic, partition)]
        decision = out_of_range(
            topic, partition, position, low, high, start_from="earliest", on_gap="stop", now_ms=now_ms
        )
        if decision.gap is not None and decision.gap.reason == "retention":
            gaps.append(decision.gap)
    return gaps


def say_gaps(ledger: GapLedger, link: str, gaps: list[Gap]) -> None:
    """Each gap written to the link's ledger and logged once (a restart finding it again says it was noted)."""
    for gap in gaps:
        if ledger.record(gap):
            log.error("%s", gap.describe(link))
        else:
            log.warning("%s (noted before: the link stays stopped)", gap.describe(link))
