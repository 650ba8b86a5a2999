"""Snapshots into windows, group evaluation and mirror link views, from hand-made snapshots (no broker)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import pytest

from kernel.config import LinkConfig, TopicSelection
from kernel.worker_status import WorkerStatus
from monitor.collector import ClusterSnapshot, GroupInfo, PartitionOffsets
from monitor.dating import append_bounds, date_record, interpolate_record_time, lag_age
from monitor.evaluator import EvaluatorConfig, OffsetSample, Status
from monitor.links import WorkerSighting, link_view, safe_positions
from monitor.state import evaluate_groups, observe_snapshot
from monitor.windows import OffsetWindows

T0 = 1_700_000_000_000
LINK = LinkConfig(name="l", source="source", target="target", group_id="g")


def snapshot(at_ms: int, hwm: int, committed: int, members: int = 1, up: bool = True) -> ClusterSnapshot:
    return ClusterSnapshot(
        alias="source",
        observed_ms=at_ms,
        up=up,
        cluster_id="c1",
        partitions={("orders", 0): PartitionOffsets(0, hwm), ("orders", 1): PartitionOffsets(0, 10)},
        groups={
            "g": GroupInfo(
                "g", "STABLE" if members else "EMPTY", members, False, {("orders", 0): committed, ("orders", 1): 10}
            )
        },
    )


def test_observations_go_into_the_groups_windows() -> None:
    windows = OffsetWindows(10)
    observe_snapshot(windows, snapshot(T0, 100, 40))
    observe_snapshot(windows, snapshot(T0 + 10_000, 120, 60, members=0))
    samples = windows.samples(("source", "g", "orders", 0))
    assert [(s.offset, s.high_watermark, s.has_members) for s in samples] == [(40, 100, True), (60, 120, False)]
    observe_snapshot(windows, snapshot(T0 + 20_000, 0, 0, up=False))  # a failed collection adds nothing
    assert len(windows.samples(("source", "g", "orders", 0))) == 2


def test_groups_are_evaluated_with_lag_in_records_and_seconds() -> None:
    windows = OffsetWindows(10)
    for i in range(10):
        observe_snapshot(windows, snapshot(T0 + i * 10_000, 100 + i * 20, i * 10))  # falling behind
    last = snapshot(T0 + 90_000, 280, 90)
    # the record at the committed offset was below the high-watermark at the first observation: written before it
    views = evaluate_groups(windows, last, EvaluatorConfig(), {("source", "orders", 0, 90): T0 - 5_000})
    view = views[("source", "g")]
    assert (view.state, view.members) == ("STABLE", 1)
    assert view.evaluation.status == Status.WARN
    by_partition = {p.partition: p for p in view.evaluation.partitions}
    assert (by_partition[0].status, by_partition[0].current_lag, by_partition[0].lag_seconds) == (
        Status.WARN,
        190,
        95.0,
    )
    assert (by_partition[1].status, by_partition[1].current_lag, by_partition[1].lag_seconds) == (Status.OK, 0, 0.0)
    assert view.evaluation.total_lag == 190


def sighting(document: Mapping[str, Any], at_ms: int = T0, *, is_live: bool = True) -> WorkerSighting:
    """A worker's status document (as a status file holds it) observed at `at_ms`."""
    defaults = {"link": "l", "worker": 0, "engine": "python", "state": "running", "publish_interval_ms": 1000}
    status = WorkerStatus.from_json({**defaults, **document, "observed_ms": at_ms})
    assert status is not None
    return WorkerSighting(status, is_live)


