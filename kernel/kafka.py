"""The one Kafka client factory: a cluster section in, a confluent-kafka client out. Nothing else builds clients.

Clients are created when asked for (never at import or in constructors elsewhere), and their librdkafka log lines go
to Python logging under `mirrorwatch.kafka.<cluster alias>` instead of stderr, repeats counted rather than logged
(`kernel.log_repeats`: a failing connection is one line per broker and attempt).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from kernel.config import ClusterConfig
from kernel.errors import ConfigError, ConfigProblem, KafkaClientError
from kernel.log_repeats import Demoted, RepeatFilter

__all__ = [
    "COORDINATOR_NOT_READY",
    "COORDINATOR_NOT_READY_NAMES",
    "DENIED",
    "QUICK_RECONNECT",
    "WAN_DEFAULTS",
    "already_exists",
    "client_config",
    "consume_ready",
    "create_topics",
    "denied",
    "error_of",
    "error_text",
    "headers_of",
    "kafka_error",
    "new_admin",
    "new_consumer",
    "new_producer",
    "no_authorizer",
]

ConfigValue = str | int | float | bool

# A group coordinator request answered so is worth asking again shortly: the coordinator moved or is still loading.
# A cluster that never had a consumer group creates __consumer_offsets at the first FindCoordinator and answers
# NOT_COORDINATOR (librdkafka: not retriable) until it is loaded: a fresh DR or migration target.
COORDINATOR_NOT_READY = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
)
COORDINATOR_NOT_READY_NAMES = frozenset(KafkaError(code).name() for code in COORDINATOR_NOT_READY)  # as FetchError has
# An ACL refused the request: asking again changes nothing until an operator grants it (said once, not retried loudly).
DENIED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)
_DENIED_NAMES = frozenset(KafkaError(code).name() for code in DENIED)

# A consumed record's headers, read so that a header name that is not UTF-8 raises SystemError. confluent-kafka's
# Message.headers() returns a list *and* sets an exception for such a name; the generic call path turns that into
# SystemError, but CPython 3.11's specialised call of a method descriptor (what `msg.headers()` becomes in a loop)
# does not check, and hands out a tuple holding NULL that crashes the interpreter (SIGSEGV) when touched. A
# methodcaller always takes the checked path. Read a record's headers once: a later plain call returns the broken
# list without an error; a checked call raises while the first call's exception is still pending, which the per-record
# loops use to stay fast (`h = msg.headers()`, and only when there are headers, `h = headers_of(msg)` at once).
headers_of = operator.methodcaller("headers")
Overrides = Mapping[str, Any] | None


def _kafka_logger(alias: str) -> logging.Logger:
    """Where a cluster's librdkafka lines go, with their repeats counted rather than logged (`RepeatFilter`) and the
    warnings that are not the user's to act on at a lower level (`Demoted`)."""
    logger = logging.getLogger(f"mirrorwatch.kafka.{alias}")
    if not any(isinstance(f, Demoted) for f in logger.filters):
        logger.addFilter(Demoted())
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
    return logger


