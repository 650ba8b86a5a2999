"""Figures computed for the moment they are served (pure `served_link`, and the service's `served_links` with a hand
-set clock and round): between two rounds a stuck partition's age grows second by second, one that moved is measured
at its fresh status; and a source the monitor cannot read is said, never read as 0."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from dashboards.health import lag_seconds
from kernel.config import ClusterConfig, LinkConfig, MonitorConfig
from kernel.worker_status import WorkerStatus
from monitor.evaluator import GroupEvaluation, OffsetSample, Status
from monitor.link_families import link_lags
from monitor.links import LinkView, WorkerSighting, link_view, safe_positions
from monitor.moments import OnSourceBy
from monitor.served import served_link
from monitor.service import SERVED_REUSE_MS, MonitorService
from monitor.snapshot import ClusterSnapshot, GroupInfo, PartitionOffsets
from monitor.state import GroupView, MonitorState

T0 = 1_700_000_000_000
LINK = LinkConfig(name="l", source="source", target="target", group_id="g")
WRITTEN = T0 - 5_000  # when the record at offset 90 (the oldest not on the target) was written
TIMES = {("source", "orders", 0, 90): WRITTEN}


def source(at_ms: int, high: int, *, committed: int = 80, up: bool = True) -> ClusterSnapshot:
    return ClusterSnapshot(
        alias="source",
        observed_ms=at_ms,
        up=up,
        cluster_id="c1",
        partitions={("orders", 0): PartitionOffsets(0, high)},
        groups={"g": GroupInfo("g", "STABLE", 1, False, {("orders", 0): committed})} if up else {},
        error=None if up else "no answer for 4.0s",
    )


def status(at_ms: int, acked: int, high: int | None, *, worker: int = 0, partition: int = 0) -> WorkerStatus:
    document = {
        "link": "l",
        "worker": worker,
        "engine": "python",
        "state": "running",
        "publish_interval_ms": 500,
        "observed_ms": at_ms,
        "partitions": [
            {
                "topic": "orders",
                "partition": partition,
                "target_topic": "orders",
                "consumed": acked + 50,
                "acked": acked,
                "committed": 80,
                "in_flight_records": 50,
                "high_watermark": high,
            }
        ],
    }
    parsed = WorkerStatus.from_json(document)
    assert parsed is not None
    return parsed


def round_view(sightings: Sequence[WorkerSighting], at_ms: int = T0) -> LinkView:
    return link_view(LINK, sightings=sightings, snapshot=source(at_ms, 200), record_times=TIMES, now_ms=at_ms)


def fresh(sightings: Sequence[WorkerSighting], now_ms: int, snapshot: ClusterSnapshot | None = None) -> Any:
    return safe_positions(LINK, sightings, snapshot or source(T0, 200), now_ms)


@pytest.mark.parametrize("between_ms", [0, 1, 250, 999, 1_000, 1_500, 1_999, 4_000])
def test_a_stuck_partition_served_between_rounds_is_its_fresh_moment_minus_the_oldest_unacknowledged_record(
    between_ms: int,
) -> None:
    """The target is down: the live worker's acknowledged position stays at 90 in every status (one each 0.5 s).
    Whenever it is served, the figure is the newest status's moment (at most 0.5 s before now) minus when record 90
    was written, stated at that moment — not the round's figure of T0 - 200 ms."""
    view = round_view([WorkerSighting(status(T0 - 200, 90, 200), True)])
    (p,) = view.partitions
    assert (p.replication_lag_seconds, p.observed_ms, p.waiting_since_ms) == (4.8, T0 - 200, WRITTEN)
    now = T0 + between_ms
    status_ms = now - between_ms % 500  # the newest status, written on the 0.5 s beat
    newest = WorkerSighting(status(status_ms, 90, 200 + between_ms), True)
    (served,) = served_link(view, now, fresh([newest], now)).partitions
    assert served.replication_lag_seconds == (max(status_ms, T0 - 200) - WRITTEN) / 1000
    assert served.observed_ms == max(status_ms, T0 - 200)
    assert served.replication_lag_records == 110 + between_ms  # the source kept growing, as the worker saw it
    assert served_link(view, now, fresh([newest], now)).observed_ms == now  # the view itself is served now


