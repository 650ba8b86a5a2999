"""Exact offset translation by provenance (pure): where a consumer group must start on the target so that it reads
every record it has not read on the source, and as few as possible of those it has.

A scan of a target partition feeds `TargetLog.add` with every record in offset order: its position (the target
offset) and, for a record this link's source wrote (its provenance's last hop), the source topic, partition and
offset. A source group's committed offset O on a source partition means "every record at or after O is unread". For
a target partition the answer is

    T = the lowest position among the last copies of the records at or after O that are on the target

(or the partition's end when there are none: the group is level with the mirror or ahead of it). Every unread record
has a copy at or after T (its last one), and nothing below the lowest such last copy needs reading. That holds
whatever the target holds:

- records replayed after a mirror crash: a record written twice is found at its second place, so a group whose
  commit falls inside a replayed stretch starts in the replay, not before it (MirrorMaker 2's "last sync + 1" reads
  the whole stretch twice);
- gaps in the source offsets (transaction markers, aborted records a read_committed mirror never wrote, compaction
  on either side, records a handler dropped): only offsets that are there are looked at;
- retention that removed the start of the target: what is gone is counted (`before_first`), not guessed;
- records of other writers on the target topic (active-active, producers writing there directly): never counted
  as read twice, since the group never read them.

What a consumer starting at T reads twice is counted exactly: each copy at or after T of a record below O, and each
copy of an unread record that is not its last. Nothing here reads the clock or touches Kafka.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kernel.worker_status import Gap

__all__ = [
    "Lost",
    "SourcePartition",
    "SourceProgress",
    "TargetLog",
    "Translation",
    "check_position",
    "lost_unread",
    "source_progress",
    "translate",
]

SourcePartition = tuple[str, int]


@dataclass
class TargetLog:
    """What one target partition holds of one link's source, fed record by record in offset order by a scan.

    `floors` are the lowest committed offsets (of every group to translate) per source partition: nothing is kept
    before the first record at or above its floor, since no answer can lie before it. `older`: per source partition
    whose topic was deleted and created again and restarted into the same target topic, the position where its
    current generation's copies begin: the records below are copies of the old topic's records under the same
    offsets, and count as another writer's. `finish(end)` closes it."""

    topic: str
    partition: int
    floors: Mapping[SourcePartition, int]
    older: Mapping[SourcePartition, int] = field(default_factory=dict)
    start: int | None = None  # the first position scanned (the partition's log start when scanned from there)
    end: int | None = None
    records: int = 0  # every record scanned, this source's or not
    first_seen: dict[SourcePartition, int] = field(default_factory=dict)  # lowest source offset of each
    last_seen: dict[SourcePartition, int] = field(default_factory=dict)  # highest source offset of each
    _sources: list[SourcePartition] = field(default_factory=list)
    _index: dict[SourcePartition, int] = field(default_factory=dict)
    _positions: array[int] = field(default_factory=lambda: array("q"))
    _which: array[int] = field(default_factory=lambda: array("i"))
    _offsets: array[int] = field(default_factory=lambda: array("q"))
    _last_copy: bytearray = field(default_factory=bytearray)
    _by_source: list[_SourceIndex] = field(default_factory=list)  # per source, built by finish()

    def add(self, position: int, source: SourcePartition | None, source_offset: int = -1) -> None:
        if self.start is None:
            self.start = position
        self.records += 1
        if source is None or (self.older and position < self.older.get(source, -1)):
            return  # another writer's, or a copy of an older generation of the source topic
        first = self.first_seen.get(source)
        if first is None or source_offset < first:
            self.first_seen[source] = source_offset
        if source_offset > self.last_seen.get(source, -1):
            self.last_seen[source] = source_offset
        if not self._positions:
            floor = self.floors.get(source)
            if floor is None or source_offset < floor:
                return
        which = self._index.get(source)
        if which is None:
            which = self._index[source] = len(self._sources)
            self._sources.append(source)
        self._positions.append(position)
        self._which.append(which)
        self._offsets.append(source_offset)

    def finish(self, end: int) -> None:
        """The scan reached `end` (the partition's end offset when it was scanned). Marks each kept record that is
        its source record's last copy on this partition."""
        self.end = end
        if self.start is None:
            self.start = end
        seen: set[tuple[int, int]] = set()
        flags = bytearray(len(self._positions))
        for i in range(len(self._positions) - 1, -1, -1):
            key = (self._which[i], self._offsets[i])
            if key not in seen:
                seen.add(key)
                flags[i] = 1
        self._last_copy = flags
        self._by_source = [_SourceIndex() for _ in self._sources]
        for i, which in enumerate(self._which):
            index = self._by_source[which]
            index.positions.append(self._positions[i])
            if flags[i]:
                index.last_copies.append((self._offsets[i], self._positions[i]))
        for index in self._by_source:
            index.seal()

    def keeps_enough_for(self, floors: Mapping[SourcePartition, int]) -> bool:
        """True when answers for groups at or above `floors` can come from what this log kept: no floor is below
        the one it was kept from, and no source partition is new to it (records of one skipped before keeping
        began are gone)."""
        return all(s in self.floors and o >= self.floors[s] for s, o in floors.items())

    def raise_floors(self, floors: Mapping[SourcePartition, int]) -> None:
        """Forget what no group at or above the new `floors` can need (a standby's groups move forward); the log
        must keep enough for them (`keeps_enough_for`)."""
        if not self.keeps_enough_for(floors):
            raise ValueError(f"floors {dict(floors)} are below what the log kept from: {dict(self.floors)}")
        self.floors = dict(floors)
        drop = 0
        for i in range(len(self._positions)):
            floor = self.floors.get(self._sources[self._which[i]])
            if floor is not None and self._offsets[i] >= floor:
                break
            drop = i + 1
        if drop:
            del self._positions[:drop], self._which[:drop], self._offsets[:drop]
            if self._last_copy:
                del self._last_copy[:drop]

    @property
    def kept(self) -> int:
        return len(self._positions)

    @property
    def first_kept(self) -> int | None:
        """The position of the first record kept (every record before it is another writer's, or below its source's
        floor); the end when none was kept. None before `finish`."""
        return self._positions[0] if self._positions else self.end

    def _commits_by_index(self, commits: Mapping[SourcePartition, int]) -> list[int | None]:
        below = {s: o for s, o in commits.items() if s in self.floors and o < self.floors[s]}
        if below:
            raise ValueError(f"commits {below} are below the floors the log was kept from: {dict(self.floors)}")
        return [commits.get(source) for source in self._sources]

    def _scan_from(self, t: int, commits_of: list[int | None]) -> int:
        """Copies at or after position `t` that a group with these commits has read already or reads twice."""
        positions, which, offsets, last = self._positions, self._which, self._offsets, self._last_copy
        twice = 0
        for i in range(_first_at_or_after(positions, t), len(positions)):
            committed = commits_of[which[i]]
            if committed is not None and (offsets[i] < committed or not last[i]):
                twice += 1
        return twice


