"""mirror.flow: the window of what a link may have on its way to the target (pure)."""

from __future__ import annotations

import itertools

from mirror.flow import (
    FLOOR_BYTES,
    HORIZON_S,
    RATE_SPAN_S,
    RECORD_OVERHEAD_BYTES,
    Budget,
    FlowWindow,
    Silence,
    worker_budget,
)

CEILING = 64 * 1024 * 1024


def test_an_idle_or_new_link_starts_from_the_floor_in_what_records_take_on_the_wire() -> None:
    window = FlowWindow(CEILING)
    assert window.limit_records(100) == FLOOR_BYTES // (100 + RECORD_OVERHEAD_BYTES)
    window.note(0.0, 0)
    window.note(5.0, 0)
    assert window.limit_records(1000) == FLOOR_BYTES // (1000 + RECORD_OVERHEAD_BYTES)


def test_the_window_is_two_seconds_of_what_the_target_acknowledged_over_the_last_second() -> None:
    window = FlowWindow(CEILING)
    # a slow link: 12,500 bytes/s acknowledged, sampled every 0.1 s for 3 s
    for tick in range(31):
        window.note(tick / 10, 1250 * tick)
    assert window.limit_bytes == int(12_500 * HORIZON_S)
    # in records of the link's size: 1,250 records of 10 bytes a second, two seconds of them
    assert window.limit_records(10) == 2_500
    # the floor wins over a smaller window: 125 records of 100 bytes a second (64 KB on the wire at most crosses
    # 100 kbit/s in about 5 s)
    assert window.limit_records(100) == max(250, FLOOR_BYTES // (100 + RECORD_OVERHEAD_BYTES))
    # a fast link: 100 MB/s
    for tick in range(31, 62):
        window.note(tick / 10, 1250 * 30 + 10_000_000 * (tick - 30))
    assert window.limit_bytes == CEILING  # 2 s of 100 MB/s is above the ceiling
    assert window.limit_records(1000) == CEILING // 1000


def test_a_young_link_does_not_read_a_burst_as_a_rate_and_grows_each_round_trip() -> None:
    """Within the first RATE_SPAN_S the bytes acknowledged count over a whole span: a window of the floor, with a
    1 ms round trip, is several times larger after each of the first round trips, and reaches the ceiling within
    a few dozen of them."""
    window = FlowWindow(CEILING)
    acked, now, windows = 0, 0.0, []
    window.note(now, acked)
    size = 1000
    while window.limit_bytes < CEILING and now < RATE_SPAN_S:
        acked += window.limit_records(size) * size  # a round trip acknowledges the whole window
        now += 0.001
        window.note(now, acked)
        windows.append(window.limit_bytes)
    assert window.limit_bytes == CEILING
    assert len(windows) < 50
    assert all(b > a for a, b in itertools.pairwise(windows))


def test_a_record_larger_than_the_window_still_goes() -> None:
    assert FlowWindow(CEILING).limit_records(10 * FLOOR_BYTES) == 1


def test_a_cut_off_target_shrinks_the_window_to_the_floor_once_a_second_passes_without_acknowledgements() -> None:
    window = FlowWindow(CEILING)
    for tick in range(21):
        window.note(tick / 10, 1_000_000 * tick)  # 10 MB/s
    assert window.limit_bytes == int(10_000_000 * HORIZON_S)
    for tick in range(21, 33):
        window.note(tick / 10, 20_000_000)
    assert window.limit_bytes == 0
    assert window.limit_records(1000) == FLOOR_BYTES // (1000 + RECORD_OVERHEAD_BYTES)


def test_silence_is_said_once_records_have_waited_unacknowledged_long_enough_and_cleared_by_the_next_ack() -> None:
    silence = Silence(after_s=5.0)
    assert silence.note(0.0, 1_000, acked_total=10, waiting=3) is None
    assert silence.note(4.9, 5_900, acked_total=10, waiting=3) is None
    assert silence.since_ms is None
    assert silence.note(5.0, 6_000, acked_total=10, waiting=3) == "silent"
    assert silence.since_ms == 1_000  # the moment it was last heard
    assert silence.note(9.0, 10_000, acked_total=10, waiting=500) is None
    assert silence.since_ms == 1_000
    assert silence.note(9.5, 10_500, acked_total=11, waiting=499) == "heard"
    assert silence.since_ms is None


def test_an_idle_link_is_never_silent() -> None:
    silence = Silence(after_s=5.0)
    for t in range(60):
        assert silence.note(float(t), t * 1000, acked_total=7, waiting=0) is None
    assert silence.since_ms is None
    # a record handed over after 59 s: silence counts from the last moment nothing waited, not from the last
    # acknowledgement at the start
    assert silence.note(62.0, 62_000, acked_total=7, waiting=1) is None
    assert silence.note(64.0, 64_000, acked_total=7, waiting=1) == "silent"
    assert silence.since_ms == 59_000


# -- the bandwidth budget -------------------------------------------------------------------------------------------


def drive(budget: Budget, seconds: float, record_bytes: int, *, start: float = 0.0, given: int = 0) -> tuple[int, int]:
    """A loop turning every 10 ms that reads what the budget allows (as the engine's does); the bytes it gave and
    the cumulative bytes given at the end."""
    turns = round(seconds * 100)
    gave = 0
    for turn in range(turns):
        room = budget.room(start + turn / 100, given, record_bytes)
        if room is None:
            raise AssertionError("no budget")
        given += room * record_bytes
        gave += room * record_bytes
    return gave, given


def test_a_budget_holds_the_bytes_given_to_the_producer_to_its_rate_plus_one_bucket() -> None:
    """A token bucket on the bytes read (keys and values), not a sleep per record: over a minute the link gives its
    rate, whatever the record size; over any second at most the rate and one bucket."""
    for record_bytes in (100, 1_000, 30_000):
        budget = Budget(1_000_000)
        gave, _ = drive(budget, 60, record_bytes)
        assert 60_000_000 - record_bytes <= gave <= 60_000_000 + budget.capacity() + record_bytes, record_bytes
        budget = Budget(1_000_000)
        gave, given = drive(budget, 5, record_bytes)
        second, _ = drive(budget, 1, record_bytes, start=5, given=given)
        assert second <= 1_000_000 + budget.capacity() + record_bytes


def test_a_read_larger_than_the_bucket_is_a_debt_the_next_reads_wait_out_and_the_wait_is_throttle_time() -> None:
    budget = Budget(100_000)  # a bucket of MIN_BURST_BYTES (16 KB)
    assert budget.room(0.0, 0, 1_000) == budget.capacity() // 1_000
    # the loop read 200 KB at once (records far larger than the average): two seconds of the rate owed
    assert budget.room(0.01, 200_000, 1_000) == 0
    assert budget.room(1.0, 200_000, 1_000) == 0
    assert budget.room(2.5, 200_000, 1_000) not in (0, None)
    assert 2.4 <= budget.throttled_s <= 2.5  # from the turn that found no room to the one that found some


def test_a_new_rate_takes_effect_at_once_and_no_budget_lets_everything_through_without_a_debt() -> None:
    budget = Budget()
    assert budget.room(0.0, 0, 100) is None
    assert budget.room(1.0, 50_000_000, 100) is None  # read freely: nothing owed when a budget comes
    assert budget.set_rate(1_000_000, 1.0) and not budget.set_rate(1_000_000, 1.0)
    assert budget.room(1.1, 50_000_000, 100) == 1_000  # 0.1 s of the new rate
    budget.set_rate(10_000_000, 1.1)
    assert budget.room(1.2, 50_000_000, 100) == 10_000  # the bucket grows to 0.1 s of the new rate
    budget.set_rate(None, 1.2)
    assert budget.room(1.3, 60_000_000, 100) is None
    assert budget.throttled_s == 0


def test_each_worker_takes_its_share_of_the_link_budget_by_the_partitions_it_owns_at_most_its_own_cap() -> None:
    assert worker_budget(None, None, owned=3, total=6) is None
    assert worker_budget(1_200_000, None, owned=3, total=12) == 300_000  # four workers: the shares add up
    assert worker_budget(1_200_000, None, owned=12, total=12) == 1_200_000
    assert worker_budget(1_200_000, None, owned=0, total=0) == 1_200_000  # nothing known yet: the whole of it
    assert worker_budget(1_200_000, 200_000, owned=6, total=12) == 200_000
    assert worker_budget(None, 200_000, owned=6, total=12) == 200_000
    assert worker_budget(5, None, owned=1, total=12) == 1  # never 0: that would hold the worker for ever


def test_before_the_first_record_the_budget_lets_one_through_its_size_unknown() -> None:
    """The first read of a link would otherwise be sized by an average of 1 byte: thousands of records at once, the
    whole of a backlog past the budget (seen: 1.5 MB in under a second under a 300 KB/s budget)."""
    budget = Budget(300_000)
    assert budget.room(0.0, 0, None) == 1
    assert budget.room(0.01, 1_010, 1_010) == 30_000 // 1_010  # paid, and the bucket full again after 10 ms
