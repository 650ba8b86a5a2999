"""Which of the high-watermarks a worker's consumer saw its status states as of its own moment (pure
`mirror.highs.SeenHighs`): the monitor claims a partition caught up at the status's moment on them, so a value that
may be older than that moment is left out (issue #41: a CI run read 13 records 2 s behind as 0)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from mirror.client_stats import ClientStats
from mirror.highs import RX_SILENT_MS, SeenHighs

A, B = ("t", 0), ("t", 1)


def cache(values: Mapping[tuple[str, int], int]) -> Callable[[Iterable[tuple[str, int]]], dict[tuple[str, int], int]]:
    """The consumer's cache as the worker reads it: what its last fetch responses said of these partitions."""

    def read(partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {key: values[key] for key in partitions if key in values}

    return read


def consumer_stats(leaders_up_for_ms: int | None) -> ClientStats:
    return ClientStats("consumer", 0, 0, 0, 0, None, None, None, 0, None, 0, leaders_up_for_ms)


def test_a_status_states_what_the_loop_noted_last() -> None:
    highs = SeenHighs()
    assert highs.stated() == {}  # never noted
    highs.note(cache({A: 120, B: 50}), [A, B])
    assert highs.stated() == {A: 120, B: 50}


def test_a_value_cached_when_the_source_was_lost_is_stated_only_once_fetched_again() -> None:
    highs = SeenHighs()
    highs.note(cache({A: 120, B: 50}), [A, B])
    highs.lost(cache({A: 120, B: 50}), [A, B], now_ms=10_200)
    assert highs.stale_since_ms == 10_200
    assert highs.noted == {}
    highs.note(cache({A: 130, B: 50}), [A, B])  # A fetched since; B still says what it said
    assert highs.stated() == {A: 130}
    highs.seen_again(consumer_stats(leaders_up_for_ms=500), now_ms=10_600)  # up since 10,100: before the loss
    assert highs.stale_since_ms == 10_200
    highs.seen_again(consumer_stats(leaders_up_for_ms=300), now_ms=10_600)  # up again since 10,300
    assert highs.stale_since_ms is None
    highs.note(cache({A: 130, B: 50}), [A, B])
    assert highs.stated() == {A: 130, B: 50}


def silent_stats(rx_idle_ms: int | None) -> ClientStats:
    return replace(consumer_stats(leaders_up_for_ms=60_000), leaders_rx_idle_ms=rx_idle_ms)


def test_a_fetching_consumer_that_hears_nothing_from_a_leader_stales_its_values_until_it_hears_again() -> None:
    """A connection hanging in a network partition (issue #44): no error until librdkafka's request timeout, the
    broker still UP; the worker's statistics say how long since the leader last sent anything. Over RX_SILENT_MS
    while fetching, the worker treats it as lost from the moment last heard (`mirror.worker`); once heard from since,
    its values are vouched for again. A consumer that reads nothing (paused, or held by back-pressure: librdkafka's
    queue fills and it stops fetching) hears nothing either: its silence says nothing, nor does the part of it from
    before it read again (seen: a worker held through a 60 s target cut read "lost sight of the source" as it
    resumed, and its caught-up partitions read unknown)."""
    highs = SeenHighs()
    highs.note(cache({A: 120}), [A])
    assert highs.silent_since(silent_stats(RX_SILENT_MS - 1), 20_000, fetching_since_ms=0) is None
    assert highs.silent_since(silent_stats(None), 20_000, fetching_since_ms=0) is None
    assert highs.silent_since(silent_stats(4_000), 20_000, fetching_since_ms=None) is None
    assert highs.silent_since(silent_stats(60_000), 20_000, fetching_since_ms=20_000 - RX_SILENT_MS + 1) is None
    assert highs.silent_since(silent_stats(60_000), 20_000, fetching_since_ms=20_000 - RX_SILENT_MS) == -40_000
    since = highs.silent_since(silent_stats(4_000), 20_000, fetching_since_ms=0)
    assert since == 16_000
    highs.lost(cache({A: 120}), [A], now_ms=since)
    assert highs.stated() == {} and highs.stale_since_ms == 16_000
    highs.seen_again(silent_stats(4_500), now_ms=20_500)  # still silent: the same moment last heard
    assert highs.stale_since_ms == 16_000
    highs.seen_again(silent_stats(300), now_ms=21_000)  # heard at 20,700, after the loss
    assert highs.stale_since_ms is None
    highs.note(cache({A: 900}), [A])
    assert highs.stated() == {A: 900}


def test_a_silence_that_spans_a_freeze_of_the_worker_says_nothing_about_the_source() -> None:
    """SIGSTOP (issue #45, a worker on another host): librdkafka froze with the process, and its first statistics after
    the thaw say the leader was heard 15 s ago. The statistics came every 500 ms before and after, not during: the
    silence counts from the thaw; one that lasts past RX_SILENT_MS after it is a source lost."""
    highs = SeenHighs()
    highs.note(cache({A: 120}), [A])
    highs.heard(silent_stats(100), 10_000, 0, cache({A: 120}), [A])
    highs.heard(silent_stats(100), 10_500, 0, cache({A: 120}), [A])
    highs.heard(silent_stats(15_100), 25_500, 0, cache({A: 120}), [A])  # the first after a 15 s freeze
    assert highs.stale_since_ms is None and highs.stated() == {A: 120}
    highs.heard(silent_stats(200), 26_000, 0, cache({A: 130}), [A])  # fetching again
    assert highs.stale_since_ms is None
    for now in range(26_500, 28_500, 500):  # then silent for real, past RX_SILENT_MS since it ran again
        highs.heard(silent_stats(now - 25_800), now, 0, cache({A: 130}), [A])
    assert highs.stale_since_ms == 25_800