def test_a_link_view_from_running_workers() -> None:
    status = {
        "failure": None,
        "config_drift": [
            {
                "source_topic": "orders",
                "target_topic": "src.orders",
                "config": "retention.ms",
                "source_value": "1",
                "target_value": "2",
            }
        ],
        "stats": {
            "records_out_total": 10,
            "bytes_out_total": 100,
            "replication_latency_seconds": {"buckets": [0.1, "+Inf"], "counts": [3, 1], "sum": 1.5},
        },
        "partitions": [
            {
                "topic": "orders",
                "partition": 0,
                "target_topic": "src.orders",
                "consumed": 95,
                "acked": 90,
                "committed": 80,
                "in_flight_records": 5,
            },
            {
                "topic": "orders",
                "partition": 1,
                "target_topic": "src.orders",
                "consumed": 10,
                "acked": 10,
                "committed": 10,
                "in_flight_records": 0,
            },
        ],
    }
    view = link_view(
        LINK,
        sightings=[sighting(status), sighting({**status, "partitions": []})],
        snapshot=snapshot(T0, 100, 80),
        record_times={("source", "orders", 0, 90): T0 - 4_000},
        now_ms=T0,
    )
    p0, p1 = view.partitions
    assert (p0.high_watermark, p0.replication_lag_records, p0.committed_lag_records, p0.in_flight_records) == (
        100,
        10,
        20,
        5,
    )
    assert p0.replication_lag_seconds == 4.0
    assert (p1.replication_lag_records, p1.replication_lag_seconds) == (0, 0.0)
    assert view.engine_running and view.replication_lag_records == 10 and view.replication_lag_seconds == 4.0
    assert [d["config"] for d in view.config_drift] == ["retention.ms"]  # from both workers, once
    assert view.stats == {
        "records_out_total": 20,
        "bytes_out_total": 200,  # summed over workers, histograms too
        "replication_latency_seconds": {"buckets": [0.1, "+Inf"], "counts": [6, 2], "sum": 3.0},
    }


def test_a_link_view_without_the_engine_uses_the_groups_commits() -> None:
    view = link_view(LINK, sightings=[], snapshot=snapshot(T0, 100, 70), record_times={}, now_ms=T0)
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert (p0.acked, p0.committed, p0.replication_lag_records, p0.committed_lag_records) == (None, 70, 30, 30)
    assert p0.replication_lag_seconds is None  # the record's age is not known: unknown, not 0
    assert view.replication_lag_seconds is None  # ... and so is the link's: never 0 while 30 records wait
    assert not view.engine_running


def test_the_groups_commits_on_topics_the_link_no_longer_mirrors_are_not_its_lag() -> None:
    """The whitelist narrowed (or a topic excluded): the group keeps its old commits, the link does not mirror them."""
    narrowed = LINK.model_copy(update={"topics": TopicSelection(include=(re.compile("orders"),))})
    orders = snapshot(T0, 100, 70)
    group = dataclasses.replace(orders.groups["g"], offsets={**orders.groups["g"].offsets, ("payments", 0): 5})
    source = dataclasses.replace(
        orders, groups={"g": group}, partitions={**orders.partitions, ("payments", 0): PartitionOffsets(0, 900)}
    )
    view = link_view(narrowed, sightings=[], snapshot=source, record_times={}, now_ms=T0)
    assert {p.topic for p in view.partitions} == {"orders"}
    assert view.replication_lag_records == 30
    excluded = LINK.model_copy(update={"topics": TopicSelection(exclude=(re.compile("pay.*"),))})
    assert {
        p.topic for p in link_view(excluded, sightings=[], snapshot=source, record_times={}, now_ms=T0).partitions
    } == {"orders"}


def _position(acked: int, *, high: int | None = None, committed: int | None = None) -> dict[str, object]:
    return {
        "topic": "orders",
        "partition": 0,
        "target_topic": "orders",
        "consumed": acked,
        "acked": acked,
        "committed": committed if committed is not None else acked,
        "in_flight_records": 0,
        "high_watermark": high,
    }


def test_a_busy_healthy_link_is_measured_at_its_status_moment_not_a_second_later() -> None:
    """The status is 800 ms old when the monitor reads a high-watermark 1,200 records further on: compared with
    that, the link would look 1,205 records and a second behind; at its own moment it is 5 records and 40 ms."""
    status_at = T0 - 800
    view = link_view(
        LINK,
        sightings=[sighting({"partitions": [_position(1000, high=1005)]}, status_at)],
        snapshot=snapshot(T0, 2205, 900),
        record_times={("source", "orders", 0, 1000): status_at - 40},
        now_ms=T0,
    )
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert (p0.replication_lag_records, p0.replication_lag_seconds, p0.observed_ms) == (5, 0.04, status_at)
    assert p0.position_from == "worker"


def test_a_record_written_after_the_status_is_not_lag_at_that_moment() -> None:
    """The worker saw no high-watermark (a spark status): the monitor's, read later, says records are missing, but
    the record at the acked offset was written after the status, so nothing was missing then."""
    status_at = T0 - 500
    view = link_view(
        LINK,
        sightings=[sighting({"partitions": [_position(1000)]}, status_at)],
        snapshot=snapshot(T0, 1100, 900),
        record_times={("source", "orders", 0, 1000): status_at + 100},
        now_ms=T0,
    )
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert p0.replication_lag_seconds == 0.0


