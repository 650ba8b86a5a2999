"""Offset windows: ring size, min-distance, ordering and expiry."""

from __future__ import annotations

import pytest

from monitor.evaluator import OffsetSample
from monitor.windows import OffsetWindows

KEY = ("source", "g", "orders", 0)


def sample(offset: int, at_s: int) -> OffsetSample:
    return OffsetSample(offset, at_s * 1000, offset + 10)


def test_a_window_keeps_the_last_n_observations_oldest_first() -> None:
    windows = OffsetWindows(3)
    for i in range(5):
        windows.observe(KEY, sample(i, i))
    assert [s.offset for s in windows.samples(KEY)] == [2, 3, 4]


def test_min_distance_replaces_the_last_observation() -> None:
    windows = OffsetWindows(3, min_distance_ms=10_000)
    windows.observe(KEY, sample(1, 0))
    windows.observe(KEY, sample(2, 5))  # 5 s later: replaces
    windows.observe(KEY, sample(3, 20))
    assert [(s.offset, s.observed_ms) for s in windows.samples(KEY)] == [(2, 5000), (3, 20000)]


def test_a_rewind_is_never_replaced_by_min_distance() -> None:
    windows = OffsetWindows(3, min_distance_ms=10_000)
    windows.observe(KEY, sample(500, 0))
    windows.observe(KEY, sample(200, 1))
    assert [s.offset for s in windows.samples(KEY)] == [500, 200]


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
