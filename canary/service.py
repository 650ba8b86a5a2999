"""The canary's I/O shell: probe topics, one producer per source cluster, read-back consumers, the schedule.

Every `canary.interval_seconds` (APScheduler, coalesced, one run at a time) one probe per partition of the probe
topic goes to each link's source with acks=all. A consumer per link reads the mirrored probe topic on the link's
target (its name follows the link's rename policy) and a consumer per source cluster reads the probe topic there, so
the source round trip (broker latency) and the end-to-end latency (broker + mirror) can be told apart. Consumers are
assigned partitions directly, positioned at the end before the first probe is sent (a target topic that does not
exist yet is read from its beginning once the mirror creates it), and never commit: the canary joins no group, so it
never shows up as a lagging consumer itself.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic

from canary.probe import Probe, decode_probe, is_signed
from canary.topic import CanaryTopicPlan, plan_canary_topic
from canary.tracker import QUANTILE_WINDOW_S, Histogram, LinkView, Tracker, quantile
from kernel.clock import Clock, SystemClock
from kernel.config import CanaryConfig, ClusterConfig, LinkConfig
from kernel.errors import ConfigError, ConfigProblem
from kernel.kafka import already_exists, error_text, headers_of, new_admin, new_consumer, new_producer
from kernel.rename import rename_policy
from kernel.status_board import StatusBoard

__all__ = ["CanaryService", "canary_links"]

log = logging.getLogger("mirrorwatch.canary")

TIMEOUT_S = 15.0
METADATA_REFRESH_S = 30.0
UNSIGNED_SAID_EVERY_S = 60.0


def canary_links(links: Sequence[LinkConfig]) -> list[LinkConfig]:
    if not links:
        raise ConfigError([ConfigProblem("links", "the canary probes links, and the config has none")])
    return list(links)


@dataclass
class _Reader:
    """One read-back consumer: the target of a link (`link` set) or a source cluster (`link` None)."""

    alias: str
    topic: str
    link: str | None
    consumer: Consumer
    assigned: set[int] = field(default_factory=set)
    next_refresh_s: float = 0.0


class CanaryService:
    def __init__(
        self,
        settings: CanaryConfig,
        clusters: Mapping[str, ClusterConfig],
        links: Sequence[LinkConfig],
        *,
        state_path: Path,
        clock: Clock | None = None,
    ) -> None:
        """`settings`: the canary's own section; `clusters` and `links`: what it probes; `state_path`: where it
        publishes its status for the HTTP API of another process."""
        self.settings, self.clusters = settings, dict(clusters)
        self.links = canary_links(links)
        self.instance = uuid.uuid4().hex
        self._clock = clock or SystemClock()
        canary = settings
        self.tracker = Tracker(
            self.instance,
            [link.name for link in self.links],
            interval_s=canary.interval_seconds,
            sla_s=canary.sla_seconds,
            absent_after_intervals=canary.absent_after_intervals,
            now_ns=self._clock.now_ns(),
        )
        self._lock = threading.Lock()  # guards the tracker
        self._round = threading.Lock()  # one probe round at a time (the first one runs from start())
        self._stop = threading.Event()
        self._admins: dict[str, AdminClient] = {}
        self._producers: dict[str, Producer] = {}
        self._readers: list[_Reader] = []
        self._partitions: dict[str, int] = {}  # source alias -> probe topic partitions
        self._threads: list[threading.Thread] = []
        self._scheduler: BackgroundScheduler | None = None
        self.plans: dict[str, CanaryTopicPlan] = {}
        self._board = StatusBoard(state_path / "status")
        key = settings.signing_key
        self._key = key.get_secret_value().encode() if key is not None else None
        self._unsigned = 0  # probes refused for a missing or wrong signature (said once a minute)
        self._unsigned_said_s = -UNSIGNED_SAID_EVERY_S

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        topic = self.settings.topic
        for alias in sorted({link.source for link in self.links}):
            self._producers[alias] = new_producer(
                self.clusters[alias],
                alias,
                {
                    "acks": "all",
                    "linger.ms": 0,
                    "message.timeout.ms": int(min(max(self.settings.sla_seconds, 5), 120) * 1000),
                    "client.id": f"mirrorwatch-canary-{alias}",
                },
            )
            self._readers.append(_Reader(alias, topic, None, self._consumer(alias, "source")))
        for link in self.links:
            target_topic = rename_policy(link.rename, link.source).target_topic(topic)
            self._readers.append(_Reader(link.target, target_topic, link.name, self._consumer(link.target, link.name)))
        # Position every reader before the first probe, so none is missed; a cluster that is down is retried.
        for reader in self._readers:
            self._refresh(reader, first=True)
        for alias, producer in self._producers.items():
            self._threads.append(
                threading.Thread(target=self._poll_producer, args=(producer,), name=f"canary-ack-{alias}", daemon=True)
            )
        for reader in self._readers:
            name = f"canary-read-{reader.link or 'source'}-{reader.alias}"
            self._threads.append(threading.Thread(target=self._read, args=(reader,), name=name, daemon=True))
        for thread in self._threads:
            thread.start()
        scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None})
        scheduler.add_job(self.probe_round, "interval", seconds=self.settings.interval_seconds, id="canary")
        scheduler.start()
        self._scheduler = scheduler
        self.probe_round()  # the first round now, not one interval from now
        log.info(
            "canary %s: probing %d link(s) every %gs through topic %r",
            self.instance[:8],
            len(self.links),
            self.settings.interval_seconds,
            topic,
        )

    def stop(self) -> None:
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
        for thread in self._threads:
            thread.join(timeout=10)
        for producer in self._producers.values():
            producer.flush(5)
        for reader in self._readers:
            reader.consumer.close()
        self._board.withdraw("canary", self.instance, 0)

    # -- probe topic ------------------------------------------------------------------------------------------------

    def _admin(self, alias: str) -> AdminClient:
        if alias not in self._admins:
            self._admins[alias] = new_admin(self.clusters[alias], alias, {"client.id": f"mirrorwatch-canary-{alias}"})
        return self._admins[alias]

    def _ensure_topic(self, alias: str) -> int | None:
        """Create or grow the probe topic on a source cluster; its partition count, None while it cannot be read."""
        topic = self.settings.topic
        admin = self._admin(alias)
        try:
            metadata = admin.list_topics(timeout=TIMEOUT_S)
        except KafkaException as exc:
            log.warning("canary: cannot reach source cluster %r (%s); retrying next round", alias, error_text(exc))
            return None
        existing = metadata.topics.get(topic)
        partitions = None if existing is None or existing.error is not None else existing.partitions
        leaders = {p: meta.leader for p, meta in (partitions or {}).items()}
        plan = plan_canary_topic(
            topic, None if partitions is None else len(partitions), list(metadata.brokers), leaders
        )
        self.plans[alias] = plan
        for warning in plan.warnings:
            log.warning("%s", warning)
        try:
            if plan.create:
                rf = self.settings.replication_factor or -1
                futures = admin.create_topics([NewTopic(topic, plan.partitions, rf)], request_timeout=TIMEOUT_S)
                _ignore_exists(futures[topic])
                log.info("canary: created probe topic %r on %r with %d partition(s)", topic, alias, plan.partitions)
            elif plan.grow_from is not None:
                futures = admin.create_partitions([NewPartitions(topic, plan.partitions)], request_timeout=TIMEOUT_S)
                futures[topic].result(timeout=TIMEOUT_S)
                log.info("canary: grew probe topic %r on %r to %d partition(s)", topic, alias, plan.partitions)
        except KafkaException as exc:
            log.warning("canary: cannot prepare probe topic %r on %r (%s); retrying next round", topic, alias, exc)
            return None
        return plan.partitions

    # -- probing ----------------------------------------------------------------------------------------------------

    def probe_round(self) -> None:
        """One probe per partition for every link, then the SLA check."""
        with self._round:
            if not self._stop.is_set():
                self._probe_round()

    def _probe_round(self) -> None:
        topic = self.settings.topic
        for alias in self._producers:
            partitions = self._ensure_topic(alias)
            if partitions is not None:
                self._partitions[alias] = partitions
        for link in self.links:
            producer = self._producers[link.source]
            for partition in range(self._partitions.get(link.source, 0)):
                with self._lock:
                    probe = self.tracker.new_probe(link.name, partition, self._clock.now_ns())
                try:
                    producer.produce(
                        topic,
                        value=probe.value(),
                        key=probe.key(),
                        partition=partition,
                        headers=probe.headers(self._key),
                        on_delivery=self._delivered(probe),
                    )
                except (BufferError, KafkaException) as exc:
                    log.warning("canary: cannot send probe to %s[%d]: %s", topic, partition, exc)
                    with self._lock:
                        self.tracker.produced(probe, self._clock.now_ns(), ok=False)
        with self._lock:
            lost = self.tracker.tick(self._clock.now_ns())
        if lost:
            log.warning("canary: %d probe(s) not read back within %gs", lost, self.settings.sla_seconds)
        # For a monitor in another process to serve at /canary.
        self._board.publish("canary", self.instance, 0, self.as_json(), self._clock.now_ms())

    def _delivered(self, probe: Probe) -> Callable[[KafkaError | None, Message], None]:
        def report(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                log.warning("canary: probe to partition %d refused: %s", probe.partition, error_text(err))
            with self._lock:
                self.tracker.produced(probe, self._clock.now_ns(), ok=err is None)

        return report

    def _poll_producer(self, producer: Producer) -> None:
        while not self._stop.is_set():
            producer.poll(1.0)  # returns as soon as an acknowledgement is there: no latency added

    # -- reading back -----------------------------------------------------------------------------------------------

    def _consumer(self, alias: str, role: str) -> Consumer:
        return new_consumer(
            self.clusters[alias],
            alias,
            f"mirrorwatch-canary-{self.instance[:8]}",  # never joined, never committed
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "client.id": f"mirrorwatch-canary-{role}-{alias}",
            },
        )

    def _refresh(self, reader: _Reader, *, first: bool = False) -> None:
        """Assign partitions of the reader's topic not yet assigned: at their end when the topic existed at start,
        else from their beginning (the mirror created them after we started, so everything there is new)."""
        try:
            metadata = reader.consumer.list_topics(reader.topic, timeout=TIMEOUT_S)
        except KafkaException as exc:
            log.warning(
                "canary: cannot read topic %r on %r (%s); retrying", reader.topic, reader.alias, error_text(exc)
            )
            return
        meta = metadata.topics.get(reader.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return
        new = sorted(set(meta.partitions) - reader.assigned)
        if not new:
            return
        tps = []
        for partition in new:
            offset = OFFSET_BEGINNING
            if first:  # the topic existed before our first probe: only what comes after is ours
                try:
                    _low, offset = reader.consumer.get_watermark_offsets(
                        TopicPartition(reader.topic, partition), timeout=TIMEOUT_S
                    )
                except KafkaException as exc:
                    log.warning("canary: cannot read the end of %s[%d] (%s); retrying", reader.topic, partition, exc)
                    return
            tps.append(TopicPartition(reader.topic, partition, offset))
        reader.consumer.incremental_assign(tps)
        reader.assigned.update(new)

    def _read(self, reader: _Reader) -> None:
        while not self._stop.is_set():
            now_s = self._clock.monotonic_s()
            if now_s >= reader.next_refresh_s:
                self._refresh(reader)
                reader.next_refresh_s = now_s + (METADATA_REFRESH_S if reader.assigned else 1.0)
            if not reader.assigned:
                self._stop.wait(0.2)
                continue
            # poll, not a batch consume: it returns the moment a probe is there, so the arrival time is exact.
            msg = reader.consumer.poll(1.0)
            if msg is None or msg.error() is not None:
                continue
            probe = decode_probe(msg.value())
            if probe is None or (self._key is not None and not self._signed(msg)):
                continue
            with self._lock:
                now_ns = self._clock.now_ns()
                if reader.link is None:
                    self.tracker.received_at_source(probe, now_ns)
                else:
                    self.tracker.received_at_target(probe, now_ns, link=reader.link)

    def _signed(self, msg: Message) -> bool:
        """The probe's signature is right (with a signing key); else it is counted as refused, said once a minute."""
        assert self._key is not None
        try:
            ok = is_signed(msg.value(), headers_of(msg), self._key)
        except SystemError:  # a header name that is not UTF-8 (see kernel.kafka.headers_of): not our probe
            ok = False
        if not ok:
            self._unsigned += 1
            now_s = self._clock.monotonic_s()
            if now_s - self._unsigned_said_s >= UNSIGNED_SAID_EVERY_S:
                log.warning(
                    "canary: %d probe(s) on %s without a valid signature ignored so far (forged, or from a canary "
                    "with another signing key; said once a minute)",
                    self._unsigned,
                    msg.topic(),
                )
                self._unsigned_said_s = now_s
        return ok

    # -- views ------------------------------------------------------------------------------------------------------

    def view(self) -> tuple[LinkView, ...]:
        with self._lock:
            return self.tracker.view(self._clock.now_ns())

    def expected_partitions(self) -> Mapping[str, int]:
        return dict(self._partitions)

    def as_json(self) -> dict[str, Any]:
        return canary_json(self.instance, self.settings, self.view())


