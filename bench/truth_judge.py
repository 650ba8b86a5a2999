"""B5's judge: the truth's own timeline (`Truth`: every record's acknowledgement at the source and arrival at the
target), the monitor's samples set against it, and the table per phase (see bench.monitor_truth)."""

from __future__ import annotations

import bisect
import itertools
import statistics
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FOLLOWER_LATENCY_MS", "INTERVAL_S", "Phase", "Sample", "Truth", "TruthRun", "print_report"]

INTERVAL_S = 2.0  # monitor.interval_seconds, as in the incident report this benchmark answers
# How late the follower may note an arrival: its fetch wait (20 ms), consume timeout (50 ms) and its own work — and,
# when a mirror catches up with a burst (46,000 records in a second after a source restart), its queue: a figure of 0
# stated at the worker's delivery reports was seen 250-440 ms before the follower noted the last of them.
FOLLOWER_LATENCY_MS = 500
PEAK_STEP_MS = 50  # the truth's peak in a phase is read off its timeline at this step


@dataclass
class Phase:
    name: str
    started_ms: int
    events_ms: list[int] = field(default_factory=list)  # fault injected, fault removed
    alerts_fired: set[str] = field(default_factory=set)  # every alert seen firing during the phase (with --prometheus)
    alerts_at_end: set[str] = field(default_factory=set)  # those still firing when the phase ended
    group_statuses: list[str] = field(default_factory=list)  # the link group's Burrow status, once a second
    group_status_ms: list[int] = field(default_factory=list)  # when each of them was read
    # with each of them: the total lag and the largest's committed offset, commit and observation ages (or None)
    group_largest: list[str | None] = field(default_factory=list)
    group_unanswered_ms: list[int] = field(default_factory=list)  # when the status request got no answer (2 s)
    # its partitions at WARN or worse when it was last read (what the status was judged on), for a failure to show
    group_detail: list[dict[str, Any]] = field(default_factory=list)
    ended_ms: int = 0  # when the next phase started (or the run ended)
    # (when, whether) the monitor said it sees the target cluster (mirrorwatch_cluster_up), once a second
    target_up: list[tuple[int, bool]] = field(default_factory=list)
    # the largest true lag at any moment of the phase, from the truth's own timeline (not only at the monitor's
    # samples: in one process the monitor is down with the mirror, and may serve again only once it caught up)
    truth_peak_seconds: float = 0.0
    # the engine's log lines saying it lost or had revoked partitions during the phase (a rebalance happened)
    engine_lost_partitions: int = 0

    def ok_after_seconds(self) -> float | None:
        """From the fault's removal to the link group's status reading OK for the rest of the phase (None: it did
        not end OK, or there was no fault)."""
        if len(self.events_ms) < 2 or not self.group_statuses or self.group_statuses[-1] != "OK":
            return None
        first_ok = len(self.group_statuses)
        while first_ok > 0 and self.group_statuses[first_ok - 1] == "OK":
            first_ok -= 1
        return max(0.0, (self.group_status_ms[first_ok] - self.events_ms[-1]) / 1000)

    def group_timeline(self) -> str:
        """The link group's readings in order, seconds from the phase's start (fault injected and removed marked),
        the requests without an answer among them: what a failure about the status shows."""
        largest = self.group_largest + [None] * (len(self.group_statuses) - len(self.group_largest))
        readings = [
            (at, status if word is None else f"{status} ({word})")
            for at, status, word in zip(self.group_status_ms, self.group_statuses, largest, strict=True)
        ]
        readings += [(at, "no answer") for at in self.group_unanswered_ms]
        readings += [(at, f"[fault {what}]") for at, what in zip(self.events_ms, ("injected", "removed"), strict=False)]
        return ", ".join(f"{(at - self.started_ms) / 1000:+.1f} {what}" for at, what in sorted(readings))