@pytest.mark.parametrize("between_ms", [0, 1, 250, 1_700, 1_999, 4_000])
def test_a_partition_nobody_mirrors_is_now_minus_the_oldest_unacknowledged_record(between_ms: int) -> None:
    """The worker froze (its sighting is not live): nothing can move the position, so at any moment between rounds
    the served figure is exactly now minus the time of the oldest record not on the target, stated at now."""
    frozen = WorkerSighting(status(T0 - 200, 90, 200), False)
    view = round_view([frozen])
    now = T0 + between_ms
    (served,) = served_link(view, now, fresh([frozen], now)).partitions
    assert (served.replication_lag_seconds, served.observed_ms) == ((now - WRITTEN) / 1000, now)
    assert served.position_from == "worker_gone"


def test_a_partition_nobody_mirrors_caught_up_by_the_high_watermark_read_is_so_at_that_moment_only() -> None:
    """The worker lost the partition when it had acknowledged 200, all the snapshot read at T0 - 1.5 s; what the source
    took since waits for nobody, so the 0 states T0 - 1.5 s, served or not, never now."""
    gone = WorkerSighting(status(T0 - 2_000, 200, 200), False)
    view = link_view(LINK, sightings=[gone], snapshot=source(T0 - 1_500, 200), record_times={}, now_ms=T0)
    (p,) = view.partitions
    assert (p.replication_lag_records, p.replication_lag_seconds, p.observed_ms) == (0, 0.0, T0 - 1_500)
    later = T0 + 1_000
    (served,) = served_link(view, later, fresh([gone], later, source(T0 - 1_500, 200))).partitions
    assert (served.replication_lag_seconds, served.observed_ms) == (0.0, T0 - 1_500)


def test_a_partition_that_moved_since_the_round_is_measured_at_its_fresh_status() -> None:
    """The target came back after the round: the fresh status acknowledges up to 195 of 200 — the lag is what waits
    from 195 on, dated between the high-watermarks observed (190 at T0 - 1 s in the group's window, 200 in the
    round's status at T0 - 200 ms), not the round's 4.8 s served after the recovery."""
    view = round_view([WorkerSighting(status(T0 - 200, 90, 200), True)])
    history = [OffsetSample(80, T0 - 1_000, 190, True), OffsetSample(80, T0, 200, True)]
    now = T0 + 1_000
    newer = [WorkerSighting(status(T0 + 900, 195, 200), True)]
    (served,) = served_link(view, now, fresh(newer, now), lambda _t, _p: history).partitions
    assert (served.safe_offset, served.replication_lag_records, served.observed_ms) == (195, 5, T0 + 900)
    assert served.waiting_since_ms == T0 - 600  # halfway from 190 to 200
    assert served.replication_lag_seconds == 1.5
    assert served.replication_lag_seconds_method == "interpolated"
    caught_up = [WorkerSighting(status(T0 + 900, 200, 200), True)]
    (served,) = served_link(view, now, fresh(caught_up, now), lambda _t, _p: history).partitions
    assert (served.replication_lag_records, served.replication_lag_seconds) == (0, 0.0)


def test_a_partition_that_moved_past_the_window_is_dated_from_the_rounds_own_record() -> None:
    """An outage longer than the group's window: the round dated record 90 (written at T0 - 5 s) and read 200 at
    T0 - 200 ms; the target came back and the fresh status acknowledges up to 145. No high-watermark of the window is
    below 145, yet the round's record is: the high-watermark stood at 90 when it was written, so 145 appeared halfway
    to 200 — not the round's 4.8 s at T0 - 200 ms served after the drain began (seen: 43 s while the truth read 23)."""
    view = round_view([WorkerSighting(status(T0 - 200, 90, 200), True)])
    history = [OffsetSample(80, T0, 200, True)]
    now = T0 + 1_000
    moved = [WorkerSighting(status(T0 + 900, 145, 200), True)]
    (served,) = served_link(view, now, fresh(moved, now), lambda _t, _p: history).partitions
    assert (served.safe_offset, served.replication_lag_records, served.observed_ms) == (145, 55, T0 + 900)
    assert served.waiting_since_ms == WRITTEN + 2_400  # halfway from 90 (at WRITTEN) to 200 (at T0 - 200)
    assert (served.replication_lag_seconds, served.replication_lag_seconds_method) == (3.5, "interpolated")


