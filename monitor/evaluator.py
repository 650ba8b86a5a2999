"""The lag evaluator: Burrow's statuses from an offset window, the high-watermark and `now` (pure; time passed in).

A window holds the last N observations of one group's committed offset on one partition, one per collection
(`monitor.interval_seconds`): the offset, when it was observed, the partition's high-watermark then, and whether the
group had members then. Burrow reads every commit from `__consumer_offsets`; mirrorwatch does too where the principal
may (`commits_from: auto`: each sample then carries its commit's time, so a commit of the same offset again is a
commit), and otherwise polls the admin API, which cannot tell that from "did not commit". So where Burrow compares
commit timestamps, these rules ask how long the offset has stood still *while records waited for it*
(`stuck_for_ms`: the shorter of "since the offset last moved" and "the age of the oldest record not consumed"),
measured against the group's own commit cadence (`commit_gap_ms`: the median time between the last moves of its
offset, or of its commits where they are followed, incidents' silences left out, see `monitor.windows`; unknown
until two were seen, and then `max_commit_interval_seconds` stands in for it):

  Rule 0 - the committed offset is below the partition's log start: retention (or delete-records) removed records
           the group never read, `log start - committed` of them (`records_lost`): ERR, whatever else holds — the
           group will never read them, and Burrow and kafka_exporter count them as lag like any other.
  Rule 1 - the current lag (high-watermark *now* minus the last committed offset) is within the allowed lag, in
           records or in seconds, or nothing but transaction markers follow the committed offset (no record to
           read): OK. An idle partition whose consumer is caught up is OK, however old its commit.
  Rule 2 - nobody is in the group and it has been stuck longer than the stop threshold (three commit gaps, never
           less than `min_stop_seconds`; twice `max_commit_interval_seconds` while the cadence is unknown), and,
           where commit times are known (`__consumer_offsets`), it has not committed within that time: STOP.
  Rule 3 - an offset went backwards within the window and has not come back above where it was: REWIND.
  Rule 4 - 4a. a member is there, or it keeps committing the same offset, but stuck longer than the stop
               threshold: STALL;
           4b. the offset moved, but the lag was above the allowed lag in every observation, never decreased, and
               is more than a consumer leaves waiting between two of its commits: its oldest waiting record is
               older than one and a half commit gaps (or, where that age is unknown, the lag is more records than
               arrive in that time) (needs a window at least `min_complete` full): WARN (the consumer is falling
               behind, or keeps pace without catching up).
  Rule 5 - stuck longer than one and a half commit gaps, or stuck at all after the members left: WARN. Between
           the moment a consumer stops and rules 2 and 4a, this rule says it: a stopped consumer never reads OK once
           its silence is longer than its usual one.
  Rule 6 - otherwise: OK.

Burrow's known false alarms, and why these rules do not raise them:
- an idle topic: Burrow's STOP fires when an idle consumer stops committing; here rule 1 answers first (lag 0);
- MirrorMaker 1 commits every 60 s: between two commits the offset does not move and the lag grows, which Burrow
  can take for STOP or WARN; here the group's cadence (or, before it is known, 60 s) sets how long a silence is
  normal, and the lag falls at every commit, so it is not "never decreasing";
- fresh records behind an idle consumer that stopped long ago are not yet a stop: it has been stuck only as long as
  they are old;
- lag against the high-watermark at commit time understates a consumer that stopped: rule 1 uses the current one;
- a consumer keeping pace a few records behind (Burrow #223): observed between two of its commits, its lag is the
  records that arrived since the last one, which can read the same or a little more several times in a row; Burrow's
  rule 3 takes that for falling behind, here rule 4b asks for more waiting than one and a half commit gaps.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "EvaluatorConfig",
    "GroupEvaluation",
    "OffsetSample",
    "PartitionEvaluation",
    "Status",
    "current_lag",
    "evaluate_group",
    "evaluate_partition",
    "group_status",
    "has_moved",
    "is_lag_allowed",
    "is_lag_always_above_allowed",
    "is_lag_beyond_cadence",
    "is_lag_not_decreasing",
    "is_rewound",
    "is_stalled",
    "is_stopped",
    "is_stuck",
    "members_left",
    "records_lost",
    "stalled_for_ms",
    "stop_threshold_ms",
    "stuck_for_ms",
    "warn_threshold_ms",
]


class Status(enum.IntEnum):
    """Burrow's statuses, codes and order (worse is larger)."""

    NOTFOUND = 0
    OK = 1
    WARN = 2
    ERR = 3
    STOP = 4
    STALL = 5
    REWIND = 6


