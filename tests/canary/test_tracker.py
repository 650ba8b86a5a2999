"""Probe accounting: tables of arrival sequences with the exact counters they must give (no broker, no clock)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from canary.probe import HEADER_SIGNATURE, Probe, decode_probe, is_signed
from canary.tracker import LATENCY_BUCKETS_S, NS, QUANTILE_WINDOW_S, Histogram, Tracker, quantile

S = 1_000_000_000
INSTANCE = uuid.UUID(int=1).hex


def tracker(instance: str = INSTANCE, *, now_ns: int = 0) -> Tracker:
    return Tracker(instance, ["L"], interval_s=1, sla_s=5, absent_after_intervals=3, now_ns=now_ns)


@dataclass(frozen=True)
class Case:
    number: int
    what: str
    sent: int  # probes 0..sent-1 created at t = seq seconds, all acknowledged
    arrivals: tuple[tuple[int, float], ...]  # (sequence, arrival time in seconds)
    expected: dict[str, int]  # counters after a final tick at t = 100 s
    kinds: tuple[str | None, ...] = ()  # what each arrival was counted as (when given; None: not ours)


CASES = [
    Case(1, "in order, all on time", 5, ((0, 0.1), (1, 1.1), (2, 2.1), (3, 3.1), (4, 4.1)),
         {"received": 5, "lost": 0, "duplicated": 0, "reordered": 0, "late": 0},
         ("received",) * 5),
    Case(2, "a gap: probe 2 never arrives, counted lost once", 5, ((0, 0.1), (1, 1.1), (3, 3.1), (4, 4.1)),
         {"received": 4, "lost": 1, "duplicated": 0, "reordered": 0, "late": 0}),
    Case(3, "a duplicate right after the original", 3, ((0, 0.1), (1, 1.1), (1, 1.2), (2, 2.1)),
         {"received": 3, "lost": 0, "duplicated": 1, "reordered": 0, "late": 0},
         ("received", "received", "duplicated", "received")),
    Case(4, "reordered: 2 overtakes 1", 3, ((0, 0.1), (2, 2.1), (1, 2.2)),
         {"received": 3, "lost": 0, "duplicated": 0, "reordered": 1, "late": 0},
         ("received", "received", "reordered")),
    Case(5, "mirror replays after a restart: 1 and 2 again, in order", 3,
         ((0, 0.1), (1, 1.1), (2, 2.1), (1, 3.0), (2, 3.0)),
         {"received": 3, "lost": 0, "duplicated": 2, "reordered": 0, "late": 0}),
    Case(6, "late: 1 arrives after its SLA (created 1 s, due by 6 s), counted lost at the tick and late once", 2,
         ((0, 0.1), (1, 9.0), (1, 9.5)),
         {"received": 2, "lost": 1, "duplicated": 1, "reordered": 0, "late": 1},
         ("received", "late", "duplicated")),
    Case(7, "an outage: 0..2 arrive after their SLA (late), 3 and 4 within theirs", 5,
         ((0, 7.5), (1, 7.5), (2, 7.5), (3, 7.6), (4, 7.7)),
         {"received": 5, "lost": 3, "duplicated": 0, "reordered": 0, "late": 3},
         ("late",) * 3 + ("received",) * 2),
    Case(8, "exactly at the SLA is on time (lost only after it)", 1, ((0, 5.0),),
         {"received": 1, "lost": 0, "duplicated": 0, "reordered": 0, "late": 0}),
    Case(9, "a sequence never handed out is not ours: no counter moves", 1, ((0, 0.1), (7, 0.2), (-1, 0.3)),
         {"received": 1, "lost": 0, "duplicated": 0, "reordered": 0, "late": 0},
         ("received", None, None)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.number}-{c.what[:40]}")
def test_arrival_sequences(case: Case) -> None:
    t = tracker()
    probes = {}
    events: list[tuple[float, str, int]] = [(float(seq), "send", seq) for seq in range(case.sent)]
    events += [(at, "arrive", seq) for seq, at in case.arrivals]
    kinds = []
    for at, action, seq in sorted(events, key=lambda e: (e[0], e[1] != "send")):
        now = int(at * S)
        t.tick(now)
        if action == "send":
            probes[seq] = t.new_probe("L", 0, now)
            assert probes[seq].sequence == seq
            t.produced(probes[seq], now + 1_000_000, ok=True)
        else:
            probe = probes.get(seq) or Probe(INSTANCE, "L", 0, seq, 0)
            kinds.append(t.received_at_target(probe, now))
    t.tick(100 * S)
    (view,) = t.view(100 * S)
    (partition,) = view.partitions
    got = {name: getattr(partition, name) for name in case.expected}
    assert got == case.expected, case.what
    assert partition.sent == case.sent and partition.pending == 0
    if case.kinds:
        assert tuple(kinds) == case.kinds
    assert partition.e2e.count == case.expected["received"]  # latency once per probe, never for a duplicate


def test_a_restarted_canary_ignores_the_previous_runs_probes_and_reports_none_lost() -> None:
    before = tracker(uuid.UUID(int=1).hex)
    old = [before.new_probe("L", 0, seq * S) for seq in range(3)]
    after = tracker(uuid.UUID(int=2).hex, now_ns=10 * S)
    assert [after.received_at_target(p, 11 * S) for p in old] == [None, None, None]
    assert after.received_at_source(old[0], 11 * S) is False
    fresh = after.new_probe("L", 0, 12 * S)
    assert fresh.sequence == 0
    after.produced(fresh, 12 * S, ok=True)
    assert after.received_at_target(fresh, 13 * S) == "received"
    after.tick(100 * S)
    (partition,) = after.view(100 * S)[0].partitions
    assert (partition.sent, partition.received, partition.lost, partition.duplicated) == (1, 1, 0, 0)


def test_forged_probes_with_our_public_instance_id_move_no_counter_and_create_no_series() -> None:
    """Issue #22, case 5: partitions like -7 or 99999 created new series and moved the duplicate counters."""
    t = tracker()
    real = t.new_probe("L", 0, 0)
    t.produced(real, S // 10, ok=True)
    forged = [
        Probe(INSTANCE, "L", -7, 0, 0),
        Probe(INSTANCE, "L", 99999, 0, 0),
        Probe(INSTANCE, "L", 0, 5, 0),  # a sequence not handed out yet
        Probe(INSTANCE, "other-link", 0, 0, 0),
    ]
    assert [t.received_at_target(p, S) for p in forged] == [None] * 4
    assert [t.received_at_source(p, S) for p in forged] == [False] * 4
    (view,) = t.view(S)
    assert [p.partition for p in view.partitions] == [0]
    (p,) = view.partitions
    assert (p.received, p.duplicated, p.reordered, p.late) == (0, 0, 0, 0)
    assert view.recent == ()


def test_probes_of_another_link_are_not_counted_at_this_links_target() -> None:
    t = Tracker(INSTANCE, ["a", "b"], interval_s=1, sla_s=5, absent_after_intervals=3, now_ns=0)
    probe = t.new_probe("b", 0, 0)
    assert t.received_at_target(probe, S, link="a") is None
    assert t.received_at_target(probe, S, link="b") == "received"


def test_a_probe_the_source_refused_is_a_produce_error_not_lost_and_counts_if_it_arrives_anyway() -> None:
    t = tracker()
    refused = t.new_probe("L", 0, 0)
    t.produced(refused, S // 10, ok=False)
    t.tick(60 * S)
    (p,) = t.view(60 * S)[0].partitions
    assert (p.sent, p.produce_errors, p.lost, p.pending) == (0, 1, 0, 0)
    assert t.received_at_target(refused, 61 * S) == "received"
    (p,) = t.view(61 * S)[0].partitions
    assert (p.received, p.duplicated) == (1, 0)


def test_absent_after_the_configured_intervals_without_a_probe_counted_from_the_start() -> None:
    t = tracker(now_ns=0)  # interval 1 s, absent after 3 intervals
    assert not t.is_absent("L", 3 * S)
    assert t.is_absent("L", 3 * S + 1)
    probe = t.new_probe("L", 0, 3 * S)
    t.received_at_target(probe, 4 * S)
    assert not t.is_absent("L", 7 * S)
    assert t.is_absent("L", 7 * S + 1)
    assert t.view(7 * S + 1)[0].absent


def test_latencies_produce_roundtrip_and_end_to_end_are_observed_once_each() -> None:
    t = tracker()
    probe = t.new_probe("L", 2, 0)
    t.produced(probe, 3_000_000, ok=True)  # 3 ms
    assert t.received_at_source(probe, 4_000_000) and t.received_at_source(probe, 5_000_000)  # the 2nd is ignored
    t.received_at_target(probe, 250_000_000)  # 250 ms
    (p,) = t.view(S)[0].partitions
    assert p.partition == 2
    assert (p.produce.count, round(p.produce.sum, 9)) == (1, 0.003)
    assert (p.roundtrip.count, round(p.roundtrip.sum, 9)) == (1, 0.004)
    assert (p.e2e.count, p.e2e.sum, p.last_e2e_seconds) == (1, 0.25, 0.25)
    assert t.view(S)[0].recent[-1]["sequence"] == 0


def test_a_signed_probe_verifies_only_with_its_value_and_key() -> None:
    key = b"k" * 16
    probe = Probe(INSTANCE, "L", 0, 3, 12345)
    headers = probe.headers(key)
    assert [name for name, _ in headers][-1] == HEADER_SIGNATURE
    assert is_signed(probe.value(), headers, key)
    assert is_signed(probe.value(), [("app", b"x"), *headers], key)  # other headers (the mirror's) do not matter
    assert not is_signed(probe.value(), headers, b"j" * 16)  # another key
    assert not is_signed(Probe(INSTANCE, "L", 0, 4, 12345).value(), headers, key)  # another value
    assert not is_signed(probe.value(), probe.headers(), key)  # no signature
    assert not is_signed(probe.value(), [(HEADER_SIGNATURE, "text")], key)
    assert not is_signed(None, headers, key) and not is_signed(probe.value(), None, key)


def test_histogram_buckets_are_prometheus_le_buckets_from_1ms_to_10min() -> None:
    assert LATENCY_BUCKETS_S[0] == 0.001 and LATENCY_BUCKETS_S[-1] == 600
    assert list(LATENCY_BUCKETS_S) == sorted(set(LATENCY_BUCKETS_S))
    h = Histogram().observe(0.001).observe(0.0011).observe(5000)
    cumulative = dict(h.cumulative())
    assert cumulative[0.001] == 1 and cumulative[0.0025] == 2 and cumulative[600] == 2 and cumulative[float("inf")] == 3
    assert h.quantile(0.5) == 0.0025 and Histogram().quantile(0.5) is None


def test_probe_codec_round_trips_and_rejects_anything_else() -> None:
    probe = Probe(uuid.uuid4().hex, "dc1-to-dc2", 11, 2**40, 1_700_000_000_123_456_789)
    assert decode_probe(probe.value()) == probe
    assert probe.key() == b"dc1-to-dc2/11"
    assert dict(probe.headers())["mirrorwatch.canary.instance"] == probe.instance.encode()
    assert len(probe.value()) == 44 + len("dc1-to-dc2")
    for other in (
        None,
        b"",
        b"MWCP",
        b"x" * 60,
        b"MWCP\x02" + probe.value()[5:],
        probe.value() + b"\xff",
        probe.value()[:44],
    ):
        assert decode_probe(other) is None


def test_quantiles_come_from_the_probes_in_the_window_not_from_bucket_bounds() -> None:
    """One 5.5 s probe among thirty 25 ms probes: p99 is that probe's 5.5 s (its bucket's bound would say 10 s), p50
    25 ms;
    probes older than the window no longer count."""
    tracker = Tracker("me", ["l"], interval_s=1, sla_s=120, absent_after_intervals=3, now_ns=0)
    now = 0
    for i in range(31):
        probe = tracker.new_probe("l", 0, now)
        tracker.produced(probe, now, ok=True)
        latency_ns = 5_500_000_000 if i == 7 else 25_000_000
        tracker.received_at_target(probe, now + latency_ns, link="l")
        now += NS
    (view,) = tracker.view(now)
    window = view.partitions[0].window["e2e"]
    assert (len(window), quantile(window, 0.99), quantile(window, 0.5)) == (31, 5.5, 0.025)
    assert view.partitions[0].e2e.quantile(0.99) == 10.0  # what the buckets alone could say
    (later,) = tracker.view(now + QUANTILE_WINDOW_S * NS)
    assert later.partitions[0].window["e2e"] == ()  # every probe is older than the window now
    assert quantile((), 0.5) is None


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0], 0.99, 1.0),
        ([1.0, 2.0], 0.5, 1.0),
        ([3.0, 1.0, 2.0], 0.5, 2.0),
        ([float(i) for i in range(100)], 0.29, 28.0),
    ],
)
def test_quantile_is_the_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert quantile(values, q) == expected
