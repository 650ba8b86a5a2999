"""The part of a link worker that meets records the source or the target no longer has (`mirror.gaps`): a position
the source refuses (retention passed it, an unclean election truncated the log), a source topic created again, a
target topic lost under the link. Each is written to the link's ledger and said once, and the partition stops alone
or goes on as the link's rule says (`on_gap`, `on_recreate`, `on_target_loss`). And records the target took already
older than its retention (`mirror.expiry`): counted and said, the link going on. The ledger is kept in step with the
link's progress topic (`kernel.gap_ledger`): a gap found on any host is known on every host."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TypeVar

from confluent_kafka import KafkaException, TopicPartition

from kernel.kafka import error_text
from kernel.progress_format import encode_lost
from kernel.sharing import PER_BEAT, Shares
from kernel.worker_status import Gap
from mirror.expiry import Expired, TargetExpiry
from mirror.gaps import TargetLost, out_of_range, recreated, target_lost
from mirror.worker import WorkerBase, log, read_from

__all__ = ["GapWorker"]

T = TypeVar("T")


class GapWorker(WorkerBase):
    """`WorkerBase` with the gaps' handling (the engines build on it)."""

    _expiry: TargetExpiry | None = None  # made at the first check

    def _share_facts(self, limit: int | None = PER_BEAT) -> None:
        """The link's ledger of lost records and its progress topic in step (`kernel.gap_ledger`): the gaps the
        link's workers on other hosts found are learnt (this worker's status carries them from now on), and this
        host's are handed over (up to `limit` a beat; None: all the publisher's queue takes, at the stop)."""
        if self._controls is not None:
            for gap in self._ledger.learn(self._controls.lost(self.link.name)):
                log.info("link %s: from the progress topic, found by a worker of the link elsewhere: %s", self.name,
                         gap.describe(self.link.name))  # fmt: skip
        self._offer(self._ledger, self._ledger.unshared(limit), functools.partial(encode_lost, self.link.name))

    def _offer(self, ledger: Shares[T], facts: list[T], encode: Callable[[T], tuple[bytes, bytes]]) -> None:
        """Hand these facts of the ledger to the link's progress topic, until one cannot be now (the rest wait for
        the next beat)."""
        for fact in facts:
            ledger.sharing(fact)
            if not self._board.share(encode(fact), functools.partial(ledger.shared, fact)):
                ledger.shared(fact, False)
                return

    def _check_expiry(self) -> None:
        """Every status interval, from the loop: the records the target acknowledged since the last check that it took
        already older than its topic's retention (`mirror.expiry`)."""
        if self._keeper is None or (not self._keeper.target_retention and self._expiry is None):
            return  # no target topic keeps records by their timestamps (an incident going on ends at its next check)
        expiry = self._expiry = self._expiry or TargetExpiry()
        retention, now_ms = self._keeper.target_retention, self._clock.now_ms()
        for key, began, acked, newest_ms in self._expiry_positions():
            found = expiry.check(
                key,
                began=began,
                acked=acked,
                newest_ms=newest_ms,
                retention_ms=retention.get(self._target_topic(key[0])),
                now_ms=now_ms,
            )
            if found is not None:
                self._say_expired(found)

    def _expiry_positions(self) -> Iterator[tuple[tuple[str, int], int | None, int | None, int | None]]:
        """Per owned partition: where this ownership began reading, where the target's acknowledgements stand, and
        the timestamp of the newest record read."""
        for key, p in self._progress.items():
            yield key, p.began, p.acked, p.last_timestamp_ms

    def _expiry_ends(self, key: tuple[str, int]) -> None:
        """The partition is no longer this worker's: an incident of it going on is written down as it stands."""
        if self._expiry is not None and (found := self._expiry.forget(key)) is not None:
            self._say_expired(found)

    def _say_expired(self, found: Expired) -> None:
        if self._ledger.record(found.gap, durable=found.durable) and found.new:
            log.error("%s", found.gap.describe(self.name))
        elif found.ended:
            gap = found.gap
            log.warning(
                "link %s: %s[%d]: the records the target takes are within its retention again (or the partition "
                "went to another owner): %d taken already older than it, offsets %d to %d",
                self.name, gap.topic, gap.partition, gap.records, gap.first_offset, gap.end_offset - 1,
            )  # fmt: skip

    def _out_of_range(self, topic: str, partition: int, offset: int | None, truncated: int | None = None) -> None:
        """The source refused the partition's position (or it has none; `truncated`: where librdkafka found the log
        of the position's leader epoch to end, KIP-320): read its log's bounds and do what `mirror.gaps.out_of_range`
        says. From the loop only (the consumer is the loop's)."""
        consumer, key = self._consumer, (topic, partition)
        if consumer is None or self._topic_recreated(topic, partition):
            return
        progress = self._progress.get(key)
        position = offset if offset is not None and offset >= 0 else (progress.consumed if progress else None)
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
        except KafkaException as exc:
            log.warning(
                "link %s: %s[%d]: offset %s is not on the source and its log's bounds could not be read (%s); "
                "reading it again",
                self.name, topic, partition, position, error_text(exc),
            )  # fmt: skip
            if position is not None:
                read_from(consumer, TopicPartition(topic, partition, position))
            return
        decision = out_of_range(
            topic,
            partition,
            position,
            low,
            high,
            start_from=self.link.start_from,
            on_gap=self.link.on_gap,
            now_ms=self._clock.now_ms(),
            truncated_at=truncated,
        )
        gap = decision.gap
        if gap is not None:
            self._say(gap, stopping=decision.action == "stop")
        if decision.action == "stop" and gap is not None:
            consumer.pause([TopicPartition(topic, partition)])
            self._stopped[key] = gap.describe(self.name)
            return
        assert decision.seek_to is not None
        if decision.action == "skip":
            self._skipped(key, decision.seek_to)
        read_from(consumer, TopicPartition(topic, partition, decision.seek_to))

    def _topic_recreated(self, topic: str, partition: int) -> bool:
        """Whether the partition's topic was deleted and created again under the worker (its refused position is then
        the old topic's, and the worker has handled it as `_recreated` says); engines that note topic ids say."""
        return False

    def _recreated(self, topic: str, partition: int, position: int | None, high: int | None) -> str:
        """A partition of a topic recreated since `position` was taken (`mirror.gaps.recreated`): the gap written and
        said, the partition marked stopped unless the rule restarts it. The action; the caller pauses or restarts."""
        decision = recreated(
            topic, partition, position, high, on_recreate=self.link.on_recreate, now_ms=self._clock.now_ms()
        )
        self._say(decision.gap, stopping=decision.action == "stop")
        if decision.action == "stop":
            self._stopped[(topic, partition)] = decision.gap.describe(self.name)
        return decision.action

    def _target_lost(self, key: tuple[str, int], position: int | None, how: str) -> TargetLost | None:
        """A partition whose target topic was lost under the link (`mirror.gaps.target_lost`; `position`: what the
        target had acknowledged): the gap written and said, the partition marked stopped unless the rule copies again
        (from the gap's first offset, the source's log start). None when that log start could not be read: asked
        again at the next refresh or assignment."""
        assert self._consumer is not None
        try:
            low, _high = self._consumer.get_watermark_offsets(TopicPartition(*key), timeout=10, cached=False)
        except KafkaException as exc:
            log.warning("link %s: %s[%d]: its target topic was %s, and the source's log start could not be read (%s)",
                        self.name, key[0], key[1], how, error_text(exc))  # fmt: skip
            return None
        decision = target_lost(
            *key, position, low, how=how, on_target_loss=self.link.on_target_loss, now_ms=self._clock.now_ms()
        )
        self._say(decision.gap, stopping=decision.action == "stop")
        if decision.action == "stop":
            self._stopped[key] = decision.gap.describe(self.name)
        return decision

    def _say(self, gap: Gap, *, stopping: bool) -> None:
        """A gap is written to the link's ledger and logged once; a partition it stops again (a restart, a new
        assignment) says why once more, so every process that holds it stopped has said so in its log."""
        if self._ledger.record(gap):
            log.error("%s", gap.describe(self.name))
        elif stopping:
            log.warning("%s (noted before: the partition stays stopped)", gap.describe(self.name))

    def _skipped(self, key: tuple[str, int], to: int) -> None:
        """The records below `to` are given up: the partition's progress passes them (its next commit is `to`)."""
        progress = self._progress.get(key)
        if progress is not None:
            progress.pass_to(to)