@dataclass
class Sample:
    poll_ms: int
    observed_ms: int  # the moment the figure describes (the latest of the partitions')
    seconds: float | None  # the link's lag: the largest of its partitions'
    records: int | None
    parts: list[tuple[int, int]] = field(default_factory=list)  # (partition, the moment its figure describes)
    unknown: list[dict[str, Any]] = field(default_factory=list)  # the partitions without a figure, as served
    truth_seconds: float = 0.0
    truth_records: int = 0
    # The truth's lower bound: records the follower noted within FOLLOWER_LATENCY_MS after the moment may have been
    # on the target at the moment (it notes them when its fetch returns). Figures between the two are exact.
    truth_low_seconds: float = 0.0
    # A micro-batch engine (spark) reports a batch only when it completes, and the batch writes as it goes: while one
    # runs, what it wrote is on the target but not yet reported. The most an honest figure can say then is the truth
    # when that batch started, aged by the time since (the batch's start and end are Spark's own write-ahead log:
    # the mtimes of `offsets/N` and `commits/N` in its checkpoint). None when no batch was running.
    running_batch_bound_seconds: float | None = None
    # The truth when the figure was read (what a scrape compares with), and its lower bound (as above)
    served_truth_seconds: float = 0.0
    served_truth_low_seconds: float = 0.0
    # When the poll sent its request (its `poll_ms` is when the answer was in): Prometheus stamps a scraped sample
    # with its scrape's start. The truth's range over that request (its lowest lower bound, its highest upper one) is
    # what a figure read then can be judged against without counting the answer's own transit (a process busy
    # draining a backlog holds its answer some milliseconds, while the truth falls hundreds of seconds a second).
    asked_ms: int = 0
    request_truth_low_seconds: float = 0.0
    request_truth_seconds: float = 0.0
    positions_from: list[str] = field(default_factory=list)  # where each partition's position came from
    served: list[dict[str, Any]] = field(default_factory=list)  # every partition as served (for --json)
    target_silent_since_ms: int | None = None  # the link view's: since when its target acknowledged nothing

    def error_s(self) -> float | None:
        """How far the figure is from the truth at the moment it states, 0 within [truth_low_seconds,
        truth_seconds]."""
        return _error(self.seconds, self.truth_low_seconds, self.truth_seconds)

    def served_error_s(self) -> float | None:
        """How far the figure is from the truth at the moment it was read: what a scrape or a dashboard sees."""
        return _error(self.seconds, self.served_truth_low_seconds, self.served_truth_seconds)

    def request_error_s(self) -> float | None:
        """How far the figure is from the truth at the nearest moment of its request, from the poll's sending it to
        the answer being in (0 when it is the truth of one of them)."""
        return _error(self.seconds, self.request_truth_low_seconds, self.request_truth_seconds)

    @property
    def unexplained(self) -> bool:
        """A partition without a figure, and without a reason for it."""
        return any(not p.get("reason") for p in self.unknown)


def _error(seconds: float | None, low: float, high: float) -> float | None:
    if seconds is None:
        return None
    if seconds > high:
        return seconds - high
    return min(0.0, seconds - low)


