"""At which moment a mirror link partition's figures are true, and why its high-watermark is only a floor (pure):
the rules `monitor.links.safe_positions` applies to a partition a live worker reports and to one nobody mirrors."""

from __future__ import annotations

import threading

from kernel.worker_status import PartitionPosition, WorkerStatus

__all__ = ["REPORTED_AFTER_READ", "OnSourceBy", "stale_high", "unowned_high", "unowned_moment"]

# Why a partition nobody mirrors is not known to be caught up though the source answers: its position came in a status
# later than the high-watermark read, from a worker that did not say (or saw further than) where the source stood then
# — a worker that has just released it in a rebalance, or died. The round's figure, if it had one, stands at its own
# moment (`monitor.served._served_partition`); only a round that reads the source again measures it.
REPORTED_AFTER_READ = "its position was reported after the last high-watermark read"


def unowned_high(high: int | None, high_ms: int | None, proof: tuple[int, int | None] | None) -> int | None:
    """The high-watermark a partition nobody mirrors is measured against: the monitor's read (`high` at `high_ms`),
    or what its last worker saw when that worker reported after the read and saw further (`proof`: when, and the
    high-watermark it saw) — records it had read and not had acknowledged wait, and nobody mirrors them (a mirror
    SIGKILLed with records in flight: its partitions read "not known" while provably behind)."""
    if proof is None or proof[1] is None or high_ms is None or proof[0] <= high_ms:
        return high
    return proof[1] if high is None or proof[1] > high else high


def unowned_moment(
    safe: int | None,
    high: int | None,
    high_ms: int | None,
    unowned_ms: int,
    proof: tuple[int, int | None] | None,
) -> tuple[int, str | None]:
    """The moment a partition nobody mirrors is measured at, and why its high-watermark is only a floor (None: it is
    not). Behind: now (`unowned_ms`), its lag growing. Caught up by the high-watermark read at `high_ms`: so it was
    then, not necessarily now (nobody mirrors what the source took since) — provided the position was known by then;
    one a worker reported only later (`proof`: when, and the high-watermark it saw) is caught up at that report if
    its worker saw no further, and otherwise nothing says whether records waited at any moment."""
    if safe is None or high is None or high_ms is None or safe < high:
        return unowned_ms, None
    if proof is None or proof[0] <= high_ms:
        return min(unowned_ms, high_ms), None
    proven_ms, seen_high = proof
    if seen_high is not None and safe >= seen_high:
        return min(unowned_ms, proven_ms), None
    return unowned_ms, REPORTED_AFTER_READ


def stale_high(
    position: PartitionPosition, status: WorkerStatus, observed_hwm_ms: int | None, stale_after_ms: int
) -> str | None:
    """Why the high-watermark a live worker's partition is measured against is only a floor (None: it is not): the
    worker states none of its own because its consumer lost sight of the source and has not fetched the partition
    since (`WorkerStatus.highs_stale_since_ms`, issue #41: a read of the monitor's may predate records the source
    took in its last instant), or it has not read the partition and the monitor's read is older than usual."""
    if position.high_watermark is not None or observed_hwm_ms is None:
        return None
    lost_ms = status.highs_stale_since_ms
    if lost_ms is not None:
        return (
            f"its worker lost sight of the source {max(0, status.observed_ms - lost_ms) / 1000:.0f} s ago and has "
            "not fetched the partition since"
        )
    if position.consumed is not None or position.acked is None:
        return None  # it has read the partition (so fetched it), or never had any of it: nothing of an old ownership
    age_s = (status.observed_ms - observed_hwm_ms) / 1000
    if age_s * 1000 <= stale_after_ms:
        return None
    return f"its worker has not fetched since its assignment and the high-watermark read is {age_s:.0f} s older"


class OnSourceBy:
    """What the monitor has seen of when records were on the source, kept across its rounds (pure; a lock for the
    round's thread and the served views'): per link partition, high-watermarks read and the earliest moment each had
    been read by (every record below it was on the source then: `SafePosition.behind_by_ms`). A later round whose
    snapshots are newer (or cut short by a source going down) proves less of the same record; the lower bound served
    for a record not dated then stays what the first proof made it, and grows (issue #67)."""

    def __init__(self) -> None:
        self._proofs: dict[tuple[str, str, int], dict[int, int]] = {}
        self._lock = threading.Lock()

    def earliest(self, key: tuple[str, str, int], offset: int, high: int, at_ms: int, now_high: int | None) -> int:
        """Note that the high-watermark of `key` (link, topic, partition) had reached `high` by `at_ms`; the earliest
        moment any proof so far gives the record at `offset` on the source (a high-watermark above it). Proofs of
        offsets at or below `offset` alone are dropped (a link's position only moves on), and proofs above the
        high-watermark known now (`now_high`): a high-watermark never goes back, so they are of a topic since deleted
        and created again under the same name, whose records are not this one's."""
        with self._lock:
            proofs = self._proofs.setdefault(key, {})
            for reached in [h for h in proofs if h <= offset or (now_high is not None and h > now_high)]:
                del proofs[reached]
            proofs[high] = min(at_ms, proofs.get(high, at_ms))
            return min(at for reached, at in proofs.items() if reached > offset)

    def forget(self, keep: set[tuple[str, str, int]]) -> None:
        """Drop what is known of partitions no link has any more."""
        with self._lock:
            for key in [k for k in self._proofs if k not in keep]:
                del self._proofs[key]
