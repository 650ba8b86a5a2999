"""Worker progress on the progress topic: published by every mirror worker, read by any monitor on any host.

The status files (`kernel.status_board`) reach only a monitor on the worker's host. A worker also publishes its status
to the compacted topic `progress.topic` on its link's *target* cluster (`kernel.progress_format`: one key per worker
process, a versioned value): the target is the cluster a worker already writes to, the one a monitor must read anyway
for the copies' high-watermarks, and the one that survives a lost source (what the last positions say is then all
that is left to know). A monitor reads the topic of each target cluster of its links from its beginning and tails it
(one consumer per cluster, never a poll per key), and merges what it holds with the status files it can see
(`merge_statuses`: the newer status of a writer wins, whichever way it came).

The publisher never holds a worker up: it publishes at most every `progress.interval_seconds` per worker, into a
short queue (a target that takes nothing fills it and the statuses of that time are dropped, which is right: a newer
one replaces them); the topic is created on a thread of its own (compacted, `MAX_VALUE_BYTES`); a refused ACL is one
line (`DenialLog`); a clean stop withdraws the status with a tombstone, as it removes its file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from kernel.acl import DenialLog
from kernel.config import ClusterConfig, LinkConfig, MirrorwatchConfig, ProgressConfig
from kernel.kafka import (
    DENIED,
    QUICK_RECONNECT,
    WAN_DEFAULTS,
    consume_ready,
    create_topics,
    denied,
    error_text,
    new_admin,
    new_consumer,
    new_producer,
)
from kernel.link_control import ControlUnreadable, LinkControl
from kernel.progress_format import (
    FORMAT,
    FORMAT_HEADER,
    MAX_VALUE_BYTES,
    Documents,
    Entry,
    Refused,
    Tombstone,
    control_link_of,
    decode_as,
    decode_control,
    decode_lost,
    decode_note,
    encode,
    encode_control,
    lost_link_of,
    note_link_of,
    writer_of,
)
from kernel.status_board import HOST, StatusBoard
from kernel.topic_notes import PartitionNote
from kernel.worker_status import Gap

__all__ = ["ProgressPublisher", "ProgressReader", "StatusOut", "progress_readers", "publish_control"]

log = logging.getLogger("mirrorwatch")

_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "max.message.bytes": str(MAX_VALUE_BYTES),
    "segment.ms": "60000",  # a segment a minute, compacted soon after: a reader starting reads minutes, not hours
    "min.cleanable.dirty.ratio": "0.1",
}


class ProgressPublisher:
    """A worker's statuses on the progress topic of its link's target cluster."""

    def __init__(self, cluster: ClusterConfig, alias: str, settings: ProgressConfig, who: str) -> None:
        self._cluster, self._alias, self._settings, self._who = cluster, alias, settings, who
        self._producer: Producer | None = None  # created at the first publish, never in a constructor
        self._ready = threading.Event()  # the topic exists
        self._started = False
        self._closed = threading.Event()
        self._last: dict[bytes, float] = {}  # key -> when it was last published (monotonic)
        self._lock = threading.Lock()
        self._denials = DenialLog(log, f"{who}: progress topic {settings.topic!r}")
        self._too_big = False
        self._withdrawing = False  # a withdrawal was asked (close() says if it stays undelivered)
        self.published = 0
        self.dropped = 0

    def publish(self, kind: str, document: Mapping[str, Any], *, urgent: bool = False) -> None:
        """Publish a status-file document (it names its writer) unless this writer published less than an interval
        ago and it is not `urgent`; never blocks, never raises."""
        key, value = encode(kind, document)
        now = time.monotonic()
        with self._lock:
            if self._closed.is_set() or (
                not urgent and now - self._last.get(key, -1e9) < self._settings.interval_seconds
            ):
                return
            if len(value) > MAX_VALUE_BYTES:
                if not self._too_big:
                    self._too_big = True
                    log.warning("%s: a status of %d bytes is too big for the progress topic", self._who, len(value))
                return
            producer = self._start()
            if producer is None or not self._ready.is_set():
                return
            self._produce(producer, key, value)
            self._last[key] = now

    def share(self, record: tuple[bytes, bytes], done: Callable[[bool], None]) -> bool:
        """Publish a fact of a link (a gap of its ledger of lost records, a note of its topics: `kernel.sharing`):
        False when it could not be handed over now (the topic not known to exist yet, a full queue: the ledger
        offers it again); `done` says whether the cluster took it."""
        key, value = record
        with self._lock:
            if self._closed.is_set():
                return False
            producer = self._start()
            if producer is None or not self._ready.is_set():
                return False
            return self._produce(producer, key, value, done)

    def withdraw(self, kind: str, name: str, worker: int, pid: int, timeout_s: float = 5.0) -> None:
        """A clean stop: the writer's status is removed (a tombstone). Unlike a status (a newer one replaces it), it
        is the writer's last word: a full queue is waited on (up to `timeout_s`), never dropped — without it every
        monitor reads the writer as gone, not stopped, for as long as it keeps a gone writer's last status."""
        key, _ = encode(kind, {"name": name, "worker": worker, "host": HOST, "pid": pid})
        with self._lock:
            producer = self._producer
            if producer is None or not self._ready.is_set():
                return
            self._withdrawing = True
            deadline = time.monotonic() + timeout_s
            while not (taken := self._produce(producer, key, None)) and time.monotonic() < deadline:
                producer.poll(0.1)  # the queue drains as the target takes what waits (or nothing, if it is down)
            if not taken:
                log.warning("%s: its stop was not published on the progress topic (its queue stayed full)", self._who)

    def close(self, timeout_s: float = 5.0) -> None:
        self._closed.set()
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            left = producer.flush(timeout_s)
            if left and self._withdrawing:
                log.warning(
                    "%s: %d progress record(s) not delivered at the stop, its withdrawal among them: monitors read "
                    "this worker as gone rather than stopped until they forget it",
                    self._who,
                    left,
                )
            elif left:
                log.info("%s: %d progress record(s) not delivered at the stop", self._who, left)

    def _produce(
        self, producer: Producer, key: bytes, value: bytes | None, done: Callable[[bool], None] | None = None
    ) -> bool:
        """Hand a record to the producer; False when its queue is full (the target takes nothing)."""
        headers: list[tuple[str, str | bytes | None]] = [(FORMAT_HEADER, str(FORMAT).encode())]
        taken = True

        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._delivered(err, msg)
            if done is not None:
                done(err is None)

        try:
            producer.produce(self._settings.topic, value, key, headers=headers, on_delivery=delivered)
            self.published += 1
        except BufferError:
            self.dropped += 1  # a status: a newer one replaces it
            taken = False
        except KafkaException as exc:
            log.debug("%s: progress record not produced: %s", self._who, error_text(exc))
            taken = done is None  # a gap is offered again
        producer.poll(0)
        return taken

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self._denials.allowed("Write", "topic", [self._settings.topic])
        elif err.code() in DENIED:
            self._denials.denied("Write", "topic", self._settings.topic, error_text(err))

    def _start(self) -> Producer | None:
        if self._started:
            return self._producer
        self._started = True
        overrides = {
            **WAN_DEFAULTS,
            "client.id": f"mirrorwatch-progress-{self._who}",
            # In order (one request at a time), never idempotent: an idempotent producer waits for a producer id
            # after a target restart ("coordinator load in progress": seconds), and a status sent twice is harmless
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "zstd",
            "queue.buffering.max.messages": 64,
            "message.timeout.ms": 10_000,  # a status older than this is worth less than the next one
            "message.max.bytes": MAX_VALUE_BYTES + 65_536,
        }
        self._producer = new_producer(self._cluster, self._alias, overrides)
        threading.Thread(target=self._create_topic, name=f"progress-topic-{self._who}", daemon=True).start()
        return self._producer

    def _create_topic(self) -> None:
        """Make sure the topic exists (compacted), retried every 10 s until it does or the publisher closes."""
        overrides = {**WAN_DEFAULTS, "client.id": f"mirrorwatch-progress-{self._who}"}
        admin = new_admin(self._cluster, self._alias, overrides)
        topic = self._settings.topic
        while not self._closed.is_set():
            try:
                create_topics(
                    admin,
                    {topic: 1},
                    config=_TOPIC_CONFIG,
                    timeout_s=10,
                    replication_factor=self._settings.replication_factor,
                )
                self._ready.set()
                return
            except Exception as exc:  # unreachable, or not allowed: the topic may exist all the same
                if _exists(admin, topic):
                    self._ready.set()
                    return
                if denied(exc):
                    self._denials.denied("Create", "topic", topic, str(exc))
                else:
                    log.info("%s: progress topic %r not created yet (%s); retried in 10 s", self._who, topic, exc)
            self._closed.wait(10)