@pytest.mark.parametrize("round_acked", [200, 190])
def test_caught_up_is_served_at_a_fresh_status_only_on_the_high_watermark_its_worker_saw(round_acked: int) -> None:
    """The round read 200 at T0 and measured the worker then (caught up, or 10 behind). 2.5 s later its fresh status
    says 200 acknowledged but states no high-watermark of its own (its consumer lost the source's broker): only the
    round's read says caught up, and the source may have taken records since — the round's figure stands, at its
    moment (seen: 13 records 2 s behind read as 0). Stating the high-watermark it saw, the worker is caught up at its
    fresh status."""
    view = round_view([WorkerSighting(status(T0 - 200, round_acked, 200), True)])
    (at_round,) = view.partitions
    now = T0 + 2_600
    blind = [WorkerSighting(status(T0 + 2_500, 200, None), True)]
    (served,) = served_link(view, now, fresh(blind, now)).partitions
    assert served == at_round
    assert (served.observed_ms, served.replication_lag_records) == (T0 - 200, 200 - round_acked)
    seeing = [WorkerSighting(status(T0 + 2_500, 200, 200), True)]
    (served,) = served_link(view, now, fresh(seeing, now)).partitions
    assert (served.observed_ms, served.replication_lag_records, served.replication_lag_seconds) == (T0 + 2_500, 0, 0.0)


def test_without_fresh_statuses_the_round_stands_and_without_a_date_the_read_that_saw_the_record_bounds_it() -> None:
    view = round_view([WorkerSighting(status(T0 - 200, 90, 200), True)])
    assert served_link(view, T0 + 1_000, None) == view
    unknown = link_view(LINK, sightings=[], snapshot=source(T0, 200), record_times={}, now_ms=T0)
    (p,) = unknown.partitions
    assert p.replication_lag_seconds is None and p.reason is not None  # 120 records wait, their age not read yet
    (served,) = served_link(unknown, T0 + 1_000, fresh([], T0 + 1_000)).partitions
    # 80 was on the source at every observation, the first at T0: no date, but at least 1 s old a second later
    assert (served.replication_lag_seconds, served.replication_lag_seconds_method) == (1.0, "at_least")
    history = [OffsetSample(70, T0 - 3_000, 60, True), OffsetSample(70, T0 - 1_000, 100, True)]
    (served,) = served_link(unknown, T0 + 1_000, fresh([], T0 + 1_000), lambda _t, _p: history).partitions
    assert (served.replication_lag_seconds, served.replication_lag_seconds_method) == (3.0, "interpolated")


def test_a_source_the_monitor_cannot_read_is_said_never_read_as_caught_up() -> None:
    """The source stopped answering; its last snapshot said 200. Nobody owns the partition (the group lost it). By
    that snapshot a partition at 200 is caught up — but the source may have grown: unknown, with the reason. One at 90
    is behind by at least 110 records, and its oldest waiting record's age is known exactly."""
    last = source(T0 - 4_000, 200)
    gone = WorkerSighting(status(T0 - 5_000, 200, 200), False)
    positions = safe_positions(LINK, [gone], last, T0, unseen_source="no answer for 4.0s")
    view = link_view(LINK, sightings=[gone], snapshot=last, record_times=TIMES, now_ms=T0, positions=positions)
    (p,) = view.partitions
    assert (p.replication_lag_records, p.replication_lag_seconds) == (None, None)
    assert p.reason is not None and "cannot see the source (no answer for 4.0s)" in p.reason
    assert (view.replication_lag_records, view.replication_lag_seconds, view.reason) == (None, None, p.reason)
    behind = WorkerSighting(status(T0 - 5_000, 90, 200), False)
    positions = safe_positions(LINK, [behind], last, T0, unseen_source="no answer for 4.0s")
    view = link_view(LINK, sightings=[behind], snapshot=last, record_times=TIMES, now_ms=T0, positions=positions)
    (p,) = view.partitions
    assert (p.replication_lag_records, p.replication_lag_seconds) == (110, 5.0)
    assert p.reason is not None and "at least" in p.reason


def test_while_the_source_is_unseen_a_released_position_above_its_last_high_watermark_counts() -> None:
    """The source went quiet after the monitor's last good snapshot (200) while the worker went on to 230 and then
    lost the partition (session timeout): what it acknowledged is on the target, above a high-watermark that is
    merely old, not of a topic created again — the position is 230, not the group's commit at 80."""
    document = status(T0 - 1_000, 230, 230).as_json()
    document["released"], document["partitions"] = document["partitions"], []
    released = WorkerStatus.from_json(document)
    assert released is not None
    positions = safe_positions(
        LINK, [WorkerSighting(released, True)], source(T0 - 8_000, 200), T0, unseen_source="no answer for 6.0s"
    )
    assert (positions[("orders", 0)].safe, positions[("orders", 0)].position_from) == (230, "worker_gone")
    seen = safe_positions(LINK, [WorkerSighting(released, True)], source(T0, 200), T0)  # a source that answers
    assert seen[("orders", 0)].safe == 80  # 230 above its high-watermark now: a topic created again since


