"""The life of a link worker, whatever its delivery guarantee: connect to both clusters (retrying with a log line),
refuse a link that would mirror a cluster onto itself, create the source consumer, publish the worker's status from a
heartbeat thread, run the engine's loop, shut down, and stop the link with its reason when a part failed.

`mirror.engine.LinkWorker` (at-least-once) and `mirror.transactional.TransactionalLinkWorker` (exactly-once) are
the two loops on top; both compose the same parts: the topic keeper, the router and the client settings."""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import asdict, replace
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kernel.acl import DenialLog
from kernel.byte_rate import format_byte_rate
from kernel.clock import Clock, SystemClock
from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.gap_ledger import GapLedger
from kernel.kafka import error_text, new_admin, new_consumer, new_producer
from kernel.link_control import LinkControl
from kernel.progress_topic import ProgressReader, StatusOut
from kernel.rename import rename_policy
from kernel.sharing import PER_BEAT
from kernel.status_board import HOST, PIDS
from kernel.worker_status import PartitionPosition, WorkerStatus
from mirror.admin import link_cluster_ids
from mirror.client_stats import ClientStats, summarize
from mirror.failure import LinkFailure, MirrorFailure
from mirror.flow import Budget, FlowWindow, Silence, worker_budget
from mirror.gaps import truncated_at
from mirror.handler import load_handler
from mirror.highs import SeenHighs
from mirror.hold import OperatorHold
from mirror.progress import PartitionProgress, catching_up, status_rest_s
from mirror.routes import Router
from mirror.settings import PRODUCER_DEFAULTS, consumer_settings, producer_settings
from mirror.stats import LinkStats
from mirror.topic_keeper import Survey, Surveyor, TopicKeeper, refuse_loop
from mirror.topics import ConfigDrift, TopicPlan

__all__ = ["SHUTDOWN_FLUSH_S", "STATUS_EVERY_S", "MirrorFailure", "WorkerBase", "read_from", "writer_fields"]

log = logging.getLogger("mirrorwatch.mirror")

SHUTDOWN_FLUSH_S = 30.0  # how long a stopping or rebalancing worker waits for the target to acknowledge

# librdkafka names the topic in the text of some consumer errors only ("Subscribed topic not available: T: ...").
_TOPIC_IN_ERROR = re.compile(r"topic not available: (\S+?):")

# How often the status the monitor reads (when in another process) is rewritten (`_heartbeat`): the last status of a
# worker that is killed is at most this old, and so is what the monitor believes of the records it had acknowledged.
STATUS_EVERY_S = 0.5
# ... and while it catches up (`mirror.progress.catching_up`): the monitor reads the statuses when it serves a figure
CATCHING_UP_EVERY_S = 0.1
CONTROL_WAIT_S = 10.0  # a starting worker's wait for the link's control on the target's progress topic


def writer_fields(config: MirrorwatchConfig, link: LinkConfig, worker: int) -> dict[str, Any]:
    """What every engine's WorkerStatus says of who writes it: this process (host, pid), the worker it is across
    restarts (its host, state directory and number: a process on another host or with a state of its own is another
    worker, however it is numbered) and the link."""
    return {
        "host": HOST,
        "pid": os.getpid(),
        "pids": PIDS,
        "instance": f"{HOST}:{config.state_path}#{worker}",
        "source": link.source,
        "target": link.target,
        "consumer_group": link.consumer_group,
        "delivery": link.delivery,
    }