def publish_control(
    cluster: ClusterConfig, alias: str, settings: ProgressConfig, control: LinkControl, timeout_s: float = 5.0
) -> str | None:
    """Publish a link's control document on the progress topic (creating the topic if it is missing), waiting for
    the cluster's acknowledgement: None when it took it, else why not (the link's workers elsewhere do not know)."""
    topic = settings.topic
    overrides = {**WAN_DEFAULTS, "client.id": "mirrorwatch-link-control"}
    admin = new_admin(cluster, alias, overrides)
    try:
        create_topics(
            admin, {topic: 1}, config=_TOPIC_CONFIG, timeout_s=timeout_s, replication_factor=settings.replication_factor
        )
    except Exception as exc:  # not allowed, or not answering: it may exist all the same
        if not _exists(admin, topic, timeout_s):
            return f"progress topic {topic!r} on cluster {alias!r} is not there and cannot be created: {exc}"
    delivery = {"acks": "all", "enable.idempotence": False, "message.timeout.ms": int(timeout_s * 1000)}
    producer = new_producer(cluster, alias, {**overrides, **delivery})
    answers: list[KafkaError | None] = []
    key, value = encode_control(control.link, control.as_json())
    headers: list[tuple[str, str | bytes | None]] = [(FORMAT_HEADER, str(FORMAT).encode())]
    producer.produce(topic, value, key, headers=headers, on_delivery=lambda err, _msg: answers.append(err))
    producer.flush(timeout_s + 5)
    if not answers:
        return f"cluster {alias!r} did not acknowledge it on progress topic {topic!r} within {timeout_s:g} s"
    if answers[0] is not None:
        return f"cluster {alias!r} refused it on progress topic {topic!r}: {error_text(answers[0])}"
    return None


