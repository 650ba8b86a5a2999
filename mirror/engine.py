"""The python mirror engine: one worker of one link (the I/O shell around progress, planner and provenance).

Consume from the source with the link's consumer group (cooperative-sticky by default, batched `consume()`),
produce to the target (acks=all, idempotent), and commit to the source group only offsets below which the target
acknowledged every record (`PartitionProgress.acked`): on a timer, on revocation and at shutdown.

What can go wrong, and what the worker does:
- a cluster is unreachable at start: retried with a log line and back-off until it answers or the worker is stopped;
- the target is down mid-stream: librdkafka retries for ever (message.timeout.ms=0); in-flight records pile up to
  the producer's memory cap, then the worker reads nothing more (back-pressure) and, when the producer stays full,
  pauses the source partitions until the target drains;
- the target refuses a record (too large, policy, authorization): the record goes to the dead-letter topic if the
  link has one, else the link stops with the reason; the committed offset stays below that record either way
  until it is safe, so nothing is lost;
- SIGTERM/SIGINT: stop fetching, flush (bounded), commit what the target acknowledged, leave the group.

Sparse delivery reports (links without a handler, `partitioning: preserve`, not exactly-once): asking the producer
for a report on every record costs more than producing it, so only the last record of each run of a partition's
records in a consumed batch carries one. One report proves the whole run, because the producer is idempotent with
`enable.gapless.guarantee`: the target writes a partition's records in the order they were produced or not at all, a
refused record makes the producer fail for good instead of leaving a gap, and records never time out
(message.timeout.ms=0). A sparse report does not say which record was refused, so on any delivery error the worker
goes back to the offsets the target acknowledged and mirrors on with a report per record (`_replay_exactly`): the
refusal is then handled exactly as above, naming the record. Records between the acknowledged offset and the refused
one may be written twice, as after a restart.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from bisect import bisect_left
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from mirror.admin import cluster_id, describe_topics, execute_plan, list_topic_partitions
from mirror.client_stats import ClientStats, summarize
from mirror.handler import Handler, MirrorRecord, load_handler, run_handler
from mirror.progress import PartitionProgress
from mirror.provenance import (
    HeaderValue,
    ProvenanceStamp,
    has_visited,
    provenance_stamp,
    with_provenance,
)
from mirror.rename import RenamePolicy, rename_policy
from mirror.stats import LATENCY_BUCKETS_SECONDS, LinkStats
from mirror.topics import ConfigDrift, CreateTopic, TopicPlan, plan_topics, select_topics
from mirrorwatch.clock import Clock, SystemClock
from mirrorwatch.config import LinkConfig, MirrorwatchConfig
from mirrorwatch.errors import ConfigError, ConfigProblem, KafkaClientError, MirrorwatchError
from mirrorwatch.kafka import new_admin, new_consumer, new_producer
from mirrorwatch.status_board import HOST, StatusBoard
from mirrorwatch.worker_status import PartitionPosition, WorkerStatus

__all__ = [
    "CONSUMER_DEFAULTS",
    "CONSUMER_FIXED",
    "PRODUCER_DEFAULTS",
    "PRODUCER_FIXED",
    "LinkWorker",
    "MirrorFailure",
    "writer_fields",
]

log = logging.getLogger("mirrorwatch.mirror")

# Defaults a user may override per cluster or per link (`consumer_properties`, `producer_properties`).
CONSUMER_DEFAULTS: dict[str, str | int | bool] = {
    "partition.assignment.strategy": "cooperative-sticky",
    # Aborted transactions on the source are not copied; committed ones are.
    "isolation.level": "read_committed",
    # Bounded memory: what librdkafka prefetches per partition and in total.
    "queued.max.messages.kbytes": 32768,
    "fetch.max.bytes": 16 * 1024 * 1024,
    # When the local queue reaches those bounds (or queued.min.messages), librdkafka waits this long before fetching
    # again; its default (1 s) is far longer than the engine takes to drain the queue, so a busy link sat idle on an
    # empty queue for half of every second (measured: 53 % of the loop's time in consume() on 500,000 x 1 KB).
    "fetch.queue.backoff.ms": 10,
    # A crashed worker's partitions move to the others after this long (librdkafka's default is 45 s).
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 1_000,
    "statistics.interval.ms": 10_000,  # librdkafka statistics for status() and the monitor
}
PRODUCER_DEFAULTS: dict[str, str | int | bool] = {
    "linger.ms": 20,
    "batch.size": 1024 * 1024,
    "queue.buffering.max.kbytes": 65536,
    "queue.buffering.max.messages": 200_000,
    # Java-compatible key hashing for `partitioning: hash`, as MirrorMaker's producers did.
    "partitioner": "murmur2_random",
    # The target decides how large a record may be (its max.message.bytes), not a client-side default of 1 MB.
    "message.max.bytes": 64 * 1024 * 1024,
    "statistics.interval.ms": 10_000,
    # librdkafka's default is 5 minutes; a grown target topic should be seen sooner even without a produce error.
    "topic.metadata.refresh.interval.ms": 30_000,
}
# Safety settings nobody overrides: the no-loss guarantee rests on them.
CONSUMER_FIXED: dict[str, str | int | bool] = {"enable.auto.commit": False, "enable.auto.offset.store": False}
PRODUCER_FIXED: dict[str, str | int | bool] = {
    "acks": "all",
    "enable.idempotence": True,
    # Never give up on a record because the target is slow or down: the link pauses instead (back-pressure).
    "message.timeout.ms": 0,
}

SHUTDOWN_FLUSH_S = 30.0
PROGRESS_EVERY_S = 10.0
# How long the producer may stay full before the source partitions are paused. A full producer is normal flow control
# on a busy link (we read faster than the target writes): reading nothing more is back-pressure enough, and librdkafka
# stops prefetching at queued.max.messages.kbytes on its own. Pausing purges what librdkafka already fetched for those
# partitions, to be fetched again on resume, so it is kept for a target that stays full (slow or down), where
# consume() must go on being called (max.poll.interval.ms) without handing out records.
PAUSE_AFTER_FULL_S = 10.0
# How often the status the monitor reads (when in another process) is rewritten (`_heartbeat`): the last status of a
# worker that is killed is at most this old, and so is what the monitor believes of the records it had acknowledged.
STATUS_EVERY_S = 0.5
CONNECT_BACKOFF_MAX_S = 30.0
TOPIC_NOT_READY_CODES = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC})


def writer_fields(link: LinkConfig) -> dict[str, Any]:
    """What every engine's WorkerStatus says of who writes it: this process (host, pid) and the link."""
    return {
        "host": HOST,
        "pid": os.getpid(),
        "source": link.source,
        "target": link.target,
        "consumer_group": link.consumer_group,
        "delivery": link.delivery,
    }