def canary_json(instance: str, settings: CanaryConfig, links: tuple[LinkView, ...]) -> dict[str, Any]:
    """What `/canary` serves: per link its absence, counters and latency quantiles per partition, recent probes."""

    def hist(h: Histogram, window: tuple[float, ...]) -> dict[str, Any]:
        """Count and sum since the start (as the histogram); quantiles of the probes within the window."""
        return {
            "count": h.count,
            "sum_seconds": h.sum,
            "window_seconds": QUANTILE_WINDOW_S,
            "window_count": len(window),
            "p50_seconds": quantile(window, 0.5),
            "p99_seconds": quantile(window, 0.99),
            "max_seconds": max(window, default=None),
        }

    return {
        "instance": instance,
        "topic": settings.topic,
        "interval_seconds": settings.interval_seconds,
        "sla_seconds": settings.sla_seconds,
        "links": [
            {
                "link": view.link,
                "absent": view.absent,
                "last_received_ns": view.last_received_ns,
                **{
                    f"{name}_total": view.total(name)
                    for name in ("sent", "received", "lost", "duplicated", "reordered", "late", "produce_errors")
                },
                "partitions": [
                    {
                        "partition": p.partition,
                        "sent": p.sent,
                        "received": p.received,
                        "lost": p.lost,
                        "duplicated": p.duplicated,
                        "reordered": p.reordered,
                        "late": p.late,
                        "produce_errors": p.produce_errors,
                        "pending": p.pending,
                        "last_received_ns": p.last_received_ns,
                        "last_e2e_seconds": p.last_e2e_seconds,
                        "e2e_latency": hist(p.e2e, p.window.get("e2e", ())),
                        "produce_latency": hist(p.produce, p.window.get("produce", ())),
                        "source_roundtrip": hist(p.roundtrip, p.window.get("roundtrip", ())),
                    }
                    for p in view.partitions
                ],
                "recent": list(view.recent),
            }
            for view in links
        ],
    }


def _ignore_exists(future: Any) -> None:
    try:
        future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        if not already_exists(exc):
            raise
