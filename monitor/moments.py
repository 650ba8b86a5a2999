"""At which moment a mirror link partition's figures are true, and why its high-watermark is only a floor (pure):
the rules `monitor.links.safe_positions` applies to a partition a live worker reports and to one nobody mirrors."""

from __future__ import annotations

from kernel.worker_status import PartitionPosition, WorkerStatus

__all__ = ["live_moment", "stale_high", "unowned_moment"]


def live_moment(
    position: PartitionPosition, status: WorkerStatus, safe: int | None, high: int | None, high_ms: int | None
) -> int:
    """A live worker's partition is measured at its status's moment, but one that it has read and states no
    high-watermark of (not fetched since its consumer lost the source, `mirror.progress.vouched_highs`) is caught up
    by the monitor's older read only as of that read: the source may have taken records after it (issue #41)."""
    if position.high_watermark is not None or position.consumed is None or high_ms is None or high is None:
        return status.observed_ms
    return min(status.observed_ms, high_ms) if safe is not None and safe >= high else status.observed_ms


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
    return unowned_ms, "its position was reported after the last high-watermark read"


def stale_high(
    position: PartitionPosition, status: WorkerStatus, observed_hwm_ms: int | None, stale_after_ms: int
) -> str | None:
    """Why the high-watermark a live worker's partition is measured against is only a floor (None: it is not)."""
    if position.high_watermark is not None or observed_hwm_ms is None:
        return None
    if position.consumed is not None or position.acked is None:
        return None  # it has read the partition (so fetched it), or never had any of it: nothing of an old ownership
    age_s = (status.observed_ms - observed_hwm_ms) / 1000
    if age_s * 1000 <= stale_after_ms:
        return None
    return f"its worker has not fetched since its assignment and the high-watermark read is {age_s:.0f} s older"