class MirrorFailure(MirrorwatchError):
    """The link stopped because continuing could lose or corrupt data; the message says why and what to do."""


# One record on its way to the producer, as a plain tuple (the per-record path allocates nothing else):
# progress of its source partition, source offset, target topic, target partition (-1: the producer's partitioner),
# key, value, headers, timestamp ms (0: none), (source topic, source partition), and the target's refusal when it is
# going to the dead-letter topic instead.
OutboxItem = tuple[
    PartitionProgress,
    int,
    str,
    int,
    bytes | None,
    bytes | None,
    list[tuple[str, HeaderValue]],
    int,
    tuple[str, int],
    KafkaError | None,
]

# The newest record of a run `_queue_sparse` has read but not yet handed to the producer: source offset, key, value,
# timestamp ms (0: none), headers.
HeldRecord = tuple[int, bytes | None, bytes | None, int, list[tuple[str, HeaderValue]]]
# What a sparse report acknowledges: route, first and last source offset of the run, records and key + value bytes in
# it, the first record's timestamp ms (for latency: the run's oldest record).
RunReport = tuple["_Route", int, int, int, int, int]

# A record `_queue_plain` handed to the producer directly, as its delivery report sees it: route, source offset,
# timestamp ms (0: none), key + value bytes, headers as written (for the dead-letter topic if the target refuses it).
PlainItem = tuple["_Route", int, int, int, list[tuple[str, HeaderValue]]]


@dataclass(slots=True)
class _Route:
    """Where the records of one assigned source partition go, worked out once per assignment and topic refresh."""

    source: tuple[str, int]
    progress: PartitionProgress
    target_topic: str
    target_partition: int  # -1: the producer's partitioner (by key)
    topic_bytes: bytes
    partition_bytes: bytes
    stamp: ProvenanceStamp


