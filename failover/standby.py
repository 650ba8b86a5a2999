"""Standby groups kept ready (a link's `checkpoint:` option): MirrorMaker 2's checkpoints and sync.group.offsets,
translated exactly.

Every `checkpoint.interval_seconds` a round reads the selected source groups' commits, reads on the target
partitions from where the last round ended (`TargetScans`), translates every group (`make_plan`) and publishes a
`StandbyView`: per group the target offsets, what a failover now would read twice and miss (offsets the target
does not have yet), and whether it is ready. With `sync_group_offsets` the translations are committed to target
groups without active members, only forward (`apply_plan` without force): a consumer started on the target after
the source is lost starts where the source group was, as of the last round. A round that fails keeps the last good
view and says why; its age grows, which is what the stale-checkpoint alert watches.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from failover.apply import GroupOutcome, apply_plan
from failover.plan import FailoverPlan, GroupPlan, make_plan
from failover.scan import TargetScans
from failover.translate import Translation
from kernel.clock import Clock, SystemClock
from kernel.config import CheckpointConfig, LinkConfig, MirrorwatchConfig
from kernel.errors import MirrorwatchError
from kernel.kafka import error_text

__all__ = ["GroupStandby", "Standby", "StandbyView"]

log = logging.getLogger("mirrorwatch.failover")


@dataclass(frozen=True)
class GroupStandby:
    group: str
    ready: bool
    why: str  # what keeps it from being ready ("" when ready)
    translations: tuple[Translation, ...]
    read_twice: int | None  # records a consumer failed over now would read twice (None: unknown)
    not_mirrored: int  # offsets at or after its commits the target does not have yet
    target_state: str
    target_members: int
    synced: bool  # the target group is committed at the translated offsets


@dataclass(frozen=True)
class StandbyView:
    link: str
    interval_s: float
    sync: bool
    updated_ms: int | None = None  # when the source commits of the last good round were read
    round_seconds: float = 0.0
    error: str | None = None  # why the last round failed (None: it did not)
    groups: tuple[GroupStandby, ...] = ()
    synced_total: int = 0  # target group commits made since start

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def readiness(plan: GroupPlan, outcome: GroupOutcome | None, sync: bool) -> GroupStandby:
    """Whether a group could fail over now: all its mirrored topics translated, nothing it has not read gone from
    the target, no consumers already on the target group, and (when syncing) the target group at the translation."""
    target = plan.target
    synced = bool(plan.translations) and all(
        target.committed.get((t.topic, t.partition)) == t.offset for t in plan.translations
    )
    if outcome is not None and outcome.outcome in ("committed", "unchanged"):
        synced = True
    why = ""
    gone = sum(s.before_first for s in plan.sources)
    if not plan.translations:
        why = "none of its topics is on the target through this link"
    elif target.members:
        why = f"in use on the target ({target.members} member(s)): failed over already, or consumed there"
    elif gone:
        why = f"{gone} offset(s) at or after its commits are no longer on the target (retention)"
    elif sync and not synced:
        why = outcome.reason if outcome is not None and outcome.reason else "the target group is not at the translation"
    return GroupStandby(
        plan.group,
        not why,
        why,
        tuple(plan.translations),
        plan.read_twice,
        plan.not_mirrored,
        target.state,
        target.members,
        synced,
    )


@dataclass
class Standby:
    """The standby of one link: rounds on a thread of its own; `view()` is the last published one."""

    config: MirrorwatchConfig
    link: LinkConfig
    clock: Clock = field(default_factory=SystemClock)

    def __post_init__(self) -> None:
        settings = self.link.checkpoint
        if settings is None:
            raise ValueError(f"link {self.link.name} has no checkpoint: section")
        self.settings: CheckpointConfig = settings
        target = self.config.clusters[self.link.target]
        self._scans = TargetScans(target, self.link.target)
        self._view = StandbyView(self.link.name, settings.interval_seconds, settings.sync_group_offsets)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def view(self) -> StandbyView:
        with self._lock:
            return self._view

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"standby-{self.link.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.round()
            self._stop.wait(max(0.0, self.settings.interval_seconds - (time.monotonic() - started)))

    def round(self) -> StandbyView:
        """One round: translate, commit when syncing, publish. Never raises for a Kafka failure."""
        started, read_ms = time.monotonic(), self.clock.now_ms()
        previous = self.view()
        try:
            plan = make_plan(self.config, self.link.name, select=self.settings.groups.matches, scans=self._scans)
            outcomes = self._sync(plan) if self.settings.sync_group_offsets else {}
        except (MirrorwatchError, KafkaException) as exc:
            text = error_text(exc) if isinstance(exc, KafkaException) else str(exc)
            if text != previous.error:
                log.warning(
                    "link %s: checkpoint round failed (the last good one stays published): %s", self.link.name, text
                )
            view = StandbyView(
                previous.link,
                previous.interval_s,
                previous.sync,
                previous.updated_ms,
                previous.round_seconds,
                text,
                previous.groups,
                previous.synced_total,
            )
        else:
            groups = tuple(readiness(g, outcomes.get(g.group), self.settings.sync_group_offsets) for g in plan.groups)
            committed = sum(1 for o in outcomes.values() if o.outcome == "committed")
            view = StandbyView(
                self.link.name,
                self.settings.interval_seconds,
                self.settings.sync_group_offsets,
                read_ms,
                time.monotonic() - started,
                None,
                groups,
                previous.synced_total + committed,
            )
        with self._lock:
            self._view = view
        return view

    def _sync(self, plan: FailoverPlan) -> dict[str, GroupOutcome]:
        """Commit each translation to the target group where it has no members and it moves forward."""
        idle = FailoverPlan(
            plan.link,
            plan.source,
            plan.target,
            [g for g in plan.groups if g.translations and not g.target.members],
            plan.scanned_partitions,
            plan.scanned_records,
            plan.seconds,
            plan.logs,
        )
        # only forward; a group ahead of the mirror is committed at the end all the same: when the source is lost,
        # what the mirror had not copied is gone, and while it is not, the next round moves the group on
        outcomes = {o.group: o for o in apply_plan(self.config, idle, force=False, allow_rereads=True)}
        for o in outcomes.values():
            if o.outcome == "committed":
                moves = ", ".join(f"{t}[{p}] {b if b is not None else 'none'} -> {a}" for t, p, b, a in o.changes)
                log.info(
                    "link %s: standby group %s committed on %s: %s", self.link.name, o.target_group, plan.target, moves
                )
        return outcomes