def _exists(admin: Any, topic: str, timeout_s: float = 10.0) -> bool:
    try:
        found = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException:
        return False
    return found is not None and found.error is None and bool(found.partitions)


class StatusOut:
    """Where a worker's statuses go: its status file (the same host) and, unless disabled, the progress topic."""

    def __init__(self, config: MirrorwatchConfig, target: str, who: str, source: str | None = None) -> None:
        self.board = StatusBoard(config.state_path / "status")
        settings = config.progress
        self.topic = ProgressPublisher(config.clusters[target], target, settings, who) if settings.enabled else None
        # the same statuses on the source's topic too: they reach the monitor while the target does not answer
        on_source = settings.enabled and settings.on_source and source is not None and source != target
        self.also = ProgressPublisher(config.clusters[source], source, settings, who) if on_source and source else None
        self._owned: dict[tuple[str, str, int], frozenset[tuple[Any, Any]]] = {}

    def publish(self, kind: str, name: str, worker: int, document: Mapping[str, Any], now_ms: int) -> None:
        """A status goes to the topic at most every `progress.interval_seconds`, but at once when the partitions the
        worker owns changed (a rebalance: until the new owner's status arrives, the monitor measures a moved
        partition from its last owner's word)."""
        body = self.board.publish(kind, name, worker, document, now_ms)
        if self.topic is not None:
            owned = frozenset((p.get("topic"), p.get("partition")) for p in body.get("partitions", ()))
            urgent, self._owned[(kind, name, worker)] = owned != self._owned.get((kind, name, worker)), owned
            for topic in self._topics():
                topic.publish(kind, body, urgent=urgent)

    def share(self, record: tuple[bytes, bytes], done: Callable[[bool], None]) -> bool:
        """A fact of a link (`encode_lost`, `encode_note`) on the progress topic of the link's target (the cluster
        that survives a lost source, and the one the link's workers read): False when there is none, or it cannot
        take it now."""
        return self.topic is not None and self.topic.share(record, done)

    def withdraw(self, kind: str, name: str, worker: int) -> None:
        self.board.withdraw(kind, name, worker)
        for topic in self._topics():
            topic.withdraw(kind, name, worker, self.board.pid)

    def close(self) -> None:
        for topic in self._topics():
            topic.close()

    def _topics(self) -> list[ProgressPublisher]:
        return [t for t in (self.topic, self.also) if t is not None]


