"""Records a Spark link will never copy (issue #43): counted exactly, the link held failed.

Spark's Kafka source reads with `failOnDataLoss=true`: an offset the source no longer has fails the query (its
message says data may have been lost, not which records nor how many). When the query fails, the driver compares
where the checkpoint says each partition was written up to with the source's log start now (`mirror.gaps.
out_of_range`, as the python engines decide, with `on_gap: stop`): offsets position .. log start - 1 are a gap with
reason `retention`, action `stopped`, written to the link's ledger and logged once. The driver then stays up, failed,
publishing its status (the gaps, each partition's reason) so that the monitor, the API, the metrics, the alerts and
the console say it, until it is stopped (SIGTERM): a supervisor restarting a failed process does not loop (a restart
fails again at once and says the same gap once more, as noted before). A Spark query is the link's every partition:
it stops whole, not one partition alone; `on_gap: skip` is refused for the spark engine at start.

The same for a log truncated below the checkpoint (an unclean election, a restore: Spark's source fails the query
when a partition's offsets go back; reason `truncated`, the records the target holds that the source no longer
has), and for a source topic deleted and created again under its name (KIP-516: a new topic id). Spark's
checkpoint names topics, not their ids: a query started on a recreated topic would read it on from the old
topic's offsets, skipping the new one's first records without a word. So the driver notes the id each partition
was read under on this host, as the python engines do (`SourceGenerations`, `kernel.topic_notes`), and checks them
before it starts the query and when the query fails: a partition whose topic has another id now is a gap with
reason `recreated` (the old topic's records it had not copied, as far as its note knew), and the link is held
failed (`on_recreate: restart` is refused for spark: the checkpoint would have to be rewritten).

And a target topic lost under the link (deleted, or created again by someone else): the notes name the id of the
target topic each partition was copied into, the link's topic keeper watches them (`TopicKeeper.watch_targets`)
and does not create a lost one again; the driver stops the query and counts, per partition, the records the
checkpoint says were written there that the source still has (`mirror.gaps.target_lost`, reason `target-deleted`
or `target-recreated`), and holds the link failed; a restart finds it lost from the notes before the query starts
(`on_target_loss: recopy` is refused for spark)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, Protocol

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.errors import KafkaClientError
from kernel.gap_ledger import GapLedger
from kernel.kafka import error_text
from kernel.topic_notes import PartitionNote, TopicLedger, topic_ids
from kernel.worker_status import Gap
from mirror.admin import TIMEOUT_S as ADMIN_TIMEOUT_S
from mirror.failure import MirrorFailure
from mirror.gaps import out_of_range, recreated, target_lost
from mirror.topic_keeper import TopicKeeper

__all__ = [
    "SourceGenerations",
    "hold_failed",
    "refuse_start",
    "say_gaps",
    "source_gaps",
    "stop_query",
    "target_lost_gaps",
]

log = logging.getLogger("mirrorwatch.mirror.spark")


WHY_HELD = {
    "recreated": "a source topic was deleted and created again",
    "target-deleted": "a target topic was deleted under the link",
    "target-recreated": "a target topic was deleted and created again by someone else",
}


class Failing(Protocol):
    """The driver's status, as a held link needs it (`mirror.spark_engine._Progress`)."""

    def fail(self, failure: str, gaps: list[Gap]) -> None: ...
    def publish(self) -> None: ...
    def close(self) -> None: ...


_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
TIMEOUT_S = 10.0


def source_gaps(admin: AdminClient, positions: dict[tuple[str, int], int], now_ms: int) -> list[Gap]:
    """The partitions whose position the source's log start has passed (retention), or whose log now ends below it
    (truncated), as gaps (none when the source does not answer: the query's failure is then said as it is)."""
    if not positions:
        return []
    bounds: dict[tuple[str, int], list[int]] = {}
    try:
        for spec in (_EARLIEST, _LATEST):
            futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in positions}, request_timeout=TIMEOUT_S)
            for tp, future in futures.items():
                bounds.setdefault((tp.topic, tp.partition), []).append(int(future.result(timeout=TIMEOUT_S).offset))
    except (KafkaException, TimeoutError) as exc:
        log.warning("reading the source's log starts after the query failed: %s", exc)
        return []
    gaps = []
    for (topic, partition), (low, high) in sorted(bounds.items()):
        position = positions[(topic, partition)]
        decision = out_of_range(
            topic, partition, position, low, high, start_from="earliest", on_gap="stop", now_ms=now_ms
        )
        if decision.gap is not None:
            gaps.append(decision.gap)
    return gaps


