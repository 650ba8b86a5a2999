"""The Kafka client settings of every engine, in one place: librdkafka defaults a user may override per cluster or
per link (`consumer_properties`, `producer_properties`), the safety settings nobody overrides (the Java client's, for
Spark's connector, are in mirror.java_client)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

from kernel.config import LinkConfig, MirrorwatchConfig, reveal
from kernel.errors import ConfigProblem
from kernel.kafka import WAN_DEFAULTS, error_text

__all__ = [
    "CONSUMER_DEFAULTS",
    "CONSUMER_FIXED",
    "PRODUCER_DEFAULTS",
    "PRODUCER_FIXED",
    "client_problems",
    "consumer_settings",
    "producer_settings",
]

# Across a WAN (issue #44): kernel.kafka.WAN_DEFAULTS (the monitor's clients have them too).
CONSUMER_DEFAULTS: dict[str, str | int | bool] = {
    **WAN_DEFAULTS,
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
    # librdkafka statistics for status() and the monitor, and how the worker learns soon that its source has gone
    # silent (a hanging connection, mirror.highs.RX_SILENT_MS) before any timeout says so
    "statistics.interval.ms": 500,
}
PRODUCER_DEFAULTS: dict[str, str | int | bool] = {
    **WAN_DEFAULTS,
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
CONSUMER_FIXED: dict[str, str | int | bool] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # The end of a partition is how the worker learns that the offsets after its last record hold no record
    # (transaction markers), to commit past them (mirror.delivery.read_error).
    "enable.partition.eof": True,
}
PRODUCER_FIXED: dict[str, str | int | bool] = {
    "acks": "all",
    "enable.idempotence": True,
    # Never give up on a record because the target is slow or down: the link pauses instead (back-pressure).
    "message.timeout.ms": 0,
}


def consumer_settings(
    config: MirrorwatchConfig,
    link: LinkConfig,
    client_id: str,
    *,
    on_commit: Callable[..., None],
    stats_cb: Callable[[str], None],
    error_cb: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """A link worker's source consumer: defaults < the cluster's properties < the link's < the fixed settings."""
    source = config.clusters[link.source]
    settings: dict[str, Any] = {
        **CONSUMER_DEFAULTS,
        **dict(source.client_properties()),
        **reveal(link.consumer_properties),
        **CONSUMER_FIXED,
        # Never a silent move: an offset out of range (or none committed) is an event the worker decides on
        # (`mirror.gaps`: start where the link begins, or a gap counted and stopped at or skipped).
        "auto.offset.reset": "error",
        "topic.metadata.refresh.interval.ms": int(link.refresh_topics_interval_seconds * 1000),
        "on_commit": on_commit,
        "stats_cb": stats_cb,
    }
    if error_cb is not None:
        settings["error_cb"] = error_cb
    settings.setdefault("client.id", client_id)
    return settings


def producer_settings(
    config: MirrorwatchConfig, link: LinkConfig, client_id: str, *, stats_cb: Callable[[str], None]
) -> dict[str, Any]:
    """A link worker's target producer, in the same order of precedence."""
    target = config.clusters[link.target]
    settings: dict[str, Any] = {
        **PRODUCER_DEFAULTS,
        **dict(target.client_properties()),
        **reveal(link.producer_properties),
        **PRODUCER_FIXED,
        "stats_cb": stats_cb,
    }
    settings.setdefault("client.id", client_id)
    return settings


_PROPERTY = re.compile(r'property:? "([^"]+)"')
_QUIET = {"log_level": 0}  # a check client that cannot connect says nothing


def client_problems(config: MirrorwatchConfig, link: LinkConfig) -> list[ConfigProblem]:
    """What librdkafka refuses in the link's consumer and producer settings, found by creating the clients (no
    connection is needed, so a problem is said at once even while a cluster is unreachable), each at the path of
    the property it names: the link's `consumer_properties`/`producer_properties`, else the cluster's."""
    index = config.links.index(link)
    problems = []
    for role, own, alias in (
        ("consumer", link.consumer_properties, link.source),
        ("producer", link.producer_properties, link.target),
    ):
        try:
            if role == "consumer":
                settings = consumer_settings(config, link, "check", on_commit=_ignore, stats_cb=_ignore)
                Consumer({**settings, "group.id": link.consumer_group, **_QUIET}).close()
            else:
                Producer({**producer_settings(config, link, "check", stats_cb=_ignore), **_QUIET})
        except KafkaException as exc:
            found = _PROPERTY.search(error_text(exc))
            name = found.group(1) if found else None
            if name is not None and name in own:
                path = f"links[{index}].{role}_properties.{name}"
            elif name is not None and name in config.clusters[alias].properties:
                path = f"clusters.{alias}.properties.{name}"
            else:
                path = f"links[{index}]"
            problems.append(ConfigProblem(path, f"the {role} configuration was rejected: {error_text(exc)}"))
    return problems


def _ignore(*_args: Any) -> None:
    pass