class WorkerBase:
    """Mirrors one link until `stop` is set or the link fails. `run()` returns the CLI exit code; the engine's loop is
    `_loop`, its positions `_partition_positions`."""

    ENGINE = "python"

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
        self._fail = LinkFailure(self.name)
        self._rename = rename_policy(link.rename, link.source)
        self._progress: dict[tuple[str, int], PartitionProgress] = {}
        self._client_stats: dict[str, ClientStats] = {}
        self._paused = False
        self._reading_since_ms: int | None = 0  # since when the loop reads (None: held by back-pressure)
        self._batch_bytes = 0  # the producer's batch.size
        # Clients (and the parts that hold them) are created in run(), never here.
        self._keeper: TopicKeeper | None = None
        self._surveyor: Surveyor | None = None  # the refresh rounds after the first, off the loop
        self._router: Router | None = None
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._source_admin: AdminClient | None = None
        self._target_admin: AdminClient | None = None
        self._board = StatusOut(config, link.target, self.name, link.source)  # the status file and the progress topic
        self._denials = DenialLog(log, f"link {self.name}")  # a missing ACL: one line, not a warning per retry
        self._ledger = GapLedger(config.state_path / "lost", link.name)
        self._stopped: dict[tuple[str, int], str] = {}  # partitions this worker stopped mirroring alone, and why
        # `mirrorwatch link pause|resume` on this host (its file) or any (the target's progress topic: _follow_controls)
        self._controls: ProgressReader | None = None
        self._hold = OperatorHold(config.state_path, link.name, self.name, self._published_control)
        self._cooperative = True  # the group's rebalance protocol (its assignors: all cooperative-sticky)
        self._highs = SeenHighs()  # what the consumer saw of the high-watermarks, and what a status states
        self._silence = Silence()  # since when the target acknowledged nothing with records waiting (mirror.flow)
        self._budget = Budget()  # the link's bandwidth budget, this worker's share (mirror.flow)
        self._status_due = threading.Event()  # a status now, not at the next beat (a backlog acknowledged at once)

    # -- public view ------------------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.link.name if self.link.num_streams == 1 else f"{self.link.name}#{self.worker}"

    @property
    def _failure(self) -> str | None:
        return self._fail.message

    def positions(self) -> list[dict[str, Any]]:
        """Per source partition: consumed, acked and committed positions, in-flight records, last timestamp."""
        return [asdict(p) for p in self._partition_positions()]

    def _partition_positions(self) -> tuple[PartitionPosition, ...]:
        raise NotImplementedError

    def _released_positions(self) -> tuple[PartitionPosition, ...]:
        """Partitions no longer owned, with what was acknowledged of them (see WorkerStatus.released)."""
        return ()

    def _stated_highs(self) -> dict[tuple[str, int], int]:
        """The high-watermarks a status states as of its own moment (`mirror.highs`)."""
        return self._highs.stated()

    def _note_highs(self, partitions: Iterable[tuple[str, int]]) -> None:
        """From the loop only (the consumer is the loop's alone: from another thread its calls wait for consume())."""
        self._highs.note(functools.partial(_raw_highs, self._consumer), partitions)

    def _on_consumer_error(self, error: KafkaError) -> None:
        """A source broker lost (served in consume(); librdkafka's lines say it) stales the cached high-watermarks."""
        log.debug("link %s: source consumer error: %s", self.name, error.str())
        if error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            self._highs.lost(functools.partial(_raw_highs, self._consumer), self._progress, self._clock.now_ms())

    def _target_topic(self, topic: str) -> str:
        return self._keeper.topic_map.get(topic, self._rename.target_topic(topic)) if self._keeper else topic

    def config_drift(self) -> tuple[ConfigDrift, ...]:
        return self._keeper.drift if self._keeper is not None else ()

    def worker_status(self) -> WorkerStatus:
        """Everything about this worker, at this moment (the worker-status contract the monitor reads)."""
        router, hold = self._router, self._hold
        partitions = tuple(replace(p, paused=hold.paused((p.topic, p.partition))) for p in self._partition_positions())
        state = "throttled" if self._paused else "running"
        if partitions and all(p.paused for p in partitions):
            state = "paused"
        return WorkerStatus(
            link=self.link.name,
            worker=self.worker,
            engine=self.ENGINE,
            observed_ms=self._clock.now_ms(),
            publish_interval_ms=int(STATUS_EVERY_S * 1000),
            state="failed" if self._failure else state,
            partitions=partitions,
            failure=self._failure,
            **writer_fields(self.config, self.link, self.worker),
            source_cluster_id=(router.source_id.decode() or None) if router else None,
            target_cluster_id=(router.target_id.decode() or None) if router else None,
            stats={
                **self.stats.as_dict(),
                "budget_bytes_per_second": self._budget.rate or 0,  # this worker's share
                "budget_link_bytes_per_second": self._budget.of_link or 0,  # of the link's, as the loop obeys it
                "budget_throttled_seconds_total": self._budget.throttled_s,
            },
            clients={role: s.as_dict() for role, s in self._client_stats.items()},
            config_drift=tuple(asdict(d) for d in self.config_drift()),
            config_synced=self._keeper.synced if self._keeper is not None else (),
            released=self._released_positions(),
            gaps=self._ledger.gaps(),
            drift_report=self._keeper.drift_report if self._keeper is not None else {},
            highs_stale_since_ms=self._highs.stale_since_ms,
            target_silent_since_ms=self._silence.since_ms,
        )

    def status(self) -> dict[str, Any]:
        """Everything about this worker as JSON-able data (what `/mirror/links` serves)."""
        return self.worker_status().as_json()

    def _on_client_stats(self, stats_json: str) -> None:
        summary = summarize(stats_json)
        self._client_stats[summary.role] = summary
        cache = functools.partial(_raw_highs, self._consumer) if self._consumer is not None else None
        self._highs.heard(summary, self._clock.now_ms(), self._fetching_since_ms(), cache, self._progress)

    def _window_room(self, window: FlowWindow) -> int:
        """How many more records the producer may be given now (none: back-pressure, as when it is full): what its
        flow window and the link's bandwidth budget leave (mirror.flow)."""
        waiting = len(self._producer) if self._producer is not None else 0
        now = self._clock.monotonic_s()
        self._silence.note(now, self._clock.now_ms(), self.stats.records_out_total, waiting, name=self.name)
        room = window.room(now, self.stats, waiting)
        budget = self._budget_room()  # the bandwidth budget's: none left, held too
        return room if budget is None else min(room, budget)

    def _budget_room(self) -> int | None:
        """Records this worker's share of the link's bandwidth budget lets the loop read now (None: no budget), the
        budget as the operator set it last (`mirrorwatch link budget`, read with the control document) or the
        config's."""
        now = self._clock.monotonic_s()
        known = self._keeper.known_source_partitions if self._keeper is not None else {}
        self._budget.of_link = self._hold.control.budget_of(self.link.max_bytes_per_second)
        rate = worker_budget(
            self._budget.of_link,
            self.link.worker_max_bytes_per_second,
            owned=self._owned(),
            total=sum(known.values()),
        )
        if self._budget.set_rate(rate, now):
            link_rate = format_byte_rate(self._budget.of_link)
            log.info("link %s: bandwidth budget %s (the link's: %s)", self.name, format_byte_rate(rate), link_rate)
        average = self.stats.average_record_bytes() if self.stats.records_in_total else None
        return self._budget.room(now, self.stats.bytes_in_total, average)

    def _owned(self) -> int:
        return len(self._progress)

    def _fetching_since_ms(self) -> int | None:  # the at-least-once loop: None while back-pressure holds it
        return 0

    # -- run --------------------------------------------------------------------------------------------------------

    def run(self) -> int:
        link, config = self.link, self.config
        self._source_admin, self._target_admin = (new_admin(config.clusters[a], a) for a in (link.source, link.target))
        ids = link_cluster_ids(config, link, (self._source_admin, self._target_admin), self._stop, name=self.name)
        if ids is None:
            return 0  # stopped before both clusters answered: nothing was read, nothing to commit
        refuse_loop(config, link, *ids)
        self._ledger = GapLedger(config.state_path / "lost", link.name)  # as claimed (mirror.cluster_notes)
        self._keeper = TopicKeeper(
            config,
            link,
            name=self.name,
            source_admin=self._source_admin,
            target_admin=self._target_admin,
            same_cluster=ids[0] == ids[1],
        )
        self._router = Router(link, self._keeper, self._progress, self.stats, self._fail)
        self._router.source_id, self._router.target_id = ids[0].encode(), ids[1].encode()
        if link.handler:
            index = config.links.index(link)
            self._router.handler = load_handler(link.handler, link.handler_args, path=f"links[{index}].handler")
        self._start()
        settings = consumer_settings(
            config,
            link,
            f"mirrorwatch-{self.name}",
            on_commit=self._on_commit,
            stats_cb=self._on_client_stats,
            error_cb=self._on_consumer_error,
        )
        strategies = str(settings.get("partition.assignment.strategy", "")).split(",")
        self._cooperative = all(s.strip() == "cooperative-sticky" for s in strategies)
        self._consumer = new_consumer(config.clusters[link.source], link.source, link.consumer_group, settings)
        self._follow_controls()
        self._share_facts()  # the gaps found on other hosts, before the first status
        self._hold.read()  # before the first assignment: a link paused before its start reads nothing
        heartbeat_stop = threading.Event()
        heartbeat = threading.Thread(
            target=self._heartbeat, args=(heartbeat_stop,), name=f"status-{self.name}", daemon=True
        )
        heartbeat.start()
        try:
            self._prepare()
            self.refresh_topics()  # before the producer: its batch size depends on the target topics
            self._producer = self._new_producer()
            self._surveyor = Surveyor(self._keeper, link.refresh_topics_interval_seconds, name=self.name)
            self._surveyor.start()
            self._loop()
        finally:
            if self._surveyor is not None:
                self._surveyor.close()
            if self._controls is not None:
                self._controls.stop()
            self._shutdown()
            heartbeat_stop.set()
            self._status_due.set()
            heartbeat.join(timeout=10)
            if self._failure is None:
                self._board.withdraw("links", self.link.name, self.worker)
            else:
                self._publish_status()  # the failure stays visible until the file goes stale
            self._share_facts(limit=None)  # those of the last moments: taken before the publisher closes
            self._board.close()
        if self._failure is not None:
            raise MirrorFailure(self._failure)
        return 0

    def _start(self) -> None:
        """Decisions between connecting and creating the consumer (the at-least-once worker picks its reports)."""

    def _prepare(self) -> None:
        """Set-up between creating the consumer and the first topic refresh (exactly-once reads its offsets here)."""

    def _producer_overrides(self) -> dict[str, Any]:
        return producer_settings(self.config, self.link, f"mirrorwatch-{self.name}", stats_cb=self._on_client_stats)

    def _new_producer(self) -> Producer:
        assert self._keeper is not None
        overrides = self._producer_overrides()
        self._batch_bytes = overrides["batch.size"] = capped_batch(
            overrides, self._keeper.smallest_target_limit, self.name
        )
        return new_producer(self.config.clusters[self.link.target], self.link.target, overrides)

    def _loop(self) -> None:
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            self._group_denied(err)
            return
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            log.warning("link %s: commit failed (%s); it is retried at the next interval", self.name, error_text(err))
            return
        self._denials.allowed("Read", "group", (self.link.consumer_group,))
        self._mark_committed(partitions)

    def _group_denied(self, err: KafkaError) -> None:
        self._denials.denied("Read", "group", self.link.consumer_group, f"source: {error_text(err)}")

    def _topics_readable(self, topics: Iterable[str]) -> None:
        """Partitions of these topics were assigned: the source lets the link read them (again)."""
        self._denials.allowed("Read", "topic", topics)

    def _mark_committed(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            p = self._progress.get((tp.topic, tp.partition))
            if p is not None and tp.error is None and tp.offset >= 0:
                p.mark_committed(tp.offset)

    def refresh_topics(self) -> TopicPlan:
        """A refresh round here and now: the first, before the loop (the producer's batch size depends on the target
        topics). The loop's rounds run on the surveyor's thread (`_take_survey`)."""
        assert self._keeper is not None
        return self._adopt(self._keeper.survey())

    def _adopt(self, survey: Survey) -> TopicPlan:
        """Take what a refresh round found, in the loop between records (routes and subscriptions change only here)."""
        assert self._keeper is not None
        plan = self._keeper.adopt(survey)
        # A mirrored topic the source now hides from this principal drops out of the selection like a deleted one,
        # often before any fetch of it is refused: say the refusal (once) all the same. Kafka answers a principal
        # without Describe on a name the same whether the topic exists or not, so the reason says both.
        for topic in self._keeper.refused:
            reason = "source: no longer listed and may not be described: an ACL was removed, or the topic deleted"
            self._denials.denied("Read", "topic", topic, reason)
        return plan

    def _take_survey(self) -> None:
        """Adopt the surveyor's round if one finished (the loop calls this every turn: it never waits)."""
        survey = self._surveyor.take() if self._surveyor is not None else None
        if survey is not None:
            self._adopt(survey)

    def _follow_controls(self) -> None:
        """The link's control as an operator on any host published it last on the target's progress topic, read to
        its end before the first assignment (at most CONTROL_WAIT_S: a target that does not answer leaves this
        host's document alone in force until it does), then tailed."""
        if not self.config.progress.enabled:
            return
        topic, target = self.config.progress.topic, self.link.target
        names = frozenset({self.link.name})
        self._controls = ProgressReader(self.config.clusters[target], target, topic, names, "mirror")
        self._controls.start()
        if not self._controls.wait_caught_up(CONTROL_WAIT_S):
            log.warning(
                "link %s: the link's control on progress topic %r of cluster %r not read within %g s: this host's "
                "control document alone until it is",
                self.name,
                topic,
                self.link.target,
                CONTROL_WAIT_S,
            )

    def _share_facts(self, limit: int | None = PER_BEAT) -> None:
        """The link's ledgers and its progress topic in step, from the status thread (`mirror.gap_worker`)."""

    def _published_control(self) -> LinkControl | None:
        return self._controls.control(self.link.name) if self._controls is not None else None

    def _request_refresh(self) -> None:
        """A refresh round as soon as possible (a new source partition, a target topic the producer does not know)."""
        if self._surveyor is not None:
            self._surveyor.request()

    def _heartbeat(self, stop: threading.Event) -> None:
        """Publish the status every STATUS_EVERY_S from a thread of its own: the loop may block for a while (a
        topic refresh against a target that is down waits for its timeout) and is no less alive for it; a worker
        whose loop hangs shows as positions that stand still, and its lag grows. Only a process that is gone or
        stopped stops publishing. Each beat reads the link's control document too (`mirror.hold`). Catching up, every
        CATCHING_UP_EVERY_S (`catching_up`); asked (`_status_due`), at once after a rest (`status_rest_s`)."""
        acked: dict[tuple[str, int], int | None] = {}
        while True:
            every, began = STATUS_EVERY_S, self._clock.monotonic_s()
            try:
                self._hold.read()
                status = self._publish_status()
                now = {(p.topic, p.partition): p.acked for p in status.partitions}
                if catching_up(acked, now, self._newest_read_ms(), status.observed_ms):
                    every = CATCHING_UP_EVERY_S
                acked = now
                self._share_facts()
            except Exception:  # the loop changed what was being read (an assignment): the next beat reads again
                log.debug("link %s: status not published this time", self.name, exc_info=True)
            rest = status_rest_s(self._clock.monotonic_s() - began, STATUS_EVERY_S)
            if not stop.wait(rest):
                self._status_due.wait(max(0.0, every - rest))
            self._status_due.clear()
            if stop.is_set():
                return

    def _newest_read_ms(self) -> dict[tuple[str, int], int | None]:
        """Per owned partition, the timestamp of the newest record read (`mirror.progress.catching_up`)."""
        return {key: p.last_timestamp_ms for key, p in list(self._progress.items())}

    def _publish_status(self) -> WorkerStatus:
        status = self.worker_status()
        self._board.publish("links", self.link.name, self.worker, status.as_json(), status.observed_ms)
        return status

    def _consumer_error(self, err: KafkaError, topic: str | None = None, msg: Message | None = None) -> None:
        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            return
        if code == KafkaError._AUTO_OFFSET_RESET and msg is not None and msg.topic() is not None:
            where = f"{msg.topic()}[{msg.partition()}]"
            try:
                self._out_of_range(msg.topic() or "", msg.partition() or 0, msg.offset(), truncated_at(err.str()))
            except KafkaException as exc:  # the partition cannot be read from where it must: stop, said, not a crash
                self._fail(f"cannot go on reading {where} after its offset was refused: {error_text(exc)}")
            return
        if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            named = topic or (m.group(1) if (m := _TOPIC_IN_ERROR.search(err.str())) else "(a mirrored topic)")
            self._denials.denied("Read", "topic", named, f"source: {error_text(err)}")
            return
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            self._group_denied(err)
            return
        if err.fatal():
            self._fail(f"the source consumer hit a fatal error: {error_text(err)}")
            return
        log.warning("link %s: source consumer: %s", self.name, error_text(err))

    def _out_of_range(self, topic: str, partition: int, offset: int | None, truncated: int | None = None) -> None:
        raise NotImplementedError  # `mirror.gap_worker.GapWorker`


def capped_batch(overrides: dict[str, Any], smallest: int | None, name: str) -> int:
    """The producer's batch.size. A batch larger than a target topic's max.message.bytes is refused whole, good
    records with the bad one. librdkafka sends a record larger than batch.size alone, so capping batch.size at the
    smallest limit makes the broker refuse exactly the records that are too large and nothing else."""
    configured = int(overrides.get("batch.size", PRODUCER_DEFAULTS["batch.size"]))
    if smallest is not None and smallest < configured:
        log.info(
            "link %s: producer batch.size %d (the smallest max.message.bytes of the target topics)", name, smallest
        )
        return smallest
    return configured


def read_from(consumer: Consumer, at: TopicPartition) -> None:
    """Make the consumer read `at.partition` from `at.offset`. After an offset-reset error librdkafka has stopped
    fetching the partition and refuses a seek (`_STATE`, librdkafka#2961): the partition is assigned to this consumer
    again at that offset instead (incrementally under the cooperative protocol, the whole assignment otherwise, every
    other partition at its position)."""
    try:
        consumer.seek(at)
        return
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._STATE:
            raise
    here = TopicPartition(at.topic, at.partition)
    try:
        consumer.incremental_unassign([here])
        consumer.incremental_assign([at])
    except KafkaException:  # an eager assignor (range, roundrobin): assign() replaces the whole assignment
        others = [
            tp
            for tp in consumer.position(consumer.assignment())
            if (tp.topic, tp.partition) != (at.topic, at.partition)
        ]
        consumer.assign([*others, at])


def _raw_highs(consumer: Consumer | None, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """What the consumer's last fetch responses said of each partition's high-watermark (no broker request)."""
    seen: dict[tuple[str, int], int] = {}
    if consumer is None:
        return seen
    for topic, partition in list(partitions):
        try:
            _, cached = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        except (KafkaException, RuntimeError):
            continue
        if cached >= 0:
            seen[(topic, partition)] = cached
    return seen
