"""PartitionProgress: the committed offset never passes a record the target has not acknowledged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.worker_status import stale_after_ms
from mirror.progress import (
    CATCHING_UP_AFTER_MS,
    STATUS_REST_S,
    PartitionProgress,
    catching_up,
    status_rest_s,
    vouched_highs,
)


def test_nothing_read_nothing_to_commit() -> None:
    p = PartitionProgress()
    assert (p.consumed, p.acked, p.in_flight_records, p.offset_to_commit()) == (None, None, 0, None)


def test_starts_at_the_committed_offset() -> None:
    p = PartitionProgress(start_offset=40, committed=40)
    assert (p.acked, p.offset_to_commit()) == (40, None)


def test_in_order_acks_advance_the_watermark() -> None:
    p = PartitionProgress(start_offset=0)
    for offset in range(3):
        p.dispatch(offset, 1)
    assert (p.consumed, p.acked, p.in_flight_records) == (3, 0, 3)
    p.ack(0)
    assert p.acked == 1
    p.ack(1)
    p.ack(2)
    assert (p.acked, p.in_flight_records, p.offset_to_commit()) == (3, 0, 3)


def test_out_of_order_ack_waits_for_the_gap() -> None:
    p = PartitionProgress(start_offset=10)
    for offset in (10, 11, 12):
        p.dispatch(offset, 1)
    p.ack(12)
    p.ack(11)
    assert p.acked == 10  # 10 is still in flight: committing 11 or 13 could lose it
    p.ack(10)
    assert p.acked == 13


def test_a_record_that_cannot_be_mirrored_holds_the_position_whatever_the_reports_after_it_say() -> None:
    """A partition stopped alone at a refused or unreadable record (issue #42): a sparse report of a later run
    acknowledges every entry through its last offset, the stopped record's too; the position stays below it."""
    p = PartitionProgress(start_offset=0)
    p.dispatch(0, 1)
    p.extend(299)  # one run 0..299
    p.dispatch(300, 0)  # the unreadable record: nothing produced for it
    p.stop_at(300)
    p.dispatch(301, 1)
    p.extend(309)  # the next run, 301..309, read before the partition was paused
    p.ack_through(309)
    assert (p.acked, p.offset_to_commit(), p.in_flight_records) == (300, 300, 10)
    p.stop_at(305)  # a later one does not move it up
    assert p.acked == 300


def test_a_refused_record_in_flight_holds_the_position_after_later_acks() -> None:
    p = PartitionProgress(start_offset=10)
    for offset in (10, 11, 12):
        p.dispatch(offset, 1)
    p.ack(10)
    p.stop_at(11)  # refused: never acknowledged
    p.ack(12)
    assert (p.acked, p.offset_to_commit()) == (11, 11)
    p.ack_through(12)
    assert p.acked == 11


def test_fan_out_needs_every_copy_acknowledged() -> None:
    p = PartitionProgress(start_offset=0)
    p.dispatch(0, 3)  # a handler wrote three records for offset 0
    p.ack(0)
    p.ack(0)
    assert p.acked == 0
    p.ack(0)
    assert p.acked == 1


def test_records_that_write_nothing_are_done_but_wait_their_turn() -> None:
    p = PartitionProgress(start_offset=0)
    p.dispatch(0, 0)  # filtered (came from the target): done at once
    assert p.acked == 1
    p.dispatch(1, 1)
    p.dispatch(2, 0)  # filtered, behind 1 which is in flight
    assert p.acked == 1
    p.ack(1)
    assert p.acked == 3


def test_gaps_in_offsets_from_compaction_or_transaction_markers() -> None:
    p = PartitionProgress(start_offset=0)
    p.dispatch(5, 1)
    p.dispatch(9, 1)
    assert (p.consumed, p.acked) == (10, 5)
    p.ack(5)
    assert p.acked == 9
    p.ack(9)
    assert p.acked == 10


def test_the_end_of_a_partition_passes_the_markers_after_the_last_record() -> None:
    p = PartitionProgress(start_offset=0)
    p.dispatch(0, 1)
    p.dispatch(1, 1)  # offset 2: the transaction's commit marker, the partition's end is 3
    p.pass_to(3)
    assert (p.consumed, p.acked, p.offset_to_commit()) == (3, 0, 0)  # behind the records in flight
    p.ack(0)
    p.ack(1)
    assert (p.acked, p.offset_to_commit()) == (3, 3)
    p.pass_to(2)  # an older end never goes back
    assert p.consumed == 3
    p.dispatch(3, 1)  # a record written after the end was seen
    assert (p.consumed, p.acked) == (4, 3)
    fresh = PartitionProgress()  # nothing committed, nothing read: the end is where it stands
    fresh.pass_to(7)
    assert (fresh.consumed, fresh.acked) == (7, 7)


def test_commit_only_moves_forward() -> None:
    p = PartitionProgress(start_offset=0)
    p.dispatch(0, 1)
    p.ack(0)
    assert p.offset_to_commit() == 1
    p.mark_committed(1)
    assert p.offset_to_commit() is None
    p.mark_committed(0)  # a late, older commit result
    assert p.committed == 1


def test_offsets_must_ascend() -> None:
    p = PartitionProgress(start_offset=0)
    p.dispatch(3, 1)
    with pytest.raises(ValueError, match="offsets must ascend"):
        p.dispatch(2, 1)


@given(
    copies=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=40),
    ack_order=st.randoms(use_true_random=False),
    acks_to_apply=st.integers(min_value=0, max_value=200),
)
def test_watermark_never_passes_an_unacknowledged_record(
    copies: list[int], ack_order: object, acks_to_apply: int
) -> None:
    import random

    assert isinstance(ack_order, random.Random)
    p = PartitionProgress(start_offset=0)
    pending: list[int] = []
    for offset, n in enumerate(copies):
        p.dispatch(offset, n)
        pending += [offset] * n
    ack_order.shuffle(pending)
    applied, remaining = pending[:acks_to_apply], pending[acks_to_apply:]
    for offset in applied:
        p.ack(offset)
    expected = min(remaining) if remaining else len(copies)
    assert p.acked == expected
    assert p.offset_to_commit() == expected  # nothing committed yet: committing the watermark is always safe


