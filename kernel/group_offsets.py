"""Consumer groups through the admin API, asked in a child process: their committed offsets (one OffsetFetch per
group) and their descriptions (DescribeConsumerGroups).

librdkafka's admin client crashes the process that asks when an OffsetFetch is answered NOT_COORDINATOR or
COORDINATOR_NOT_AVAILABLE: its response handler asks the client's own consumer group to look for a new coordinator,
and an admin client has none (a null pointer, confluentinc/librdkafka#5040, open in the librdkafka this suite pins).
Those answers come exactly when a group's coordinator moves: a broker restarting, a frozen one thawing, a rolling
upgrade. The monitor (in admin-API mode), standby groups and failover ask then, so the asking happens in a child
process with an admin client of its own: a crash there costs one answer (`GroupOffsetsUnknown`, the log says why)
and a new child at the next ask, never the process that asked. DescribeConsumerGroups is asked there too: every
admin request sent to a group's coordinator can abort the asker when that coordinator's connection drops while the
request is on its way, or when the request times out before its coordinator lookup ends (`eonce->refcnt > 0`,
confluentinc/librdkafka#4605, open): a broker restart under the monitor, or a pytest worker hosting one, was enough.

One child per cluster configuration, started at first use and kept (a spawn costs about a second): it reads its
requests from a pipe and exits when the pipe closes, so it never outlives its parent, however that one ends.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from kernel.config import ClusterConfig
from kernel.errors import KafkaClientError

__all__ = [
    "FetchError",
    "GroupDescription",
    "GroupOffsetsUnknown",
    "MemberDescription",
    "commit_offsets",
    "committed_offsets",
    "described_groups",
    "end_children",
    "fetcher",
]

log = logging.getLogger("mirrorwatch.kafka")

Offsets = dict[tuple[str, int], int]  # (topic, partition) -> committed offset
ANSWER_MARGIN_S = 30.0  # beyond the request's own timeout: a slow pipe, a loaded machine
START_TIMEOUT_S = 60.0  # for a new child to say it is ready (a spawn: an interpreter, imports, an admin client)
SLOW_START_S = 10.0  # a start slower than this is said in the log
SLOW_ANSWER_S = 5.0  # an answer later than its timeout by more than this is said in the log
REQUEST_FLOOR_S = 30.0  # the shortest timeout a coordinator request is given in the child (`_asked`)


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
    """No answer at all for this ask: the child crashed (the librdkafka bug above) or did not answer in time (ask
    again), or this process is stopping (`stopping`: code _STOPPING, not retriable: no child will answer again)."""

    def __init__(self, message: str, *, stopping: bool = False) -> None:
        super().__init__(message, code="_STOPPING" if stopping else "_CRASHED", retriable=not stopping)


@dataclass(frozen=True)
class MemberDescription:
    """One member of a described group and the partitions assigned to it."""

    host: str
    member_id: str
    client_id: str
    partitions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class GroupDescription:
    """A group as DescribeConsumerGroups answered it (plain data, from the child)."""

    state: str  # the state's name, upper case as librdkafka names it: STABLE, EMPTY, DEAD, ...
    simple: bool
    members: tuple[MemberDescription, ...] = ()


Answer = dict[str, dict[str, Any]]  # kind ("offsets", "describe", "commit") -> group -> its answer or FetchError


def _why(exc: BaseException) -> FetchError:
    from kernel.kafka import error_of

    error = error_of(exc)
    return FetchError(error.str(), error.name(), error.retriable()) if error is not None else FetchError(str(exc))


def _described(d: Any) -> GroupDescription:
    members = tuple(
        MemberDescription(
            m.host or "",
            m.member_id or "",
            m.client_id or "",
            tuple((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else ())),
        )
        for m in d.members
    )
    return GroupDescription(str(getattr(d.state, "name", d.state)), bool(d.is_simple_consumer_group), members)


Commits = Mapping[str, Sequence[tuple[str, int, int]]]  # group -> (topic, partition, offset) to commit


def _asked(admin: Any, groups: Sequence[str], timeouts: Mapping[str, float], commits: Commits) -> dict[str, Any]:
    """Every request of an ask, sent at once: kind -> group -> its future. Each request may take at least
    `REQUEST_FLOOR_S`, however soon its answer is awaited: one that times out before its coordinator lookup ends is
    what aborts the client (librdkafka#4605), and one answered after its ask is simply not read."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    timeouts = {kind: max(timeout, REQUEST_FLOOR_S) for kind, timeout in timeouts.items()}
    futures: dict[str, dict[str, Any]] = {}
    if "describe" in timeouts:
        futures["describe"] = admin.describe_consumer_groups(list(groups), request_timeout=timeouts["describe"])
    if "offsets" in timeouts:
        futures["offsets"] = {
            g: admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=timeouts["offsets"]
            )[g]
            for g in groups
        }
    if "commit" in timeouts:  # one group per request, as the admin API allows
        futures["commit"] = {
            g: admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g, [TopicPartition(t, p, o) for t, p, o in commits[g]])],
                request_timeout=timeouts["commit"],
            )[g]
            for g in groups
        }
    return futures