@dataclass
class TruthRun:
    phases: list[Phase]
    samples: list[Sample]
    acked: int
    missing_on_target: int
    duplicates: int = 0  # records that arrived on the target more than once (each repeat counted)
    steady_after_s: float = 0.0  # from the engine's start to the target caught up for STEADY_SPAN_S

    def phase_of(self, at_ms: int) -> Phase:
        starts = [p.started_ms for p in self.phases]
        return self.phases[max(0, bisect.bisect_right(starts, at_ms) - 1)]

    def judged(self) -> list[Sample]:
        """The samples describing a moment of a phase (not the start-up before the steady phase: there the engine
        may still be catching up with what was produced while it started)."""
        return [s for s in self.samples if self.phases and s.observed_ms >= self.phases[0].started_ms]

    def tolerance_s(self, sample: Sample) -> float:
        """1 s, and one collection interval more (plus the worker's status interval) just after a phase change."""
        near = any(0 <= sample.observed_ms - e <= (INTERVAL_S + 1.0) * 1000 for p in self.phases for e in p.events_ms)
        return 1.0 + (INTERVAL_S + 1.0 if near else 0.0)

    def is_outside(self, sample: Sample) -> bool:
        """Off the truth by more than the tolerance (see `tolerance_s`); above it, a micro-batch engine's figure is
        also within the tolerance of the bound its running batch sets (`Sample.running_batch_bound_seconds`)."""
        if sample.seconds is None:
            return False
        error = sample.error_s() or 0.0
        if abs(error) <= self.tolerance_s(sample):
            return False
        return not (self.is_held_by_running_batch(sample) and error > 0)

    def is_held_by_running_batch(self, sample: Sample) -> bool:
        bound = sample.running_batch_bound_seconds
        return (
            sample.seconds is not None
            and bound is not None
            and sample.seconds - sample.truth_seconds > self.tolerance_s(sample)
            and sample.seconds <= bound + self.tolerance_s(sample)
        )

    def zero_while_behind(self, phase: Phase) -> list[Sample]:
        """The samples of a phase reading 0 (in seconds or in records) while the truth's lower bound was more than
        2 s behind."""
        return [
            s
            for s in self.judged()
            if self.phase_of(s.observed_ms) is phase and s.truth_low_seconds > 2 and (s.seconds == 0 or s.records == 0)
        ]

    def zero_while_behind_detail(self, name: str) -> str:
        """Those samples of the phase called `name` as served, with the truth at each partition's moment: what a
        failure must show to be understood."""
        out = []
        for phase in (p for p in self.phases if p.name == name):
            for s in self.zero_while_behind(phase):
                out.append(
                    f"read at {s.poll_ms} for {s.observed_ms}: {s.seconds} s / {s.records} records, truth "
                    f"{s.truth_low_seconds:.3f}-{s.truth_seconds:.3f} s / {s.truth_records} records; served "
                    f"{s.served}"
                )
        return "\n".join(out)

    def report(self) -> list[dict[str, Any]]:
        rows = []
        for phase in self.phases:
            mine = [s for s in self.judged() if self.phase_of(s.observed_ms) is phase]
            known = [s for s in mine if s.seconds is not None]
            errors = [abs(e) for s in known if (e := s.error_s()) is not None]
            served = [abs(e) for s in known if (e := s.served_error_s()) is not None]
            asked = [abs(e) for s in known if (e := s.request_error_s()) is not None]
            record_errors = [abs(s.records - s.truth_records) for s in known if s.records is not None]
            rows.append(
                {
                    "phase": phase.name,
                    "samples": len(mine),
                    "truth_max_seconds": max((s.truth_seconds for s in mine), default=0.0),
                    "truth_peak_seconds": phase.truth_peak_seconds,
                    "error_median_seconds": statistics.median(errors) if errors else None,
                    "error_max_seconds": max(errors, default=None),
                    "served_within_1s_share": sum(1 for e in served if e <= 1.0) / len(served) if served else None,
                    "served_error_median_seconds": statistics.median(served) if served else None,
                    "served_error_max_seconds": max(served, default=None),
                    "request_within_1s_share": sum(1 for e in asked if e <= 1.0) / len(asked) if asked else None,
                    "request_error_max_seconds": max(asked, default=None),
                    "error_median_records": statistics.median(record_errors) if record_errors else None,
                    "error_max_records": max(record_errors, default=None),
                    "outside_tolerance": sum(1 for s in known if self.is_outside(s)),
                    "held_by_running_batch": sum(1 for s in known if self.is_held_by_running_batch(s)),
                    "zero_while_behind": len(self.zero_while_behind(phase)),
                    "no_figure": len(mine) - len(known),
                    "unexplained": sum(1 for s in mine if s.unexplained),
                    "reasons": sorted({str(p.get("reason")) for s in mine for p in s.unknown}),
                    "engine_lost_partitions": phase.engine_lost_partitions,
                    "served_age_max_seconds": max(((s.poll_ms - s.observed_ms) / 1000 for s in mine), default=None),
                    # the longest the monitor went without a new figure (a round held up shows here)
                    "figure_gap_max_seconds": max(
                        ((b.observed_ms - a.observed_ms) / 1000 for a, b in itertools.pairwise(mine)), default=None
                    ),
                    "alerts_fired": sorted(phase.alerts_fired),
                    "alerts_at_end": sorted(phase.alerts_at_end),
                    "events_ms": list(phase.events_ms),
                    "group_statuses": sorted(set(phase.group_statuses)),
                    "group_status_at_end": phase.group_statuses[-1] if phase.group_statuses else None,
                    "group_ok_after_seconds": phase.ok_after_seconds(),
                    "group_detail_at_end": phase.group_detail,
                }
            )
        return rows