class SourceGenerations:
    """The topic id each partition a Spark link copies was read under, in the link's notes on this host (shared
    with the python engines' workers: `failover plan` reads them too)."""

    def __init__(self, directory: Path, link: str, admin: AdminClient) -> None:
        self.notes = TopicLedger(directory, link)
        self._admin = admin
        self._ids: dict[str, str] = {}  # the id each topic was read under by this driver: never one seen later

    def recreated(self, positions: Mapping[tuple[str, int], int], now_ms: int) -> list[Gap]:
        """Before the query starts and when it failed: the partitions (of the checkpoint's `positions`) whose topic
        has another id now than the notes say, as gaps; the others' ids are taken as this driver's."""
        self.notes.read()
        now = topic_ids(self._admin, {t for t, _ in positions})
        gaps = []
        for (topic, partition), position in sorted(positions.items()):
            note, current = self.notes.note(topic, partition), now.get(topic)
            was = note.topic_id if note is not None else self._ids.get(topic)
            if was and current and was != current:
                high = note.high if note is not None else None
                gaps.append(recreated(topic, partition, position, high, on_recreate="stop", now_ms=now_ms).gap)
            elif current:
                self._ids.setdefault(topic, current)
        return gaps

    def write(
        self,
        positions: Mapping[tuple[str, int], int],
        highs: Mapping[tuple[str, int], int],
        target_ids: Mapping[str, str],
    ) -> None:
        """Note each partition: its topic's id (asked the first time a topic is met), where the checkpoint says it
        was written up to, the source's high-watermark last read, and the id of the target topic it was copied into
        (`target_ids`, by source topic)."""
        if missing := {t for t, _ in positions if t not in self._ids}:
            self._ids.update(topic_ids(self._admin, missing))
        notes = [
            PartitionNote(t, p, self._ids[t], acked=o, high=highs.get((t, p)), target_id=target_ids.get(t, ""))
            for (t, p), o in sorted(positions.items())
            if self._ids.get(t)
        ]
        self.notes.write(notes)

    def noted_targets(self, target_topic: Callable[[str], str]) -> dict[str, str]:
        """The target topic ids the notes name, by target topic: the keeper watches them from its first refresh, so
        that one deleted while the link was stopped is found lost, not created anew."""
        self.notes.read()
        return {target_topic(n.topic): n.target_id for n in self.notes.notes() if n.target_id}


def target_lost_gaps(
    admin: AdminClient, keeper: TopicKeeper, positions: Mapping[tuple[str, int], int], now_ms: int
) -> list[Gap]:
    """The partitions whose target topic the keeper finds lost under the link (deleted, or created again by someone
    else), as gaps: the records the checkpoint says were written there that the source still has (from its log
    start); none when the source's log starts cannot be read (the failure is then said as it is)."""
    lost = {k: o for k, o in positions.items() if keeper.target_topic(k[0]) in keeper.lost_targets}
    if not lost:
        return []
    try:
        futures = admin.list_offsets({TopicPartition(*k): _EARLIEST for k in lost}, request_timeout=TIMEOUT_S)
        lows = {(tp.topic, tp.partition): int(f.result(timeout=TIMEOUT_S).offset) for tp, f in futures.items()}
    except (KafkaException, TimeoutError) as exc:
        log.warning("reading the source's log starts for a lost target topic: %s", exc)
        return []
    return [
        target_lost(
            *key,
            position,
            lows[key],
            how=keeper.lost_targets[keeper.target_topic(key[0])],
            on_target_loss="stop",
            now_ms=now_ms,
        ).gap
        for key, position in sorted(lost.items())
    ]


def say_gaps(ledger: GapLedger, link: str, gaps: list[Gap]) -> None:
    """Each gap written to the link's ledger and logged once (a restart finding it again says it was noted)."""
    for gap in gaps:
        if ledger.record(gap):
            log.error("%s", gap.describe(link))
        else:
            log.warning("%s (noted before: the link stays stopped)", gap.describe(link))


