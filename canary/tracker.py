"""Probe accounting (pure; every time is passed in, in nanoseconds since the epoch).

Per link and source partition the tracker hands out sequence numbers and classifies each probe read back:

- **received** — first arrival of one of our probes at the target; its end-to-end latency is observed.
- **lost** — not read back within `sla_s` of its creation (counted by `tick`). Counters only grow, so a lost probe
  that turns up afterwards stays counted in `lost` and is counted once in **late** as well: probes never seen =
  lost - late.
- **duplicated** — a probe read back again (the mirror replayed it, or somebody produced it twice), and any arrival
  of a sequence settled so long ago that it is no longer remembered.
- **not ours** — a probe of another instance, link, partition, or a sequence never handed out: ignored (no counter,
  no series), so that whoever can write the probe topic cannot inflate the metrics' cardinality; with a signing
  key (`canary.signing_key`) an unsigned or wrongly signed probe is not even decoded as one.
- **reordered** — arrived after a probe with a higher sequence number of the same partition had arrived.
- **absent** — the link: nothing arrived at its target for `absent_after_intervals` intervals (counted from the start,
  so a canary that never sees a probe becomes absent too).

Probes of other canary instances (another canary, or this one before a restart: each start has a new instance id)
are ignored, so a restarted canary never reports its previous run's sequences as lost. A probe the source refused to
acknowledge counts as a produce error, not as lost; should it arrive after all, it counts as received.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from canary.probe import Probe
from kernel.histogram import LATENCY_BUCKETS_SECONDS, Histogram

__all__ = ["LATENCY_BUCKETS_S", "QUANTILE_WINDOW_S", "Histogram", "LinkView", "PartitionView", "Tracker", "quantile"]

LATENCY_BUCKETS_S: tuple[float, ...] = LATENCY_BUCKETS_SECONDS  # the mirror's: dashboards put the two side by side
REMEMBERED = 10_000  # settled sequences remembered per partition (for duplicates and late arrivals)
RECENT = 50  # recent arrivals kept per link for /canary
NS = 1_000_000_000
# Quantiles for /canary and the console come from the probes themselves over this window (as the alert rules'
# canary_window), not from histogram buckets: a partition sees a few probes a minute, and one 5 s probe among thirty
# 25 ms ones is a p99 of 5 s, not the 10 s bound of its bucket.
QUANTILE_WINDOW_S = 600
LATENCIES_KEPT = 2_000  # per partition and kind, whatever the probe rate


def quantile(values: Iterable[float], q: float) -> float | None:
    """The q-quantile of the values by nearest rank (an observed value, never an interpolation); None without any."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(round(q * len(ordered), 9)))  # rounded first: 0.29 * 100 is 28.999999999999996
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class _Counters:
    sent: int = 0
    received: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    late: int = 0
    produce_errors: int = 0


@dataclass
class _Partition:
    next_sequence: int = 0
    pending: dict[int, int] = field(default_factory=dict)  # sequence -> created_ns, awaiting the target
    overdue: dict[int, int] = field(default_factory=dict)  # counted lost; a late arrival is still possible
    seen: dict[int, None] = field(default_factory=dict)  # arrived (ordered, bounded)
    unconfirmed: dict[int, int] = field(default_factory=dict)  # the source did not acknowledge them
    at_source: dict[int, int] = field(default_factory=dict)  # sequence -> created_ns, awaiting the source read-back
    highest_seen: int = -1
    counters: _Counters = field(default_factory=_Counters)
    e2e: Histogram = field(default_factory=Histogram)
    produce: Histogram = field(default_factory=Histogram)
    roundtrip: Histogram = field(default_factory=Histogram)
    last_received_ns: int | None = None
    last_e2e_s: float | None = None
    # kind ("e2e", "produce", "roundtrip") -> (when observed, seconds), for window quantiles
    latencies: dict[str, deque[tuple[int, float]]] = field(default_factory=dict)

    def observe(self, kind: str, now_ns: int, seconds: float) -> None:
        self.latencies.setdefault(kind, deque(maxlen=LATENCIES_KEPT)).append((now_ns, seconds))

    def window(self, kind: str, now_ns: int) -> tuple[float, ...]:
        since = now_ns - QUANTILE_WINDOW_S * NS
        return tuple(s for at, s in self.latencies.get(kind, ()) if at >= since)


