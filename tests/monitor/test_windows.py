"""Offset windows: ring size, min-distance, ordering and expiry."""

from __future__ import annotations

import pytest

from monitor.dating import append_bounds
from monitor.evaluator import OffsetSample
from monitor.windows import OffsetWindows

KEY = ("source", "g", "orders", 0)
T0 = 1_700_000_000_000


def sample(offset: int, at_s: float, high: int | None = None) -> OffsetSample:
    return OffsetSample(offset, int(at_s * 1000), offset + 10 if high is None else high)


def test_a_window_keeps_the_last_n_observations_oldest_first() -> None:
    windows = OffsetWindows(3)
    for i in range(5):
        windows.observe(KEY, sample(i, i))
    assert [s.offset for s in windows.samples(KEY)] == [2, 3, 4]


def test_min_distance_replaces_the_last_observation() -> None:
    windows = OffsetWindows(3, min_distance_ms=10_000)
    windows.observe(KEY, sample(1, 0, high=50))
    windows.observe(KEY, sample(2, 5, high=50))  # 5 s later, nothing new on the source: replaces
    windows.observe(KEY, sample(3, 20, high=50))
    assert [(s.offset, s.observed_ms) for s in windows.samples(KEY)] == [(2, 5000), (3, 20000)]


def test_a_moved_high_watermark_is_never_replaced_so_a_fast_pollers_chain_does_not_date_records_back() -> None:
    """A poller faster than the min-distance: each observation replaced the last, so the one before the records
    arrived (the moment their dating rests on) went with them, and the records read as old as the chain."""
    windows = OffsetWindows(3, min_distance_ms=500)
    windows.observe(KEY, sample(10, 0, high=10))
    for i in range(1, 40):  # 16 s of observations 0.4 s apart, nothing new
        windows.observe(KEY, sample(10, 1 + i * 0.4, high=10))
    windows.observe(KEY, sample(10, 17, high=110))  # records arrived: 0.2 s after the last observation
    assert [(s.observed_ms, s.high_watermark) for s in windows.samples(KEY)] == [(0, 10), (16_600, 10), (17_000, 110)]
    assert append_bounds(windows.samples(KEY), 10) == (16_600, None)


def test_a_rewind_is_never_replaced_by_min_distance() -> None:
    windows = OffsetWindows(3, min_distance_ms=10_000)
    windows.observe(KEY, sample(500, 0, high=600))
    windows.observe(KEY, sample(200, 1, high=600))  # the group went back; the log did not
    assert [s.offset for s in windows.samples(KEY)] == [500, 200]


def test_a_log_that_now_ends_below_the_groups_commit_starts_the_window_again() -> None:
    """The topic was deleted and created again (offsets from 0) or its log truncated: the group's first commit on the
    new log is not a move backwards from its commit on the old one (a false REWIND). A high-watermark lower than the
    last one seen but not below the group's commit says nothing of another log: the window goes on."""
    windows = OffsetWindows(5)
    windows.observe(KEY, sample(1000, 0, high=1200))
    windows.observe(KEY, sample(1000, 1, high=1100))
    assert [s.offset for s in windows.samples(KEY)] == [1000, 1000]
    # Kafka dropped the group's commit with the deleted topic; its first on the new one, whose log ends at 300
    windows.observe(KEY, sample(50, 3, high=300))
    assert [(s.offset, s.high_watermark) for s in windows.samples(KEY)] == [(50, 300)]
    windows.observe(KEY, sample(40, 4, high=300))  # a real rewind on the new log is still one
    assert [s.offset for s in windows.samples(KEY)] == [50, 40]


def test_late_observations_are_ignored() -> None:
    windows = OffsetWindows(3)
    windows.observe(KEY, sample(5, 10))
    windows.observe(KEY, sample(4, 9))
    assert [s.offset for s in windows.samples(KEY)] == [5]


def test_expiry_forgets_partitions_no_longer_observed() -> None:
    windows = OffsetWindows(3, expire_after_ms=60_000)
    windows.observe(KEY, sample(1, 0))
    other = ("source", "g2", "orders", 1)
    windows.observe(other, sample(1, 100))
    assert windows.expire(now_ms=120_000) == [KEY]
    assert windows.samples(KEY) == () and windows.groups("source") == {"g2"}


def test_groups_partitions_and_forgetting() -> None:
    windows = OffsetWindows(3)
    windows.observe(("a", "g", "t", 1), sample(1, 0))
    windows.observe(("a", "g", "t", 0), sample(1, 0))
    windows.observe(("b", "g", "t", 0), sample(1, 0))
    assert windows.partitions("a", "g") == [("t", 0), ("t", 1)]
    windows.forget_group("a", "g")
    assert windows.groups("a") == set() and windows.groups("b") == {"g"}


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least one"):
        OffsetWindows(0)


def test_an_offset_that_stays_keeps_the_time_it_was_first_seen() -> None:
    windows = OffsetWindows(2)
    for at in (0, 10, 20, 30):
        windows.observe(KEY, sample(7, at))
    first, last = windows.samples(KEY)
    assert (first.observed_ms, last.observed_ms) == (20_000, 30_000)  # the window slid ...
    assert last.first_seen_ms == 0  # ... but still knows the offset has stood since 0
    windows.observe(KEY, sample(8, 40))
    assert windows.samples(KEY)[-1].first_seen_ms == 40_000