def hold_failed(
    config: MirrorwatchConfig,
    link: LinkConfig,
    progress: Failing,
    failed: tuple[str, list[Gap]],
    stop: threading.Event,
    *,
    status_every_s: float,
) -> None:
    """The link stopped on gaps (retention, a truncated log, a recreated topic): each said once, and the driver stays
    up, failed, its status saying why, until it is stopped."""
    failure, gaps = failed
    say_gaps(GapLedger(config.state_path / "lost", link.name), link.name, gaps)
    progress.fail(failure, gaps)
    progress.publish()  # the status says it before the log line does
    log.error(
        "link %s: stopped on %d gap(s) (%s): %d record(s) there were never copied; the driver stays up, failed, "
        "until it is stopped (SIGTERM)",
        link.name,
        len(gaps),
        ", ".join(sorted({g.reason for g in gaps})),
        sum(g.records for g in gaps),
    )
    while not stop.wait(status_every_s):
        progress.publish()


def refuse_start(
    config: MirrorwatchConfig,
    link: LinkConfig,
    progress: Failing,
    gaps: list[Gap],
    stop: threading.Event,
    *,
    status_every_s: float,
) -> NoReturn:
    """Since the checkpoint was written a source topic was deleted and created again, or a target topic lost under
    the link: the query is not started (it would read the new source topic on from the old one's offsets, or write
    into a topic the keeper does not create again); the link is held failed until stopped."""
    failure = f"link {link.name}: since the checkpoint was written, " + " and ".join(
        sorted({WHY_HELD.get(g.reason, g.reason) for g in gaps})
    )
    try:
        hold_failed(config, link, progress, (failure, gaps), stop, status_every_s=status_every_s)
    finally:
        progress.close()
    raise MirrorFailure(failure)


def query_error(query: Any, keeper: TopicKeeper, keeper_stop: threading.Event, thread: threading.Thread) -> Any:
    """The query's exception, None when it did not fail. A query that failed may have failed on a target topic
    deleted under it before the keeper's next round found it: the keeper's thread is then stopped and one round
    asked now, so that the failure is judged on what the target holds now, a lost topic counted as lost (issue #69:
    the link exited 1, its gaps uncounted, where it should have held failed). A round that cannot ask leaves the
    failure as it is, said."""
    error = query.exception()
    if error is None or keeper.lost_targets:
        return error
    keeper_stop.set()
    thread.join(timeout=ADMIN_TIMEOUT_S)  # a round waits on a cluster at most this long per request
    if thread.is_alive():  # its round waits on a cluster: a second round beside it would race it
        return error
    try:
        keeper.refresh()
    except (KafkaException, KafkaClientError, MirrorFailure) as exc:
        log.warning("link %s: target topics not surveyed after the query failed: %s", keeper.name, error_text(exc))
    return error


def stop_query(query: Any, name: str) -> None:
    """Stop the query: its running batch is cut and runs again from the checkpoint on a restart (nothing lost). A
    batch stuck writing (to a target topic deleted under it: the sink's producer waits for its metadata) may outlast
    spark.sql.streaming.stopTimeout; Spark then raises, and the batch is cut when the session stops after this."""
    if not query.isActive:
        return
    try:
        query.stop()
    except Exception as exc:  # py4j's error for Spark's TimeoutException: a stop that failed, not the link's failure
        lines = str(exc).strip().splitlines() or [repr(exc)]
        why = next((line for line in lines if "Exception" in line), lines[0])
        log.warning("link %s: the Spark query did not stop in time (%s); its batch is cut with the session", name,
                    why.strip()[:300])  # fmt: skip


def keep_topics(keeper: TopicKeeper, link: LinkConfig) -> tuple[threading.Event, threading.Thread]:
    """The target topics made now (before the first micro-batch writes to them), then kept in step by a thread of
    their own until the returned event is set."""
    keeper.refresh()
    keeper_stop = threading.Event()
    thread = threading.Thread(target=keeper.keep, args=(keeper_stop,), name=f"topics-{link.name}", daemon=True)
    thread.start()
    return keeper_stop, thread
