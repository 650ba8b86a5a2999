"""The monitor's own memory (pure): bounded history per link and group, and the events between two rounds."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from monitor.evaluator import GroupEvaluation, Status
from monitor.history import CanaryReading, Events, History, canary_transitions, transitions
from monitor.links import LinkPartitionView, LinkView
from monitor.snapshot import ClusterSnapshot
from monitor.state import GroupView, MonitorState

T0 = 1_700_000_000_000


def _link(lag: int, records_out: int, *, running: bool = True, workers: int = 1, gone: int = 0) -> LinkView:
    partition = LinkPartitionView("orders", 0, "orders", 100, 100 - lag, 100 - lag, 90, lag, 10, 3, lag / 10)
    stats = {"records_in_total": records_out + 5, "records_out_total": records_out}
    return LinkView(
        "dr",
        "source",
        "target",
        "g",
        running,
        (partition,),
        stats,
        workers=workers if running else 0,
        workers_gone=gone,
    )


def _group(status: Status, lag: int) -> GroupView:
    return GroupView("source", "billing", "STABLE", 1, GroupEvaluation(status, 1.0, (), None, lag))


def _state(at_ms: int, link: LinkView, group: GroupView, *, up: bool = True) -> MonitorState:
    cluster = ClusterSnapshot("source", at_ms, up=up, error=None if up else "no answer")
    return MonitorState(at_ms, {"source": cluster}, {("source", "billing"): group}, {"dr": link})


def test_the_history_keeps_a_span_of_rounds_with_rates_from_the_counters() -> None:
    history = History(span_ms=30_000, interval_ms=10_000)  # four rounds
    for i in range(6):
        history.record(_state(T0 + i * 10_000, _link(lag=10 * i, records_out=1000 * i), _group(Status.OK, i)))
    link = history.link("dr")
    assert [t for t, _ in link["replication_lag_records"]] == [T0 + i * 10_000 for i in range(2, 6)]
    assert [v for _, v in link["replication_lag_records"]] == [20, 30, 40, 50]
    assert [v for _, v in link["replication_lag_seconds"]] == [2.0, 3.0, 4.0, 5.0]
    assert {v for _, v in link["records_out_per_second"]} == {100.0}  # 1,000 records every 10 s
    assert history.group("source", "billing")["total_lag"][-1] == (T0 + 50_000, 5.0)
    assert history.group("source", "billing")["status"][-1] == (T0 + 50_000, float(int(Status.OK)))
    assert history.link("dr", since_ms=T0 + 40_000)["in_flight_records"] == [(T0 + 40_000, 3.0), (T0 + 50_000, 3.0)]
    assert history.change_per_minute(("group", "source", "billing", "total_lag"), 20_000) == 6.0  # 2 in 20 s
    # compact: one time per round, one float32 per round and series, whatever has been recorded
    assert history.points(("cluster", "source", "up"))[-1] == (T0 + 50_000, 1.0)
    assert history.link("dr")["workers"][-1] == (T0 + 50_000, 1.0)
    assert (history.capacity, history.series) == (4, 9 + 2 + 1)  # link, group, cluster series
    assert history.bytes == 4 * (8 + 4 * 12)


def test_a_first_round_has_no_rate_and_an_unknown_figure_no_point() -> None:
    history = History(span_ms=60_000, interval_ms=10_000)
    unknown_age = replace(_link(5, 0), partitions=(replace(_link(5, 0).partitions[0], replication_lag_seconds=None),))
    history.record(_state(T0, unknown_age, _group(Status.OK, 0)))
    history.record(_state(T0 + 10_000, _link(5, 1000), _group(Status.OK, 0)))
    link = history.link("dr")
    assert link["records_out_per_second"] == [(T0 + 10_000, 100.0)]  # none for the first round: no "before"
    assert link["replication_lag_seconds"] == [(T0 + 10_000, 0.5)]  # unknown is no point, never 0
    history.record(_state(T0 + 5_000, _link(0, 0), _group(Status.OK, 0)))  # older than the last: ignored
    assert len(history.link("dr")["replication_lag_records"]) == 2


def test_a_stretched_interval_keeps_the_same_rounds_and_serves_only_the_span() -> None:
    history = History(span_ms=20_000, interval_ms=10_000)  # three rounds
    for i in range(3):
        history.record(_state(T0 + i * 30_000, _link(i, 0), _group(Status.OK, i)))  # rounds 30 s apart
    assert history.link("dr")["replication_lag_records"] == [(T0 + 60_000, 2.0)]  # the others are older than 20 s


def test_a_restart_that_resets_the_counters_is_not_a_negative_rate() -> None:
    history = History(span_ms=60_000, interval_ms=10_000)
    history.record(_state(T0, _link(0, 5000), _group(Status.OK, 0)))
    history.record(_state(T0 + 10_000, _link(0, 100), _group(Status.OK, 0)))
    assert history.link("dr")["records_out_per_second"][-1] == (T0 + 10_000, 0.0)


def test_series_of_a_group_that_is_gone_are_dropped_after_a_whole_ring() -> None:
    history = History(span_ms=20_000, interval_ms=10_000)  # three rounds
    history.record(_state(T0, _link(0, 0), _group(Status.OK, 0)))
    for i in range(1, 4):
        history.record(replace(_state(T0 + i * 10_000, _link(0, 0), _group(Status.OK, 0)), groups={}))
        kept = {"total_lag": [(T0, 0.0)], "status": [(T0, float(int(Status.OK)))]}  # within the span still
        assert history.group("source", "billing") == ({} if i == 3 else kept)
    assert history.keys("group") == [] and history.series == 9 + 1


def test_transitions_between_two_rounds() -> None:
    before = _state(T0, _link(0, 0), _group(Status.OK, 0))
    after = _state(T0 + 10_000, _link(0, 0, running=False, gone=1), _group(Status.WARN, 40), up=False)
    events = transitions(before, after)
    texts = {e.text for e in events}
    assert "cluster source down: no answer" in texts
    assert "link dr: running -> workers gone" in texts
    assert "link dr: a worker died or froze (1 -> 0 live)" in texts
    assert "group billing on source: OK -> WARN" in texts
    assert transitions(None, before) == []
    assert transitions(before, before) == []


def test_a_config_the_link_synced_is_an_event_once_about_its_link() -> None:
    sync: dict[str, Any] = {
        "source_topic": "orders",
        "target_topic": "dc1.orders",
        "config": "retention.ms",
        "was": "2000",
    }
    sync |= {"now": "1000", "at_ms": T0 + 5_000}
    removed = {**sync, "config": "segment.ms", "was": "60000", "now": None}
    states = [
        _state(T0 + i * 10_000, replace(_link(0, 0), config_synced=synced), _group(Status.OK, 0))
        for i, synced in enumerate([(), (sync, removed), (sync, removed)])
    ]
    ring = Events()
    for before, after in itertools.pairwise(states):
        ring.extend(transitions(before, after))
    assert [(e.kind, e.before, e.after, e.text) for e in reversed(ring.query(link="dr"))] == [
        ("sync", "2000", "1000", "link dr: dc1.orders synced retention.ms from its source: 2000 -> 1000"),
        ("sync", "60000", "unset", "link dr: dc1.orders synced segment.ms from its source: 60000 -> unset"),
    ]


def test_events_newest_first_and_filtered() -> None:
    ring = Events(size=3)
    states = [
        _state(T0 + i * 10_000, _link(0, 0), _group(s, 0))
        for i, s in enumerate([Status.OK, Status.WARN, Status.ERR, Status.OK, Status.WARN])
    ]
    for before, after in itertools.pairwise(states):
        ring.extend(transitions(before, after))
    newest = ring.query()
    assert [(e.before, e.after) for e in newest] == [
        ("OK", "WARN"),
        ("ERR", "OK"),
        ("WARN", "ERR"),
    ]  # the oldest fell out
    assert ring.query(group="billing", limit=1)[0].after == "WARN"
    assert ring.query(link="dr") == [] and ring.query(cluster="elsewhere") == []


def test_the_canary_s_latency_joins_its_link_s_history_when_a_canary_publishes() -> None:
    history = History(span_ms=60_000, interval_ms=10_000)
    history.record(_state(T0, _link(0, 0), _group(Status.OK, 0)))  # no canary yet
    history.record(_state(T0 + 10_000, _link(0, 0), _group(Status.OK, 0)), {"dr": 1.5})
    history.record(_state(T0 + 20_000, _link(0, 0), _group(Status.OK, 0)), {"dr": None})  # no probe in its window
    history.record(_state(T0 + 30_000, _link(0, 0), _group(Status.OK, 0)), {"dr": 0.25})
    assert history.link("dr")["canary_e2e_latency_p99_seconds"] == [(T0 + 10_000, 1.5), (T0 + 30_000, 0.25)]


def test_a_canary_going_absent_and_coming_back_is_an_event_about_its_link() -> None:
    present, absent = CanaryReading(0.1, False), CanaryReading(None, True)
    assert canary_transitions(None, {"dr": absent}, T0) == []  # no reading before: nothing changed
    assert canary_transitions({"dr": present}, {"dr": present}, T0) == []
    (gone,) = canary_transitions({"dr": present}, {"dr": absent}, T0)
    (back,) = canary_transitions({"dr": absent}, {"dr": present}, T0 + 1)
    assert (gone.kind, gone.subject, gone.before, gone.after) == ("canary", "dr", "present", "absent")
    assert "canary absent" in gone.text and (back.before, back.after) == ("absent", "present")
    events = Events()
    events.extend([gone, back])
    assert [e.after for e in events.query(link="dr")] == ["present", "absent"]


def test_a_pause_is_an_event_a_link_all_paused_reads_paused_and_a_partition_no_worker_reports_is_not_resumed() -> None:
    base = _link(10, 100)
    p0 = replace(base.partitions[0], position_from="worker")
    p1 = replace(p0, partition=1)
    why = "paused by ops@h (mirrorwatch link pause): drill"
    active = replace(base, partitions=(p0, p1))
    one = replace(base, partitions=(replace(p0, paused=why), p1))
    both = replace(base, partitions=(replace(p0, paused=why), replace(p1, paused=why)))
    assert (active.state, one.state, both.state) == ("running", "running", "paused")
    assert both.unpaused().partitions == () and one.unpaused().partitions == (p1,)

    def said(before: LinkView, after: LinkView) -> list[tuple[str, str, str, str]]:
        events = transitions(_state(T0, before, _group(Status.OK, 0)), _state(T0 + 1, after, _group(Status.OK, 0)))
        return [(e.kind, e.before, e.after, e.text) for e in events]

    assert said(active, one) == [("pause", "active", "paused", f"link dr: orders[0] {why}")]
    assert said(one, both) == [
        ("link", "running", "paused", "link dr: running -> paused"),
        ("pause", "active", "paused", f"link dr: orders[1] {why}"),
    ]
    assert said(both, active) == [
        ("link", "paused", "running", "link dr: paused -> running"),
        ("pause", "paused", "active", "link dr: orders[0], orders[1] resumed"),
    ]
    gone = replace(base, partitions=(replace(p0, position_from="worker_gone"), p1))
    assert said(one, gone) == []  # its worker died: not said resumed
