"""Consumer groups' committed offsets through the admin API (one OffsetFetch per group), asked in a child process.

librdkafka's admin client crashes the process that asks when an OffsetFetch is answered NOT_COORDINATOR or
COORDINATOR_NOT_AVAILABLE: its response handler asks the client's own consumer group to look for a new coordinator,
and an admin client has none (a null pointer, confluentinc/librdkafka#5040, open in the librdkafka this suite pins).
Those answers come exactly when a group's coordinator moves: a broker restarting, a frozen one thawing, a rolling
upgrade. The monitor (in admin-API mode), standby groups and failover ask then, so the asking happens in a child
process with an admin client of its own: a crash there costs one answer (`GroupOffsetsUnknown`, the log says why)
and a new child at the next ask, never the process that asked.

One child per cluster configuration, started at first use and kept (a spawn costs about a second): it reads its
requests from a pipe and exits when the pipe closes, so it never outlives its parent, however that one ends.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from kernel.config import ClusterConfig
from kernel.errors import KafkaClientError

__all__ = ["FetchError", "GroupOffsetsUnknown", "committed_offsets", "fetcher"]

log = logging.getLogger("mirrorwatch.kafka")

Offsets = dict[tuple[str, int], int]  # (topic, partition) -> committed offset
ANSWER_MARGIN_S = 30.0  # beyond the request's own timeout: the child's start, and a slow pipe


@dataclass(frozen=True)
class FetchError:
    """Why one group's offsets are unknown (the broker's or the client's error)."""

    text: str
    code: str = ""
    retriable: bool = False

    def __str__(self) -> str:  # as error_text writes it: the message and its code name
        return f"{self.text} ({self.code})" if self.code else self.text

    def exception(self, context: str) -> KafkaClientError:
        return KafkaClientError(f"{context}: {self.text}", code=self.code, retriable=self.retriable)


class GroupOffsetsUnknown(KafkaClientError):
    """No answer at all for this ask: the child crashed (the librdkafka bug above) or did not answer in time."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="_CRASHED", retriable=True)


def _serve(connection: Connection, cluster: ClusterConfig, alias: str) -> None:  # runs in the child
    """The child: one admin client; per request, every group's OffsetFetch in flight at once, answered together."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    from kernel.kafka import error_of, new_admin

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when it stops (Ctrl-C reaches the group)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    admin = new_admin(cluster, alias)
    while True:
        try:
            groups, timeout_s = connection.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        futures = {
            g: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)], request_timeout=timeout_s)[g]
            for g in groups
        }
        deadline = time.monotonic() + timeout_s
        answer: dict[str, Offsets | FetchError] = {}
        for group, future in futures.items():
            try:
                found = future.result(timeout=max(0.0, deadline - time.monotonic())).topic_partitions or []
                answer[group] = {
                    (tp.topic, tp.partition): tp.offset for tp in found if tp.error is None and tp.offset >= 0
                }
            except KafkaException as exc:
                error = error_of(exc)
                answer[group] = (
                    FetchError(error.str(), error.name(), error.retriable())
                    if error is not None
                    else FetchError(str(exc))
                )
            except TimeoutError:
                answer[group] = FetchError("no answer", "_TIMED_OUT", True)
        connection.send(answer)


class _Fetcher:
    def __init__(self, cluster: ClusterConfig, alias: str) -> None:
        self.cluster, self.alias = cluster, alias
        self._lock = threading.Lock()
        self._process: Any = None  # multiprocessing's SpawnProcess
        self._connection: Connection | None = None
        self.asks = 0  # requests sent to a child
        self.crashes = 0  # children lost (crashed, or gave no answer in time)

    def _start(self) -> Connection:
        if self._connection is None:
            context = multiprocessing.get_context("spawn")  # never fork a process with librdkafka's threads in it
            ours, theirs = context.Pipe()
            self._process = context.Process(
                target=_serve,
                args=(theirs, self.cluster, self.alias),
                name=f"mirrorwatch-offsets-{self.alias}",
                daemon=True,
            )
            self._process.start()
            theirs.close()
            self._connection = ours
        return self._connection

    def _lost(self, why: str) -> GroupOffsetsUnknown:
        process, self._process = self._process, None
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if process is not None:
            process.join(5)
            if process.exitcode is None:
                process.kill()
                process.join(5)
            code = process.exitcode
            if code is not None and code < 0:
                why = (
                    f"its admin client crashed ({signal.Signals(-code).name}; librdkafka#5040 when a coordinator moves)"
                )
        self.crashes += 1
        message = f"cluster {self.alias!r}: committed offsets unknown this time: {why}; a new client asks next time"
        log.warning("%s", message)
        return GroupOffsetsUnknown(message)

    def fetch(self, groups: Sequence[str], timeout_s: float) -> dict[str, Offsets | FetchError]:
        if not groups:
            return {}
        with self._lock:
            connection = self._start()
            self.asks += 1
            try:
                connection.send((list(groups), timeout_s))
                if connection.poll(timeout_s + ANSWER_MARGIN_S):
                    answer: dict[str, Offsets | FetchError] = connection.recv()
                    return answer
            except (EOFError, OSError):
                raise self._lost("the process asking them ended") from None
            raise self._lost(f"no answer within {timeout_s + ANSWER_MARGIN_S:g} s")

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()  # the child sees the pipe close and exits
                self._connection = None
            if self._process is not None:
                self._process.join(10)
                if self._process.exitcode is None:
                    self._process.kill()
                    self._process.join(5)
                self._process = None


_fetchers: dict[str, _Fetcher] = {}
_registry_lock = threading.Lock()


def fetcher(cluster: ClusterConfig, alias: str) -> _Fetcher:
    """The child asking for this cluster configuration (started at its first ask)."""
    key = alias + "\0" + cluster.model_dump_json()
    with _registry_lock:
        if key not in _fetchers:
            _fetchers[key] = _Fetcher(cluster, alias)
        return _fetchers[key]


def committed_offsets(
    cluster: ClusterConfig, alias: str, groups: Sequence[str], timeout_s: float = 30.0
) -> dict[str, Offsets | FetchError]:
    """Each group's committed offsets (a group without any: {}), or why they are unknown. Raises
    `GroupOffsetsUnknown` when the child gave no answer at all."""
    return fetcher(cluster, alias).fetch(groups, timeout_s)