@dataclass
class _SourceIndex:
    """One source partition's records in a finished log, for answers in O(log n) per group: the positions of all
    its kept records (ascending), and its last copies sorted by source offset with the lowest position from each
    one on (`min_position_from[k]`: the lowest position among the last copies of offsets `offsets[k:]`)."""

    positions: list[int] = field(default_factory=list)
    last_copies: list[tuple[int, int]] = field(default_factory=list)  # (source offset, position)
    offsets: list[int] = field(default_factory=list)
    min_position_from: list[int] = field(default_factory=list)

    def seal(self) -> None:
        self.last_copies.sort()
        self.offsets = [o for o, _ in self.last_copies]
        lowest = [0] * len(self.last_copies)
        running: int | None = None
        for k in range(len(self.last_copies) - 1, -1, -1):
            position = self.last_copies[k][1]
            running = position if running is None else min(running, position)
            lowest[k] = running
        self.min_position_from = lowest


def _first_at_or_after(positions: array[int], t: int) -> int:
    lo, hi = 0, len(positions)
    while lo < hi:
        mid = (lo + hi) // 2
        if positions[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Translation:
    """Where a group starts on one target partition, and what that costs."""

    topic: str
    partition: int
    offset: int
    method: str  # "exact", "time" or "mm2-checkpoint"
    how: str  # in words: what the offset points at
    read_twice: int | None  # copies at or after `offset` of records the group read, or extra copies (None: unknown)
    unread_here: int  # records at or after the commit that are on this partition (each once) from `offset` on
    end: int


def translate(log: TargetLog, commits: Mapping[SourcePartition, int]) -> Translation:
    """The exact start on `log`'s partition for a group with `commits` (source partition -> committed offset)."""
    if log.end is None:
        raise ValueError(f"{log.topic}[{log.partition}] was not finished: call finish(end) after the scan")
    commits_of = log._commits_by_index(commits)
    unread = 0
    t: int | None = None
    first_source: SourcePartition | None = None
    for which, committed in enumerate(commits_of):
        if committed is None:
            continue
        index = log._by_source[which]
        k = bisect_left(index.offsets, committed)
        if k < len(index.offsets):
            unread += len(index.offsets) - k
            if t is None or index.min_position_from[k] < t:
                t, first_source = index.min_position_from[k], log._sources[which]
    if t is None or first_source is None:
        behind = [s for s in commits if s in log.last_seen]
        how = (
            "the end: every record at or after the commit that was mirrored here is behind it, or none is here yet"
            if behind
            else "the end: nothing of the committed source partitions is on this partition yet"
        )
        return Translation(log.topic, log.partition, log.end, "exact", how, 0, 0, log.end)
    # read twice: every record of a committed source at or after t, less the unread ones (all of whose last copies
    # lie at or after t, t being the lowest of them)
    at_or_after = sum(
        len(log._by_source[w].positions) - bisect_left(log._by_source[w].positions, t)
        for w, committed in enumerate(commits_of)
        if committed is not None
    )
    how = f"the last copy of {first_source[0]}[{first_source[1]}]'s first unread record"
    return Translation(log.topic, log.partition, t, "exact", how, at_or_after - unread, unread, log.end)


@dataclass(frozen=True)
class PositionCheck:
    """A committed target position judged against the source commits: records it would miss and read twice."""

    topic: str
    partition: int
    committed: int
    exact: int
    missed: int  # records at or after the source commit whose every copy is below the committed position
    read_twice: int


def check_position(log: TargetLog, commits: Mapping[SourcePartition, int], committed: int) -> PositionCheck:
    """What a group committed at `committed` on this partition would miss or read twice (for `failover verify`)."""
    exact = translate(log, commits).offset
    commits_of = log._commits_by_index(commits)
    positions, which, offsets, last = log._positions, log._which, log._offsets, log._last_copy
    missed = 0
    for i in range(_first_at_or_after(positions, committed)):
        c = commits_of[which[i]]
        if c is not None and offsets[i] >= c and last[i]:
            missed += 1
    twice = log._scan_from(committed, commits_of)
    return PositionCheck(log.topic, log.partition, committed, exact, missed, twice)


@dataclass(frozen=True)
class SourceProgress:
    """How far the target has one source partition, against a group's commit there."""

    topic: str
    partition: int
    committed: int
    high_watermark: int | None
    first_on_target: int | None  # lowest source offset of this partition on the target
    last_on_target: int | None  # highest
    not_mirrored: int  # offsets at or after the commit above the highest mirrored (still to come)
    before_first: int  # offsets at or after the commit below the lowest on the target (gone or never mirrored)
    # offsets below the commit (records the group has read) that the mirror has not passed yet: their copies are
    # still to come, after the partition's present end, so a consumer starting now would read them twice
    read_not_mirrored: int = 0
    mirrored_to: int | None = None  # the offset the mirror has passed (the first one not on the target yet)
    # where the link's own group must commit for every record the group read to be on the target: the offset after
    # the last record below the commit (None: the commit itself; a transaction marker just below it is no record)
    mirror_must_reach: int | None = None


def source_progress(
    source: SourcePartition,
    committed: int,
    high_watermark: int | None,
    logs: Iterable[TargetLog],
    *,
    log_start: int | None = None,
    mirror_committed: int | None = None,
) -> SourceProgress:
    """How far the target has `source`, against a group's commit there. The mirror has passed an offset when a
    later one of the same partition is on the target (a mirror copies a partition in order), when the link's own
    group committed past it (it commits what the target acknowledged, and past the records it skips, such as echoes
    of the target's own), or when it lies below the source's log start (`log_start`: nothing there to copy)."""
    logs = list(logs)
    firsts = [log.first_seen[source] for log in logs if source in log.first_seen]
    lasts = [log.last_seen[source] for log in logs if source in log.last_seen] if firsts else []
    first = min(firsts) if firsts else None
    last = max(lasts) if lasts else None
    frontier = committed if last is None else max(committed, last + 1)
    not_mirrored = max(0, high_watermark - frontier) if high_watermark is not None else 0
    before_first = max(0, first - committed) if first is not None else 0
    passed = [o for o in (None if last is None else last + 1, mirror_committed, log_start) if o is not None]
    mirrored_to = max(passed) if passed else None
    read_not_mirrored = max(0, committed - mirrored_to) if mirrored_to is not None else 0
    return SourceProgress(
        source[0],
        source[1],
        committed,
        high_watermark,
        first,
        last,
        not_mirrored,
        before_first,
        read_not_mirrored,
        mirrored_to,
    )


@dataclass(frozen=True)
class Lost:
    """Records of a source partition a group had not read (at or after its commit) that the link never copied: gone
    from the source before the link read them (its ledger's gaps). No consumer reads them on the target, however
    exactly its offset is translated."""

    topic: str
    partition: int
    first_offset: int
    end_offset: int
    reason: str

    @property
    def records(self) -> int:
        return self.end_offset - self.first_offset


def lost_unread(commits: Mapping[SourcePartition, int], gaps: Iterable[Gap]) -> list[Lost]:
    """Of the link's gaps, the records at or after each commit. Only gaps of records no cluster keeps for the group
    count: the source deleted them before the link read them (retention), or the target took them already older than
    its retention (target-retention: its broker deletes them at its next check). A recreated topic's gap is in the
    old topic's offsets (Kafka dropped the groups' commits of it), and a truncated log's records are on the target.
    Overlapping gaps (a growing one found again by a partition's next owner) are counted once."""
    spans: dict[tuple[str, int, str], list[tuple[int, int]]] = {}
    for gap in gaps:
        committed = commits.get((gap.topic, gap.partition))
        if gap.reason not in ("retention", "target-retention") or committed is None:
            continue
        first = max(gap.first_offset, committed)
        if first < gap.end_offset:
            spans.setdefault((gap.topic, gap.partition, gap.reason), []).append((first, gap.end_offset))
    out: list[Lost] = []
    for (topic, partition, reason), ranges in spans.items():
        merged: list[list[int]] = []
        for first, end in sorted(ranges):
            if merged and first <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([first, end])
        out.extend(Lost(topic, partition, first, end, reason) for first, end in merged)
    return sorted(out, key=lambda lost: (lost.topic, lost.partition, lost.first_offset))