@dataclass(frozen=True, slots=True)
class OffsetSample:
    offset: int  # the group's committed offset
    observed_ms: int  # when the collector saw it
    high_watermark: int  # the partition's high-watermark then
    has_members: bool = True  # whether the group had members then
    # When this offset was first seen, possibly before the window's oldest sample (the window store carries it
    # forward); None: at observed_ms. Without it, a sliding window could never show an offset standing still for
    # longer than the window spans.
    since_ms: int | None = None
    # Since when this offset has been seen with records waiting behind it, carried forward like since_ms
    # (None: from observed_ms, or no lag).
    lag_since_ms: int | None = None
    # Whether the group had members at this or any earlier observation of this partition (carried by the window
    # store beyond the window): a group whose members left is not a commit-only group.
    had_members: bool = False
    # When the group last committed this partition, the same offset again included (the commit's timestamp, read
    # from __consumer_offsets as Burrow reads it); None when the offsets come from the admin API, which cannot tell
    # a commit of the same offset from no commit.
    commit_ms: int | None = None

    @property
    def first_seen_ms(self) -> int:
        return self.observed_ms if self.since_ms is None else self.since_ms

    @property
    def lag(self) -> int:
        return max(0, self.high_watermark - self.offset)


@dataclass(frozen=True)
class EvaluatorConfig:
    window: int = 10
    min_complete: float = 0.5  # rule 4 needs at least this share of the window
    allowed_lag_records: int = 0
    allowed_lag_seconds: float | None = None
    min_stop_seconds: float = 30.0  # rules 2 and 4a never fire sooner, whatever the group's cadence
    # A group's commit cadence is learned from its moves; until then, commits this far apart are assumed normal
    # (MirrorMaker 1's offset.commit.interval.ms).
    max_commit_interval_seconds: float = 60.0


@dataclass(frozen=True)
class PartitionEvaluation:
    topic: str
    partition: int
    status: Status
    start: OffsetSample | None
    end: OffsetSample | None
    current_lag: int
    lag_seconds: float | None
    complete: float
    # How lag_seconds was found: "record" (the record's own timestamp), "interpolated" (the record is gone: from the
    # high-watermark history), "at_least" (gone and older than that history: a lower bound, which the rules treat as
    # unknown), None when unknown or not lagging.
    lag_seconds_method: str | None = None
    records_lost: int = 0  # rule 0: records below the log start the group never read


@dataclass(frozen=True)
class GroupEvaluation:
    status: Status  # NOTFOUND, OK, WARN or ERR (STOP, STALL and REWIND count as ERR, as in Burrow; so do records lost)
    complete: float  # share of partitions whose window is full
    partitions: tuple[PartitionEvaluation, ...]
    max_lag: PartitionEvaluation | None
    total_lag: int


# -- rule predicates -------------------------------------------------------------------------------------------------


def current_lag(samples: Sequence[OffsetSample], high_watermark_now: int) -> int:
    """Lag against the high-watermark at evaluation time, not the one seen with the last commit."""
    return max(0, high_watermark_now - samples[-1].offset) if samples else 0


def is_lag_allowed(lag_records: int, lag_seconds: float | None, config: EvaluatorConfig) -> bool:
    """Rule 1: within the allowed lag in records, or (when a seconds threshold is set and known) in seconds."""
    if lag_records <= config.allowed_lag_records:
        return True
    return (
        config.allowed_lag_seconds is not None and lag_seconds is not None and lag_seconds <= config.allowed_lag_seconds
    )


def stalled_for_ms(samples: Sequence[OffsetSample], now_ms: int) -> int:
    """How long the offset has not moved: since the current offset was first seen."""
    if not samples:
        return 0
    since = samples[-1].first_seen_ms
    for sample in reversed(samples):
        if sample.offset != samples[-1].offset:
            break
        since = min(since, sample.first_seen_ms)
    return max(0, now_ms - since)


def stuck_for_ms(samples: Sequence[OffsetSample], now_ms: int, lag_seconds: float | None) -> int:
    """How long the offset has stood still while records waited for it: the shorter of the time since it last moved
    and the age of the oldest record not consumed. Without that age, the observations tell: since the first of the
    latest observations that saw this offset with lag, or, when the last one saw none, since that one (the records
    came later)."""
    if not samples:
        return 0
    standing = stalled_for_ms(samples, now_ms)
    if lag_seconds is not None:
        return min(standing, int(lag_seconds * 1000))
    last = samples[-1]
    since = last.observed_ms
    if last.lag > 0:
        for sample in reversed(samples):
            if sample.offset != last.offset or sample.lag == 0:
                break
            since = min(since, sample.observed_ms if sample.lag_since_ms is None else sample.lag_since_ms)
    return min(standing, max(0, now_ms - since))