def test_a_partition_whose_worker_is_gone_keeps_its_last_acked_position_and_its_lag_grows_now() -> None:
    """A SIGKILLed worker's last status (acked 90, above the group's commit at 80) stays the best word on what reached
    the target; the lag is measured now against today's high-watermark, and the link says its workers are gone."""
    gone = sighting({"partitions": [_position(90, high=95, committed=80)]}, T0 - 20_000, is_live=False)
    record_times = {("source", "orders", 0, 90): T0 - 21_000}
    view = link_view(LINK, sightings=[gone], snapshot=snapshot(T0, 150, 80), record_times=record_times, now_ms=T0)
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert (p0.acked, p0.committed, p0.replication_lag_records, p0.replication_lag_seconds) == (90, 80, 60, 21.0)
    assert (p0.observed_ms, p0.position_from) == (T0, "worker_gone")
    assert (view.engine_running, view.workers, view.workers_gone, view.state) == (False, 0, 1, "workers gone")
    later = link_view(
        LINK,
        sightings=[gone],
        snapshot=snapshot(T0 + 5_000, 200, 80),
        record_times=record_times,
        now_ms=T0 + 5_000,
    )
    assert next(p for p in later.partitions if p.partition == 0).replication_lag_seconds == 26.0


def test_a_partition_a_live_worker_just_lost_keeps_what_it_had_acknowledged() -> None:
    """Between a session-timeout loss and the next assignment the live worker reports the partition as released, with
    acked 90: records below 90 are on the target, whatever the group's commit (80) says (the truth test saw 4.3 s of
    lag too many here, from the commit, right after a 30 s freeze). A released position above the high-watermark is
    from a topic since created again: ignored."""
    released = sighting({"partitions": [], "released": [_position(90, committed=80)]}, T0)
    record_times = {("source", "orders", 0, 90): T0 - 1_000, ("source", "orders", 0, 80): T0 - 5_000}
    view = link_view(LINK, sightings=[released], snapshot=snapshot(T0, 120, 80), record_times=record_times, now_ms=T0)
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert (p0.acked, p0.replication_lag_records, p0.replication_lag_seconds) == (90, 30, 1.0)
    stale = sighting({"partitions": [], "released": [_position(5000, committed=80)]}, T0)
    view = link_view(LINK, sightings=[stale], snapshot=snapshot(T0, 120, 80), record_times=record_times, now_ms=T0)
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert (p0.acked, p0.committed, p0.replication_lag_records) == (None, 80, 40)


def test_the_best_position_wins_and_a_position_above_the_high_watermark_is_ignored() -> None:
    """After a rebalance the new worker re-reads from the commit (85) while the gone one had 90 acknowledged: records
    below 90 are on the target. A gone worker's 5000 is from a topic since created again: ignored."""
    live = sighting({"partitions": [_position(85, high=120, committed=80)]}, T0)
    gone = sighting({"partitions": [_position(90, committed=80)]}, T0 - 9_000, is_live=False)
    recreated = sighting({"worker": 1, "partitions": [_position(5000)]}, T0 - 60_000, is_live=False)
    view = link_view(
        LINK, sightings=[live, gone, recreated], snapshot=snapshot(T0, 120, 80), record_times={}, now_ms=T0
    )
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert (p0.acked, p0.replication_lag_records, p0.consumed) == (90, 30, 85)
    assert (view.workers, view.workers_gone) == (1, 1)  # worker 0 was restarted; worker 1 is gone


def test_a_dead_worker_on_another_host_is_gone_though_a_live_one_has_its_number() -> None:
    """A fleet: `mirrorwatch mirror` on two hosts, each worker 0 of its own process. The one on host b died: it is
    gone, not restarted, whatever the live one on host a is numbered; a new process on host b is its restart."""
    live = sighting({"instance": "a:/var/lib/mirrorwatch#0", "partitions": [_position(85, high=120)]}, T0)
    dead = sighting({"instance": "b:/var/lib/mirrorwatch#0", "partitions": [_position(90)]}, T0 - 9_000, is_live=False)
    view = link_view(LINK, sightings=[live, dead], snapshot=snapshot(T0, 120, 80), record_times={}, now_ms=T0)
    assert (view.workers, view.workers_gone) == (1, 1)
    again = sighting({"instance": "b:/var/lib/mirrorwatch#0", "partitions": []}, T0)
    view = link_view(LINK, sightings=[live, dead, again], snapshot=snapshot(T0, 120, 80), record_times={}, now_ms=T0)
    assert (view.workers, view.workers_gone) == (2, 0)