def _remember(store: dict[int, Any], sequence: int, value: Any) -> None:
    store[sequence] = value
    while len(store) > REMEMBERED:
        del store[next(iter(store))]


@dataclass(frozen=True)
class PartitionView:
    partition: int
    sent: int
    received: int
    lost: int
    duplicated: int
    reordered: int
    late: int
    produce_errors: int
    pending: int
    e2e: Histogram
    produce: Histogram
    roundtrip: Histogram
    last_received_ns: int | None
    last_e2e_seconds: float | None
    # kind -> the latencies of the probes observed within QUANTILE_WINDOW_S
    window: dict[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class LinkView:
    link: str
    absent: bool
    last_received_ns: int | None
    partitions: tuple[PartitionView, ...]
    recent: tuple[dict[str, Any], ...]

    def total(self, counter: str) -> int:
        return sum(int(getattr(p, counter)) for p in self.partitions)


@dataclass
class _Link:
    started_ns: int
    partitions: dict[int, _Partition] = field(default_factory=dict)
    last_received_ns: int | None = None
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT))


class Tracker:
    def __init__(
        self,
        instance: str,
        links: Iterable[str],
        *,
        interval_s: float,
        sla_s: float,
        absent_after_intervals: int,
        now_ns: int,
    ) -> None:
        self.instance = instance
        self.interval_s = interval_s
        self.sla_ns = int(sla_s * NS)
        self.absent_after_ns = int(absent_after_intervals * interval_s * NS)
        self._links = {link: _Link(started_ns=now_ns) for link in links}

    @property
    def links(self) -> tuple[str, ...]:
        return tuple(self._links)

    def _partition(self, link: str, partition: int) -> _Partition:
        return self._links[link].partitions.setdefault(partition, _Partition())

    # -- producing --------------------------------------------------------------------------------------------------

    def new_probe(self, link: str, partition: int, now_ns: int) -> Probe:
        """The next probe for this partition; from now on its arrival is expected within the SLA."""
        p = self._partition(link, partition)
        probe = Probe(self.instance, link, partition, p.next_sequence, now_ns)
        p.next_sequence += 1
        p.pending[probe.sequence] = now_ns
        p.at_source[probe.sequence] = now_ns
        return probe

    def produced(self, probe: Probe, now_ns: int, *, ok: bool) -> None:
        """The source's answer to the produce request: acknowledged (acks=all) or refused."""
        p = self._partition(probe.link, probe.partition)
        if ok:
            p.counters.sent += 1
            p.produce = p.produce.observe(max(0, now_ns - probe.created_ns) / NS)
            p.observe("produce", now_ns, max(0, now_ns - probe.created_ns) / NS)
            return
        p.counters.produce_errors += 1
        p.at_source.pop(probe.sequence, None)
        if p.pending.pop(probe.sequence, None) is not None:
            _remember(p.unconfirmed, probe.sequence, probe.created_ns)

    # -- reading back -----------------------------------------------------------------------------------------------

    def _ours(self, probe: Probe, link: str | None) -> bool:
        """One of the probes this tracker handed out: its instance, a configured link, a partition it produced to
        and a sequence it gave out. Anything else (another canary, or a forgery: the instance id is public at
        /canary) is ignored: it moves no counter and creates no series."""
        if probe.instance != self.instance or probe.link not in self._links or link not in (None, probe.link):
            return False
        p = self._links[probe.link].partitions.get(probe.partition)
        return p is not None and 0 <= probe.sequence < p.next_sequence

    def received_at_source(self, probe: Probe, now_ns: int) -> bool:
        """A probe read back from the source canary topic (the source round trip). False if not ours."""
        if not self._ours(probe, None):
            return False
        p = self._partition(probe.link, probe.partition)
        if p.at_source.pop(probe.sequence, None) is not None:
            p.roundtrip = p.roundtrip.observe(max(0, now_ns - probe.created_ns) / NS)
            p.observe("roundtrip", now_ns, max(0, now_ns - probe.created_ns) / NS)
        return True

    def received_at_target(self, probe: Probe, now_ns: int, *, link: str | None = None) -> str | None:
        """Classify a probe read at the target of `link` (None: the probe's own link); returns what it was counted
        as ("received", "late", "duplicated"; "reordered" is also "received"), None when it is not ours."""
        if not self._ours(probe, link):
            return None
        owner = self._links[probe.link]
        p = self._partition(probe.link, probe.partition)
        seq = probe.sequence
        latency_s = max(0, now_ns - probe.created_ns) / NS
        if seq in p.seen or (
            seq not in p.pending and seq not in p.overdue and seq not in p.unconfirmed
        ):  # seen, or settled and forgotten
            p.counters.duplicated += 1
            kind = "duplicated"
        else:
            if p.overdue.pop(seq, None) is not None:
                p.counters.late += 1
                kind = "late"
            else:
                p.pending.pop(seq, None)
                p.unconfirmed.pop(seq, None)
                kind = "reordered" if seq < p.highest_seen else "received"
                if kind == "reordered":
                    p.counters.reordered += 1
            p.counters.received += 1
            _remember(p.seen, seq, None)
            p.highest_seen = max(p.highest_seen, seq)
            p.e2e = p.e2e.observe(latency_s)
            p.observe("e2e", now_ns, latency_s)
            p.last_e2e_s = latency_s
        p.last_received_ns = now_ns
        owner.last_received_ns = now_ns
        owner.recent.append(
            {
                "partition": probe.partition,
                "sequence": seq,
                "created_ns": probe.created_ns,
                "received_ns": now_ns,
                "e2e_seconds": latency_s,
                "counted_as": kind,
            }
        )
        return kind

    # -- time -------------------------------------------------------------------------------------------------------

    def tick(self, now_ns: int) -> int:
        """Count the probes whose SLA has passed as lost; returns how many were newly counted."""
        newly = 0
        for link in self._links.values():
            for p in link.partitions.values():
                expired = [seq for seq, created in p.pending.items() if now_ns - created > self.sla_ns]
                for seq in expired:
                    _remember(p.overdue, seq, p.pending.pop(seq))
                    p.counters.lost += 1
                    newly += 1
                for seq in [s for s, created in p.at_source.items() if now_ns - created > self.sla_ns]:
                    del p.at_source[seq]
        return newly

    def is_absent(self, link: str, now_ns: int) -> bool:
        state = self._links[link]
        since = state.last_received_ns if state.last_received_ns is not None else state.started_ns
        return now_ns - since > self.absent_after_ns

    def view(self, now_ns: int) -> tuple[LinkView, ...]:
        return tuple(
            LinkView(
                name,
                self.is_absent(name, now_ns),
                state.last_received_ns,
                tuple(
                    PartitionView(
                        partition,
                        p.counters.sent,
                        p.counters.received,
                        p.counters.lost,
                        p.counters.duplicated,
                        p.counters.reordered,
                        p.counters.late,
                        p.counters.produce_errors,
                        len(p.pending),
                        p.e2e,
                        p.produce,
                        p.roundtrip,
                        p.last_received_ns,
                        p.last_e2e_s,
                        {kind: p.window(kind, now_ns) for kind in ("e2e", "produce", "roundtrip")},
                    )
                    for partition, p in sorted(state.partitions.items())
                ),
                tuple(state.recent),
            )
            for name, state in self._links.items()
        )
