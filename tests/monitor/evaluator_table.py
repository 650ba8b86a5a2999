"""The evaluator's numbered table of offset windows (`tests/monitor/test_evaluator.py` proves each): what every case
tests and why, the value of every rule predicate and the final status."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from monitor.evaluator import EvaluatorConfig, OffsetSample, Status

T0 = 1_700_000_000_000
STEP = 10_000  # one observation every 10 s, the default monitor interval
MIN = 60_000


def window(
    offsets: list[int], hwms: list[int] | int, *, step_ms: int = STEP, members: bool | list[bool] = True
) -> tuple[OffsetSample, ...]:
    hwm_list = hwms if isinstance(hwms, list) else [hwms] * len(offsets)
    member_list = members if isinstance(members, list) else [members] * len(offsets)
    return tuple(
        OffsetSample(o, T0 + i * step_ms, h, m)
        for i, (o, h, m) in enumerate(zip(offsets, hwm_list, member_list, strict=True))
    )


@dataclass(frozen=True)
class Case:
    number: int
    tests: str
    why: str
    samples: tuple[OffsetSample, ...]
    hwm_now: int
    now_ms: int
    expected: Status
    # rule predicates: allowed (1), stopped (2), rewound (3), stalled (4a), always_above, moved, not_decreasing and
    # beyond_cadence (4b), stuck (5)
    predicates: dict[str, bool] = field(default_factory=dict)
    lag_seconds: float | None = None
    config: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    commit_gap_ms: int | None = None  # the group's cadence as the window store learned it (None: not yet known)
    nothing_to_read: bool = False  # only transaction markers follow the committed offset
    log_start: int | None = None  # the partition's first offset now (None: not known)


def after(samples: tuple[OffsetSample, ...], ms: int) -> int:
    return samples[-1].observed_ms + ms


CAUGHT_UP = window(list(range(10, 110, 10)), list(range(10, 110, 10)))
_idle_gone = window([500] * 10, 500, members=False)
_moving_then_gone = window(list(range(0, 100, 10)), list(range(100, 200, 10)), members=[True] * 9 + [False])
_catching_up_then_gone = window(list(range(0, 200, 20)), list(range(100, 200, 10)), members=[True] * 9 + [False])
_slow_committer_gone = window(list(range(0, 100, 10)), list(range(100, 200, 10)), step_ms=100_000, members=False)
_idle_then_data = window([500] * 10, 500, members=False)
_rewind = window([100, 110, 120, 50, 60], 200)
_rewind_recovered = window([100, 110, 50, 90, 130, 140], 200)
_reset_to_earliest = window([900, 910, 920, 0, 10, 20, 30, 40, 50, 60], 1000)
_stuck_member = window([100] * 10, list(range(200, 300, 10)), step_ms=15_000)
_below_final_marker = window([100] * 10, 101)
_mm1_between_commits = window([100] * 5, list(range(200, 250, 10)))
_falling_behind = window(list(range(0, 100, 10)), list(range(100, 300, 20)))
_steady_lag = window(list(range(0, 100, 10)), list(range(100, 200, 10)))
_catching_up = window(list(range(0, 200, 20)), list(range(100, 200, 10)))
INCOMPLETE = window([0, 10, 20], [100, 120, 140])
_between_commits = window([190, 390, 580, 780, 980], [200, 400, 600, 800, 1000])  # lag 10, 10, 20, 20, 20
_two_then_gone = window([0, 10], [100, 110], members=False)
_single = window([10], 20)
_caught_up_then_stopped = window(list(range(10, 110, 10)), list(range(10, 110, 10)), members=[True] * 9 + [False])
_touches_zero = window([0, 10, 20, 30, 40, 50, 60, 70, 80, 90], [5, 10, 25, 35, 45, 55, 65, 75, 85, 95])
_mm1_full_window = window([100] * 6 + [160] * 4, list(range(110, 210, 10)))
_rewind_then_gone = window([100, 110, 120, 50, 60], 200, members=[True, True, True, True, False])
_commit_only_group = window(list(range(0, 200, 20)), list(range(100, 200, 10)), members=False)
_stuck_under_allowed = window([100] * 10, 105, step_ms=15_000)
_stuck_20s = window([*range(0, 90, 10), 80], list(range(100, 200, 10)))
_stuck_40s = window([*range(0, 80, 10), 70, 70], list(range(100, 200, 10)))
# A member-less group (Burrow's commit-only consumer) committing offset 100 again every 10 s while records wait, as
# read from __consumer_offsets: each sample carries its last commit's time, 2 s before the observation.
_recommitting = tuple(
    replace(s, commit_ms=s.observed_ms - 2_000) for s in window([100] * 10, list(range(200, 300, 10)), members=False)
)
# The same group, whose last commit (the same offset again) came 90 s ago and none since.
_recommitted_then_silent = tuple(replace(s, commit_ms=T0) for s in window([100] * 10, 300, members=False))
_slid_window_gone = tuple(OffsetSample(300, T0 + i * STEP, 400, False, since_ms=T0 - 10 * MIN) for i in range(3))

CASES = [
    Case(
        1,
        "a consumer caught up at every observation",
        "rule 1: no lag is never a problem",
        CAUGHT_UP,
        100,
        after(CAUGHT_UP, STEP),
        Status.OK,
        {
            "allowed": True,
            "stopped": False,
            "rewound": False,
            "always_above": False,
            "stalled": False,
            "not_decreasing": True,
        },
    ),
    Case(
        2,
        "an idle partition whose consumer left an hour ago",
        "Burrow's false alarm: idle is not STOP (rule 1 first)",
        _idle_gone,
        500,
        after(_idle_gone, 60 * MIN),
        Status.OK,
        {"allowed": True, "stopped": True, "rewound": False, "always_above": False, "stalled": False},
    ),
    Case(
        3,
        "lag within the allowed records",
        "rule 1 in records",
        CAUGHT_UP,
        130,
        after(CAUGHT_UP, STEP),
        Status.OK,
        {"allowed": True},
        config=EvaluatorConfig(allowed_lag_records=50),
    ),
    Case(
        4,
        "1000 records behind but only 5 s behind",
        "rule 1 in seconds: a busy topic can be many records behind",
        _steady_lag,
        1090,
        after(_steady_lag, STEP),
        Status.OK,
        {"allowed": True},
        lag_seconds=5.0,
        config=EvaluatorConfig(allowed_lag_seconds=60),
    ),
    Case(
        5,
        "behind, and over the allowed seconds too",
        "rule 1 fails in both units; the window decides",
        _steady_lag,
        190,
        after(_steady_lag, STEP),
        Status.WARN,
        {"allowed": False, "always_above": True},
        lag_seconds=300.0,
        config=EvaluatorConfig(allowed_lag_seconds=60),
    ),
    Case(
        6,
        "a consumer that committed until 200 s ago and left",
        "rule 2: nobody is consuming and the lag stays",
        _moving_then_gone,
        200,
        after(_moving_then_gone, 200_000),
        Status.STOP,
        {"allowed": False, "stopped": True, "rewound": False},
    ),
    Case(
        7,
        "a consumer that left 60 s ago with lag, its cadence not known yet",
        "rule 5: gone with records waiting is never OK; STOP waits for twice the assumed 60 s commit interval",
        _catching_up_then_gone,
        200,
        after(_catching_up_then_gone, MIN),
        Status.WARN,
        {"allowed": False, "stopped": False, "rewound": False, "always_above": True, "not_decreasing": False},
    ),
    Case(
        8,
        "a commit-only group that commits every 100 s, silent for 200 s",
        "rule 2 waits three of its commit gaps; rule 5 warns after one and a half",
        _slow_committer_gone,
        200,
        after(_slow_committer_gone, 200_000),
        Status.WARN,
        {"stopped": False, "always_above": True, "not_decreasing": True, "stuck": True},
        commit_gap_ms=100_000,
    ),
    Case(
        9,
        "new records after an hour idle, 2 s old, consumer gone",
        "fresh data cannot have been missed yet",
        _idle_then_data,
        510,
        after(_idle_then_data, 60 * MIN),
        Status.OK,
        {"allowed": False, "stopped": False, "always_above": False},
        lag_seconds=2.0,
    ),
    Case(
        10,
        "the same, but the waiting records are an hour old",
        "rule 2: the consumer is gone and data waits",
        _idle_then_data,
        510,
        after(_idle_then_data, 60 * MIN),
        Status.STOP,
        {"stopped": True},
        lag_seconds=3600.0,
    ),
    Case(
        11,
        "the same, record age unknown",
        "without the age, a long silence with lag is taken as STOP",
        _idle_then_data,
        510,
        after(_idle_then_data, 60 * MIN),
        Status.STOP,
        {"stopped": True},
    ),
    Case(
        12,
        "an offset that went back and stayed below",
        "rule 3: a reset or a bug replays data",
        _rewind,
        200,
        after(_rewind, STEP),
        Status.REWIND,
        {"rewound": True, "stopped": False},
    ),
    Case(
        13,
        "an offset that went back and then passed where it was",
        "a finished replay is no longer REWIND",
        _rewind_recovered,
        200,
        after(_rewind_recovered, STEP),
        Status.OK,
        {"rewound": False, "always_above": True, "not_decreasing": False},
    ),
    Case(
        14,
        "a group reset to earliest, still far behind",
        "rule 3 with a full window",
        _reset_to_earliest,
        1000,
        after(_reset_to_earliest, STEP),
        Status.REWIND,
        {"rewound": True},
    ),
    Case(
        15,
        "a member that has not moved for 150 s with lag",
        "rule 4a: alive but stuck",
        _stuck_member,
        300,
        after(_stuck_member, 15_000),
        Status.STALL,
        {"stopped": False, "always_above": True, "stalled": True, "moved": False},
    ),
    Case(
        16,
        "a member that has not moved for 50 s (between two 60 s commits)",
        "not long enough to call it STALL or WARN",
        _mm1_between_commits,
        250,
        after(_mm1_between_commits, STEP),
        Status.OK,
        {"always_above": True, "stalled": False, "moved": False, "not_decreasing": True, "stuck": False},
    ),
    Case(
        17,
        "a consumer moving slower than the producer",
        "rule 4b: lag never decreases, and 190 records are 95 s of its traffic",
        _falling_behind,
        300,
        after(_falling_behind, STEP),
        Status.WARN,
        {"always_above": True, "stalled": False, "moved": True, "not_decreasing": True, "beyond_cadence": True},
    ),
    Case(
        18,
        "a consumer keeping pace 100 records behind",
        "rule 4b as Burrow: steady lag is not catching up (100 records are 100 s of its traffic)",
        _steady_lag,
        190,
        after(_steady_lag, STEP),
        Status.WARN,
        {"moved": True, "not_decreasing": True, "beyond_cadence": True},
    ),
    Case(
        19,
        "the same with 100 records allowed",
        "allowed lag silences a steady, known lag",
        _steady_lag,
        190,
        after(_steady_lag, STEP),
        Status.OK,
        {"allowed": True},
        config=EvaluatorConfig(allowed_lag_records=100),
    ),
    Case(
        20,
        "a consumer lagging but catching up",
        "the lag fell: not WARN",
        _catching_up,
        190,
        after(_catching_up, STEP),
        Status.OK,
        {"always_above": True, "not_decreasing": False},
    ),
    Case(
        21,
        "3 of 10 observations, lag growing",
        "too little history for rule 4: OK, complete 0.3",
        INCOMPLETE,
        150,
        after(INCOMPLETE, STEP),
        Status.OK,
        {"always_above": True, "not_decreasing": True},
    ),
    Case(
        22,
        "2 observations, then the group is empty for 10 minutes",
        "rule 2 needs no full window",
        _two_then_gone,
        110,
        after(_two_then_gone, 10 * MIN),
        Status.STOP,
        {"stopped": True},
    ),
    Case(
        23,
        "no observation at all",
        "don't know is a value: NOTFOUND",
        (),
        100,
        T0,
        Status.NOTFOUND,
        {"allowed": True, "stopped": False, "rewound": False},
    ),
    Case(
        24,
        "one observation, a little lag, member present",
        "nothing to judge yet",
        _single,
        20,
        after(_single, STEP),
        Status.OK,
        {"allowed": False, "stopped": False, "always_above": True},
    ),
    Case(
        25,
        "caught up at its last commit, then gone for 10 minutes while the producer wrote 1000 records",
        "lag uses the high-watermark now: Burrow's commit-time lag of 0 would say OK",
        _caught_up_then_stopped,
        1100,
        after(_caught_up_then_stopped, 10 * MIN),
        Status.STOP,
        {"allowed": False, "stopped": True, "always_above": False},
        lag_seconds=590.0,
    ),
    Case(
        26,
        "lag that touched 0 in the window",
        "rule 4 needs lag in every observation",
        _touches_zero,
        100,
        after(_touches_zero, STEP),
        Status.OK,
        {"always_above": False},
    ),
    Case(
        27,
        "MirrorMaker 1 committing every 60 s over a full window",
        "the lag falls at each commit: not WARN",
        _mm1_full_window,
        210,
        after(_mm1_full_window, STEP),
        Status.OK,
        {"always_above": True, "stalled": False, "moved": True, "not_decreasing": False},
    ),
    Case(
        28,
        "a rewind, then the group left 10 minutes ago",
        "rule 2 before rule 3: STOP says more",
        _rewind_then_gone,
        200,
        after(_rewind_then_gone, 10 * MIN),
        Status.STOP,
        {"stopped": True, "rewound": True},
    ),
    Case(
        29,
        "a group with no members whose offsets move (a Spark link's commit-only group)",
        "no members is normal for it: moving offsets are not STOP",
        _commit_only_group,
        190,
        after(_commit_only_group, STEP),
        Status.OK,
        {"stopped": False, "not_decreasing": False},
    ),
    Case(
        30,
        "stuck for 150 s but within the allowed lag",
        "rule 1 before rule 4a",
        _stuck_under_allowed,
        105,
        after(_stuck_under_allowed, 15_000),
        Status.OK,
        {"allowed": True, "stalled": True},
        config=EvaluatorConfig(allowed_lag_records=10),
    ),
    Case(
        31,
        "a consumer that committed at every observation (10 s) and left 40 s ago",
        "rule 2 with a known cadence: three gaps (30 s) of silence with records waiting is STOP, sooner than Burrow",
        _catching_up_then_gone,
        200,
        after(_catching_up_then_gone, 40_000),
        Status.STOP,
        {"stopped": True},
        lag_seconds=45.0,
        commit_gap_ms=STEP,
    ),
    Case(
        32,
        "a member that committed every 10 s and has been stuck for 20 s with records waiting",
        "rule 5: longer than one and a half of its gaps is WARN, before STALL can be proven",
        _stuck_20s,
        200,
        after(_stuck_20s, STEP),
        Status.WARN,
        {"stalled": False, "stuck": True, "not_decreasing": True, "moved": True},
        lag_seconds=25.0,
        commit_gap_ms=STEP,
    ),
    Case(
        33,
        "the same member stuck for 40 s",
        "rule 4a with a known cadence: STALL after three gaps (30 s)",
        _stuck_40s,
        200,
        after(_stuck_40s, 2 * STEP),
        Status.STALL,
        {"stalled": True, "stopped": False},
        lag_seconds=45.0,
        commit_gap_ms=STEP,
    ),
    Case(
        34,
        "a member that commits every 60 s, its offset still for 70 s (sampling adds up to 10 s), cadence learned",
        "its own silence is normal: a 60 s committer raises nothing",
        _mm1_between_commits,
        250,
        after(_mm1_between_commits, 30_000),
        Status.OK,
        {"stalled": False, "stuck": False},
        lag_seconds=75.0,
        commit_gap_ms=MIN,
    ),
    Case(
        35,
        "a consumer that closed 10 s ago while producers go on",
        "rule 5: the members left and records wait: WARN at once",
        _moving_then_gone,
        200,
        after(_moving_then_gone, STEP),
        Status.WARN,
        {"stopped": False, "stuck": True},
        lag_seconds=12.0,
        commit_gap_ms=STEP,
    ),
    Case(
        36,
        "no member, committing the same offset every 10 s (followed in __consumer_offsets), records waiting 95 s",
        "rule 4a: a group that keeps committing is there, stalled, not stopped (Burrow's STALL)",
        _recommitting,
        300,
        after(_recommitting, 0),
        Status.STALL,
        {"stopped": False, "stalled": True, "rewound": False},
        lag_seconds=95.0,
        commit_gap_ms=STEP,
    ),
    Case(
        37,
        "the same group, its last commit (the same offset) 90 s ago and none since",
        "rule 2: nothing committed within the stop threshold (30 s) and nobody in the group: STOP",
        _recommitted_then_silent,
        300,
        after(_recommitted_then_silent, 0),
        Status.STOP,
        {"stopped": True, "stalled": False},
        lag_seconds=95.0,
        commit_gap_ms=STEP,
    ),
    Case(
        38,
        "a consumer committing every second, observed every 10 s between two of its commits (20 records/s)",
        "the lag it leaves between commits reads the same or a little more 5 times running: not behind (Burrow #223)",
        _between_commits,
        1020,
        after(_between_commits, 0),
        Status.OK,
        {"always_above": True, "moved": True, "not_decreasing": True, "beyond_cadence": False, "stuck": False},
        lag_seconds=1.2,
        commit_gap_ms=STEP,
    ),
    Case(
        39,
        "the same, the oldest waiting record's age unknown",
        "20 records are 1 s of its traffic, less than one and a half gaps: not behind",
        _between_commits,
        1020,
        after(_between_commits, 0),
        Status.OK,
        {"always_above": True, "not_decreasing": True, "beyond_cadence": False},
        commit_gap_ms=STEP,
    ),
    Case(
        40,
        "the same lag, but its oldest waiting record is 5 minutes old",
        "rule 4b: keeping pace without catching up is behind",
        _between_commits,
        1020,
        after(_between_commits, 0),
        Status.WARN,
        {"always_above": True, "not_decreasing": True, "beyond_cadence": True},
        lag_seconds=300.0,
        commit_gap_ms=STEP,
    ),
    Case(
        41,
        "a member standing one offset below the end for 90 s: its last record + 1, the final transaction marker after",
        "rule 1: nothing but markers to read is caught up (librdkafka's applications commit there)",
        _below_final_marker,
        101,
        after(_below_final_marker, 0),
        Status.OK,
        {"allowed": False, "stalled": True},
        commit_gap_ms=STEP,
        nothing_to_read=True,
    ),
    Case(
        42,
        "the same offset with a record waiting there",
        "rule 4a: stuck for 90 s with a member is STALL",
        _below_final_marker,
        101,
        after(_below_final_marker, 0),
        Status.STALL,
        {"allowed": False, "stalled": True},
        commit_gap_ms=STEP,
    ),
    Case(
        43,
        "a group gone for the weekend whose unread records retention deleted",
        "rule 0: committed 500 below a log start of 800: 300 records it will never read; ERR before any other rule",
        _idle_gone,
        1000,
        after(_idle_gone, 0),
        Status.ERR,
        {"lost": True, "allowed": False},
        commit_gap_ms=STEP,
        log_start=800,
    ),
    Case(
        44,
        "a group whose commit stands exactly at the log start",
        "rule 0 not met: nothing below the log start was unread; it is caught up (rule 1), however old its commit",
        _idle_gone,
        500,
        after(_idle_gone, 3_600_000),
        Status.OK,
        {"lost": False, "allowed": True},
        commit_gap_ms=STEP,
        log_start=500,
    ),
]
