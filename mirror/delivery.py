"""The delivery side of a link worker: records handed to the target producer, the outbox that keeps their order while
the producer is full, the delivery reports (one per record, or one per run of records: sparse reports, see
`mirror.engine`'s docstring), dead letters, and what a refused record means for the link.

Failures are values: a delivery report that must stop the link calls the shared `LinkFailure`; one that makes the
sparse reports unreliable sets `sparse_failure`, and the worker replays from what the target acknowledged
(`LinkWorker._replay_exactly`). The per-record loops (`queue_plain`, `queue_sparse`) are the engine's hot path:
tuned, allocation-free but for tuples, and kept whole."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kernel.config import LinkConfig
from kernel.kafka import error_text, headers_of
from kernel.provenance import HeaderValue, has_visited, with_provenance
from mirror.failure import LinkFailure
from mirror.progress import PartitionProgress
from mirror.routes import Route, Router
from mirror.stats import LinkStats

__all__ = ["Delivery", "OutboxItem", "dead_letter_headers", "refused", "unreadable"]

log = logging.getLogger("mirrorwatch.mirror")

TOPIC_NOT_READY_CODES = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC})

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

# The newest record of a run `queue_sparse` has read but not yet handed to the producer: source offset, key, value,
# timestamp ms (0: none), headers.
HeldRecord = tuple[int, bytes | None, bytes | None, int, list[tuple[str, HeaderValue]]]
# What a sparse report acknowledges: route, first and last source offset of the run, records and key + value bytes in
# it, the first record's timestamp ms (for latency: the run's oldest record).
RunReport = tuple[Route, int, int, int, int, int]
# A record `queue_plain` handed to the producer directly, as its delivery report sees it: route, source offset,
# timestamp ms (0: none), key + value bytes, headers as written (for the dead-letter topic if the target refuses it).
PlainItem = tuple[Route, int, int, int, list[tuple[str, HeaderValue]]]


def _waiting(
    route: Route,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    *,
    headers: list[tuple[str, HeaderValue]],
    timestamp: int,
) -> OutboxItem:
    """A record of a route as the outbox holds it (off the hot path: only when the producer is full or refused)."""
    return (route.progress, offset, route.target_topic, route.target_partition, key, value, headers, timestamp,
            route.source, None)  # fmt: skip


def dead_letter_headers(
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


class Delivery:
    """Hands consumed records to the producer and turns its delivery reports into acknowledged progress."""

    def __init__(
        self,
        link: LinkConfig,
        name: str,
        router: Router,
        stats: LinkStats,
        *,
        fail: LinkFailure,
        consumer_error: Callable[[KafkaError, str | None, Message | None], None],
        stop_alone: Callable[[tuple[str, int], str], None] | None = None,
        acked_waited: Callable[[], None] | None = None,
    ) -> None:
        self.link, self.name, self.router, self.stats, self.fail = link, name, router, stats, fail
        self.consumer_error = consumer_error
        # told after the reports acknowledged a record that waited (`LinkStats.waited_out`): a backlog drains
        self.acked_waited = acked_waited
        # a partition with a record that cannot be mirrored stops alone, its reason said (None: the link stops)
        self.stop_alone = stop_alone
        self.producer: Producer | None = None
        self.outbox: deque[OutboxItem] = deque()
        self.sparse = False  # sparse delivery reports: decided at start, off for good after a delivery error
        self.sparse_failure: str | None = None  # why the sparse reports must be replaced by exact ones
        self.producer_fatal = False  # the producer hit a fatal error: what it holds will never be written
        self.refresh_wanted = False  # a target topic or partition the producer does not know yet
        self._outbox_runs: dict[tuple[tuple[str, int], int], RunReport] = {}  # runs an outbox record reports for

    def handle(self, messages: list[Message]) -> None:
        if messages:
            plain = self.queue_plain if self.router.handler is None else self.queue_handled
            (self.queue_sparse if self.sparse else plain)(messages)
            self.drain()

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """Records of these partitions not yet handed to the producer: the partitions' next owner reads them again."""
        self.outbox = deque(item for item in self.outbox if item[8] not in partitions)
        self._outbox_runs = {k: run for k, run in self._outbox_runs.items() if k[0] not in partitions}

    def clear(self) -> None:
        self.outbox.clear()
        self._outbox_runs.clear()

    # -- the per-record paths ---------------------------------------------------------------------------------------

    def queue_plain(self, messages: list[Message]) -> None:  # noqa: PLR0915 - one loop: a call per record costs
        """The per-record path of a link without a handler: each record handed to the producer at once (the outbox
        keeps order behind one it could not take)."""
        assert self.producer is not None
        router, outbox, stats = self.router, self.outbox, self.stats
        routes, route_of, source_id, target_id = router.routes, router.route, router.source_id, router.target_id
        read_headers = headers_of  # never msg.headers(): see kernel.kafka.headers_of
        form = self.link.provenance
        produce, delivered, partial = self.producer.produce, self._delivered_plain, functools.partial
        records_in = bytes_in = 0
        last_tp: tuple[str, int] | None = None
        route: Route | None = None
        for msg in messages:
            err = msg.error()
            if err is not None:
                read_error(self, msg, err)
                continue
            # A consumed record always has a topic, partition and offset (typing.cast is a call: not per record).
            tp: tuple[str, int] = (msg.topic(), msg.partition())  # type: ignore[assignment]
            if tp != last_tp:  # a batch holds runs of records of the same partition
                last_tp, route = tp, routes.get(tp) or route_of(tp)
            if route is None:  # revoked while this batch was in our hands
                continue
            offset: int = msg.offset()  # type: ignore[assignment]
            timestamp = msg.timestamp()[1]
            key, value = msg.key(), msg.value()
            size = (len(value) if value else 0) + (len(key) if key else 0)
            records_in += 1
            bytes_in += size
            try:  # fast when a record has no headers; a checked second read when it has (kafka.headers_of)
                headers: list[tuple[str, bytes | None]] | None = msg.headers()  # type: ignore[assignment]
                if headers:
                    headers = read_headers(msg)
            except SystemError:  # a header name that is not UTF-8 (see `unreadable`): never call headers() again
                if not unreadable(self, route, offset, key=key, value=value, timestamp=timestamp):
                    return
                continue
            if headers:
                if has_visited(headers, target_id):  # it came from the target: writing it back would loop
                    stats.loop_skipped_total += 1
                    route.progress.dispatch(offset, 0, timestamp)
                    continue
                out = with_provenance(headers, source_id, route.topic_bytes, route.partition_bytes, offset, form=form)
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
            outbox.append(_waiting(route, offset, key, value, headers=out, timestamp=timestamp))
        stats.records_in_total += records_in
        stats.bytes_in_total += bytes_in

    def queue_sparse(self, messages: list[Message]) -> None:  # noqa: PLR0915 - one loop: a call per record costs
        """`queue_plain` with sparse reports: a run of a partition's records in the batch is one progress entry, its
        newest record held back until the next shows whether it ends the run (and carries the run's report)."""
        assert self.producer is not None
        router, outbox, stats = self.router, self.outbox, self.stats
        routes, route_of, source_id, target_id = router.routes, router.route, router.source_id, router.target_id
        read_headers = headers_of  # never msg.headers(): see kernel.kafka.headers_of
        form = self.link.provenance
        produce, end_run = self.producer.produce, self._end_run
        records_in = bytes_in = 0
        last_tp: tuple[str, int] | None = None
        route: Route | None = None
        held: HeldRecord | None = None
        run_first = run_records = run_bytes = run_timestamp = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                read_error(self, msg, err)
                continue
            tp: tuple[str, int] = (msg.topic(), msg.partition())  # type: ignore[assignment]
            if tp != last_tp:
                if held is not None and route is not None:
                    end_run(route, held, (route, run_first, held[0], run_records, run_bytes, run_timestamp))
                    held = None
                last_tp, route = tp, routes.get(tp) or route_of(tp)
            if route is None:  # revoked while this batch was in our hands
                continue
            offset: int = msg.offset()  # type: ignore[assignment]
            timestamp = msg.timestamp()[1]
            key, value = msg.key(), msg.value()
            size = (len(value) if value else 0) + (len(key) if key else 0)
            records_in += 1
            bytes_in += size
            try:  # fast when a record has no headers; a checked second read when it has (kafka.headers_of)
                headers: list[tuple[str, bytes | None]] | None = msg.headers()  # type: ignore[assignment]
                if headers:
                    headers = read_headers(msg)
            except SystemError:  # a header name that is not UTF-8 (see `unreadable`): never call headers() again
                if held is not None:  # the open run ends before it
                    end_run(route, held, (route, run_first, held[0], run_records, run_bytes, run_timestamp))
                    held = None
                if not unreadable(self, route, offset, key=key, value=value, timestamp=timestamp):
                    return
                continue
            if headers:
                if has_visited(headers, target_id):  # it came from the target: writing it back would loop
                    stats.loop_skipped_total += 1
                    route.progress.dispatch(offset, 0, timestamp)  # done, behind the open run if there is one
                    continue
                out = with_provenance(headers, source_id, route.topic_bytes, route.partition_bytes, offset, form=form)
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
                    end_run(route, held, (route, run_first, held[0], run_records, run_bytes, run_timestamp))
                    held = None
            if held is None:
                if outbox:  # the producer is full: keep order behind the records waiting, one report each
                    route.progress.dispatch(offset, 1, timestamp)
                    outbox.append(_waiting(route, offset, key, value, headers=out, timestamp=timestamp))
                    continue
                route.progress.dispatch(offset, 1, timestamp)  # a new run: one entry for all of it
                run_first, run_records, run_bytes, run_timestamp = offset, 0, 0, timestamp
            held = (offset, key, value, timestamp, out)
            run_records += 1
            run_bytes += size
        if held is not None and route is not None:
            end_run(route, held, (route, run_first, held[0], run_records, run_bytes, run_timestamp))
        stats.records_in_total += records_in
        stats.bytes_in_total += bytes_in

    def _end_run(self, route: Route, held: HeldRecord, run: RunReport) -> None:
        """Hand a run's last record to the producer with the run's report, or to the outbox when it cannot take it."""
        assert self.producer is not None
        offset, key, value, timestamp, headers = held
        route.progress.extend(offset, timestamp or None)
        if not self.outbox:
            try:
                self.producer.produce(
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
        self.outbox.append(_waiting(route, offset, key, value, headers=headers, timestamp=timestamp))

    def queue_handled(self, messages: list[Message]) -> None:
        """The per-record path of a link with a handler: the handler sees a MirrorRecord and may return several."""
        progress, outbox, records_for = self.router.progress, self.outbox, self.router.records_for
        for msg in messages:
            err = msg.error()
            if err is not None:
                read_error(self, msg, err)
                continue
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            p = progress.get((topic, partition))
            if p is None:  # revoked while this batch was in our hands
                continue
            records = records_for(msg, topic, partition, offset)
            if records is None:
                return
            p.dispatch(offset, len(records), msg.timestamp()[1])
            for r in records:
                partition_out = -1 if r.partition is None else r.partition
                outbox.append((p, offset, r.topic, partition_out, r.key, r.value, r.headers, r.timestamp_ms,
                               (topic, partition), None))  # fmt: skip

    def drain(self) -> None:
        """Hand the outbox to the producer in order, until it is empty or the producer is full."""
        outbox = self.outbox
        if not outbox:
            return
        assert self.producer is not None
        produce = self.producer.produce
        delivered = self._delivered_sparse if self.sparse else self._delivered
        while outbox:
            item = outbox[0]
            _p, _offset, topic, partition, key, value, headers, timestamp, _source, dead_letter_cause = item
            if dead_letter_cause is not None:
                topic, partition = self.link.dead_letter_topic or "", -1
                headers = dead_letter_headers(item[6], item[2], item[3], dead_letter_cause)
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
                    self.refresh_wanted = True
                    with contextlib.suppress(KafkaException):
                        self.producer.list_topics(topic, timeout=5)
                    self.serve_reports(0.2)
                    return
                outbox.popleft()
                refused(self, item, error)
                continue
            outbox.popleft()

    # -- delivery reports (run inside producer.poll()) --------------------------------------------------------------

    def _delivered_run(self, run: RunReport, err: KafkaError | None, _msg: Message) -> None:
        """The report on the last record of a run (sparse mode): every record of the run is on the target, or the
        worker must find out which one was refused."""
        route, first, last, records, size, timestamp = run
        if err is not None:
            self.sparse_failed(route.progress, route.source, first, last, err)
            return
        route.progress.ack_through(last)
        self.stats.count_out(records, size, timestamp, time.time())  # the run's latency from its oldest record

    def _delivered_sparse(self, item: OutboxItem, err: KafkaError | None, msg: Message) -> None:
        """The report of a record the outbox handed over in sparse mode (it may end a run)."""
        p, offset, *_rest, source, cause = item
        run = self._outbox_runs.pop((source, offset), None)
        if run is not None:
            self._delivered_run(run, err, msg)
        elif err is not None:
            self.sparse_failed(p, source, offset, offset, err)
        elif cause is not None:  # a dead letter, on the dead-letter topic
            p.ack_through(offset)
            self.stats.dead_lettered_total += 1
        else:
            p.ack_through(offset)
            key, value = item[4], item[5]
            self.stats.count_out(1, (len(value) if value else 0) + (len(key) if key else 0), item[7], time.time())

    def sparse_failed(
        self, p: PartitionProgress, source: tuple[str, int], first: int, last: int, err: KafkaError
    ) -> None:
        if not p.abandoned:
            # The acknowledged position never passes the run that failed, whatever the reports of later runs say: a
            # gapless producer's fatal error fails one request while the next may already be written (seen: the run
            # after a refused record acknowledged through it, and the replay started past the refused record).
            p.stop_at(first)
        if self.sparse_failure is None and not p.abandoned:
            where = f"{source[0]}[{source[1]}]@{first}" + (f"..{last}" if last != first else "")
            self.sparse_failure = f"{where}: {error_text(err)}"

    def _delivered(self, item: OutboxItem, err: KafkaError | None, _msg: Message) -> None:
        p, offset, _topic, _partition, key, value, _headers, timestamp, _source, dead_letter_cause = item
        if err is not None:
            refused(self, item, err)
        elif dead_letter_cause is not None:
            p.ack(offset)
            self.stats.dead_lettered_total += 1
        else:
            p.ack(offset)
            self.stats.count_out(1, (len(value) if value else 0) + (len(key) if key else 0), timestamp, time.time())

    def _delivered_plain(self, item: PlainItem, err: KafkaError | None, msg: Message) -> None:
        """The report of a record `queue_plain` handed over itself (refused: key and value from the report)."""
        route, offset, timestamp, size, headers = item
        if err is None:
            route.progress.ack(offset)
            self.stats.count_out(1, size, timestamp, time.time())
            return
        refused(self, _waiting(route, offset, msg.key(), msg.value(), headers=headers, timestamp=timestamp), err)

    # -- the producer -----------------------------------------------------------------------------------------------

    def serve_reports(self, timeout_s: float) -> None:
        """producer.poll(): reports run as callbacks here; a fatal producer error is raised here, not to error_cb.
        Then `acked_waited` if they acknowledged a record that waited."""
        assert self.producer is not None
        try:
            self.producer.poll(timeout_s)
        except KafkaException as exc:
            self._producer_failed(exc)
        if self.stats.waited_out:
            self.stats.waited_out = False
            if self.acked_waited is not None:
                self.acked_waited()

    def flush(self, timeout_s: float) -> int:
        """producer.flush(), as `serve_reports`; a fatal producer's records are purged; returns those not acked."""
        producer = self.producer
        assert producer is not None
        try:
            remaining = producer.flush(0 if self.producer_fatal else timeout_s)
        except KafkaException as exc:
            self._producer_failed(exc)
            remaining = len(producer)
        if self.producer_fatal and remaining:
            producer.purge()
            with contextlib.suppress(KafkaException):
                producer.poll(0)
        return remaining

    def _producer_failed(self, exc: KafkaException) -> None:
        error: KafkaError = exc.args[0]
        self.producer_fatal = True
        if not self.sparse:
            self.fail(f"the producer hit a fatal error: {error_text(error)}; restart the link")
        elif self.sparse_failure is None:
            self.sparse_failure = f"the records in flight ({error_text(error)})"

    def drop_producer(self) -> None:
        """Give up on what the producer holds (a sparse replay reads it again from the acknowledged offsets); a request
        already sent may still be written by the target, so those records may be written twice, never lost."""
        old = self.producer
        self.clear()
        self.sparse = False
        if old is None:
            return
        with contextlib.suppress(KafkaException):  # fatal: raised once already
            old.poll(0)
        old.purge()
        with contextlib.suppress(KafkaException):
            old.poll(0)
        self.producer_fatal = False  # the worker makes a new producer


def refused(delivery: Delivery, item: OutboxItem, err: KafkaError) -> None:
    """The target refused a record for good (librdkafka already retried what can be retried)."""
    p, offset, topic, _partition, *_rest, (source_topic, source_partition), dead_letter_cause = item
    if delivery.sparse or p.abandoned:  # sparse: which record is not known for sure; replayed with a report each
        delivery.sparse_failed(p, (source_topic, source_partition), offset, offset, err)
        return
    delivery.stats.send_errors_total += 1
    where = f"{source_topic}[{source_partition}]@{offset}"
    if err.fatal():
        delivery.fail(f"the producer hit a fatal error on {where}: {error_text(err)}; restart the link")
    elif dead_letter_cause is not None:
        delivery.fail(
            f"the dead-letter topic {delivery.link.dead_letter_topic!r} refused {where} too: {error_text(err)}"
        )
    elif delivery.link.dead_letter_topic:
        log.error(
            "link %s: the target refused %s for %s: %s; sending it to the dead-letter topic %r",
            delivery.name,
            where,
            topic,
            error_text(err),
            delivery.link.dead_letter_topic,
        )
        delivery.outbox.appendleft((*item[:9], err))
    elif delivery.stop_alone is not None:  # nothing at or past the refused record is committed
        p.stop_at(offset)
        delivery.stop_alone(
            (source_topic, source_partition),
            f"the target refused {where} for topic {topic!r}: {error_text(err)}. The partition stopped alone "
            "without committing past this record, so nothing is lost, and the link's other partitions go on; "
            "fix the target (e.g. the topic's max.message.bytes) or set the link's dead_letter_topic, then "
            "restart the link to try it again",
        )
    else:
        delivery.fail(
            f"the target refused {where} for topic {topic!r}: {error_text(err)}. The link stopped "
            "without committing past this record, so nothing is lost; fix the target (e.g. the topic's "
            "max.message.bytes) or set the link's dead_letter_topic, then start it again"
        )


def unreadable(
    delivery: Delivery, route: Route, offset: int, *, key: bytes | None, value: bytes | None, timestamp: int
) -> bool:
    """A record whose headers cannot be read: confluent-kafka's Message.headers() raises SystemError on a header
    name that is not valid UTF-8, and a second call returns a tuple holding NULL that crashes the interpreter
    (SIGSEGV) when touched. It cannot be copied as it is, so it is refused like a record the target refuses:
    to the dead-letter topic (key, value and provenance, not its headers, with the reason), or its partition stops
    alone naming it (the link, where the engine stops no partition alone), without committing past it. True when the
    loop may go on."""
    where = f"{route.source[0]}[{route.source[1]}]@{offset}"
    reason = "a header name is not valid UTF-8: the record cannot be read as it is (confluent-kafka)"
    if not delivery.link.dead_letter_topic and delivery.stop_alone is not None:
        route.progress.dispatch(offset, 0, timestamp)
        route.progress.stop_at(offset)  # nothing at or past it is committed, whatever the reports after it say
        delivery.stop_alone(
            route.source,
            f"{where} cannot be mirrored: {reason}. The partition stopped alone without committing past this "
            "record, so nothing is lost, and the link's other partitions go on; set the link's dead_letter_topic "
            "to move such records aside, then restart the link",
        )
        return True
    if not delivery.link.dead_letter_topic:
        delivery.fail(
            f"{where} cannot be mirrored: {reason}. The link stopped without committing past this record, so "
            "nothing is lost; set the link's dead_letter_topic to move such records aside, then start it again"
        )
        return False
    log.error(
        "link %s: %s: %s; sending it to the dead-letter topic %r",
        delivery.name,
        where,
        reason,
        delivery.link.dead_letter_topic,
    )
    route.progress.dispatch(offset, 1, timestamp)
    cause = KafkaError(KafkaError._BAD_MSG, reason)
    before, name, prefix, after = route.stamp  # its own headers are lost; where it came from is not
    headers: list[tuple[str, HeaderValue]] = [*before, (name, prefix + b"%d" % offset), *after]
    delivery.outbox.append((route.progress, offset, route.target_topic, route.target_partition, key, value, headers,
                            timestamp if timestamp > 0 else 0, route.source, cause))  # fmt: skip
    return True


def read_error(delivery: Delivery, msg: Message, err: KafkaError) -> None:
    """An event of the consumer in place of a record. The end of a partition (`enable.partition.eof`) comes after
    every record below it in the consumer's queue, so the offsets up to it that were not handed out hold nothing to
    copy (transaction markers; aborted records under read_committed): the progress passes them and the group commits
    the partition's end, as a Java consumer's position does, not one below the last transaction marker (which the
    monitor would read as 1 record of lag for ever). Anything else goes to the worker."""
    if err.code() == KafkaError._PARTITION_EOF:
        p = delivery.router.progress.get((msg.topic() or "", msg.partition() or 0))
        end = msg.offset()
        if p is not None and end is not None and end >= 0:
            p.pass_to(end)
        return
    delivery.consumer_error(err, msg.topic(), msg)