def test_a_run_is_one_entry_and_one_report_proves_it_all() -> None:
    p = PartitionProgress(start_offset=100)
    p.dispatch(100, 1, 5)
    p.extend(149, 7)
    assert (p.consumed, p.acked, p.in_flight_records, p.last_timestamp_ms) == (150, 100, 50, 7)
    p.dispatch(150, 1)
    p.extend(199)
    p.ack_through(149)  # the first run's last record was acknowledged: the second run is still in flight
    assert (p.acked, p.offset_to_commit()) == (150, 150)
    p.ack_through(199)
    assert (p.acked, p.in_flight_records) == (200, 0)


def test_ack_through_passes_records_with_nothing_to_write_behind_it_but_not_later_entries() -> None:
    p = PartitionProgress(start_offset=0)
    p.dispatch(0, 1)
    p.dispatch(3, 0)  # a record skipped (it came from the target) while the run was open
    p.extend(2)  # the run's last record came before the skipped one: consumed must not move back
    assert p.consumed == 4
    p.dispatch(4, 1)
    p.ack_through(2)
    assert p.acked == 4  # the skipped record 3 is done; 4 is in flight
    p.ack_through(4)
    assert (p.acked, p.offset_to_commit()) == (5, 5)


def test_a_report_below_an_entry_does_not_acknowledge_it() -> None:
    p = PartitionProgress(start_offset=10, committed=10)
    p.dispatch(10, 1)
    p.extend(19)
    p.ack_through(9)
    assert (p.acked, p.offset_to_commit()) == (10, None)


def test_a_high_watermark_not_fetched_since_the_source_was_lost_is_not_vouched_for() -> None:
    """At the loss the consumer's cache said 100 and 50 (`stale`); since then partition 0's fetch said 120 and a
    partition assigned after the loss said 7; partition 1 still says 50, which says nothing of the source now."""
    stale = {("t", 0): 100, ("t", 1): 50}
    cached = {("t", 0): 120, ("t", 1): 50, ("t", 2): 7}
    assert vouched_highs(cached, stale) == {("t", 0): 120, ("t", 2): 7}
    assert vouched_highs(cached, {}) == cached  # never lost: every one stands


def test_a_worker_catches_up_while_its_target_acknowledges_records_that_waited() -> None:
    """`catching_up` (the status beat quickens, issue #41): an acknowledged position that moved while the newest
    record read of the partition is over a second old; not an idle partition, not a steady flow of fresh records,
    not a partition first seen or without a record read."""
    now = 1_800_000_000_000
    before = {("t", 0): 100, ("t", 1): 50}
    assert catching_up(before, {("t", 0): 900, ("t", 1): 50}, {("t", 0): now - 30_000, ("t", 1): now - 60_000}, now)
    assert not catching_up(before, {("t", 0): 900, ("t", 1): 50}, {("t", 0): now - 200, ("t", 1): now - 60_000}, now)
    assert not catching_up(before, before, {("t", 0): now - 30_000, ("t", 1): now - 30_000}, now)  # idle
    assert not catching_up({}, {("t", 0): 900}, {("t", 0): now - 30_000}, now)  # first seen: no move known
    assert not catching_up(before, {("t", 0): 900}, {}, now)  # nothing read of it (nothing to date)
    assert not catching_up(before, {("t", 0): None}, {("t", 0): now - 30_000}, now)
    edge = now - CATCHING_UP_AFTER_MS
    assert not catching_up(before, {("t", 0): 101}, {("t", 0): edge}, now)
    assert catching_up(before, {("t", 0): 101}, {("t", 0): edge - 1}, now)


def test_a_status_asked_for_at_once_comes_after_a_rest_that_keeps_its_thread_nine_tenths_idle() -> None:
    """`status_rest_s` (a backlog drains: the status is asked for at every acknowledgement of records that waited,
    issue #41): a small worker's statuses come every STATUS_REST_S; a status that takes 10 ms to write is followed by
    90 ms of rest, so publishing never takes more than a tenth of the thread's time."""
    assert status_rest_s(0.0, 1.0) == status_rest_s(0.001, 1.0) == STATUS_REST_S == 0.02
    assert status_rest_s(0.01, 1.0) == pytest.approx(0.09)
    took = 0.05
    assert took / (took + status_rest_s(took, 1.0)) == pytest.approx(0.1)


def test_a_status_slow_to_publish_rests_no_longer_than_the_beat_the_monitor_counts_on() -> None:
    """Uncapped, a status that took 0.5 s to publish (a loaded machine) rested 4.5 s, and the monitor, which takes
    a status older than two beats and a second for a gone worker's, read none live while the worker mirrored on (the
    suspected cause of MirrorwatchMirrorDown firing in test_truth when the alone phase ran three at a time). The rest
    never exceeds the beat."""
    assert status_rest_s(0.5, 1.0) == 1.0
    assert status_rest_s(0.5, 1.0) + 0.5 < stale_after_ms(1_000) / 1000