def test_a_status_newer_than_the_high_watermark_read_is_not_taken_for_a_recreated_topic() -> None:
    """In one process the workers' statuses are read after the snapshot: acked 1010 above the high-watermark of 1000
    read a moment before is progress, not a topic created again."""
    live = sighting({"partitions": [_position(1010, high=1012)]}, T0 + 300)
    view = link_view(
        LINK,
        sightings=[live],
        snapshot=snapshot(T0, 1000, 900),
        record_times={("source", "orders", 0, 1010): T0 + 280},
        now_ms=T0 + 300,
    )
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert (p0.acked, p0.replication_lag_records, p0.replication_lag_seconds) == (1010, 2, 0.02)


def test_a_status_between_two_snapshots_is_compared_with_the_interpolated_high_watermark() -> None:
    """The target is down and the worker stopped fetching: the high-watermark it saw (1100) is old. Its status, 500 ms
    into a 2 s round whose snapshots read 1000 and 2000, is compared with 1250, not 1100 nor 2000."""
    live = sighting({"partitions": [_position(1050, high=1100)]}, T0 + 500)
    positions = safe_positions(LINK, [live], snapshot(T0 + 2000, 2000, 900), T0 + 2100, snapshot(T0, 1000, 900))
    assert positions[("orders", 0)].lag_records == 200


def test_no_answer_from_the_source_is_unknown_lag_never_zero() -> None:
    gone = sighting({"partitions": [_position(90)]}, T0 - 20_000, is_live=False)
    view = link_view(LINK, sightings=[gone], snapshot=snapshot(T0, 0, 0, up=False), record_times={}, now_ms=T0)
    (p0,) = view.partitions
    assert (p0.replication_lag_records, p0.replication_lag_seconds) == (None, None)


def test_interpolation_over_the_high_watermark_history() -> None:
    history = [OffsetSample(0, T0, 100), OffsetSample(0, T0 + 10_000, 200), OffsetSample(0, T0 + 20_000, 400)]
    assert interpolate_record_time(history, 150) == T0 + 5_000  # halfway between 100 (at T0) and 200 (at T0+10 s)
    assert interpolate_record_time(history, 300) == T0 + 15_000
    assert interpolate_record_time(history, 50) == T0  # older than the history: at least this old
    assert interpolate_record_time(history, 400) is None  # not written as of the last observation
    assert interpolate_record_time([], 5) is None


@pytest.mark.parametrize(
    ("record_times", "expected"),
    [
        ({}, (None, None)),  # not read yet: unknown
        ({("source", "t", 0, 150): T0 + 1_000}, (29.0, "record")),
        ({("source", "t", 0, 150): None}, (25.0, "interpolated")),  # removed by retention
    ],
)
def test_lag_age(
    record_times: dict[tuple[str, str, int, int], int | None], expected: tuple[float | None, str | None]
) -> None:
    history = [OffsetSample(0, T0, 100), OffsetSample(0, T0 + 10_000, 200)]
    assert lag_age(T0 + 30_000, ("source", "t", 0, 150), record_times, history) == expected


HOUR_MS = 3_600_000
WEEK_MS = 7 * 24 * HOUR_MS
# the high-watermark at each observation: offset 150 arrived after T0 + 10 s, and had by the collection that began at
# T0 + 20 s read the high-watermark (which ended before the next began, at T0 + 25 s)
BRACKETED = [
    OffsetSample(0, T0, 100),
    OffsetSample(0, T0 + 10_000, 140),
    OffsetSample(0, T0 + 20_000, 200),
    OffsetSample(0, T0 + 25_000, 260),
]


def test_append_bounds_are_the_observations_either_side_of_the_offset() -> None:
    assert append_bounds(BRACKETED, 150) == (T0 + 10_000, T0 + 25_000)
    assert append_bounds(BRACKETED, 50) == (None, T0 + 10_000)  # before the history: no earlier bound
    assert append_bounds(BRACKETED, 230) == (T0 + 20_000, None)  # reached only by the newest observation
    assert append_bounds(BRACKETED, 300) == (T0 + 25_000, None)  # not on the source as of the newest observation
    recreated = [OffsetSample(0, T0, 500), OffsetSample(0, T0 + 10_000, 20)]  # deleted and created again
    assert append_bounds(recreated, 100) == (None, None)