def test_a_live_worker_is_no_proof_of_caught_up_while_the_source_is_unseen() -> None:
    """The source stopped: the worker still owns the partition, and the high-watermark its consumer last saw says
    caught up — but records the source took just before it stopped may never have reached the worker (seen: 6
    records, 4 s read as 0). Caught up by what was last seen is unknown, with the reason; behind by it is a floor."""
    last = source(T0 - 3_000, 200)
    worker = WorkerSighting(status(T0 - 100, 200, 200), True)
    positions = safe_positions(LINK, [worker], last, T0, unseen_source="no answer for 3.0s")
    view = link_view(LINK, sightings=[worker], snapshot=last, record_times={}, now_ms=T0, positions=positions)
    (p,) = view.partitions
    assert (p.replication_lag_records, p.replication_lag_seconds, p.position_from) == (None, None, "worker")
    assert p.reason is not None and p.reason.startswith("cannot see the source")
    behind = WorkerSighting(status(T0 - 100, 90, 200), True)
    positions = safe_positions(LINK, [behind], last, T0, unseen_source="no answer for 3.0s")
    view = link_view(LINK, sightings=[behind], snapshot=last, record_times=TIMES, now_ms=T0, positions=positions)
    assert (view.replication_lag_records, view.replication_lag_seconds) == (110, 4.9)


def test_a_waiting_record_not_yet_dated_is_at_least_as_old_as_the_last_read_that_saw_it() -> None:
    """The source stopped answering (a broker's restart) after the snapshot of T0 - 4 s, whose collection took 0.2 s and
    read 200; the worker acknowledged up to 150 since, and nobody dated record 150 before the source went quiet. It was
    on the source by T0 - 3.8 s (200 > 150 was read by then): at least 3.7 s old at the status of T0 - 100 ms, growing
    with every status, said a lower bound everywhere (the view, the link's figure, /metrics, the console) — issue #67:
    "not known" for 12 s while the truth grew from 2 to 12 s."""
    last = dataclasses.replace(source(T0 - 4_000, 200), collect_seconds=0.2)
    worker = WorkerSighting(status(T0 - 100, 150, 150), True)
    positions = safe_positions(LINK, [worker], last, T0, unseen_source="no answer for 4.0s")
    view = link_view(LINK, sightings=[worker], snapshot=last, record_times=TIMES, now_ms=T0, positions=positions)
    (p,) = view.partitions
    assert (p.replication_lag_records, p.replication_lag_seconds, p.replication_lag_seconds_method) == (
        50,
        3.7,
        "at_least",
    )
    assert p.reason == "cannot see the source (no answer for 4.0s): records and seconds at least this many"
    assert (view.replication_lag_seconds, view.replication_lag_seconds_at_least) == (3.7, True)
    caught_up = dataclasses.replace(
        p, partition=1, replication_lag_records=0, replication_lag_seconds=0.0, replication_lag_seconds_method=None
    )
    exact = dataclasses.replace(
        view, partitions=(dataclasses.replace(p, replication_lag_seconds_method=None), caught_up)
    )
    assert (exact.replication_lag_seconds, exact.replication_lag_seconds_at_least) == (3.7, False)
    unknown = dataclasses.replace(caught_up, replication_lag_records=None, replication_lag_seconds=None)
    with_unknown = dataclasses.replace(exact, partitions=(exact.partitions[0], unknown))  # e.g. the canary's topic
    assert (with_unknown.replication_lag_seconds, with_unknown.replication_lag_seconds_at_least) == (3.7, True)
    later = WorkerSighting(status(T0 + 2_400, 150, 150), True)
    served = served_link(view, T0 + 2_500, safe_positions(LINK, [later], last, T0 + 2_500, unseen_source="no answer"))
    (q,) = served.partitions
    assert (q.replication_lag_seconds, q.replication_lag_seconds_method) == (6.2, "at_least")
    _, repl_s, at_least = link_lags({"l": served})
    assert (repl_s.samples, at_least.samples) == (1, 1)
    assert lag_seconds({"replication_lag_seconds": 6.2, "replication_lag_seconds_at_least": True}) == "at least 6.2 s"
    seen = link_view(LINK, sightings=[worker], snapshot=last, record_times=TIMES, now_ms=T0)  # the source answers:
    (p,) = seen.partitions  # record 150 not dated yet all the same
    assert (p.replication_lag_seconds, p.replication_lag_seconds_method) == (3.7, "at_least")
    assert (
        p.reason == "the oldest record not on the target is not dated yet: at least as old as the last read that saw it"
    )
    dated = link_view(
        LINK,
        sightings=[worker],
        snapshot=last,
        record_times={**TIMES, ("source", "orders", 0, 150): T0 - 4_500},
        now_ms=T0,
    )
    assert (dated.replication_lag_seconds, dated.replication_lag_seconds_at_least) == (4.4, False)  # dated: exact


