"""Exact translation on the target histories a mirror really leaves: replays after crashes, gaps in the source
offsets, retention, records of other writers, several source partitions in one target partition. Each case states
what a consumer starting at the answer reads, worked out by hand."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from failover.mm2_format import Checkpoint, parse_checkpoint
from failover.translate import Lost, TargetLog, check_position, lost_unread, source_progress, translate
from kernel.worker_status import Gap

S = ("orders", 0)
S1 = ("orders", 1)


def log_of(
    history: list[tuple[tuple[str, int], int] | None], floors: dict[tuple[str, int], int], *, start: int = 0
) -> TargetLog:
    """A target partition holding `history` from position `start` on (None: a record of another writer)."""
    log = TargetLog("orders", 0, floors)
    for i, entry in enumerate(history):
        if entry is None:
            log.add(start + i, None)
        else:
            log.add(start + i, entry[0], entry[1])
    log.finish(start + len(history))
    return log


def run(offsets: range | list[int], source: tuple[str, int] = S) -> list[tuple[tuple[str, int], int] | None]:
    return [(source, o) for o in offsets]


def reads_from(log_history: list[tuple[tuple[str, int], int] | None], t: int, start: int = 0) -> list[int]:
    return [e[1] for e in log_history[t - start :] if e is not None]


def test_a_clean_mirror_translates_to_the_same_place() -> None:
    history = run(range(100))
    t = translate(log_of(history, {S: 40}), {S: 40})
    assert (t.offset, t.read_twice, t.unread_here, t.method) == (40, 0, 60, "exact")
    assert reads_from(history, t.offset) == list(range(40, 100))


def test_a_commit_inside_a_replayed_stretch_starts_in_the_replay() -> None:
    # 0..99 written, the mirror crashed with 80 committed and wrote 80..199 again from position 100.
    history = run(range(100)) + run(range(80, 200))
    t = translate(log_of(history, {S: 90}), {S: 90})
    assert (t.offset, t.read_twice) == (110, 0)
    assert reads_from(history, 110) == list(range(90, 200))


def test_a_commit_before_the_replay_point_reads_the_replayed_stretch_twice_and_says_so() -> None:
    history = run(range(100)) + run(range(80, 200))
    t = translate(log_of(history, {S: 70}), {S: 70})
    assert (t.offset, t.read_twice) == (70, 20)  # 80..99 at 80..99, then again from 100
    read = reads_from(history, t.offset)
    assert len(read) - len(set(read)) == t.read_twice and set(read) == set(range(70, 200))


def test_a_replay_still_under_way_keeps_every_unread_record_and_counts_the_replayed_ones() -> None:
    # 0..99 written, crash, the replay from 80 has reached 90 so far: 91..99 exist only in the first run.
    history = run(range(100)) + run(range(80, 91))
    t = translate(log_of(history, {S: 85}), {S: 85})
    assert t.offset == 91
    read = reads_from(history, 91)
    assert set(range(85, 100)) <= set(read)
    assert t.read_twice == sum(1 for o in read if o < 85) == 5


def test_two_crashes_leave_two_replays() -> None:
    history = run(range(50)) + run(range(30, 120)) + run(range(100, 150))
    for commit in (10, 35, 60, 105, 149, 150):
        log = log_of(history, {S: 0})
        t = translate(log, {S: commit})
        read = reads_from(history, t.offset)
        assert set(range(commit, 150)) <= set(read), commit
        assert t.read_twice == len(read) - len(set(read)) + sum(1 for o in set(read) if o < commit), commit
        # nothing later would do: one position further misses a record
        if log.end is not None and t.offset < log.end:
            assert check_position(log, {S: commit}, t.offset + 1).missed > 0, commit


def test_gaps_in_the_source_offsets_are_not_records() -> None:
    # a transactional source: commit markers at every third offset, aborted records never mirrored
    offsets = [o for o in range(60) if o % 3 != 2 and not 30 <= o < 40]
    history = run(offsets)
    for commit, first in ((2, 3), (31, 40), (58, 58)):
        t = translate(log_of(history, {S: 0}), {S: commit})
        assert history[t.offset] == (S, first), commit
        assert t.read_twice == 0
    assert translate(log_of(history, {S: 0}), {S: 59}).offset == len(history)  # 59 is a marker: nothing unread


def test_a_group_level_with_or_ahead_of_the_mirror_starts_at_the_end_and_the_rest_is_to_come() -> None:
    history = run(range(100))
    log = log_of(history, {S: 100})
    t = translate(log, {S: 100})
    assert (t.offset, t.read_twice, t.unread_here) == (100, 0, 0)
    ahead = translate(log_of(history, {S: 150}), {S: 150})
    assert ahead.offset == 100
    progress = source_progress(S, 150, 180, [log])
    assert (progress.not_mirrored, progress.last_on_target) == (30, 99)
    assert source_progress(S, 90, 180, [log]).not_mirrored == 80


def test_records_the_group_read_that_the_mirror_has_not_copied_yet_are_counted() -> None:
    """The group read up to 150; the mirror copied up to 99: 50 records it read are still to come, and a consumer
    started at the end now would read them again. What the mirror passed counts as copied: a later record on the
    target, the link's own commit (past gaps the target cannot show), the source's log start."""
    log = log_of(run(range(100)), {S: 150})
    ahead = source_progress(S, 150, 180, [log], log_start=0)
    assert (ahead.read_not_mirrored, ahead.mirrored_to) == (50, 100)
    assert source_progress(S, 150, 180, [log], log_start=0, mirror_committed=120).read_not_mirrored == 30
    assert source_progress(S, 150, 180, [log], log_start=0, mirror_committed=150).read_not_mirrored == 0
    assert source_progress(S, 90, 180, [log], log_start=0, mirror_committed=40).read_not_mirrored == 0
    # nothing of the partition on the target yet: everything from the source's log start on is to come
    empty = log_of([], {S: 40})
    assert source_progress(S, 40, 60, [empty], log_start=10).read_not_mirrored == 30
    assert source_progress(S, 40, 60, [empty], log_start=10, mirror_committed=45).read_not_mirrored == 0
    # a log start past the commit (retention on the source): nothing below it can come
    assert source_progress(S, 40, 60, [empty], log_start=50).read_not_mirrored == 0
    # the copies of a replayed stretch: the highest copied offset is what counts, wherever it lies
    replayed = log_of(run(range(60)) + run(range(30, 45)), {S: 50})
    assert source_progress(S, 70, 80, [replayed], log_start=0).read_not_mirrored == 10
    # nothing known at all (no log start, no commit of the link, nothing on the target): no claim
    assert source_progress(S, 40, 60, [empty]).read_not_mirrored == 0


def test_the_first_kept_position_is_where_a_scan_began_keeping() -> None:
    """Before it, only records of other writers and copies below their floors (what `failover verify` reads again
    for a position below it); the end when nothing was kept."""
    history: list[tuple[tuple[str, int], int] | None] = [None, *run(range(10)), None, *run(range(10, 20))]
    assert log_of(history, {S: 5}).first_kept == 6
    assert log_of(history, {S: 15}).first_kept == 17
    assert log_of(history, {S: 40}).first_kept == len(history)


def test_retention_that_removed_the_start_of_the_target_is_counted_not_hidden() -> None:
    history = run(range(50, 100))
    log = log_of(history, {S: 20}, start=50)
    t = translate(log, {S: 20})
    assert t.offset == 50
    assert source_progress(S, 20, 100, [log]).before_first == 30


def test_records_of_other_writers_are_read_but_never_counted_as_read_twice() -> None:
    history: list[tuple[tuple[str, int], int] | None] = []
    for o in range(40):
        history += [(S, o), None]
    t = translate(log_of(history, {S: 10}), {S: 10})
    assert t.offset == 20 and t.read_twice == 0


def test_several_source_partitions_in_one_target_partition_take_the_earliest_unread() -> None:
    # hash partitioning: two source partitions interleaved; the group is further on S1 than on S
    history: list[tuple[tuple[str, int], int] | None] = []
    for o in range(30):
        history += [(S, o), (S1, o)]
    t = translate(log_of(history, {S: 0, S1: 0}), {S: 10, S1: 20})
    assert t.offset == 20  # S's offset 10
    assert t.read_twice == 10  # S1's 10..19 lie between
    read = [e for e in history[t.offset :] if e is not None]
    assert {o for s, o in read if s == S} == set(range(10, 30))


def test_a_source_partition_without_a_commit_does_not_move_the_answer() -> None:
    history: list[tuple[tuple[str, int], int] | None] = []
    for o in range(30):
        history += [(S1, o), (S, o)]
    t = translate(log_of(history, {S: 0}), {S: 25})
    assert t.offset == 51 and t.read_twice == 0


def test_check_position_counts_what_a_wrong_position_misses_or_reads_twice() -> None:
    history = run(range(100)) + run(range(80, 200))
    log = log_of(history, {S: 0})
    assert check_position(log, {S: 90}, 110).missed == 0
    late = check_position(log, {S: 90}, 115)
    assert (late.exact, late.missed) == (110, 5)
    early = check_position(log, {S: 90}, 90)
    assert (early.missed, early.read_twice) == (0, 20)


def test_the_log_refuses_commits_below_what_it_kept_and_answers_before_finishing() -> None:
    log = log_of(run(range(10)), {S: 5})
    with pytest.raises(ValueError, match="below the floors"):
        translate(log, {S: 2})
    unfinished = TargetLog("orders", 0, {S: 0})
    unfinished.add(0, S, 0)
    with pytest.raises(ValueError, match="not finished"):
        translate(unfinished, {S: 0})


def test_only_records_from_the_lowest_floor_on_are_kept() -> None:
    log = log_of(run(range(1000)), {S: 990})
    assert log.kept == 10 and log.records == 1000
    assert (log.first_seen[S], log.last_seen[S]) == (0, 999)


def test_a_log_kept_across_rounds_answers_as_a_fresh_one_after_its_floors_rise() -> None:
    history = run(range(100)) + run(range(80, 200))
    log = log_of(history[:150], {S: 10})
    log.raise_floors({S: 60})
    assert log.kept < 150 - 10
    for position, entry in enumerate(history[150:], start=150):
        assert entry is not None
        log.add(position, entry[0], entry[1])
    log.finish(len(history))
    fresh = log_of(history, {S: 60})
    for commit in (60, 85, 90, 150, 199, 200):
        assert translate(log, {S: commit}) == translate(fresh, {S: commit}), commit
    assert log.keeps_enough_for({S: 70}) and not log.keeps_enough_for({S: 50})
    assert not log.keeps_enough_for({S: 70, S1: 0})  # a source partition it never kept
    with pytest.raises(ValueError, match="below what the log kept"):
        log.raise_floors({S: 20})


def brute_force(
    history: list[tuple[tuple[str, int], int] | None], commits: dict[tuple[str, int], int]
) -> tuple[int, int]:
    """(T, read twice) straight from the definition, no index: the lowest last copy of an unread record."""
    last: dict[tuple[tuple[str, int], int], int] = {}
    for position, entry in enumerate(history):
        if entry is not None:
            last[entry] = position
    unread_last = [p for (s, o), p in last.items() if s in commits and o >= commits[s]]
    t = min(unread_last) if unread_last else len(history)
    twice = sum(
        1
        for position, entry in enumerate(history[t:], start=t)
        if entry is not None and entry[0] in commits and (entry[1] < commits[entry[0]] or last[entry] != position)
    )
    return t, twice


@settings(max_examples=300, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 40), st.sampled_from([S, S1])), min_size=1, max_size=6),
    foreign=st.sets(st.integers(0, 300)),
    commit0=st.integers(0, 110),
    commit1=st.integers(0, 110),
)
def test_the_index_answers_as_the_definition_on_any_history(
    runs: list[tuple[int, int, tuple[str, int]]], foreign: set[int], commit0: int, commit1: int
) -> None:
    # runs of consecutive source offsets (replays start anywhere), interleaved with other writers' records
    history: list[tuple[tuple[str, int], int] | None] = []
    for start, length, source in runs:
        for o in range(start, start + length):
            if len(history) in foreign:
                history.append(None)
            history.append((source, o))
    commits = {S: commit0, S1: commit1}
    t = translate(log_of(history, {S: 0, S1: 0}), commits)
    assert (t.offset, t.read_twice) == brute_force(history, commits)


def test_mirrormaker2_checkpoint_records_parse_and_garbage_does_not() -> None:
    def string(text: str) -> bytes:
        return struct.pack(">h", len(text.encode())) + text.encode()

    key = string("billing") + string("source.orders") + struct.pack(">i", 3)
    value = struct.pack(">hqq", 0, 1200, 1187) + string("")
    assert parse_checkpoint(key, value) == Checkpoint("billing", "source.orders", 3, 1200, 1187)
    assert parse_checkpoint(key, struct.pack(">hqq", 1, 1, 1) + string("")) is None  # a version it does not know
    for bad_key, bad_value in [
        (None, value),
        (key, None),
        (b"\x00", value),
        (key, b"\x00\x00"),
        (b"\x7f\xff" + b"x", value),
        (string("g") + string("t"), value),
    ]:
        assert parse_checkpoint(bad_key, bad_value) is None


def test_the_records_a_group_had_not_read_that_the_link_never_copied_are_lost_to_it() -> None:
    """The link's gaps (its ledger) against a group's commits: what retention took before the link copied it, at or
    after the commit, is lost to that group whatever its translation; other reasons are not (module docstring)."""
    gaps = [
        Gap("orders", 0, 1000, 1500, "retention", "stopped", 1),
        Gap("orders", 1, 200, 300, "retention", "skipped", 2),
        Gap("orders", 2, 50, 80, "truncated", "stopped", 3),  # on the target: not lost to a consumer there
        Gap("orders", 3, 0, 40, "recreated", "restarted", 4),  # the old topic's offsets
    ]
    commits = {("orders", 0): 900, ("orders", 1): 250, ("orders", 2): 10, ("orders", 3): 0, ("payments", 0): 5}
    lost = lost_unread(commits, gaps)
    assert lost == [Lost("orders", 0, 1000, 1500, "retention"), Lost("orders", 1, 250, 300, "retention")]
    assert [x.records for x in lost] == [500, 50]  # the whole gap; the part at or after the commit
    assert lost_unread({("orders", 0): 1500, ("orders", 1): 400}, gaps) == []  # read before they went


def test_copies_of_an_older_generation_of_a_recreated_topic_are_read_past() -> None:
    """The source topic was deleted and created again; the link restarted it into the same target topic, whose
    partition held 10 copies of the old topic's records (offsets 0-9) and then the new topic's 0-4. A group at 2 on
    the new topic starts at the copy of the new topic's record 2 (position 12): the old topic's 5-9 carry the same
    offsets but are not its records. Without knowing where the generation began, they look unread (position 5)."""
    history = [*run(range(10)), *run(range(5))]
    mixed = translate(log_of(history, {S: 2}), {S: 2})
    assert mixed.offset == 5  # what a plan said before the notes knew where the new generation began
    log = TargetLog("orders", 0, {S: 2}, {S: 10})
    for position, entry in enumerate(history):
        assert entry is not None
        log.add(position, entry[0], entry[1])
    log.finish(len(history))
    t = translate(log, {S: 2})
    assert (t.offset, t.read_twice, t.unread_here) == (12, 0, 3)
    assert reads_from(history, t.offset) == [2, 3, 4]