class LinkWorker:
    """Mirrors one link until `stop` is set or the link fails. `run()` returns the CLI exit code."""

    SPARSE_REPORTS = True  # whether this kind of worker may use sparse delivery reports (see the module docstring)

    def __init__(
        self,
        config: MirrorwatchConfig,
        link: LinkConfig,
        *,
        stop: threading.Event,
        worker: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.link = link
        self.worker = worker
        self.stats = LinkStats()
        self._stop = stop
        self._clock = clock or SystemClock()
        self._link_index = next(i for i, item in enumerate(config.links) if item.name == link.name)
        self._rename: RenamePolicy = rename_policy(link.rename, link.source)
        self._handler: Handler | None = None
        self._progress: dict[tuple[str, int], PartitionProgress] = {}
        self._earlier_progress: dict[tuple[str, int], PartitionProgress] = {}  # of partitions revoked or lost
        self._seen_high: dict[tuple[str, int], int] = {}  # high-watermarks the consumer saw (`_note_high_watermarks`)
        self._outbox: deque[OutboxItem] = deque()
        self._routes: dict[tuple[str, int], _Route] = {}
        self._topic_map: dict[str, str] = {}
        self._target_partitions: dict[str, int] = {}
        self._known_source_partitions: dict[str, int] = {}
        self._subscribed: tuple[str, ...] | None = None
        self._drift: tuple[ConfigDrift, ...] = ()
        self._failure: str | None = None
        self._client_stats: dict[str, ClientStats] = {}
        self._paused = False
        self._refresh_requested = False
        self._source_id = b""
        self._target_id = b""
        self._same_cluster = False
        self._smallest_target_limit: int | None = None
        self._batch_bytes = 0
        self._sparse = False  # sparse delivery reports: decided in run(), off for good after a delivery error
        self._sparse_failure: str | None = None  # why the sparse reports must be replaced by exact ones
        self._producer_fatal = False  # the producer hit a fatal error: what it holds will never be written
        self._outbox_runs: dict[tuple[tuple[str, int], int], RunReport] = {}  # runs an outbox record reports for
        self._topic_bytes: dict[str, bytes] = {}
        self._partition_bytes: dict[int, bytes] = {}
        # Clients are created in run(), never here.
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._board = StatusBoard(config.state_path / "status")

    # -- public view ------------------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.link.name if self.link.num_streams == 1 else f"{self.link.name}#{self.worker}"

    def positions(self) -> list[dict[str, Any]]:
        """Per source partition: consumed, acked and committed positions, in-flight records, last timestamp."""
        return [asdict(p) for p in self._partition_positions()]

    def _note_high_watermarks(self) -> None:
        """What the consumer's last fetch responses said of each partition's high-watermark (no broker request),
        noted by the loop for the status: the consumer is the loop's alone (called from the heartbeat thread, its
        methods wait for the loop's consume() and took seconds)."""
        consumer = self._consumer
        if consumer is None:
            return
        seen: dict[tuple[str, int], int] = {}
        for topic, partition in list(self._progress):
            with contextlib.suppress(KafkaException, RuntimeError):
                _, cached = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
                if cached >= 0:
                    seen[(topic, partition)] = cached
        self._seen_high = seen

    def _partition_positions(self) -> tuple[PartitionPosition, ...]:
        positions = []
        seen_high = self._seen_high
        for (topic, partition), p in sorted(self._progress.items()):
            high = seen_high.get((topic, partition))
            acked = p.acked
            earlier = self._earlier_progress.get((topic, partition))
            if earlier is not None and earlier.acked is not None and (acked is None or earlier.acked > acked):
                acked = earlier.acked  # durable on the target before the partition was lost and assigned again
            positions.append(
                PartitionPosition(
                    topic=topic,
                    partition=partition,
                    target_topic=self._topic_map.get(topic, self._rename.target_topic(topic)),
                    consumed=p.consumed,
                    acked=acked,
                    committed=p.committed,
                    in_flight_records=p.in_flight_records,
                    high_watermark=high,
                    last_record_timestamp_ms=p.last_timestamp_ms,
                )
            )
        return tuple(positions)

    def config_drift(self) -> tuple[ConfigDrift, ...]:
        return self._drift

    ENGINE = "python"

    def _status_interval_ms(self) -> int:
        """How often this worker promises to rewrite its status (see `_loop`)."""
        return int(STATUS_EVERY_S * 1000)

    def worker_status(self) -> WorkerStatus:
        """Everything about this worker, at this moment (the worker-status contract the monitor reads)."""
        return WorkerStatus(
            link=self.link.name,
            worker=self.worker,
            engine=self.ENGINE,
            observed_ms=self._clock.now_ms(),
            publish_interval_ms=self._status_interval_ms(),
            state="failed" if self._failure else ("paused" if self._paused else "running"),
            partitions=self._partition_positions(),
            failure=self._failure,
            **writer_fields(self.link),
            source_cluster_id=self._source_id.decode() or None,
            target_cluster_id=self._target_id.decode() or None,
            stats=self.stats.as_dict(),
            clients={role: s.as_dict() for role, s in self._client_stats.items()},
            config_drift=tuple(asdict(d) for d in self._drift),
        )

    def status(self) -> dict[str, Any]:
        """Everything about this worker as JSON-able data (what `/mirror/links` serves)."""
        return self.worker_status().as_json()

    def _on_client_stats(self, stats_json: str) -> None:
        summary = summarize(stats_json)
        self._client_stats[summary.role] = summary

    # -- run --------------------------------------------------------------------------------------------------------

    def run(self) -> int:
        link = self.link
        source, target = self.config.clusters[link.source], self.config.clusters[link.target]
        self._source_admin = new_admin(source, link.source)
        self._target_admin = new_admin(target, link.target)
        if not self._connect():
            return 0  # stopped before both clusters answered: nothing was read, nothing to commit
        self._check_loop_safety()
        if link.handler:
            self._handler = load_handler(link.handler, link.handler_args, path=f"links[{self._link_index}].handler")
        self._sparse = self.SPARSE_REPORTS and self._handler is None and link.partitioning == "preserve"
        consumer_overrides: dict[str, Any] = {
            **CONSUMER_DEFAULTS,
            **dict(source.client_properties()),
            **_reveal(link.consumer_properties),
            **CONSUMER_FIXED,
            "auto.offset.reset": link.start_from,
            "topic.metadata.refresh.interval.ms": int(link.refresh_topics_interval_seconds * 1000),
            "on_commit": self._on_commit,
            "stats_cb": self._on_client_stats,
        }
        consumer_overrides.setdefault("client.id", f"mirrorwatch-{self.name}")
        self._consumer = new_consumer(source, link.source, link.consumer_group, consumer_overrides)
        heartbeat_stop = threading.Event()
        heartbeat = threading.Thread(
            target=self._heartbeat, args=(heartbeat_stop,), name=f"status-{self.name}", daemon=True
        )
        heartbeat.start()
        try:
            self._prepare()
            self.refresh_topics()  # before the producer: its batch size depends on the target topics
            self._producer = self._new_producer()
            self._loop()
        finally:
            self._shutdown()
            heartbeat_stop.set()
            heartbeat.join(timeout=10)
            if self._failure is None:
                self._board.withdraw("links", self.link.name, self.worker)
            else:
                self._publish_status()  # the failure stays visible until the file goes stale
        if self._failure is not None:
            raise MirrorFailure(self._failure)
        return 0

    def _producer_overrides(self) -> dict[str, Any]:
        target = self.config.clusters[self.link.target]
        overrides: dict[str, Any] = {
            **PRODUCER_DEFAULTS,
            **dict(target.client_properties()),
            **_reveal(self.link.producer_properties),
            **PRODUCER_FIXED,
            "stats_cb": self._on_client_stats,
        }
        overrides.setdefault("client.id", f"mirrorwatch-{self.name}")
        return overrides

    def _new_producer(self) -> Producer:
        link, target = self.link, self.config.clusters[self.link.target]
        overrides = self._producer_overrides()
        # A batch larger than a target topic's max.message.bytes is refused whole, good records with the bad one.
        # librdkafka sends a record larger than batch.size alone, so capping batch.size at the smallest limit makes
        # the broker refuse exactly the records that are too large and nothing else.
        configured = int(overrides.get("batch.size", PRODUCER_DEFAULTS["batch.size"]))
        if self._smallest_target_limit is not None and self._smallest_target_limit < configured:
            overrides["batch.size"] = self._smallest_target_limit
            log.info(
                "link %s: producer batch.size %d (the smallest max.message.bytes of the target topics)",
                self.name,
                self._smallest_target_limit,
            )
        self._batch_bytes = int(overrides["batch.size"])
        if self._sparse:
            overrides["enable.gapless.guarantee"] = True  # what makes one report prove a run (module docstring)
        return new_producer(target, link.target, overrides)

    def _prepare(self) -> None:
        """Set-up between connecting and the first topic refresh (the exactly-once worker reads its offsets here)."""

    def _connect(self) -> bool:
        """Learn both cluster ids, retrying (with a log line, never a traceback) until they answer or we stop."""
        ids: dict[str, str] = {}
        for side, alias, admin in (
            ("source", self.link.source, self._source_admin),
            ("target", self.link.target, self._target_admin),
        ):
            backoff_s = 1.0
            while side not in ids:
                try:
                    ids[side] = cluster_id(admin)
                except KafkaException as exc:
                    servers = self.config.clusters[alias].bootstrap_servers
                    log.warning(
                        "link %s: cannot reach %s cluster %r at %s (%s); retrying in %.0fs",
                        self.name,
                        side,
                        alias,
                        servers,
                        _reason(exc),
                        backoff_s,
                    )
                    if self._stop.wait(backoff_s):
                        return False
                    backoff_s = min(backoff_s * 2, CONNECT_BACKOFF_MAX_S)
        self._source_id, self._target_id = ids["source"].encode(), ids["target"].encode()
        log.info(
            "link %s: source %r is cluster %s, target %r is cluster %s",
            self.name,
            self.link.source,
            ids["source"],
            self.link.target,
            ids["target"],
        )
        return True

    def _check_loop_safety(self) -> None:
        self._same_cluster = self._source_id == self._target_id
        if self._same_cluster and not self._rename.renames_every_topic:
            raise ConfigError(
                [
                    ConfigProblem(
                        f"links[{self._link_index}].rename",
                        f"source {self.link.source!r} and target {self.link.target!r} are the same cluster "
                        f"(id {self._source_id.decode()}): every record would be mirrored onto itself; "
                        "use a rename policy that changes every topic name (prefix, or format with more than ${topic})",
                    )
                ]
            )

    # -- topics -----------------------------------------------------------------------------------------------------

    def _always_topics(self) -> tuple[str, ...]:
        return (self.config.canary.topic,)

    def refresh_topics(self) -> TopicPlan:
        """Select source topics, create/grow their targets, (re)subscribe when the selection changed."""
        source_partitions = list_topic_partitions(self._source_admin)
        selected = select_topics(
            source_partitions,
            self.link.topics,
            exclude_internal=self.link.exclude_internal_topics,
            always=self._always_topics(),
        )
        if self._same_cluster:  # never mirror our own output again (orders -> source.orders -> source.source.orders)
            selected = [t for t in selected if self._rename.source_topic(t) is None]
        target_partitions = list_topic_partitions(self._target_admin)
        source_info = describe_topics(self._source_admin, selected, source_partitions)
        target_names = [self._rename.target_topic(t) for t in selected]
        target_info = describe_topics(self._target_admin, target_names, target_partitions)
        plan = plan_topics(
            source_info,
            target_info,
            selected,
            self._rename,
            partitioning=self.link.partitioning,
            replication_factor=self.link.replication_factor,
            known_source_partitions=self._known_source_partitions,
            dead_letter_topic=self.link.dead_letter_topic,
        )
        if plan.problems:
            raise MirrorFailure(f"link {self.name}: " + "; ".join(plan.problems))
        if plan.changes_target:
            execute_plan(self._target_admin, plan)
            target_partitions = list_topic_partitions(self._target_admin)
            if self._producer is not None:  # the producer's metadata cache would otherwise learn this in 5 minutes
                for grown in plan.add_partitions:
                    self._producer.list_topics(grown.topic, timeout=10)
        if plan.drift != self._drift:
            for d in plan.drift:
                log.warning(
                    "link %s: topic config drift %s -> %s: %s is %r on the source, %r on the target",
                    self.name,
                    d.source_topic,
                    d.target_topic,
                    d.config,
                    d.source_value,
                    d.target_value,
                )
            self._drift = plan.drift
        limits = [info.max_message_bytes for info in target_info.values() if info.max_message_bytes]
        limits += [int(c.configs["max.message.bytes"]) for c in plan.create if "max.message.bytes" in c.configs]
        if limits:
            smallest = min(limits)
            if self._producer is not None and smallest < self._batch_bytes:
                log.warning(
                    "link %s: a target topic takes at most %d bytes per batch but the producer batches up to "
                    "%d; restart the link so that one refused record cannot fail its neighbours",
                    self.name,
                    smallest,
                    self._batch_bytes,
                )
            known = self._smallest_target_limit
            self._smallest_target_limit = smallest if known is None else min(known, smallest)
        self._known_source_partitions = dict(plan.source_partitions)
        self._topic_map = dict(plan.mapping)
        self._target_partitions = {t: target_partitions.get(t, 0) for t in plan.mapping.values()}
        self._routes.clear()  # target topics or partition counts may have changed
        wanted = tuple(selected)
        if wanted != self._subscribed:
            self._subscribe(wanted)
        return plan

    def _subscribe(self, topics: tuple[str, ...]) -> None:
        assert self._consumer is not None
        if topics:
            self._consumer.subscribe(
                list(topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            log.info("link %s: mirroring %d topic(s): %s", self.name, len(topics), ", ".join(topics))
        else:
            self._consumer.unsubscribe()
            log.warning(
                "link %s: no source topic matches %s yet; checking again every %gs",
                self.name,
                [p.pattern for p in self.link.topics.include],
                self.link.refresh_topics_interval_seconds,
            )
        self._subscribed = topics

    # -- rebalance callbacks (run inside consume()) -----------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = consumer.committed(partitions, timeout=30)
        for tp in committed:
            start = tp.offset if tp.offset >= 0 else None
            self._progress[(tp.topic, tp.partition)] = PartitionProgress(start_offset=start, committed=start)
            self._routes.pop((tp.topic, tp.partition), None)
            preserve = self.link.partitioning == "preserve"
            if preserve and tp.partition >= self._target_partitions.get(self._topic_map.get(tp.topic, ""), 0):
                self._refresh_requested = True  # a new source partition: the target must grow first
        log.info("link %s: assigned %s", self.name, _tps(partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Before another worker takes these partitions: get what we sent acknowledged, commit it, forget them."""
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        # Records not yet handed to the producer are read again by the next owner.
        self._forget_outbox(revoked)
        if self._producer is not None:
            self._flush(SHUTDOWN_FLUSH_S)
        self._commit(keys=revoked, asynchronous=False)
        for key in revoked:
            self._forget_progress(key)
        log.info("link %s: revoked %s", self.name, _tps(partitions))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions taken away without a chance to commit (session timeout): the next owner re-reads them."""
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self._forget_outbox(lost)
        for key in lost:
            self._forget_progress(key)
        log.warning(
            "link %s: lost %s (records after the last commit will be mirrored again)", self.name, _tps(partitions)
        )

    def _forget_progress(self, key: tuple[str, int]) -> None:
        """A partition is no longer ours. Its progress is kept aside: what it had acknowledged, and what the
        producer still acknowledges for it, stays on the target, and the status says so (`_partition_positions`)
        when the partition comes back and is read again from the committed offset, below it."""
        progress = self._progress.pop(key, None)
        if progress is not None:
            self._earlier_progress[key] = progress
        self._routes.pop(key, None)

    def _forget_outbox(self, partitions: set[tuple[str, int]]) -> None:
        self._outbox = deque(item for item in self._outbox if _key_of(item) not in partitions)
        self._outbox_runs = {k: run for k, run in self._outbox_runs.items() if k[0] not in partitions}

    # -- the loop ---------------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self._consumer is not None and self._producer is not None
        consumer = self._consumer
        clock = self._clock
        refresh_every_s = self.link.refresh_topics_interval_seconds
        commit_every_s = self.link.offset_commit_interval_ms / 1000
        now = clock.monotonic_s()
        next_refresh, next_commit, next_progress = now + refresh_every_s, now + commit_every_s, now + PROGRESS_EVERY_S
        next_high = now
        last_progress = (0, now)  # records mirrored, and when, at the last progress line
        full_since: float | None = None  # when the producer last became full
        while not self._stop.is_set() and self._failure is None:
            if self._sparse_failure is not None and self._sparse:
                self._replay_exactly()
            if self._refresh_requested:
                self._refresh_requested = False
                self._refresh_safely()
            self._drain_outbox()
            if self._outbox:
                # Back-pressure: the producer is full. Read nothing more until it takes records again; pause the
                # source (and keep the group alive) only when it stays full (PAUSE_AFTER_FULL_S).
                now = clock.monotonic_s()
                if full_since is None:
                    full_since = now
                if not self._paused and now - full_since >= PAUSE_AFTER_FULL_S:
                    consumer.pause(consumer.assignment())
                    self._paused = True
                self._serve_reports(0.05)
                if self._paused:
                    self._handle(consumer.consume(num_messages=500, timeout=0))
            else:
                full_since = None
                if self._paused:
                    consumer.resume(consumer.assignment())
                    self._paused = False
                # What librdkafka already fetched, without waiting: consume() with a timeout waits until the batch is
                # full, which at a low rate would hold every record for the whole timeout. Nothing there: wait for
                # the first record only.
                messages = consumer.consume(num_messages=2000, timeout=0)
                self._handle(messages or consumer.consume(num_messages=1, timeout=0.1))
                self._serve_reports(0)
            now = clock.monotonic_s()
            if now >= next_commit:
                self._commit()
                next_commit = now + commit_every_s
            if now >= next_refresh:
                self._refresh_safely()
                next_refresh = now + refresh_every_s
            if now >= next_progress:
                last_progress = self._log_progress(now, *last_progress)
                next_progress = now + PROGRESS_EVERY_S
            if now >= next_high:
                self._note_high_watermarks()
                next_high = now + STATUS_EVERY_S

    def _log_progress(self, now: float, last_records: int, last_at: float) -> tuple[int, float]:
        rate = (self.stats.records_out_total - last_records) / max(now - last_at, 1e-9)
        in_flight = sum(p.in_flight_records for p in self._progress.values())
        log.info(
            "link %s: %d records mirrored (%.0f/s), %d in flight, %d partition(s)%s",
            self.name,
            self.stats.records_out_total,
            rate,
            in_flight,
            len(self._progress),
            " [paused: target not keeping up]" if self._paused else "",
        )
        return self.stats.records_out_total, now

    def _heartbeat(self, stop: threading.Event) -> None:
        """Publish the status every STATUS_EVERY_S from a thread of its own: the loop may block for a while (a
        topic refresh against a target that is down waits for its timeout) and is no less alive for it; a worker
        whose loop hangs shows as positions that stand still, and its lag grows. Only a process that is gone or
        stopped stops publishing."""
        while True:
            try:
                self._publish_status()
            except Exception:  # the loop changed what was being read (an assignment): the next beat reads again
                log.debug("link %s: status not published this time", self.name, exc_info=True)
            if stop.wait(STATUS_EVERY_S):
                return

    def _publish_status(self) -> None:
        status = self.worker_status()
        self._board.publish("links", self.link.name, self.worker, status.as_json(), status.observed_ms)

    def _refresh_safely(self) -> None:
        try:
            self.refresh_topics()
        except KafkaClientError as exc:
            log.warning("link %s: topic refresh failed (%s); the link keeps mirroring what it has", self.name, exc)
        except KafkaException as exc:
            log.warning(
                "link %s: topic refresh failed (%s); the link keeps mirroring what it has", self.name, _reason(exc)
            )

    def _handle(self, messages: list[Message]) -> None:
        if not messages:
            return
        if self._sparse:
            self._queue_sparse(messages)
        elif self._handler is None:
            self._queue_plain(messages)
        else:
            self._queue_handled(messages)
        self._drain_outbox()

    def _queue_plain(self, messages: list[Message]) -> None:
        """The per-record path of a link without a handler: one record out per record in, handed to the producer
        at once (the outbox only keeps order behind a record the producer could not take), no objects but tuples."""
        assert self._producer is not None
        routes, outbox, stats, target_id = self._routes, self._outbox, self.stats, self._target_id
        form = self.link.provenance
        produce, delivered, partial = self._producer.produce, self._delivered_plain, functools.partial
        records_in = bytes_in = 0
        last_tp: tuple[str, int] | None = None
        route: _Route | None = None
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._consumer_error(err)
                continue
            # A consumed record always has a topic, partition and offset (typing.cast is a call: not per record).
            tp: tuple[str, int] = (msg.topic(), msg.partition())  # type: ignore[assignment]
            if tp != last_tp:  # a batch holds runs of records of the same partition
                last_tp, route = tp, routes.get(tp) or self._route(tp)
            if route is None:  # revoked while this batch was in our hands
                continue
            offset: int = msg.offset()  # type: ignore[assignment]
            timestamp = msg.timestamp()[1]
            key, value = msg.key(), msg.value()
            size = (len(value) if value else 0) + (len(key) if key else 0)
            records_in += 1
            bytes_in += size
            headers: list[tuple[str, bytes | None]] | None = msg.headers()  # type: ignore[assignment]
            if headers:
                if has_visited(headers, target_id):  # it came from the target: writing it back would loop
                    stats.loop_skipped_total += 1
                    route.progress.dispatch(offset, 0, timestamp)
                    continue
                out = with_provenance(
                    headers, self._source_id, route.topic_bytes, route.partition_bytes, offset, form=form
                )
            else:
                before, name, prefix, after = route.stamp
                out = [*before, (name, prefix + b"%d" % offset), *after]
            route.progress.dispatch(offset, 1, timestamp)
            timestamp = timestamp if timestamp > 0 else 0
            if not outbox:
                try:
                    produce(
                        route.target_topic,
                        value=value,
                        key=key,
                        partition=route.target_partition,
                        timestamp=timestamp,
                        headers=out,
                        on_delivery=partial(delivered, (route, offset, timestamp, size, out)),
                    )
                    continue
                except (BufferError, KafkaException):
                    pass  # full, or an error: the outbox tries again in order and deals with it
            outbox.append(
                (
                    route.progress,
                    offset,
                    route.target_topic,
                    route.target_partition,
                    key,
                    value,
                    out,
                    timestamp,
                    tp,
                    None,
                )
            )
        stats.records_in_total += records_in
        stats.bytes_in_total += bytes_in

    def _queue_sparse(self, messages: list[Message]) -> None:  # noqa: PLR0915 - one loop: a call per record costs
        """`_queue_plain` with sparse delivery reports: each run of a partition's records in the batch is one progress
        entry, and only its last record carries a report. The newest record of the open run is held back until the
        next one shows whether it is the last; whatever ends a run (another partition, the end of the batch, a full
        producer) hands it over with the run's report."""
        assert self._producer is not None
        routes, outbox, stats, target_id = self._routes, self._outbox, self.stats, self._target_id
        form = self.link.provenance
        produce = self._producer.produce
        records_in = bytes_in = 0
        last_tp: tuple[str, int] | None = None
        route: _Route | None = None
        held: HeldRecord | None = None
        run_first = run_records = run_bytes = run_timestamp = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._consumer_error(err)
                continue
            tp: tuple[str, int] = (msg.topic(), msg.partition())  # type: ignore[assignment]
            if tp != last_tp:
                if held is not None and route is not None:
                    self._end_run(route, held, (route, run_first, held[0], run_records, run_bytes, run_timestamp))
                    held = None
                last_tp, route = tp, routes.get(tp) or self._route(tp)
            if route is None:  # revoked while this batch was in our hands
                continue
            offset: int = msg.offset()  # type: ignore[assignment]
            timestamp = msg.timestamp()[1]
            key, value = msg.key(), msg.value()
            size = (len(value) if value else 0) + (len(key) if key else 0)
            records_in += 1
            bytes_in += size
            headers: list[tuple[str, bytes | None]] | None = msg.headers()  # type: ignore[assignment]
            if headers:
                if has_visited(headers, target_id):  # it came from the target: writing it back would loop
                    stats.loop_skipped_total += 1
                    route.progress.dispatch(offset, 0, timestamp)  # done, behind the open run if there is one
                    continue
                out = with_provenance(
                    headers, self._source_id, route.topic_bytes, route.partition_bytes, offset, form=form
                )
            else:
                before, name, prefix, after = route.stamp
                out = [*before, (name, prefix + b"%d" % offset), *after]
            timestamp = timestamp if timestamp > 0 else 0
            if held is not None:
                try:
                    # Positional (topic, value, key, partition, callback, on_delivery, timestamp, headers): keyword
                    # arguments cost more than the rest of the call. No report: the run's last record proves it.
                    produce(route.target_topic, held[2], held[1], route.target_partition, None, None, held[3], held[4])
                except (BufferError, KafkaException):
                    # Full (or failing): the held record ends its run through the outbox, this one waits behind it.
                    self._end_run(route, held, (route, run_first, held[0], run_records, run_bytes, run_timestamp))
                    held = None
            if held is None:
                if outbox:  # the producer is full: keep order behind the records waiting, one report each
                    route.progress.dispatch(offset, 1, timestamp)
                    outbox.append(
                        (
                            route.progress,
                            offset,
                            route.target_topic,
                            route.target_partition,
                            key,
                            value,
                            out,
                            timestamp,
                            tp,
                            None,
                        )
                    )
                    continue
                route.progress.dispatch(offset, 1, timestamp)  # a new run: one entry for all of it
                run_first, run_records, run_bytes, run_timestamp = offset, 0, 0, timestamp
            held = (offset, key, value, timestamp, out)
            run_records += 1
            run_bytes += size
        if held is not None and route is not None:
            self._end_run(route, held, (route, run_first, held[0], run_records, run_bytes, run_timestamp))
        stats.records_in_total += records_in
        stats.bytes_in_total += bytes_in

    def _end_run(self, route: _Route, held: HeldRecord, run: RunReport) -> None:
        """Hand a run's last record to the producer with the run's report, or to the outbox when it cannot take it."""
        assert self._producer is not None
        offset, key, value, timestamp, headers = held
        route.progress.extend(offset, timestamp or None)
        if not self._outbox:
            try:
                self._producer.produce(
                    route.target_topic,
                    value=value,
                    key=key,
                    partition=route.target_partition,
                    timestamp=timestamp,
                    headers=headers,
                    on_delivery=functools.partial(self._delivered_run, run),
                )
                return
            except (BufferError, KafkaException):
                pass  # the outbox tries again in order and deals with it
        self._outbox_runs[(route.source, offset)] = run
        self._outbox.append(
            (
                route.progress,
                offset,
                route.target_topic,
                route.target_partition,
                key,
                value,
                headers,
                timestamp,
                route.source,
                None,
            )
        )

    def _delivered_run(self, run: RunReport, err: KafkaError | None, _msg: Message) -> None:
        """The report on the last record of a run (sparse mode): every record of the run is on the target, or the
        worker must find out which one was refused."""
        route, first, last, records, size, timestamp = run
        if err is not None:
            self._sparse_failed(route.source, first, last, err)
            return
        route.progress.ack_through(last)
        stats = self.stats
        stats.records_out_total += records
        stats.bytes_out_total += size
        if timestamp > 0:
            # One latency observation per run, weighted by its records, from its oldest record (see _acked).
            latency = time.time() - timestamp * 0.001
            latency = latency if latency > 0.0 else 0.0
            stats.latency_bucket_counts[bisect_left(LATENCY_BUCKETS_SECONDS, latency)] += records
            stats.latency_sum_seconds += latency * records

    def _delivered_sparse(self, item: OutboxItem, err: KafkaError | None, msg: Message) -> None:
        """The report of a record the outbox handed over in sparse mode (it may end a run)."""
        p, offset, *_rest, source, _cause = item
        run = self._outbox_runs.pop((source, offset), None)
        if run is not None:
            self._delivered_run(run, err, msg)
        elif err is not None:
            self._sparse_failed(source, offset, offset, err)
        else:
            p.ack_through(offset)
            key, value, timestamp = item[4], item[5], item[7]
            self._acked_count((len(value) if value else 0) + (len(key) if key else 0), timestamp)

    def _sparse_failed(self, source: tuple[str, int], first: int, last: int, err: KafkaError) -> None:
        if self._sparse_failure is None:
            where = f"{source[0]}[{source[1]}]@{first}" + (f"..{last}" if last != first else "")
            self._sparse_failure = f"{where}: {err.str()} ({err.name()})"

    def _replay_exactly(self) -> None:
        """After a delivery error in sparse mode: let the old producer finish, go back to what the target acknowledged
        and mirror on with a report per record, so that the refused record is named (and dead-lettered or stops the
        link) exactly as without sparse reports."""
        assert self._consumer is not None and self._producer is not None
        log.warning(
            "link %s: the target refused a record among %s; going back to the last acknowledged offsets to find it "
            "(delivery reports per record from now on; records after those offsets may be written twice)",
            self.name,
            self._sparse_failure,
        )
        self._sparse = False
        self._outbox.clear()  # read again from the acknowledged offsets
        self._outbox_runs.clear()
        old = self._producer
        with contextlib.suppress(KafkaException):  # fatal: raised once already
            old.poll(0)  # reports already in: they acknowledge what it did write
        # The rest is read again from the acknowledged offsets. A request already sent may still be written by the
        # target: those records are written twice (never lost: nothing past the acknowledged offsets is committed).
        old.purge()
        with contextlib.suppress(KafkaException):
            old.poll(0)
        seeks = []
        for key, p in self._progress.items():
            acked = p.acked
            self._progress[key] = PartitionProgress(start_offset=acked, committed=p.committed)
            if acked is not None:
                seeks.append(TopicPartition(key[0], key[1], acked))
        self._routes.clear()
        self._commit(asynchronous=False)
        try:
            for tp in seeks:
                self._consumer.seek(tp)
        except KafkaException as exc:
            self._fail(
                f"could not go back to the acknowledged offsets ({_reason(exc)}) after the target refused a record "
                f"among {self._sparse_failure}; nothing past them was committed, start the link again"
            )
            return
        self._producer = self._new_producer()
        self._producer_fatal = False

    def _route(self, tp: tuple[str, int]) -> _Route | None:
        p = self._progress.get(tp)
        if p is None:
            return None
        topic, partition = tp
        target_partition = self._target_partition(topic, partition)
        topic_bytes, partition_bytes = self._bytes_of_topic(topic), self._bytes_of_partition(partition)
        route = _Route(
            source=tp,
            progress=p,
            target_topic=self._target_topic(topic),
            target_partition=-1 if target_partition is None else target_partition,
            topic_bytes=topic_bytes,
            partition_bytes=partition_bytes,
            stamp=provenance_stamp(self._source_id, topic_bytes, partition_bytes, form=self.link.provenance),
        )
        self._routes[tp] = route
        return route

    def _queue_handled(self, messages: list[Message]) -> None:
        """The per-record path of a link with a handler: the handler sees a MirrorRecord and may return several."""
        progress, outbox = self._progress, self._outbox
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._consumer_error(err)
                continue
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            p = progress.get((topic, partition))
            if p is None:  # revoked while this batch was in our hands
                continue
            records = self._records_for(msg, topic, partition, offset)
            if records is None:
                return
            p.dispatch(offset, len(records), msg.timestamp()[1])
            for r in records:
                outbox.append(
                    (
                        p,
                        offset,
                        r.topic,
                        -1 if r.partition is None else r.partition,
                        r.key,
                        r.value,
                        r.headers,
                        r.timestamp_ms,
                        (topic, partition),
                        None,
                    )
                )

    def _records_for(self, msg: Message, topic: str, partition: int, offset: int) -> list[MirrorRecord] | None:
        """What to write for one source record: [] when nothing (it came from the target, or the handler dropped
        it); None when the handler failed (the link is failing)."""
        stats = self.stats
        key, value = msg.key(), msg.value()
        headers = cast(list[tuple[str, bytes | None]] | None, msg.headers())  # a consumer returns a list
        timestamp_ms = msg.timestamp()[1]
        stats.records_in_total += 1
        stats.bytes_in_total += (len(value) if value else 0) + (len(key) if key else 0)
        if headers and has_visited(headers, self._target_id):  # it came from the target: writing it back would loop
            stats.loop_skipped_total += 1
            return []
        record = MirrorRecord(
            topic=self._target_topic(topic),
            partition=self._target_partition(topic, partition),
            key=key,
            value=value,
            headers=with_provenance(
                headers,
                self._source_id,
                self._bytes_of_topic(topic),
                self._bytes_of_partition(partition),
                offset,
                form=self.link.provenance,
            ),
            timestamp_ms=timestamp_ms if timestamp_ms > 0 else 0,
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
        )
        if self._handler is None:
            return [record]
        try:
            records = run_handler(self._handler, record)
        except Exception as exc:
            self._fail(f"the handler {self.link.handler} failed on {topic}[{partition}]@{offset}: {exc!r}")
            return None
        if not records:
            stats.handler_dropped_total += 1
        for r in records:
            if r.topic not in self._target_partitions:
                self._create_handler_topic(r.topic, topic)
        return records

    def _create_handler_topic(self, target_topic: str, like_source_topic: str) -> None:
        """A handler sent a record to a topic the plan does not know: create it like its source topic (MirrorMaker 1
        relied on the target's auto-creation for this; these brokers, rightly, do not auto-create)."""
        partitions = self._known_source_partitions.get(like_source_topic, 1)
        existing = list_topic_partitions(self._target_admin)
        if target_topic not in existing:
            execute_plan(
                self._target_admin,
                TopicPlan(
                    mapping={},
                    source_partitions={},
                    create=(CreateTopic(target_topic, partitions, self.link.replication_factor, {}),),
                ),
            )
            existing = list_topic_partitions(self._target_admin)
            log.info(
                "link %s: created %r for the handler's records (%d partitions, like %r)",
                self.name,
                target_topic,
                partitions,
                like_source_topic,
            )
        self._target_partitions[target_topic] = existing.get(target_topic, partitions)

    def _target_topic(self, topic: str) -> str:
        target = self._topic_map.get(topic)
        if target is None:
            target = self._topic_map[topic] = self._rename.target_topic(topic)
        return target

    def _target_partition(self, topic: str, partition: int) -> int | None:
        mode = self.link.partitioning
        if mode == "preserve":
            return partition
        if mode == "modulo":
            count = self._target_partitions.get(self._target_topic(topic), 0)
            return partition % count if count else partition
        return None  # hash: the producer's murmur2 partitioner, by key

    def _bytes_of_topic(self, topic: str) -> bytes:
        cached = self._topic_bytes.get(topic)
        if cached is None:
            cached = self._topic_bytes[topic] = topic.encode()
        return cached

    def _bytes_of_partition(self, partition: int) -> bytes:
        cached = self._partition_bytes.get(partition)
        if cached is None:
            cached = self._partition_bytes[partition] = str(partition).encode()
        return cached

    def _drain_outbox(self) -> None:
        outbox = self._outbox
        if not outbox:
            return
        assert self._producer is not None
        produce = self._producer.produce
        delivered = self._delivered_sparse if self._sparse else self._delivered
        while outbox:
            item = outbox[0]
            _p, _offset, topic, partition, key, value, headers, timestamp, _source, dead_letter_cause = item
            if dead_letter_cause is not None:
                topic, partition = self.link.dead_letter_topic or "", -1
                headers = _dead_letter_headers(item[6], item[2], item[3], dead_letter_cause)
            try:
                produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    timestamp=timestamp,
                    headers=headers,
                    on_delivery=functools.partial(delivered, item),
                )
            except BufferError:
                return  # full: the loop reads nothing more until delivery reports make room
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() in TOPIC_NOT_READY_CODES:
                    # The target topic or partition is not known to the producer yet (just created or grown):
                    # make sure it exists, and make the producer ask the broker instead of its cached metadata.
                    self._refresh_requested = True
                    with contextlib.suppress(KafkaException):
                        self._producer.list_topics(topic, timeout=5)
                    self._serve_reports(0.2)
                    return
                outbox.popleft()
                self._send_failed(item, error)
                continue
            outbox.popleft()

    def _delivered(self, item: OutboxItem, err: KafkaError | None, _msg: Message) -> None:
        p, offset, _topic, _partition, key, value, _headers, timestamp, _source, dead_letter_cause = item
        if err is not None:
            self._send_failed(item, err)
        elif dead_letter_cause is not None:
            p.ack(offset)
            self.stats.dead_lettered_total += 1
        else:
            self._acked(p, offset, (len(value) if value else 0) + (len(key) if key else 0), timestamp)

    def _delivered_plain(self, item: PlainItem, err: KafkaError | None, msg: Message) -> None:
        """The delivery report of a record `_queue_plain` handed to the producer itself."""
        route, offset, timestamp, size, headers = item
        if err is None:
            self._acked(route.progress, offset, size, timestamp)
            return
        # The report carries the key and value (not the headers): the refused record as the outbox holds it.
        self._send_failed(
            (
                route.progress,
                offset,
                route.target_topic,
                route.target_partition,
                msg.key(),
                msg.value(),
                headers,
                timestamp,
                route.source,
                None,
            ),
            err,
        )

    def _acked(self, p: PartitionProgress, offset: int, size: int, timestamp: int) -> None:
        p.ack(offset)
        self._acked_count(size, timestamp)

    def _acked_count(self, size: int, timestamp: int) -> None:
        stats = self.stats
        stats.records_out_total += 1
        stats.bytes_out_total += size
        if timestamp > 0:
            # stats.observe_latency, inlined: this runs once per record (0 when the source's clock is ahead of ours)
            latency = time.time() - timestamp * 0.001
            latency = latency if latency > 0.0 else 0.0
            stats.latency_bucket_counts[bisect_left(LATENCY_BUCKETS_SECONDS, latency)] += 1
            stats.latency_sum_seconds += latency

    def _send_failed(self, item: OutboxItem, err: KafkaError) -> None:
        """The target refused a record for good (librdkafka already retried what can be retried)."""
        _p, offset, topic, _partition, *_rest, (source_topic, source_partition), dead_letter_cause = item
        if self._sparse:  # which record is not known for sure: find it by replaying with a report per record
            self._sparse_failed((source_topic, source_partition), offset, offset, err)
            return
        self.stats.send_errors_total += 1
        where = f"{source_topic}[{source_partition}]@{offset}"
        if err.fatal():
            self._fail(f"the producer hit a fatal error on {where}: {err.str()} ({err.name()}); restart the link")
        elif dead_letter_cause is not None:
            self._fail(
                f"the dead-letter topic {self.link.dead_letter_topic!r} refused {where} too: {err.str()} ({err.name()})"
            )
        elif self.link.dead_letter_topic:
            log.error(
                "link %s: the target refused %s for %s: %s (%s); sending it to the dead-letter topic %r",
                self.name,
                where,
                topic,
                err.str(),
                err.name(),
                self.link.dead_letter_topic,
            )
            self._outbox.appendleft((*item[:9], err))
        else:
            self._fail(
                f"the target refused {where} for topic {topic!r}: {err.str()} ({err.name()}). The link stopped "
                "without committing past this record, so nothing is lost; fix the target (e.g. the topic's "
                "max.message.bytes) or set the link's dead_letter_topic, then start it again"
            )

    def _serve_reports(self, timeout_s: float) -> None:
        """producer.poll(): delivery reports run as callbacks here. A fatal producer error (the idempotent producer
        cannot go on without a gap) is raised here, not reported to error_cb; the producer's queue then stays stuck."""
        assert self._producer is not None
        try:
            self._producer.poll(timeout_s)
        except KafkaException as exc:
            self._producer_failed(exc)

    def _flush(self, timeout_s: float) -> int:
        """producer.flush(), as `_serve_reports`; what a fatal producer still holds is purged (read again later).
        Returns how many records are still not acknowledged."""
        producer = self._producer
        assert producer is not None
        try:
            remaining = producer.flush(0 if self._producer_fatal else timeout_s)
        except KafkaException as exc:
            self._producer_failed(exc)
            remaining = len(producer)
        if self._producer_fatal and remaining:
            producer.purge()
            with contextlib.suppress(KafkaException):
                producer.poll(0)
        return remaining

    def _producer_failed(self, exc: KafkaException) -> None:
        error: KafkaError = exc.args[0]
        self._producer_fatal = True
        if self._sparse:
            if self._sparse_failure is None:
                self._sparse_failure = f"the records in flight ({error.str()})"
        else:
            self._fail(f"the producer hit a fatal error: {error.str()} ({error.name()}); restart the link")

    def _consumer_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal():
            self._fail(f"the source consumer hit a fatal error: {err.str()} ({err.name()})")
            return
        log.warning("link %s: source consumer: %s (%s)", self.name, err.str(), err.name())

    def _fail(self, message: str) -> None:
        if self._failure is None:
            self._failure = f"link {self.name}: {message}"
            log.error("%s", self._failure)

    # -- commits ----------------------------------------------------------------------------------------------------

    def _commit(self, keys: set[tuple[str, int]] | None = None, *, asynchronous: bool = True) -> None:
        if self._consumer is None:
            return
        offsets = []
        for key, p in self._progress.items():
            if keys is not None and key not in keys:
                continue
            offset = p.offset_to_commit()
            if offset is not None:
                offsets.append(TopicPartition(key[0], key[1], offset))
        if not offsets:
            return
        try:
            if asynchronous:
                self._consumer.commit(offsets=offsets, asynchronous=True)  # marked in _on_commit
            else:
                self._mark_committed(self._consumer.commit(offsets=offsets, asynchronous=False))
        except KafkaException as exc:
            log.warning("link %s: commit failed (%s); it is retried at the next interval", self.name, _reason(exc))

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            log.warning("link %s: commit failed (%s); it is retried at the next interval", self.name, err.str())
            return
        self._mark_committed(partitions)

    def _mark_committed(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            p = self._progress.get((tp.topic, tp.partition))
            if p is not None and tp.error is None and tp.offset >= 0:
                p.mark_committed(tp.offset)

    # -- shutdown ---------------------------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        consumer, producer = self._consumer, self._producer
        if consumer is None or producer is None:
            return
        try:
            assignment = consumer.assignment()
            if assignment:
                consumer.pause(assignment)  # stop fetching
            self._outbox.clear()  # not handed to the producer: read again after restart
            remaining = self._flush(SHUTDOWN_FLUSH_S)
            if self._sparse_failure is not None and self._sparse:
                log.warning(
                    "link %s: stopped before finding which record the target refused among %s; nothing past the "
                    "acknowledged offsets is committed, and the record is named when the link runs again",
                    self.name,
                    self._sparse_failure,
                )
            if remaining:
                log.warning(
                    "link %s: %d record(s) not acknowledged within %gs; they will be mirrored again after restart",
                    self.name,
                    remaining,
                    SHUTDOWN_FLUSH_S,
                )
            self._commit(asynchronous=False)
        finally:
            consumer.close()  # leaves the group; on_revoke commits again (nothing new by now)
            self._flush(1)
        log.info("link %s: stopped after mirroring %d records", self.name, self.stats.records_out_total)


def _key_of(item: OutboxItem) -> tuple[str, int]:
    return item[8]


def _dead_letter_headers(
    headers: list[tuple[str, HeaderValue]], topic: str, partition: int | None, cause: KafkaError
) -> list[tuple[str, HeaderValue]]:
    """The refused record's headers plus why and where it was refused (`partition` -1 or None: by key)."""
    return [
        *headers,
        ("mirrorwatch.error.code", cause.name().encode()),
        ("mirrorwatch.error.message", cause.str().encode()),
        ("mirrorwatch.target.topic", topic.encode()),
        ("mirrorwatch.target.partition", str(partition if partition is not None else -1).encode()),
    ]


def _reveal(properties: dict[str, Any]) -> dict[str, Any]:
    return {k: v.get_secret_value() if hasattr(v, "get_secret_value") else v for k, v in properties.items()}


def _reason(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else exc
    return error.str() if isinstance(error, KafkaError) else str(error)


def _tps(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"