def test_the_earliest_proof_of_a_record_on_the_source_is_kept_across_rounds_until_the_link_passes_it() -> None:
    """A round whose snapshots are newer (or cut short by a source going down) proves less of the same record: the
    bound stays the first proof's, so a figure that is only a lower bound grows and never drops back."""
    proofs = OnSourceBy()
    key = ("l", "orders", 0)
    assert proofs.earliest(key, 90, 200, T0 - 3_000, 200) == T0 - 3_000
    assert proofs.earliest(key, 150, 200, T0 - 1_000, 200) == T0 - 3_000  # 200 was read by T0 - 3 s: so was 150
    assert proofs.earliest(key, 150, 260, T0 - 500, 260) == T0 - 3_000
    assert proofs.earliest(key, 230, 260, T0 - 500, 260) == T0 - 500  # past 200: only the read of 260 proves it
    # the topic deleted and created again: its high-watermark is 40 now, and 260's proof is of the old one
    assert proofs.earliest(key, 10, 40, T0, 40) == T0
    proofs.forget(set())
    assert proofs.earliest(key, 230, 260, T0, 260) == T0


def test_a_link_with_no_position_known_says_it_is_not_measured_yet() -> None:
    empty = ClusterSnapshot("source", T0, True, cluster_id="c1", partitions={("orders", 0): PartitionOffsets(0, 200)})
    view = link_view(LINK, sightings=[], snapshot=empty, record_times={}, now_ms=T0)
    assert view.partitions == () and view.replication_lag_records is None and view.replication_lag_seconds is None
    assert view.reason is not None and view.reason.startswith("not measured yet")


class _Clock:
    def __init__(self, now_ms: int) -> None:
        self.ms = now_ms

    def now_ms(self) -> int:
        return self.ms

    def now_ns(self) -> int:
        return self.ms * 1_000_000

    def monotonic_s(self) -> float:
        return self.ms / 1000


def _monitor(statuses: list[WorkerStatus], clock: _Clock) -> MonitorService:
    """A monitor of LINK that asks no broker unless told to, its workers' statuses the list as it stands."""
    return MonitorService(
        MonitorConfig(),
        {"source": ClusterConfig(bootstrap_servers="b1:9092"), "target": ClusterConfig(bootstrap_servers="b2:9092")},
        [LINK],
        link_statuses=lambda: {"l": list(statuses)},
        clock=clock,
    )


@pytest.fixture
def service() -> Iterator[tuple[MonitorService, _Clock, list[WorkerStatus]]]:
    """A monitor whose round is set by hand (no broker is asked) and whose workers' statuses are a list."""
    statuses = [status(T0 - 200, 90, 200)]
    clock = _Clock(T0)
    monitor = _monitor(statuses, clock)
    view = round_view([WorkerSighting(statuses[0], True)])
    group = GroupView("source", "g", "STABLE", 1, GroupEvaluation(Status.OK, 1.0, (), None, 0), {})
    monitor.state = MonitorState(T0, {"source": source(T0, 200)}, {("source", "g"): group}, {"l": view})
    yield monitor, clock, statuses
    monitor.stop()


