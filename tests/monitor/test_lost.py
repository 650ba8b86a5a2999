"""Records a link will never copy, as the monitor says them (pure, no brokers): each gap once whichever workers carry
it, the partition a worker stopped alone, the counter and gauge the alert rules read, and one event per new gap. The
real cases: tests/mirror/test_retention_gap.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kernel.config import ClusterConfig, LinkConfig, MonitorConfig
from kernel.worker_status import Gap, PartitionPosition, WorkerStatus
from monitor.collector import ClusterSnapshot, GroupInfo, PartitionOffsets
from monitor.exporter import MonitorCollector
from monitor.history import Event, Events, transitions
from monitor.links import LinkView, WorkerSighting, link_view
from monitor.service import MonitorService
from monitor.state import MonitorState

T0 = 1_800_000_000_000
LINK = LinkConfig(name="l", source="source", target="target", group_id="g")
RETENTION = Gap("orders", 0, 1000, 1500, "retention", "stopped", T0 - 60_000)
EARLIER = Gap("orders", 1, 10, 30, "retention", "skipped", T0 - 3_600_000)
WHY = RETENTION.describe("l")
LATE = Gap("orders", 1, 30, 40, "retention", "skipped", T0 - 1_000)  # found before the round that learnt of it


def source(at_ms: int) -> ClusterSnapshot:
    return ClusterSnapshot(
        "source",
        at_ms,
        up=True,
        partitions={("orders", 0): PartitionOffsets(1500, 2000), ("orders", 1): PartitionOffsets(30, 500)},
        groups={"g": GroupInfo("g", "STABLE", 1, False, {("orders", 0): 1000, ("orders", 1): 500})},
    )


def view(gaps_live: tuple[Gap, ...], gaps_gone: tuple[Gap, ...]) -> LinkView:
    stopped = PartitionPosition("orders", 0, "orders", 1000, 1000, 1000, 0, 2000, failed=WHY)
    going = PartitionPosition("orders", 1, "orders", 500, 500, 500, 0, 500)
    live = WorkerStatus("l", 0, "python", T0, 500, "running", (stopped, going), gaps=gaps_live)
    gone = WorkerStatus("l", 1, "python", T0 - 30_000, 500, "running", (), gaps=gaps_gone)
    return link_view(
        LINK,
        sightings=[WorkerSighting(live, True), WorkerSighting(gone, False)],
        snapshot=source(T0),
        record_times={},
        now_ms=T0,
    )


def test_each_gap_counts_once_whichever_workers_carry_it_and_the_stopped_partition_says_why() -> None:
    # the gone worker found RETENTION first; the live one, restarted, read it from the link's ledger
    v = view((EARLIER, RETENTION), (RETENTION,))
    assert v.gaps == (EARLIER, RETENTION)
    by_partition = {p.partition: p for p in v.partitions}
    assert (by_partition[0].records_lost, by_partition[0].failed) == (500, WHY)
    assert (by_partition[1].records_lost, by_partition[1].failed) == (20, None)


@pytest.fixture
def service() -> Iterator[MonitorService]:
    monitor = MonitorService(MonitorConfig(), {"source": ClusterConfig(bootstrap_servers="b1:9092")}, [LINK])
    yield monitor
    monitor.stop()


def test_the_counter_and_the_gauge_the_alerts_read(service: MonitorService) -> None:
    more = Gap("orders", 0, 1500, 1600, "retention", "skipped", T0)  # the same partition lost more later
    service.state = MonitorState(T0, {"source": source(T0)}, {}, {"l": view((RETENTION, more, EARLIER), ())})
    text = MonitorCollector(service).render().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ("mirrorwatch_mirror_records_lost_total", "mirrorwatch_mirror_partition_failed")
    }
    part = (("link", "l"), ("partition", "0"), ("topic", "orders"))
    assert samples == {
        ("mirrorwatch_mirror_records_lost_total", (*part[:2], ("reason", "retention"), part[2])): 600,
        (
            "mirrorwatch_mirror_records_lost_total",
            (("link", "l"), ("partition", "1"), ("reason", "retention"), ("topic", "orders")),
        ): 20,
        ("mirrorwatch_mirror_partition_failed", part): 1,
    }


def test_a_new_gap_is_one_event_at_its_own_moment_and_the_same_gap_again_is_none() -> None:
    before = MonitorState(T0 - 10_000, {}, {}, {"l": view((EARLIER,), ())})
    now = MonitorState(T0, {}, {}, {"l": view((EARLIER, RETENTION), ())})
    events = [e for e in transitions(before, now) if e.kind == "loss"]
    assert [(e.at_ms, e.subject, e.after, e.text) for e in events] == [(RETENTION.at_ms, "l", "500", WHY)]
    assert not [e for e in transitions(now, now) if e.kind == "loss"]
    # a monitor started after the losses (or restarted) lists each at its moment, from the workers' ledgers
    first = transitions(None, now)
    assert [(e.at_ms, e.kind, e.after) for e in first] == [
        (EARLIER.at_ms, "loss", "20"),
        (RETENTION.at_ms, "loss", "500"),
    ]
    ring = Events()
    ring.extend(transitions(None, now))
    ring.extend([Event(T0, "link", "l", "", "running", "failed", "link l: running -> failed")])
    ring.extend(transitions(now, MonitorState(T0 + 5_000, {}, {}, {"l": view((EARLIER, RETENTION, LATE), ())})))
    assert [(e.at_ms, e.kind) for e in ring.query(link="l")] == [
        (T0, "link"),
        (LATE.at_ms, "loss"),
        (RETENTION.at_ms, "loss"),
        (EARLIER.at_ms, "loss"),
    ]
    # the operator chose to go on: the same records, now skipped, are news once
    skipped = MonitorState(T0 + 10_000, {}, {}, {"l": view((EARLIER, replace(RETENTION, action="skipped")), ())})
    assert [(e.before, e.after) for e in transitions(now, skipped) if e.kind == "loss"] == [("stopped", "500")]
