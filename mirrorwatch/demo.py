"""`mirrorwatch demo`: the main job on an embedded default, from nothing.

Today it starts the two local clusters, creates a sample topic on both, produces sample orders to each cluster and
reads them back, printing progress, and stops everything cleanly on Ctrl-C / SIGTERM (or after `--duration`).
Each capability that lands in mirrorwatch joins this command.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Message, Producer

from mirrorwatch.config import MirrorwatchConfig, load_config
from mirrorwatch.kafka import create_topics, new_admin, new_consumer, new_producer
from mirrorwatch.local import ALIASES, LocalClusters

__all__ = ["DemoOptions", "run_demo"]

RUN_HEADER = "mirrorwatch-demo-run"


@dataclass(frozen=True)
class DemoOptions:
    state_dir: Path
    duration_s: float | None = None
    records_per_second: float = 20.0
    topic: str = "demo.orders"
    partitions: int = 3
    progress_every_s: float = 5.0


@dataclass
class _ClusterTraffic:
    alias: str
    producer: Producer
    consumer: Consumer
    produced: int = 0
    acked: int = 0
    consumed: int = 0
    errors: list[str] = field(default_factory=list)


def _sample_order(n: int) -> tuple[bytes, bytes]:
    key = f"customer-{n % 17}".encode()
    value = json.dumps({"order_id": n, "customer": n % 17, "amount_cents": 100 + (n * 37) % 9900}).encode()
    return key, value


def run_demo(options: DemoOptions, stop: threading.Event, out: Callable[[str], None] = print) -> int:
    """Run until `stop` is set or the duration ends; 0 when every cluster read back all it was sent."""
    clusters = LocalClusters(options.state_dir, progress=out)
    traffic: list[_ClusterTraffic] = []
    try:
        clusters.up(tie_to_parent=True)
        config = load_config(clusters.config_path)
        traffic = _start_traffic(config, options)
        _run_loop(traffic, options, stop, out)
        return _finish(traffic, out)
    finally:
        for t in traffic:
            t.consumer.close()
        for line in clusters.down():
            out(line)


def _start_traffic(config: MirrorwatchConfig, options: DemoOptions) -> list[_ClusterTraffic]:
    traffic = []
    for alias in ALIASES:
        cluster = config.clusters[alias]
        create_topics(new_admin(cluster, alias), {options.topic: options.partitions})
        producer = new_producer(cluster, alias, {"acks": "all", "enable.idempotence": True, "linger.ms": 5})
        consumer = new_consumer(
            cluster, alias, f"mirrorwatch-demo-{alias}", {"auto.offset.reset": "earliest", "enable.auto.commit": True}
        )
        consumer.subscribe([options.topic])
        traffic.append(_ClusterTraffic(alias, producer, consumer))
    return traffic


def _run_loop(
    traffic: list[_ClusterTraffic], options: DemoOptions, stop: threading.Event, out: Callable[[str], None]
) -> None:
    run_id = uuid.uuid4().hex[:12].encode()
    started = time.monotonic()
    next_progress = started + options.progress_every_s
    interval_s = 1.0 / options.records_per_second
    out(f"producing {options.records_per_second:g} orders/s to {options.topic!r} on each cluster; Ctrl-C stops")
    n = 0
    while not stop.is_set():
        now = time.monotonic()
        if options.duration_s is not None and now - started >= options.duration_s:
            break
        key, value = _sample_order(n)
        for t in traffic:
            _produce(t, options.topic, key, value, run_id)
        n += 1
        for t in traffic:
            _consume(t, run_id, timeout_s=0)
        if now >= next_progress:
            out(_progress_line(traffic, now - started))
            next_progress = now + options.progress_every_s
        stop.wait(interval_s)
    # Read back what is still on its way, for a bounded time.
    deadline = time.monotonic() + 15
    for t in traffic:
        t.producer.flush(10)
    while any(t.consumed < t.acked for t in traffic) and time.monotonic() < deadline:
        for t in traffic:
            _consume(t, run_id, timeout_s=0.2)


def _produce(t: _ClusterTraffic, topic: str, key: bytes, value: bytes, run_id: bytes) -> None:
    def on_delivery(err: object, _msg: Message) -> None:
        if err is None:
            t.acked += 1
        else:
            t.errors.append(str(err))

    t.producer.produce(topic, value=value, key=key, headers=[(RUN_HEADER, run_id)], on_delivery=on_delivery)
    t.produced += 1
    t.producer.poll(0)


def _consume(t: _ClusterTraffic, run_id: bytes, timeout_s: float) -> None:
    for msg in t.consumer.consume(num_messages=500, timeout=timeout_s):
        if msg.error() is not None:
            t.errors.append(str(msg.error()))
            continue
        if (RUN_HEADER, run_id) in (msg.headers() or []):
            t.consumed += 1


def _progress_line(traffic: list[_ClusterTraffic], elapsed_s: float) -> str:
    parts = [f"{t.alias}: produced {t.produced} acked {t.acked} consumed {t.consumed}" for t in traffic]
    return f"[{elapsed_s:6.1f}s] " + " | ".join(parts)


def _finish(traffic: list[_ClusterTraffic], out: Callable[[str], None]) -> int:
    ok = True
    for t in traffic:
        complete = t.consumed == t.acked == t.produced and not t.errors
        ok = ok and complete
        verdict = "all read back" if complete else f"INCOMPLETE, errors: {t.errors[:3]}"
        out(f"{t.alias}: produced {t.produced}, acknowledged {t.acked}, consumed {t.consumed}: {verdict}")
    return 0 if ok else 1