def _answered(kind: str, found: Any) -> Any:
    """A request's answer as plain data: a description, the committed offsets, or a commit's refused partitions."""
    from kernel.kafka import error_text

    if kind == "describe":
        return _described(found)
    if kind == "commit":
        return [
            f"{tp.topic}[{tp.partition}]: {error_text(tp.error)}" for tp in found.topic_partitions or [] if tp.error
        ]
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in found.topic_partitions or []
        if tp.error is None and tp.offset >= 0
    }


def _serve(connection: Connection, cluster: ClusterConfig, alias: str) -> None:  # runs in the child
    """The child: one admin client; per ask, every group's requests (descriptions, OffsetFetches, commits) in flight
    at once, answered together: each kind's answers awaited up to its timeout, the requests themselves given at
    least `REQUEST_FLOOR_S` (`_asked`)."""
    from confluent_kafka import KafkaException

    from kernel.kafka import new_admin

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when it stops (Ctrl-C reaches the group)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    admin = new_admin(cluster, alias)
    connection.send("ready")
    while True:
        try:
            groups, timeouts, commits = connection.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        futures = _asked(admin, groups, timeouts, commits)
        started = time.monotonic()
        answer: Answer = {kind: {} for kind in futures}
        for kind, asked in futures.items():
            deadline = started + timeouts[kind]
            for group, future in asked.items():
                try:
                    answer[kind][group] = _answered(kind, future.result(timeout=max(0.0, deadline - time.monotonic())))
                except KafkaException as exc:
                    answer[kind][group] = _why(exc)
                except TimeoutError:
                    answer[kind][group] = FetchError("no answer", "_TIMED_OUT", True)
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
        """The child, started if there is none, once it said it is ready: its start (an interpreter, the imports, an
        admin client; seconds on a loaded machine) is never charged to an ask's timeout."""
        if self._connection is None:
            context = multiprocessing.get_context("spawn")  # never fork a process with librdkafka's threads in it
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_serve,
                args=(theirs, self.cluster, self.alias),
                name=f"mirrorwatch-offsets-{self.alias}",
                daemon=True,
            )
            started = time.monotonic()
            try:
                process.start()
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            self._process, self._connection = process, ours
            try:
                ready = ours.poll(START_TIMEOUT_S) and ours.recv() == "ready"
            except (EOFError, OSError):
                ready = False
            if not ready:
                raise self._lost(f"the child asking its consumer groups did not start within {START_TIMEOUT_S:g} s")
            took = time.monotonic() - started
            (log.warning if took > SLOW_START_S else log.debug)(
                "cluster %r: the child asking its consumer groups started in %.1f s", self.alias, took
            )
        return self._connection

    def _lost(self, why: str, *, idle: bool = False) -> GroupOffsetsUnknown:
        """The child is gone (or given up): said in the log. `idle`: it ended between two asks, and the ask at hand
        goes to a new one (nothing unknown); otherwise this ask's answers are unknown (the exception returned)."""
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
                why += (
                    f": its admin client crashed ({signal.Signals(-code).name}; librdkafka#5040 or #4605, when a"
                    " coordinator moves or its connection drops)"
                )
        if _stopping.is_set():  # ended by `end_children`: not a crash
            return GroupOffsetsUnknown(f"cluster {self.alias!r}: this process is stopping", stopping=True)
        self.crashes += 1
        outcome = "a new one asks now" if idle else "consumer groups unknown this time; a new client asks next time"
        message = f"cluster {self.alias!r}: {why}; {outcome}"
        log.warning("%s", message)
        return GroupOffsetsUnknown(message)

    def fetch(self, groups: Sequence[str], timeout_s: float) -> dict[str, Offsets | FetchError]:
        answer: dict[str, Offsets | FetchError] = self.ask(groups, {"offsets": timeout_s})["offsets"]
        return answer

    def ask(self, groups: Sequence[str], timeouts: Mapping[str, float], commits: Commits | None = None) -> Answer:
        """Per kind asked ("offsets", "describe", "commit" of `commits`; each with its requests' timeout), each
        group's answer or why it is unknown. A child that ended while idle (a crash between two asks) is replaced
        before this ask, said in the log, and costs no answer."""
        if not groups:
            return {kind: {} for kind in timeouts}
        timeout_s = max(timeouts.values())
        if _stopping.is_set():
            raise GroupOffsetsUnknown(f"cluster {self.alias!r}: this process is stopping", stopping=True)
        with self._lock:
            if self._process is not None and not self._process.is_alive():
                self._lost("the child asking its consumer groups ended between two asks", idle=True)
            try:
                connection = self._start()
            except OSError as exc:  # e.g. no file descriptor left for its pipe (a connection flood at the HTTP API)
                raise self._lost(f"the child asking its consumer groups could not be started ({exc})") from None
            self.asks += 1
            asked = time.monotonic()
            try:
                connection.send((list(groups), dict(timeouts), {g: list(c) for g, c in (commits or {}).items()}))
                if connection.poll(timeout_s + ANSWER_MARGIN_S):
                    answer: Answer = connection.recv()
                    took = time.monotonic() - asked
                    if took > timeout_s + SLOW_ANSWER_S:
                        log.warning(
                            "cluster %r: the child asking its consumer groups answered %d group(s) in %.1f s (asked"
                            " within %g s)",
                            self.alias,
                            len(groups),
                            took,
                            timeout_s,
                        )
                    return answer
            except (EOFError, OSError):
                raise self._lost("the child asking its consumer groups ended") from None
            except BaseException:
                # interrupted while the child works on this ask (a signal's exception, a test's time-out): its answer
                # would come to the next ask, in place of that one's, so this child goes now
                self.end_child()
                self._lost("the ask in progress was interrupted")
                raise
            raise self._lost(
                f"the child asking its consumer groups gave no answer within {timeout_s + ANSWER_MARGIN_S:g} s"
            )

    def end_child(self) -> None:
        """Kill the child now, without waiting for an ask in progress: the ask sees its pipe close and returns at
        once, its answers unknown (the next ask starts a new child)."""
        process = self._process
        if process is not None and process.is_alive():
            process.kill()

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
_stopping = threading.Event()  # set once, by `end_children`
_registry_lock = threading.Lock()