def test_the_service_serves_the_links_for_now_and_reads_the_statuses_again(
    service: tuple[MonitorService, _Clock, list[WorkerStatus]],
) -> None:
    monitor, clock, statuses = service
    clock.ms = T0 + 1_300
    statuses[:] = [status(T0 + 1_000, 90, 230)]
    link: Mapping[str, LinkView] = monitor.served_links()
    (p,) = link["l"].partitions
    assert (p.replication_lag_seconds, p.observed_ms, p.high_watermark) == (6.0, T0 + 1_000, 230)
    statuses[:] = [status(T0 + 1_305, 230, 230)]  # the target is back and everything is acknowledged
    clock.ms = T0 + 1_300 + SERVED_REUSE_MS - 1  # within SERVED_REUSE_MS: the statuses read just before still stand
    (p,) = monitor.served_links()["l"].partitions
    assert (p.replication_lag_seconds, p.observed_ms) == (6.0, T0 + 1_000)
    clock.ms = T0 + 1_300 + SERVED_REUSE_MS  # no longer: a backlog drains tens of seconds a second (issue #41)
    (p,) = monitor.served_links()["l"].partitions
    assert (p.replication_lag_records, p.replication_lag_seconds, p.observed_ms) == (0, 0.0, T0 + 1_305)
    assert monitor.state is not None and monitor.state.links["l"].partitions[0].replication_lag_seconds == 4.8


def test_a_source_whose_collection_is_overdue_is_unseen_when_served(
    service: tuple[MonitorService, _Clock, list[WorkerStatus]],
) -> None:
    """The round said caught up; since then the source's collection has gone 1.5 s without an answer (its last took
    0.1 s): the served figure is unknown with the reason, not a 0 the round can no longer stand behind."""
    monitor, clock, statuses = service
    statuses[:] = [status(T0 + 1_000, 200, 200)]
    clock.ms = T0 + 1_100
    (p,) = monitor.served_links()["l"].partitions
    assert (p.replication_lag_records, p.replication_lag_seconds) == (0, 0.0)
    monitor._latest["source"] = dataclasses.replace(source(T0, 200), collect_seconds=0.1)
    monitor._running["source"] = (T0, concurrent.futures.Future())  # started with the round, no answer yet
    clock.ms = T0 + 1_500  # a new read of the statuses
    (p,) = monitor.served_links()["l"].partitions
    assert (p.replication_lag_records, p.replication_lag_seconds) == (None, None)
    assert p.reason == "cannot see the source (no answer for 1.5s): whether records wait is not known"
    monitor._running.clear()


def test_a_worker_that_has_not_fetched_is_measured_against_an_old_high_watermark_only_as_a_floor() -> None:
    """Just assigned after a source restart, the worker has acknowledged 200 but fetched nothing (no high-watermark of
    its own), and the snapshot read 200 twelve seconds before its status: caught up then says nothing of now (the
    producers' held records were arriving: 9.9 s behind by the truth, read as 0). With a snapshot of the round's usual
    age, the same status reads caught up."""
    document = status(T0, 200, 200).as_json()
    document["partitions"][0].update(high_watermark=None, consumed=None)  # acknowledged before it lost the partition
    worker = WorkerStatus.from_json(document)
    assert worker is not None
    sighting = WorkerSighting(worker, True)
    old = safe_positions(LINK, [sighting], source(T0 - 12_000, 200), T0, high_stale_after_ms=3_000)
    view = link_view(LINK, sightings=[sighting], snapshot=None, record_times={}, now_ms=T0, positions=old)
    (p,) = view.partitions
    assert (p.replication_lag_records, p.replication_lag_seconds) == (None, None)
    assert p.reason == (
        "its worker has not fetched since its assignment and the high-watermark read is 12 s older: "
        "whether records wait is not known"
    )
    reading = dict(document, partitions=[{**document["partitions"][0], "consumed": 200}])
    has_read = WorkerStatus.from_json(reading)  # a worker that has read its partition has fetched it: believed
    assert has_read is not None
    (believed,) = safe_positions(LINK, [WorkerSighting(has_read, True)], source(T0 - 12_000, 200), T0).values()
    assert (believed.lag_records, believed.high_floor) == (0, None)
    usual = safe_positions(LINK, [sighting], source(T0 - 2_000, 200), T0, high_stale_after_ms=3_000)
    view = link_view(LINK, sightings=[sighting], snapshot=None, record_times={}, now_ms=T0, positions=usual)
    assert (view.replication_lag_records, view.replication_lag_seconds) == (0, 0.0)