def test_the_commit_cadence_is_the_median_gap_between_moves_and_outlives_the_window() -> None:
    """Moves every 10 s, then one 35 s silence (an incident), then 10 s again: the cadence stays 10 s. The first
    move is not a gap (the offset may have stood long before the monitor first saw it). A window of 3 keeps it."""
    windows = OffsetWindows(3)
    key = ("c", "g", "t", 0)
    assert windows.commit_gap_ms(key) is None
    times = [0, 5_000, 15_000, 25_000, 60_000, 70_000]  # the offset moves at each of these
    for i, at in enumerate(times):
        windows.observe(key, OffsetSample(i * 10, T0 + at, 100))
    assert windows.commit_gap_ms(key) == 10_000  # gaps 10, 10, 35, 10 s
    windows.observe(key, OffsetSample(50, T0 + 75_000, 100))  # not a move
    assert windows.commit_gap_ms(key) == 10_000
    windows.forget_group("c", "g")
    assert windows.commit_gap_ms(key) is None


def test_where_commits_are_followed_the_cadence_is_the_time_between_commits_of_the_same_offset_too() -> None:
    """A consumer that commits offset 100 again every 5 s (commit times from __consumer_offsets), observed every
    10 s: the offset never moves, yet the cadence is learned from the commits (two commits each 10 s apart as
    observed, 5 s where two observations saw consecutive commits); the admin API could not learn it at all."""
    windows = OffsetWindows(3)
    key = ("c", "g", "t", 0)
    commits = [1_000, 11_000, 16_000, 21_000]  # the last commit each observation saw
    for i, committed in enumerate(commits):
        windows.observe(key, OffsetSample(100, T0 + (i + 1) * 10_000, 200, commit_ms=T0 + committed))
    assert windows.commit_gap_ms(key) == 5_000  # gaps 10, 5, 5 s
    windows.observe(key, OffsetSample(100, T0 + 50_000, 200, commit_ms=T0 + 21_000))  # the same commit seen again
    assert windows.commit_gap_ms(key) == 5_000
    plain = OffsetWindows(3)
    for i in range(4):
        plain.observe(key, OffsetSample(100, T0 + (i + 1) * 10_000, 200))
    assert plain.commit_gap_ms(key) is None


def test_incidents_close_together_do_not_become_the_cadence_unless_they_keep_coming() -> None:
    """Moves every 5 s, then incidents with few moves between them (a mirror killed, frozen, its target down: 16 s,
    38 s, 7 s, 47 s): a median of every gap would be 16 s, and the next 30 s incident would read OK. Gaps longer
    than one and a half of the cadence are not learned; three in a row are how the group commits now."""
    windows = OffsetWindows(10)
    key = ("c", "g", "t", 0)
    at = 0
    for gap_s in (0, 5, 5, 5, 16, 38, 7, 47, 5):
        at += gap_s * 1000
        windows.observe(key, OffsetSample(at, T0 + at, at + 100))
    assert windows.commit_gap_ms(key) == 5_000  # gaps learned: 5, 5, 7, 5
    for _ in range(2):  # a consumer reconfigured to commit every 60 s: two long gaps are still incidents
        at += 60_000
        windows.observe(key, OffsetSample(at, T0 + at, at + 100))
    assert windows.commit_gap_ms(key) == 5_000
    at += 60_000
    windows.observe(key, OffsetSample(at, T0 + at, at + 100))
    assert windows.commit_gap_ms(key) == 60_000  # the third in a row: the new cadence
    for expected in (60_000, 60_000, 5_000):  # back to 5 s: learned at once, the median (low) follows
        at += 5_000
        windows.observe(key, OffsetSample(at, T0 + at, at + 100))
        assert windows.commit_gap_ms(key) == expected


def test_lag_since_is_carried_while_the_offset_stands_with_records_waiting() -> None:
    windows = OffsetWindows(2)
    key = ("c", "g", "t", 0)
    for i in range(4):
        windows.observe(key, OffsetSample(100, T0 + i * 10_000, 150))
    assert windows.samples(key)[-1].lag_since_ms == T0
    windows.observe(key, OffsetSample(100, T0 + 50_000, 100))  # caught up: nothing waits
    assert windows.samples(key)[-1].lag_since_ms is None


def test_members_that_left_are_remembered_beyond_the_window() -> None:
    """A group whose consumer left is not taken for a commit-only group once the window holds only empty samples."""
    windows = OffsetWindows(2)
    key = ("c", "g", "t", 0)
    windows.observe(key, OffsetSample(100, T0, 150, True))
    for i in range(1, 5):
        windows.observe(key, OffsetSample(100, T0 + i * 10_000, 150 + i, False))
    assert all(not s.has_members and s.had_members for s in windows.samples(key))
    windows.observe(("c", "commit-only", "t", 0), OffsetSample(100, T0, 150, False))
    assert not windows.samples(("c", "commit-only", "t", 0))[-1].had_members
