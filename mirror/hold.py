"""A worker's side of `mirrorwatch link pause|resume`: the partitions the operator paused, kept in step with the
link's control document (`kernel.link_control`).

The heartbeat thread reads the document every status interval (`read`): this host's file and, for a link whose
workers run on several hosts, the one published last on the target's progress topic (`kernel.control_store`), the
newer of the two; the loop, which alone touches the consumer,
pauses and resumes partitions to match (`apply`) at its next turn: a running mirror obeys within a second, without a
restart. A paused partition is a librdkafka pause: it fetches nothing, stays assigned (the group and its position are
kept), and what was read before the pause is still written, acknowledged and committed. Resumed, it reads on from
its position. A partition that is also held for another reason (stopped alone, waiting for its target topic, the
whole consumer paused by back-pressure) is left paused for that reason when the operator resumes it; the loop's own
resume skips every partition held here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from kernel.link_control import ControlUnreadable, LinkControl, newest, read_control

__all__ = ["OperatorHold"]

log = logging.getLogger("mirrorwatch.mirror")

Key = tuple[str, int]


class OperatorHold:
    def __init__(
        self, state_dir: Path, link: str, name: str, published: Callable[[], LinkControl | None] = lambda: None
    ) -> None:
        self._state_dir, self._link, self._name = state_dir, link, name
        self._published = published  # the control document on the progress topic (None: none read)
        self.control = LinkControl(link)  # what the workers obey (replaced whole: read from any thread)
        self.held: set[Key] = set()  # the loop's: partitions paused for the operator now
        self._unreadable: str | None = None

    def read(self) -> None:
        """The control document as it is now (from the heartbeat thread). One that cannot be read changes nothing:
        the worker keeps obeying what it read last, and says so once."""
        try:
            control = newest(read_control(self._state_dir, self._link), self._published())
        except ControlUnreadable as exc:
            if str(exc) != self._unreadable:
                log.error("link %s: the link's control document cannot be read (%s); it stays %s until it can",
                          self._name, exc, self.control.state)  # fmt: skip
            self._unreadable = str(exc)
            return
        if self._unreadable is not None:
            log.info("link %s: the link's control document can be read again", self._name)
            self._unreadable = None
        if control != self.control:
            topics = f" (topics {', '.join(control.paused_topics)})" if control.paused_topics else ""
            said = f": {control.reason}" if control.reason else ""
            log.info("link %s: %s%s, as asked by %s%s", self._name, control.state, topics, control.by or "?", said)
            self.control = control

    def apply(self, consumer: Consumer, owned: Iterable[Key], blocked: Callable[[Key], bool]) -> None:
        """Pause the owned partitions the control holds and resume those it no longer holds (from the loop only, every
        turn: nothing to do costs two reads); `blocked`: a partition held for another reason stays paused."""
        control = self.control
        if not self.held and not control.holding:
            return
        owned = set(owned)
        wanted = {key for key in owned if control.holds(key[0])}
        newly = wanted - self.held
        freed = sorted(key for key in (self.held - wanted) & owned if not blocked(key))
        if newly:
            consumer.pause([TopicPartition(*key) for key in sorted(newly)])
            log.info("link %s: paused %s", self._name, _keys(newly))
        if freed:
            consumer.resume([TopicPartition(*key) for key in freed])
            log.info("link %s: resumed %s", self._name, _keys(freed))
        self.held = wanted

    def holds(self, key: Key) -> bool:
        """Whether the loop keeps this partition paused for the operator (its own resumes skip it)."""
        return key in self.held

    def assigned(self, keys: Iterable[Key]) -> list[Key]:
        """Partitions just assigned that the control holds: the caller pauses them at once (marked held here)."""
        control = self.control
        now = [key for key in keys if control.holds(key[0])]
        self.held.update(now)
        return now

    def paused(self, key: Key) -> str | None:
        """Why the partition is paused, for its status (None: not paused by the operator)."""
        return self.control.describe() if key in self.held else None

    def forget(self, key: Key) -> None:
        self.held.discard(key)


def _keys(keys: Iterable[Key]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(keys))