def test_a_partition_nobody_mirrors_caught_up_only_by_a_later_report_is_so_at_that_report_or_not_known() -> None:
    """The snapshot read 200 at T0 - 1.5 s; the worker, which died since, reported 200 acknowledged only at T0 - 0.5 s.
    That proves nothing of T0 - 1.5 s (it may have acknowledged them in between) nor of T0 - 0.5 s unless its own
    consumer had seen no further then (an exactly-once kill right after a commit read 0 at 4.3 s behind). Its consumer
    had seen 230: 30 records it read were not acknowledged, and nobody mirrors them since — behind now by at least
    those (a mirror SIGKILLed with records in flight read "not known" while provably behind); their age is the
    record's (not read here: not known, said)."""
    snapshot = source(T0 - 1_500, 200)
    for seen, expected in ((200, (0, 0.0, T0 - 500)), (230, (30, None, T0))):
        gone = WorkerSighting(status(T0 - 500, 200, seen), False)
        view = link_view(LINK, sightings=[gone], snapshot=snapshot, record_times={}, now_ms=T0)
        (p,) = view.partitions
        assert (p.replication_lag_records, p.replication_lag_seconds, p.observed_ms) == expected
    assert p.reason is not None and "reported after the last high-watermark read" not in p.reason
    with_time = link_view(
        LINK, sightings=[gone], snapshot=snapshot, record_times={("source", "orders", 0, 200): T0 - 900}, now_ms=T0
    )
    assert (with_time.partitions[0].replication_lag_records, with_time.partitions[0].replication_lag_seconds) == (
        30,
        0.9,
    )


def test_a_partition_released_since_the_round_keeps_the_round_figure_at_its_moment() -> None:
    """The round measured the live worker caught up at 200 (its status at T0 - 200 ms). At T0 + 500 ms the group
    rebalances and the worker's status releases the partition at 200: nobody reports it, and the source answers, but
    nothing was read of it since T0 — the round's 0 stands, at its own moment, rather than no figure (a fleet worker
    thawed from a SIGSTOP rejoined its group: three samples in a row without one, issue #45). A source that stopped
    answering since still reads unknown."""
    view = round_view([WorkerSighting(status(T0 - 200, 200, 200), True)])
    (at_round,) = view.partitions
    assert (at_round.replication_lag_records, at_round.observed_ms) == (0, T0 - 200)
    document = status(T0 + 500, 200, 200).as_json()
    document["released"], document["partitions"] = document["partitions"], []
    released = WorkerStatus.from_json(document)
    assert released is not None
    now = T0 + 600
    positions = fresh([WorkerSighting(released, True)], now)
    assert positions[("orders", 0)].high_floor == "its position was reported after the last high-watermark read"
    (served,) = served_link(view, now, positions).partitions
    assert served == at_round
    unseen = safe_positions(
        LINK, [WorkerSighting(released, True)], source(T0, 200), now, unseen_source="no answer for 1.5s"
    )
    (served,) = served_link(view, now, unseen).partitions
    assert (served.replication_lag_records, served.replication_lag_seconds) == (None, None)
    assert served.reason is not None and served.reason.startswith("cannot see the source")


def test_a_partition_with_nothing_acknowledged_and_no_commit_stands_at_the_log_start() -> None:
    """An empty partition a worker was just given (nothing read, nothing committed) is caught up, not unknown (it made
    a link's total unknown); one holding records nobody has copied is behind by all of them, from the log start where
    the link begins (start_from: earliest). Starting at the end, nothing is known until the worker reports."""
    fresh_worker = status(T0, 0, 0).as_json()
    fresh_worker["partitions"][0].update(consumed=None, acked=None, committed=None, high_watermark=None)
    worker = WorkerStatus.from_json(fresh_worker)
    assert worker is not None
    sighting = WorkerSighting(worker, True)
    empty = ClusterSnapshot("source", T0, True, partitions={("orders", 0): PartitionOffsets(40, 40)})
    (p,) = link_view(LINK, sightings=[sighting], snapshot=empty, record_times={}, now_ms=T0).partitions
    assert (p.safe_offset, p.replication_lag_records, p.replication_lag_seconds, p.reason) == (40, 0, 0.0, None)
    waiting = ClusterSnapshot("source", T0, True, partitions={("orders", 0): PartitionOffsets(40, 100)})
    times = {("source", "orders", 0, 40): T0 - 7_000}
    view = link_view(LINK, sightings=[], snapshot=waiting, record_times=times, now_ms=T0)
    assert view.partitions == ()  # no worker, no commit: the link's partitions are not known yet (it says so)
    (p,) = link_view(LINK, sightings=[sighting], snapshot=waiting, record_times=times, now_ms=T0).partitions
    assert (p.replication_lag_records, p.replication_lag_seconds, p.position_from) == (60, 7.0, "worker")
    latest = LINK.model_copy(update={"start_from": "latest"})
    (p,) = link_view(latest, sightings=[sighting], snapshot=waiting, record_times=times, now_ms=T0).partitions
    assert (p.replication_lag_records, p.replication_lag_seconds) == (None, None) and p.reason is not None