# The monitor's clients reconnect to a cluster that was down within a second of its return (librdkafka backs off up
# to 10 s by default: a restarted source read as unseen for 8 s more, issue #41).
_RECONNECT = {"reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1000}

# Across a WAN (issue #44): a request unanswered for 10 s closes its connection (librdkafka's socket.max.fails is 1)
# and a connection attempt unanswered for 5 s is given up and tried again at most 1 s later, so that a client
# resumes within seconds of a partition's end whatever its length, instead of waiting for TCP's retransmission
# backoff on a dead connection (librdkafka's 60 s / 30 s / 10 s defaults: a 30 s partition left a link standing for
# 24 s more, and the monitor reading the target as down for 25 s more, measured through bench.netns). Keep-alives
# find idle connections a middlebox dropped. The mirror guide's "Across a network" table (docs/guides/mirror.md) says
# each, with its default and why.
WAN_DEFAULTS: dict[str, str | int | bool] = {
    "socket.timeout.ms": 10_000,
    "socket.connection.setup.timeout.ms": 5_000,
    "reconnect.backoff.max.ms": 1_000,
    "socket.keepalive.enable": True,
}
QUICK_RECONNECT: dict[str, str | int | bool] = {**WAN_DEFAULTS, **_RECONNECT}  # the monitor's clients


def client_config(cluster: ClusterConfig, alias: str, overrides: Overrides = None) -> dict[str, Any]:
    """librdkafka configuration for a cluster; `overrides` (set by the caller's role) win over the file's properties."""
    config: dict[str, Any] = dict(cluster.client_properties())
    config.setdefault("client.id", f"mirrorwatch-{alias}")
    config["logger"] = _kafka_logger(alias)
    if overrides:
        config.update(overrides)
    return config


def error_of(exc: BaseException | KafkaError | None) -> KafkaError | None:
    """The KafkaError a confluent-kafka exception carries (in its first argument), or the error itself; else None."""
    if isinstance(exc, KafkaError):
        return exc
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return error if isinstance(error, KafkaError) else None


def error_text(exc: BaseException | KafkaError) -> str:
    """How mirrorwatch writes a Kafka error everywhere (logs, statuses, failures, dead letters' reasons):
    librdkafka's message and its code name, `Broker: Message size too large (MSG_SIZE_TOO_LARGE)`; a request's future
    that gave up waiting (a bare `TimeoutError`) as "no answer in time"; any other error as its own text."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "no answer in time"
    error = error_of(exc)
    return f"{error.str()} ({error.name()})" if error is not None else str(exc)


def already_exists(exc: BaseException) -> bool:
    """A topic creation that failed only because the topic is there already."""
    error = error_of(exc)
    return error is not None and error.code() == KafkaError.TOPIC_ALREADY_EXISTS


def denied(exc: BaseException) -> bool:
    """A request an ACL refused, raised by confluent-kafka or wrapped by `kafka_error` (its code name kept)."""
    error = error_of(exc)
    if error is not None:
        return error.code() in DENIED
    return isinstance(exc, KafkaClientError) and exc.code in _DENIED_NAMES


def no_authorizer(exc: BaseException) -> bool:
    """An ACL request to a cluster that has no authorizer (it has no ACLs either)."""
    error = error_of(exc)
    return error is not None and error.code() == KafkaError.SECURITY_DISABLED


def _rejected(exc: KafkaException, alias: str, role: str) -> ConfigError:
    """librdkafka refuses unknown or invalid properties when a client is created: a config problem, not a crash."""
    return ConfigError(
        [ConfigProblem(f"clusters.{alias}", f"the {role} configuration was rejected: {error_text(exc)}")]
    )


def new_producer(cluster: ClusterConfig, alias: str, overrides: Overrides = None) -> Producer:
    try:
        return Producer(client_config(cluster, alias, overrides))
    except KafkaException as exc:
        raise _rejected(exc, alias, "producer") from None


def new_consumer(cluster: ClusterConfig, alias: str, group_id: str, overrides: Overrides = None) -> Consumer:
    try:
        return Consumer(client_config(cluster, alias, {"group.id": group_id, **(overrides or {})}))
    except KafkaException as exc:
        raise _rejected(exc, alias, "consumer") from None


def consume_ready(consumer: Consumer, most: int, wait_s: float) -> list[Message]:
    """Up to `most` of what the consumer has fetched, without waiting; when it has nothing, waits up to `wait_s` for
    the first record only. (`consume(most, timeout)` waits for a full batch: a reader of a topic smaller than one
    paid its whole timeout every call, a `failover` command's scan its second.)"""
    return consumer.consume(num_messages=most, timeout=0) or consumer.consume(num_messages=1, timeout=wait_s)


def new_admin(cluster: ClusterConfig, alias: str, overrides: Overrides = None) -> AdminClient:
    try:
        return AdminClient(client_config(cluster, alias, overrides))
    except KafkaException as exc:
        raise _rejected(exc, alias, "admin client") from None


def kafka_error(exc: KafkaException | KafkaError | TimeoutError, context: str) -> KafkaClientError:
    """Wrap a confluent-kafka error, keeping its code name and whether retrying can help; a request's future that did
    not answer in time (`TimeoutError`: a cluster just started, or under load) says so, retriable."""
    if isinstance(exc, TimeoutError):
        return KafkaClientError(f"{context}: {error_text(exc)} (try again)", code="_TIMED_OUT", retriable=True)
    error = error_of(exc)
    if error is not None:
        return KafkaClientError(f"{context}: {error.str()}", code=error.name(), retriable=error.retriable())
    return KafkaClientError(f"{context}: {exc}")


def create_topics(
    admin: AdminClient,
    partitions_by_topic: Mapping[str, int],
    *,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    replication_factor: int | None = None,
) -> list[str]:
    """Create topics that do not exist yet (replication factor: the broker's default unless given); returns the ones
    created."""
    from confluent_kafka.cimpl import NewTopic

    if not partitions_by_topic:
        return []
    factor = replication_factor or -1
    new = [
        NewTopic(name, num_partitions=n, replication_factor=factor, config=dict(config or {}))
        for name, n in partitions_by_topic.items()
    ]
    created = []
    for name, future in admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            if already_exists(exc):
                continue
            raise kafka_error(exc, f"creating topic {name!r}") from None
    return created