def members_left(samples: Sequence[OffsetSample]) -> bool:
    """The group has no members now but had some before (not a commit-only group, which never has)."""
    return (
        bool(samples)
        and not samples[-1].has_members
        and (samples[-1].had_members or any(s.has_members for s in samples))
    )


def stop_threshold_ms(config: EvaluatorConfig, commit_gap_ms: int | None) -> int:
    """Stuck for longer than this is a stop or a stall: three of the group's commit gaps, never less than the
    minimum; twice the longest assumed commit interval while its cadence is unknown."""
    floor = int(config.min_stop_seconds * 1000)
    if commit_gap_ms is None:
        return max(floor, int(config.max_commit_interval_seconds * 2000))
    return max(floor, 3 * commit_gap_ms)


def warn_threshold_ms(samples: Sequence[OffsetSample], config: EvaluatorConfig, commit_gap_ms: int | None) -> int:
    """Stuck for longer than this is worth a WARN: at once when the members left, else one and a half gaps."""
    if members_left(samples):
        return 0
    gap = commit_gap_ms if commit_gap_ms is not None else int(config.max_commit_interval_seconds * 1000)
    return gap * 3 // 2


def is_stopped(
    samples: Sequence[OffsetSample],
    now_ms: int,
    lag_seconds: float | None,
    config: EvaluatorConfig,
    commit_gap_ms: int | None = None,
) -> bool:
    """Rule 2: nobody in the group, nothing committed within the stop threshold (when commit times are known: a
    group that commits the same offset again is there, stalled, not stopped), and stuck for longer than it."""
    if not samples or samples[-1].has_members:
        return False
    threshold = stop_threshold_ms(config, commit_gap_ms)
    return stuck_for_ms(samples, now_ms, lag_seconds) > threshold and not still_committing(samples, now_ms, threshold)


def still_committing(samples: Sequence[OffsetSample], now_ms: int, within_ms: int) -> bool:
    """The group committed this partition (the same offset again counts) within `within_ms` of now; False when the
    commit times are unknown (offsets from the admin API)."""
    last = samples[-1].commit_ms if samples else None
    return last is not None and now_ms - last <= within_ms


def is_rewound(samples: Sequence[OffsetSample]) -> bool:
    """Rule 3: an offset went backwards and the latest one is still below the highest offset seen before."""
    highest = None
    rewound_from = None
    for sample in samples:
        if highest is not None and sample.offset < highest:
            rewound_from = highest if rewound_from is None else max(rewound_from, highest)
        highest = sample.offset if highest is None else max(highest, sample.offset)
    return rewound_from is not None and samples[-1].offset < rewound_from


def is_lag_always_above_allowed(samples: Sequence[OffsetSample], config: EvaluatorConfig) -> bool:
    """Rule 4b's condition: the lag (against the high-watermark of its time) exceeded the allowed lag every time."""
    return bool(samples) and all(s.lag > config.allowed_lag_records for s in samples)


def is_stalled(
    samples: Sequence[OffsetSample],
    now_ms: int,
    config: EvaluatorConfig,
    lag_seconds: float | None = None,
    commit_gap_ms: int | None = None,
) -> bool:
    """Rule 4a: a member is there, or the group keeps committing the same offset, but it has been stuck for longer
    than the stop threshold (Burrow's STALL: committing, not moving)."""
    if not samples:
        return False
    threshold = stop_threshold_ms(config, commit_gap_ms)
    there = samples[-1].has_members or still_committing(samples, now_ms, threshold)
    return there and stuck_for_ms(samples, now_ms, lag_seconds) > threshold


def is_stuck(
    samples: Sequence[OffsetSample],
    now_ms: int,
    config: EvaluatorConfig,
    lag_seconds: float | None = None,
    commit_gap_ms: int | None = None,
) -> bool:
    """Rule 5: stuck for longer than a normal silence of this group."""
    return bool(samples) and stuck_for_ms(samples, now_ms, lag_seconds) > warn_threshold_ms(
        samples, config, commit_gap_ms
    )


def has_moved(samples: Sequence[OffsetSample]) -> bool:
    """The offset changed at least once within the window."""
    return any(s.offset != samples[0].offset for s in samples)


def is_lag_not_decreasing(samples: Sequence[OffsetSample]) -> bool:
    """Rule 4b: from one observation to the next the lag never went down."""
    return all(later.lag >= earlier.lag for earlier, later in itertools.pairwise(samples))