def test_a_floor_never_hides_what_the_round_knew_to_be_behind() -> None:
    """The spark driver froze: its last status said acknowledged 90 of 200 (its own high-watermark), the snapshot of
    the round before read only 80. Served with the driver gone, the snapshot alone would call it caught up, only a
    floor — but the round knew 110 records waited: aged to now, not left out."""
    frozen = WorkerSighting(status(T0 - 200, 90, 200), False)
    view = link_view(
        LINK,
        sightings=[WorkerSighting(status(T0 - 200, 90, 200), True)],
        snapshot=source(T0 - 1_000, 80),
        record_times=TIMES,
        now_ms=T0,
    )
    (p,) = view.partitions
    assert (p.replication_lag_records, p.high_watermark) == (110, 200)
    now = T0 + 1_000
    (served,) = served_link(view, now, fresh([frozen], now, source(T0 - 1_000, 80))).partitions
    assert (served.replication_lag_records, served.replication_lag_seconds) == (110, 6.0)


def test_a_live_worker_that_lost_sight_of_the_source_is_no_proof_of_caught_up_whatever_the_monitor_read() -> None:
    """The source broker stopped at T0 - 1 s. The worker, live, has read and acknowledged up to 200 but states no
    high-watermark (its consumer lost the source and has not fetched the partition since): the source may hold records
    it took in its last instant, after any read of the monitor's (one at T0 - 500 ms read 200 while the broker was
    shutting down), so caught up is not known (the first seconds of a source outage read 0 while 2-4 s behind, issue
    #41). A worker that never lost the source, or has fetched since, is measured as ever."""
    document = status(T0, 200, 200).as_json()
    document["partitions"][0].update(high_watermark=None, consumed=200)
    lost = WorkerStatus.from_json({**document, "highs_stale_since_ms": T0 - 1_000})
    assert lost is not None
    for read_ms in (T0 - 1_500, T0 - 500):
        (p,) = link_view(
            LINK, sightings=[WorkerSighting(lost, True)], snapshot=source(read_ms, 200), record_times={}, now_ms=T0
        ).partitions
        assert (p.replication_lag_records, p.replication_lag_seconds) == (None, None)
        assert p.reason == (
            "its worker lost sight of the source 1 s ago and has not fetched the partition since: whether records "
            "wait is not known"
        )
    for worker in (WorkerStatus.from_json(document), status(T0, 200, 200)):
        assert worker is not None
        (q,) = link_view(
            LINK, sightings=[WorkerSighting(worker, True)], snapshot=source(T0 - 1_500, 200), record_times={}, now_ms=T0
        ).partitions
        assert (q.replication_lag_records, q.replication_lag_seconds, q.observed_ms, q.reason) == (0, 0.0, T0, None)


def test_a_worker_that_commits_and_withdraws_its_status_during_the_round_keeps_its_partitions_in_the_link() -> None:
    """Two workers stop (SIGTERM): each commits, then withdraws its status. Worker 1 did so while the round collected
    the source: its commit is not in the snapshot and its status is gone after it. Read before the clusters, its
    status still names partition 1; read after (as a CI run of test_run once did), partition 1 left the link."""

    statuses = [status(T0 - 300, 150, 150), status(T0 - 300, 100, 100, worker=1, partition=1)]
    monitor = _monitor(statuses, _Clock(T0))

    def collect(alias: str, now_ms: int) -> ClusterSnapshot:
        if alias == "target":
            return ClusterSnapshot(alias="target", observed_ms=now_ms, up=True, cluster_id="c2")
        snapshot = ClusterSnapshot(
            alias="source",
            observed_ms=now_ms,
            up=True,
            cluster_id="c1",
            partitions={("orders", 0): PartitionOffsets(0, 150), ("orders", 1): PartitionOffsets(0, 100)},
            groups={"g": GroupInfo("g", "EMPTY", 0, False, {("orders", 0): 150})},  # worker 1 commits after this read
        )
        del statuses[1]  # ... and then withdraws its status
        return snapshot

    monitor._collect_cluster = collect  # type: ignore[method-assign]
    try:
        view = monitor.collect().links["l"]
    finally:
        monitor.stop()
    assert [(p.partition, p.safe_offset, p.replication_lag_records) for p in view.partitions] == [
        (0, 150, 0),
        (1, 100, 0),
    ]
    assert view.engine_running and view.workers == 2  # both were alive when their statuses were read