@pytest.mark.parametrize(
    ("timestamp", "offset", "expected"),
    [
        # the producer's timestamp agrees with the observations: exact
        (T0 + 15_000, 150, (15.0, "record")),
        (T0 + 25_000, 150, (5.0, "record")),  # the high-watermark was read during the collection begun at T0 + 20 s
        # a backfill (last week's event times) or a producer that buffered through a source outage: the record was
        # not on the source at T0 + 10 s, so it is dated from the observations, not a week back
        (T0 - WEEK_MS, 150, (18.334, "interpolated")),  # a sixth of the way from 140 (T0 + 10 s) to 200 (T0 + 20 s)
        (T0 - WEEK_MS, 300, (5.0, "interpolated")),  # on the source only after the newest observation (T0 + 25 s)
        # a producer clock an hour ahead: the record was on the source by T0 + 20 s, so it is dated from the
        # observations too, never "written in the future, nothing behind"
        (T0 + HOUR_MS, 150, (18.334, "interpolated")),
        (T0 + HOUR_MS, 50, (30.0, "at_least")),  # on the source before the first observation
    ],
)
def test_a_record_timestamp_the_observed_high_watermarks_contradict_is_not_believed(
    timestamp: int, offset: int, expected: tuple[float, str]
) -> None:
    assert lag_age(T0 + 30_000, ("source", "t", 0, offset), {("source", "t", 0, offset): timestamp}, BRACKETED) == (
        expected
    )


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        (T0 + 4_000, T0 + 4_000),  # between the two observations: the record's own time
        (T0 + 10_000, T0 + 10_000),
        (T0 - WEEK_MS, T0 + 2_500),  # a backfill: where offset 125 falls between 100 (at T0) and 200 (at T0 + 10 s)
        (T0, T0 + 2_500),  # not on the source yet at T0
        (T0 + HOUR_MS, T0 + 2_500),  # a producer clock an hour ahead
    ],
)
def test_a_record_is_dated_within_the_observations_either_side_of_its_arrival(timestamp: int, expected: int) -> None:
    assert date_record(timestamp, 125, (T0, 100), (T0 + 10_000, 200)) == expected


def test_a_record_with_one_observation_beside_it_is_dated_no_further_than_that() -> None:
    assert date_record(T0 + HOUR_MS, 125, None, (T0 + 10_000, 200)) == T0 + 10_000  # on the source by then
    assert date_record(T0 - WEEK_MS, 125, None, (T0 + 10_000, 200)) == T0 - WEEK_MS  # no earlier bound: believed
    assert date_record(T0 - WEEK_MS, 125, (T0, 100), None) == T0  # not there at T0
    assert date_record(T0 - WEEK_MS, 125, None, None) == T0 - WEEK_MS


def test_a_stuck_link_whose_producer_clock_runs_ahead_is_behind_not_caught_up() -> None:
    """The worker stopped mirroring at offset 1000 a minute ago and reports so every second; the record there carries
    a timestamp an hour ahead (its producer's clock). Trusted, it would be "written after the status: none behind"
    for an hour. The high-watermarks the monitor observed had passed 1000 a minute ago: 60 s behind."""
    status_at = T0 - 500
    history = [OffsetSample(990, T0 - 60_000, 1001), OffsetSample(1000, T0 - 30_000, 1050)]
    view = link_view(
        LINK,
        sightings=[sighting({"partitions": [_position(1000)]}, status_at)],
        snapshot=snapshot(T0, 1100, 900),
        record_times={("source", "orders", 0, 1000): T0 + HOUR_MS},
        now_ms=T0,
        history=lambda _topic, _partition: history,
    )
    p0 = next(p for p in view.partitions if p.partition == 0)
    assert p0.replication_lag_records == 100
    assert (p0.replication_lag_seconds, p0.replication_lag_seconds_method) == (59.5, "at_least")