def end_children() -> None:
    """For a process that is stopping: kill every child now, and start none again. Its threads waiting on one (a
    child's start may take up to START_TIMEOUT_S, an ask its timeout) return at once, their answers unknown, and so
    does every later ask."""
    _stopping.set()
    with _registry_lock:
        fetchers = list(_fetchers.values())
    for one in fetchers:
        one.end_child()


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


def described_groups(
    cluster: ClusterConfig,
    alias: str,
    groups: Sequence[str],
    timeout_s: float = 30.0,
    *,
    offsets_timeout_s: float | None = None,
) -> tuple[dict[str, GroupDescription | FetchError], dict[str, Offsets | FetchError]]:
    """Each group's description (DescribeConsumerGroups, a coordinator request: asked in the child for
    librdkafka#4605, whose abort needs only a coordinator that drops its connection while the request is on its way)
    or why it is unknown; with `offsets_timeout_s`, their committed offsets too, asked at the same time. Raises
    `GroupOffsetsUnknown` when the child gave no answer at all."""
    timeouts = {"describe": timeout_s} | ({"offsets": offsets_timeout_s} if offsets_timeout_s is not None else {})
    answer = fetcher(cluster, alias).ask(groups, timeouts)
    return answer["describe"], answer.get("offsets", {})


def commit_offsets(
    cluster: ClusterConfig, alias: str, commits: Commits, timeout_s: float = 30.0
) -> dict[str, list[str] | FetchError]:
    """Commit offsets to groups without members (AlterConsumerGroupOffsets, a coordinator request: in the child,
    one request per group, all at once): per group, the partitions the coordinator refused (none: committed) or why
    there is no answer. Raises `GroupOffsetsUnknown` when the child gave no answer at all (whether the commits
    landed is then unknown: ask again)."""
    groups = [g for g, c in commits.items() if c]
    answer: dict[str, list[str] | FetchError] = fetcher(cluster, alias).ask(groups, {"commit": timeout_s}, commits)[
        "commit"
    ]
    return answer