class ProgressReader:
    """The statuses on one cluster's progress topic: read from its beginning, then tailed, on a thread of its own."""

    def __init__(
        self, cluster: ClusterConfig, alias: str, topic: str, names: frozenset[str], who: str = "monitor"
    ) -> None:
        self.alias, self.topic, self.who = alias, topic, who
        self._names = names  # the links this monitor measures: another's records are skipped unread
        self._consumer: Consumer = new_consumer(
            cluster,
            alias,
            f"mirrorwatch-{who}-{alias}-progress-reader",  # never joins, never commits: no group appears
            {
                "client.id": f"mirrorwatch-{who}-{alias}-progress",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
                "fetch.message.max.bytes": MAX_VALUE_BYTES + 65_536,
                **QUICK_RECONNECT,
            },
        )
        self._lock = threading.Lock()
        self._entries: dict[bytes, Entry] = {}
        self._controls: dict[str, LinkControl] = {}  # each link's control document as published last
        self._lost: dict[str, dict[bytes, Gap]] = {}  # each link's ledger of lost records, as published
        self._notes: dict[str, dict[bytes, PartitionNote]] = {}  # each link's notes of its source topics
        self._refusals: set[str] = set()
        self._partitions = 0
        self._ends: dict[int, int] = {}  # per partition, its end when first assigned: read up to it, caught up
        self._caught_up = threading.Event()
        self._denials = DenialLog(log, f"{who}: cluster {alias!r}: progress topic {topic!r}")
        self.records = 0
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mirrorwatch-progress-{alias}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def wait_caught_up(self, timeout_s: float) -> bool:
        """Whether the topic was read up to where it ended when the reader started (or found not to exist, or not to
        be readable: an ACL said so), waiting at most `timeout_s` (False: the cluster did not answer in time)."""
        return self._caught_up.wait(timeout_s)

    def control(self, link: str) -> LinkControl | None:
        """The link's control document as published last on the topic (None: none, or withdrawn)."""
        with self._lock:
            return self._controls.get(link)

    def lost(self, link: str) -> tuple[Gap, ...]:
        """The link's gaps as its workers on every host published them (`kernel.gap_ledger`)."""
        with self._lock:
            return tuple(self._lost.get(link, {}).values())

    def notes(self, link: str) -> tuple[PartitionNote, ...]:
        """The link's notes of its source topics as its workers on every host published them (`kernel.topic_notes`)."""
        with self._lock:
            return tuple(self._notes.get(link, {}).values())

    def read(self, kind: str, now_ms: int, max_age_ms: int) -> Documents:
        """As `StatusBoard.read`: the statuses of every name of this kind updated within `max_age_ms`."""
        with self._lock:
            entries = [e for e in self._entries.values() if e.kind == kind]
        found: Documents = {}
        for entry in entries:
            if now_ms - entry.document["updated_ms"] <= max_age_ms:
                found.setdefault(str(entry.document["name"]), []).append(dict(entry.document))
        for documents in found.values():
            documents.sort(key=lambda d: d["updated_ms"])
        return found

    def _run(self) -> None:
        try:
            next_look = 0.0
            while not self._stop.is_set():
                if time.monotonic() >= next_look:  # the topic's partitions: it may be created (or grow) later
                    self._assign()
                    next_look = time.monotonic() + (30 if self._partitions else 2)
                if not self._partitions:
                    self._stop.wait(0.5)
                    continue
                self._take(consume_ready(self._consumer, 1000, 0.2))
        except Exception:  # a bug or an unexpected client failure: the status files remain
            log.exception("%s: cluster %r: reading the progress topic failed", self.who, self.alias)
        finally:
            self._caught_up.set()  # nothing more will be read: a waiter goes on with what it has
            self._consumer.close()

    def _assign(self) -> None:
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=5)
        except KafkaException as exc:
            log.debug("%s: cluster %r: progress topic metadata: %s", self.who, self.alias, error_text(exc))
            return
        topic = metadata.topics.get(self.topic)
        if topic is not None and topic.error is not None and topic.error.code() in DENIED:
            self._denials.denied("Describe", "topic", self.topic, error_text(topic.error))
            self._caught_up.set()  # nothing to wait for: it cannot be read (said once)
            return
        if topic is None or topic.error is not None:  # not created yet: nothing was published to read
            if topic is None or topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                self._caught_up.set()
            return
        if len(topic.partitions) <= self._partitions:
            return
        new = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self._partitions, len(topic.partitions))]
        if not self._caught_up.is_set():
            for tp in new:
                self._ends[tp.partition] = self._consumer.get_watermark_offsets(tp, timeout=5)[1]
        self._consumer.incremental_assign(new)
        self._partitions = len(topic.partitions)
        self._note_caught_up({})

    def _take(self, messages: Iterable[Message]) -> None:
        read: dict[int, int] = {}  # per partition, the offset after the last record read here
        with self._lock:
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                        # the client's look-up of its (never used) group's coordinator: reading goes on unharmed
                        log.debug("%s: cluster %r: progress reader: %s", self.who, self.alias, error_text(error))
                    elif error.code() in DENIED:
                        self._denials.denied("Read", "topic", self.topic, error_text(error))
                        self._caught_up.set()
                    continue
                self._denials.allowed("Read", "topic", [self.topic])
                self.records += 1
                read[message.partition() or 0] = (message.offset() or 0) + 1
                link = control_link_of(message.key())
                if link is not None:
                    if link in self._names:
                        self._take_control(link, message.key() or b"", message.value())
                    continue
                link = lost_link_of(message.key())
                if link is not None:
                    if link in self._names:
                        self._take_lost(link, message.key() or b"", message.value())
                    continue
                link = note_link_of(message.key())
                if link is not None:
                    if link in self._names:
                        self._take_note(link, message.key() or b"", message.value())
                    continue
                writer = writer_of(message.key())
                if writer is not None and writer[1] not in self._names:
                    continue
                record = decode_as(writer, message.key(), message.value())
                if isinstance(record, Tombstone):
                    self._entries.pop(record.key, None)
                elif isinstance(record, Entry):
                    self._entries[record.key] = record
                else:
                    self._refuse(record)
        self._note_caught_up(read)

    def _note_caught_up(self, read: Mapping[int, int]) -> None:
        if self._caught_up.is_set():
            return
        for partition, offset in read.items():
            if offset >= self._ends.get(partition, 0):
                self._ends[partition] = 0
        if self._partitions and not any(self._ends.get(p, 0) for p in range(self._partitions)):
            self._caught_up.set()

    def _take_control(self, link: str, key: bytes, value: bytes | None) -> None:
        """A link's control document (under `_lock`); one that is not a control document of that link is refused."""
        record = decode_control(key, value)
        if isinstance(record, Tombstone):
            self._controls.pop(link, None)
        elif isinstance(record, Refused):
            self._refuse(record)
        else:
            try:
                self._controls[link] = LinkControl.from_json(link, record.document)
            except ControlUnreadable as exc:
                self._refuse(Refused(f"a control document that cannot be read ({exc})"))

    def _take_lost(self, link: str, key: bytes, value: bytes | None) -> None:
        """A gap of a link's ledger (under `_lock`); one that is not a gap of that link is refused."""
        record = decode_lost(link, key, value)
        if isinstance(record, Tombstone):
            self._lost.get(link, {}).pop(key, None)
        elif isinstance(record, Refused):
            self._refuse(record)
        else:
            self._lost.setdefault(link, {})[key] = record

    def _take_note(self, link: str, key: bytes, value: bytes | None) -> None:
        """A note of a link's source topics (under `_lock`); one that is not a note of that link is refused."""
        record = decode_note(link, key, value)
        if isinstance(record, Tombstone):
            self._notes.get(link, {}).pop(key, None)
        elif isinstance(record, Refused):
            self._refuse(record)
        else:
            self._notes.setdefault(link, {})[key] = PartitionNote(**record.document)

    def _refuse(self, record: Refused) -> None:
        self.refused += 1
        if record.reason not in self._refusals and len(self._refusals) < 100:
            self._refusals.add(record.reason)
            log.warning(
                "%s: cluster %r: a record on progress topic %r is not a worker's status or a link's control, gap or "
                "note (%s); skipped",
                self.who,
                self.alias,
                self.topic,
                record.reason,
            )


@contextmanager
def progress_readers(config: MirrorwatchConfig) -> Iterator[list[ProgressReader]]:
    """A reader of the progress topic of every cluster the config's links publish on (their targets, and their
    sources with `progress.on_source`), for the block (none when progress is disabled). `config` as the monitor uses
    it (its role's client settings)."""
    if not config.progress.enabled:
        yield []
        return
    on_source = config.progress.on_source

    def publishes_on(link: LinkConfig, alias: str) -> bool:
        return link.target == alias or (on_source and link.source == alias)

    aliases = dict.fromkeys(a for link in config.links for a in (link.target, link.source) if publishes_on(link, a))
    topic = config.progress.topic
    names = {alias: frozenset(link.name for link in config.links if publishes_on(link, alias)) for alias in aliases}
    readers = [ProgressReader(config.clusters[alias], alias, topic, names[alias]) for alias in aliases]
    for reader in readers:
        reader.start()
    try:
        yield readers
    finally:
        for reader in readers:
            reader.stop()