class Truth:
    """Acknowledgement times at the source and arrival times at the target, per partition and sequence number."""

    def __init__(self, partitions: int) -> None:
        self.acked_ms: list[list[int]] = [[] for _ in range(partitions)]  # by sequence: the producer acks in order
        self.arrived_ms: list[dict[int, int]] = [{} for _ in range(partitions)]
        self.lock = threading.Lock()
        self._prefix: list[list[int]] = []
        self._arrived_prefix = [0] * partitions  # sequences below are all on the target
        self.duplicates = 0  # records that arrived on the target more than once

    def arrive(self, partition: int, seq: int, at_ms: int) -> None:
        """The follower saw a record on the target (call with `lock` held); the first arrival is the one that counts."""
        if seq in self.arrived_ms[partition]:
            self.duplicates += 1
        else:
            self.arrived_ms[partition][seq] = at_ms

    def seen(self) -> int:
        """Records read on the target, each repeat counted (under `lock`: taken here)."""
        with self.lock:
            return sum(len(a) for a in self.arrived_ms) + self.duplicates

    def arrived_prefix(self, partition: int) -> int:
        arrived, n = self.arrived_ms[partition], self._arrived_prefix[partition]
        while n in arrived:
            n += 1
        self._arrived_prefix[partition] = n
        return n

    def freeze(self) -> None:
        """For each partition, when every record up to a sequence had arrived (non-decreasing in the sequence)."""
        self._prefix = []
        for p, acked in enumerate(self.acked_ms):
            running, prefix = 0, []
            for seq in range(len(acked)):
                running = max(running, self.arrived_ms[p].get(seq, 2**62))
                prefix.append(running)
            self._prefix.append(prefix)

    def at(self, partition: int, t_ms: int, noted_late_ms: int = 0) -> tuple[float, int]:
        """The true lag of a partition at t: seconds and records. The follower notes a record's arrival a moment after
        it is on the target; with `noted_late_ms`, records noted up to that long after t count as there by t (the
        lower bound of the truth)."""
        acked, prefix = self.acked_ms[partition], self._prefix[partition]
        first_missing = bisect.bisect_right(prefix, t_ms + noted_late_ms)  # the first sequence not on the target by t
        acked_by_t = bisect.bisect_right(acked, t_ms)
        if first_missing >= acked_by_t:
            return 0.0, 0
        return (t_ms - acked[first_missing]) / 1000, acked_by_t - first_missing

    def behind_s(self, now_ms: int) -> float:
        """The true lag now, while the run goes on: the oldest acknowledged record not yet on the target."""
        oldest = [
            acked[first]
            for p, acked in enumerate(self.acked_ms)
            if (first := self.arrived_prefix(p)) < len(acked) and acked[first] <= now_ms
        ]
        return (now_ms - min(oldest)) / 1000 if oldest else 0.0

    def judge(self, sample: Sample) -> None:
        """Set the truth a sample is judged against (after `freeze`): at each partition's moment, when the answer was
        in, and over its request."""
        at = [self.at(p, observed) for p, observed in sample.parts]
        sample.truth_seconds = max(s for s, _ in at)
        sample.truth_records = sum(r for _, r in at)
        sample.truth_low_seconds = max(self.at(p, observed, FOLLOWER_LATENCY_MS)[0] for p, observed in sample.parts)
        sample.served_truth_seconds = max(self.at(p, sample.poll_ms)[0] for p, _ in sample.parts)
        sample.served_truth_low_seconds = max(
            self.at(p, sample.poll_ms, FOLLOWER_LATENCY_MS)[0] for p, _ in sample.parts
        )
        sample.request_truth_low_seconds, sample.request_truth_seconds = self.over(
            [p for p, _ in sample.parts], sample.asked_ms or sample.poll_ms, sample.poll_ms
        )

    def over(self, partitions: Iterable[int], from_ms: int, to_ms: int) -> tuple[float, float]:
        """The lowest lower bound and the highest true lag of a link (its partitions' largest) between two moments
        (after `freeze`), read every millisecond (or at 200 moments evenly, over a longer span)."""
        parts = list(partitions)
        step = max(1, (to_ms - from_ms) // 200)
        moments = [*range(from_ms, to_ms, step), to_ms]
        low = min(max(self.at(p, t, FOLLOWER_LATENCY_MS)[0] for p in parts) for t in moments)
        return low, max(max(self.at(p, t)[0] for p in parts) for t in moments)

    def peak(self, from_ms: int, to_ms: int) -> float:
        """The largest true lag between two moments (after `freeze`), read every PEAK_STEP_MS."""
        return max(
            (self.at(p, t)[0] for t in range(from_ms, to_ms + 1, PEAK_STEP_MS) for p in range(len(self.acked_ms))),
            default=0.0,
        )

    def missing(self) -> int:
        return sum(
            1 for p, acked in enumerate(self.acked_ms) for seq in range(len(acked)) if seq not in self.arrived_ms[p]
        )


def print_report(run: TruthRun) -> None:
    print(
        "| phase | samples | truth peak / at samples | within 1 s as read | error as read median / max (s) "
        "| within 1 s over the request / its worst (s) | error at its moment median / max (s) "
        "| error median / max (records) | 0 while > 2 s behind "
        "| no figure (no reason) | group status at end (OK after) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    for row in run.report():
        print(
            f"| {row['phase']} | {row['samples']} | {row['truth_peak_seconds']:.1f} / {row['truth_max_seconds']:.1f} s "
            f"| {num(row['served_within_1s_share'] and row['served_within_1s_share'] * 100, '.0f')} % "
            f"| {num(row['served_error_median_seconds'], '.2f')} / {num(row['served_error_max_seconds'], '.2f')} "
            f"| {num(row['request_within_1s_share'] and row['request_within_1s_share'] * 100, '.0f')} % / "
            f"{num(row['request_error_max_seconds'], '.2f')} "
            f"| {num(row['error_median_seconds'], '.2f')} / {num(row['error_max_seconds'], '.2f')} "
            f"| {num(row['error_median_records'], '.0f')} / {num(row['error_max_records'], '.0f')} "
            f"| {row['zero_while_behind']} | {row['no_figure']} ({row['unexplained']}) "
            f"| {row['group_status_at_end']} ({num(row['group_ok_after_seconds'], '.1f')} s) |"
        )
    reasons = sorted({r for row in run.report() for r in row["reasons"]})
    print(
        f"\n{run.acked} records acknowledged by the source, {run.missing_on_target} missing on the target, "
        f"{run.duplicates} arrived twice; the "
        f"engine was steady {run.steady_after_s:.1f} s after its start."
        + ("".join(f"\nno figure because: {r}" for r in reasons) if reasons else "")
    )
    print("\nthe link group's status once a second (its total lag, the largest's commit), phase by phase:")
    for phase in run.phases:
        print(f"- {phase.name}: {phase.group_timeline()}")