def test_a_links_configured_commit_interval_stands_in_for_the_cadence_until_the_windows_learn_it() -> None:
    """A monitor (re)started in an incident: the link's group has not moved since the monitor's first look, 9 s ago,
    with records waiting 10 s. Its cadence unknown, the longest assumed interval (60 s) lets it read OK; the link's
    5 s commit interval makes that a WARN (stuck past one and a half commits). A learnt cadence still wins."""

    def status(windows: OffsetWindows, cadences: Mapping[tuple[str, str], int] | None) -> Status:
        views = evaluate_groups(
            windows, snapshot(T0 + 9_000, 150, 40), EvaluatorConfig(), {("source", "orders", 0, 40): T0 - 1_000},
            cadences=cadences,
        )  # fmt: skip
        return next(p.status for p in views[("source", "g")].evaluation.partitions if p.partition == 0)

    fresh = OffsetWindows(10)
    for at, hwm in ((T0, 100), (T0 + 9_000, 150)):
        observe_snapshot(fresh, snapshot(at, hwm, 40))
    assert status(fresh, None) == Status.OK
    assert status(fresh, {("source", "g"): 5_000}) == Status.WARN
    assert status(fresh, {("target", "g"): 5_000, ("source", "other"): 5_000}) == Status.OK  # another group's
    learnt = OffsetWindows(10)
    for i, at in enumerate(range(T0 - 60_000, T0, 20_000)):  # it moved every 20 s before
        observe_snapshot(learnt, snapshot(at, 100, 10 * i))
    for at, hwm in ((T0, 100), (T0 + 9_000, 150)):
        observe_snapshot(learnt, snapshot(at, hwm, 40))
    assert learnt.commit_gap_ms(("source", "g", "orders", 0)) == 20_000
    assert status(learnt, {("source", "g"): 5_000}) == Status.OK


def test_a_group_whose_record_is_gone_gets_an_interpolated_age() -> None:
    windows = OffsetWindows(10)
    for i in range(3):
        observe_snapshot(windows, snapshot(T0 + i * 10_000, 100 + i * 100, 50))
    view = evaluate_groups(
        windows, snapshot(T0 + 20_000, 300, 50), EvaluatorConfig(), {("source", "orders", 0, 50): None}
    )
    p0 = next(p for p in view[("source", "g")].evaluation.partitions if p.partition == 0)
    # offset 50 is below every high-watermark seen (100 at T0): at least 20 s old, no more is known
    assert (p0.lag_seconds, p0.lag_seconds_method) == (20.0, "at_least")
    windows = OffsetWindows(10)
    for i in range(3):
        observe_snapshot(windows, snapshot(T0 + i * 10_000, 100 + i * 100, 150))
    view = evaluate_groups(
        windows, snapshot(T0 + 20_000, 300, 150), EvaluatorConfig(), {("source", "orders", 0, 150): None}
    )
    p0 = next(p for p in view[("source", "g")].evaluation.partitions if p.partition == 0)
    assert (p0.lag_seconds, p0.lag_seconds_method) == (15.0, "interpolated")  # written halfway between T0 and +10 s


def test_a_lower_bound_on_the_age_does_not_veto_stop() -> None:
    """A group parked for 150 s on a record retention removed, with a window spanning only the last 20 s: the
    interpolated age (>= 20 s) is a lower bound and must not count as "fresh data" that vetoes STOP."""
    windows = OffsetWindows(3)
    for i in range(16):
        observe_snapshot(windows, snapshot(T0 + i * 10_000, 1000, 300, members=0))
    now = T0 + 150_000
    config = EvaluatorConfig(window=3, min_stop_seconds=60)
    view = evaluate_groups(windows, snapshot(now, 1000, 300, members=0), config, {("source", "orders", 0, 300): None})
    p0 = next(p for p in view[("source", "g")].evaluation.partitions if p.partition == 0)
    assert (p0.status, p0.lag_seconds_method) == (Status.STOP, "at_least")
    assert p0.lag_seconds == 20.0
    assert view[("source", "g")].evaluation.status == Status.ERR


def test_partition_count_drift_between_source_and_target() -> None:
    target = ClusterSnapshot(
        alias="target", observed_ms=T0, up=True, partitions={("orders", p): PartitionOffsets(0, 0) for p in range(4)}
    )
    view = link_view(LINK, sightings=[], snapshot=snapshot(T0, 100, 70), target=target, record_times={}, now_ms=T0)
    assert view.config_drift == (
        {
            "source_topic": "orders",
            "target_topic": "orders",
            "config": "partition_count",
            "source_value": "2",
            "target_value": "4",
        },
    )