def is_lag_beyond_cadence(
    samples: Sequence[OffsetSample], lag_seconds: float | None, commit_gap_ms: int | None
) -> bool:
    """Rule 4b's last condition: the consumer has left more waiting than it does between two of its commits. Seen
    between two commits, a consumer that keeps up has left at most the records of one gap (and the monitor sees no
    gap shorter than its own interval); so: its oldest waiting record is older than one and a half gaps, or, where
    that age is unknown, the lag is more than the records that arrive in one and a half gaps (at the window's
    rate)."""
    if len(samples) < 2:
        return False
    span_ms = samples[-1].observed_ms - samples[0].observed_ms
    if span_ms <= 0:
        return False
    normal_wait_ms = max(commit_gap_ms or 0, span_ms // (len(samples) - 1)) * 3 // 2
    if lag_seconds is not None:
        return lag_seconds * 1000 > normal_wait_ms
    arrived = max(0, samples[-1].high_watermark - samples[0].high_watermark)
    return samples[-1].lag * span_ms > arrived * normal_wait_ms


# -- evaluation ------------------------------------------------------------------------------------------------------


def evaluate_partition(
    topic: str,
    partition: int,
    samples: Sequence[OffsetSample],
    *,
    high_watermark_now: int,
    now_ms: int,
    config: EvaluatorConfig,
    lag_seconds: float | None = None,
    commit_gap_ms: int | None = None,
    nothing_to_read: bool = False,
    log_start: int | None = None,
) -> PartitionEvaluation:
    """The status of one partition of one group. `lag_seconds` is the age of the first record not yet consumed;
    `commit_gap_ms` the group's cadence on this partition (see the module docstring), None while unknown;
    `nothing_to_read`: only transaction markers follow the committed offset (a consumer that commits its last record
    + 1, as librdkafka's applications do, stands one below the final marker). The lag still counts offsets, as
    Burrow's and kafka_exporter's do; rule 1 sees it caught up, its age is 0. `log_start`: the partition's first
    offset now (rule 0)."""
    complete = min(1.0, len(samples) / config.window)
    lag = current_lag(samples, high_watermark_now)
    lost = records_lost(samples, log_start)
    if not samples:
        status = Status.NOTFOUND
    elif lost:  # rule 0
        status = Status.ERR
    elif nothing_to_read or is_lag_allowed(lag, lag_seconds, config):  # rule 1
        status = Status.OK
    elif is_stopped(samples, now_ms, lag_seconds, config, commit_gap_ms):  # rule 2
        status = Status.STOP
    elif is_rewound(samples):  # rule 3
        status = Status.REWIND
    elif is_stalled(samples, now_ms, config, lag_seconds, commit_gap_ms):  # rule 4a
        status = Status.STALL
    elif (
        complete >= config.min_complete
        and is_lag_always_above_allowed(samples, config)
        and has_moved(samples)
        and is_lag_not_decreasing(samples)
        and is_lag_beyond_cadence(samples, lag_seconds, commit_gap_ms)
    ):  # rule 4b
        status = Status.WARN
    elif is_stuck(samples, now_ms, config, lag_seconds, commit_gap_ms):  # rule 5
        status = Status.WARN
    else:  # rule 6
        status = Status.OK
    return PartitionEvaluation(
        topic=topic,
        partition=partition,
        status=status,
        start=samples[0] if samples else None,
        end=samples[-1] if samples else None,
        current_lag=lag,
        lag_seconds=lag_seconds if lag > 0 and not nothing_to_read else 0.0,
        complete=complete,
        records_lost=lost,
    )


def records_lost(samples: Sequence[OffsetSample], log_start: int | None) -> int:
    """Rule 0: records below the partition's log start that the group's last committed offset had not reached."""
    if not samples or log_start is None:
        return 0
    return max(0, log_start - samples[-1].offset)


def group_status(partition_statuses: Iterable[Status]) -> Status:
    """The worst partition's status, with STOP, STALL and REWIND reported as ERR (Burrow's group status)."""
    statuses = [s for s in partition_statuses if s != Status.NOTFOUND]
    if not statuses:
        return Status.NOTFOUND
    worst = max(statuses)
    return Status.ERR if worst >= Status.ERR else worst


def evaluate_group(partitions: Sequence[PartitionEvaluation]) -> GroupEvaluation:
    known = [p for p in partitions if p.status != Status.NOTFOUND]
    max_lag = max(known, key=lambda p: p.current_lag, default=None)
    return GroupEvaluation(
        status=group_status(p.status for p in partitions),
        complete=sum(1 for p in known if p.complete >= 1.0) / len(known) if known else 0.0,
        partitions=tuple(partitions),
        max_lag=max_lag,
        total_lag=sum(p.current_lag for p in known),
    )
