"""`mirrorwatch demo`: the main job on an embedded default, from nothing.

It starts the two local clusters, creates the sample topic `demo.orders` on the source, produces sample orders to it,
runs the link `demo` (source -> target, the python engine), the monitor and the HTTP API (Burrow's /v3, /mirror/links,
/metrics) in this process, reads the mirrored orders back from the target, and prints progress with the link's
replication lag as the monitor measures it. Ctrl-C / SIGTERM (or `--duration`) stops the traffic,
lets the mirror catch up, checks that every order arrived, and stops everything. Each capability that lands in
mirrorwatch joins this command.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, Message, Producer

from dashboards.launch import console_command
from kernel.config import MirrorwatchConfig, load_config, parse_config
from kernel.errors import MirrorwatchError
from kernel.kafka import create_topics, headers_of, new_admin, new_consumer, new_producer
from kernel.processes import die_with_parent, free_port, stop_process
from kernel.wait import WaitTimeout, wait_until
from localkafka.local import LocalClusters
from mirror.worker import WorkerBase
from mirrorwatch.services import Running, everything_running

__all__ = ["DemoOptions", "run_demo"]

RUN_HEADER = "mirrorwatch-demo-run"
LINK = "demo"
APP_GROUP = "demo-billing"  # an application consuming the orders on the source; its standby is kept on the target
CONSOLE_PORT = 8501


@dataclass(frozen=True)
class DemoOptions:
    state_dir: Path
    duration_s: float | None = None
    records_per_second: float = 20.0
    topic: str = "demo.orders"
    partitions: int = 3
    progress_every_s: float = 5.0
    security: str | None = None  # new clusters' mode (`local up --security`); None: the state dir's, or plaintext


@dataclass
class _Traffic:
    producer: Producer
    reader: Consumer
    app: Consumer
    run_id: bytes
    produced: int = 0
    acked: int = 0
    read_on_target: int = 0
    errors: list[str] = field(default_factory=list)


def _sample_order(n: int) -> tuple[bytes, bytes]:
    key = f"customer-{n % 17}".encode()
    value = json.dumps({"order_id": n, "customer": n % 17, "amount_cents": 100 + (n * 37) % 9900}).encode()
    return key, value


def demo_config(
    clusters_config: MirrorwatchConfig,
    topic: str,
    written_to: Path | None = None,
    secured: tuple[dict[str, Any], dict[str, str]] = ({}, {}),
) -> MirrorwatchConfig:
    """The local clusters plus the demo link, as a user would write it in YAML (and with `written_to`, written there:
    the commands an operator runs beside the demo, e.g. `mirrorwatch link pause`, read it). `secured`: secured
    clusters' client properties as the generated config has them (each secret as `${VAR}`) and the environment that
    holds those variables."""
    properties, environment = secured
    document: dict[str, Any] = {
        "clusters": {
            alias: {"bootstrap_servers": c.bootstrap_servers} | ({"properties": properties} if properties else {})
            for alias, c in clusters_config.clusters.items()
        },
        "links": [
            {
                "name": LINK,
                "source": "source",
                "target": "target",
                "topics": {"include": [topic.replace(".", r"\.")]},
                "offset_commit_interval_ms": 1000,
                "refresh_topics_interval_seconds": 5,
                "sync": {"topic_configs": True},  # the orders topic's configs follow the source's
                # the application's group kept ready on the target at its exact translation
                "checkpoint": {"groups": {"include": [APP_GROUP]}, "interval_seconds": 5, "sync_group_offsets": True},
            },
        ],
        # signed probes: only this demo's canary can produce one it counts (a key new each run)
        "canary": {"interval_seconds": 5, "sla_seconds": 30, "signing_key": secrets.token_hex(16)},
        "state_dir": str(clusters_config.state_path),  # the local clusters': status files, the link's control
    }
    if written_to is not None:
        written_to.write_text(yaml.safe_dump(document, sort_keys=False))
        written_to.chmod(0o600)  # the probes' signing key is in it
    return parse_config(document, source="the demo", env=environment)


def run_demo(options: DemoOptions, stop: threading.Event, out: Callable[[str], None] = print) -> int:
    """Run until `stop` is set or the duration ends; 0 when every order produced to the source was read back from
    the target through the mirror. Everything started is stopped in reverse order, also on errors."""
    with contextlib.ExitStack() as started:
        clusters = LocalClusters(options.state_dir, progress=out, security=options.security)

        def clusters_down() -> None:
            for line in clusters.down():
                out(line)

        started.callback(clusters_down)
        clusters.up(tie_to_parent=True)
        written = options.state_dir / "demo.yaml"
        environment = clusters.security.environment()  # secured: the passwords or client secrets, for every client
        secured = (clusters.security.client_properties(), environment)
        generated = load_config(clusters.config_path, env={**os.environ, **environment})
        config = demo_config(generated, options.topic, written, secured)
        source, target = config.clusters["source"], config.clusters["target"]
        create_topics(new_admin(source, "source"), {options.topic: options.partitions})
        # The wiring of `mirrorwatch run`: the link on a thread here, the canary, the monitor, the HTTP API. A link
        # that fails stops the demo (stop is set), and the verdict says why.
        running = started.enter_context(everything_running(config, stop, any_port_if_taken=True))
        (worker,) = running.workers[LINK]
        url = f"http://127.0.0.1:{running.server.port}"
        group = config.links[0].consumer_group
        out(
            f"HTTP API: {url}/mirror/links/{LINK}  {url}/metrics  {url}/v3/kafka/source/consumer/{group}/lag  "
            f"{url}/canary  {url}/mirror/links/{LINK}/checkpoints  {url}/mirror/links/{LINK}/drift  "
            f"{url}/mirror/groups  {url}/mirror/events"
        )
        out(f"console: {_start_console(url, options.state_dir, started)}  (Streamlit; open it in a browser)")
        out(
            "pause, resume, budget, read the link: mirrorwatch link pause|resume|budget|status "
            f"--config {written} --link {LINK}"
        )
        out(f"is a cutover safe now: mirrorwatch failover promote --config {written} --link {LINK} --dry-run")
        if environment:
            out(f"{written} takes its secrets from the environment: set -a; . {clusters.security.env_file}; set +a")
        traffic = _Traffic(
            producer=new_producer(source, "source", {"acks": "all", "enable.idempotence": True, "linger.ms": 5}),
            reader=new_consumer(target, "target", "mirrorwatch-demo-reader", {"auto.offset.reset": "earliest"}),
            app=new_consumer(source, "source", APP_GROUP, {"auto.offset.reset": "earliest"}),
            run_id=uuid.uuid4().hex[:12].encode(),
        )
        started.callback(traffic.reader.close)
        started.callback(traffic.app.close)
        out(
            f"mirroring {options.topic!r} from source ({source.bootstrap_servers}) to target "
            f"({target.bootstrap_servers}) with link {LINK!r}"
        )
        assert running.canary is not None  # the demo's config enables it
        _run_loop(traffic, running, worker, options=options, stop=stop, out=out)
        _catch_up(traffic, out)
        return _verdict(traffic, running.results, out)
    raise AssertionError("unreachable")  # for mypy: the with block always returns or raises


def _start_console(api: str, state_dir: Path, started: contextlib.ExitStack) -> str:
    """The Streamlit console on port 8501 (or a free one), reading the demo's HTTP API; it dies with the demo."""
    port = CONSOLE_PORT if _port_free(CONSOLE_PORT) else free_port()
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / "console.log").open("wb") as log:
        process = subprocess.Popen(
            console_command(api, port=port, address="127.0.0.1"),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 -- only prctl, async-signal-safe
        )

    started.callback(stop_process, process)
    return f"http://127.0.0.1:{port}"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _run_loop(
    t: _Traffic,
    running: Running,
    worker: WorkerBase,
    *,
    options: DemoOptions,
    stop: threading.Event,
    out: Callable[[str], None],
) -> None:
    started = time.monotonic()
    next_progress = started + options.progress_every_s
    interval_s = 1.0 / options.records_per_second
    out(f"producing {options.records_per_second:g} orders/s to source:{options.topic}; Ctrl-C stops")
    t.reader.subscribe([options.topic])
    t.app.subscribe([options.topic])
    n = 0
    while not stop.is_set():
        now = time.monotonic()
        if options.duration_s is not None and now - started >= options.duration_s:
            break
        key, value = _sample_order(n)
        _produce(t, options.topic, key, value)
        n += 1
        _read(t, timeout_s=0)
        t.app.consume(num_messages=500, timeout=0)  # the application on the source: reads and auto-commits
        if now >= next_progress:
            out(_progress_line(t, worker, running, now - started))
            next_progress = now + options.progress_every_s
        stop.wait(interval_s)


def _catch_up(t: _Traffic, out: Callable[[str], None]) -> None:
    """Stop producing and let the mirror deliver what is on its way (bounded)."""
    t.producer.flush(10)
    out(f"stopped producing after {t.produced} orders; waiting for the mirror to deliver the rest ...")

    def delivered() -> bool:
        _read(t, timeout_s=0.2)
        return t.read_on_target >= t.acked

    with contextlib.suppress(WaitTimeout):  # the verdict says what is missing
        wait_until(delivered, timeout_s=30, interval_s=0, description="the mirror to deliver every order")


def _produce(t: _Traffic, topic: str, key: bytes, value: bytes) -> None:
    def on_delivery(err: object, _msg: Message) -> None:
        if err is None:
            t.acked += 1
        else:
            t.errors.append(str(err))

    t.producer.produce(topic, value=value, key=key, headers=[(RUN_HEADER, t.run_id)], on_delivery=on_delivery)
    t.produced += 1
    t.producer.poll(0)


def _read(t: _Traffic, timeout_s: float) -> None:
    for msg in t.reader.consume(num_messages=500, timeout=timeout_s):
        if msg.error() is not None:
            continue
        with contextlib.suppress(SystemError):  # a header name that is not UTF-8 (kernel.kafka.headers_of)
            if (RUN_HEADER, t.run_id) in (headers_of(msg) or []):
                t.read_on_target += 1


def _progress_line(t: _Traffic, worker: WorkerBase, running: Running, elapsed_s: float) -> str:
    monitor, canary = running.monitor, running.canary
    assert canary is not None
    in_flight = sum(p["in_flight_records"] for p in worker.positions())
    view = monitor.state.links.get(LINK) if monitor.state is not None else None
    if view is None:
        lag = "lag: not measured yet"
    elif view.replication_lag_records is None:
        lag = f"lag: {view.reason or 'not known'}"
    else:
        seconds = view.replication_lag_seconds
        lag = f"replication lag {view.replication_lag_records} records, " + (
            f"{seconds:.1f}s" if seconds is not None else "age not known yet"
        )
    (probes,) = canary.view()
    latency = max((p.last_e2e_seconds or 0 for p in probes.partitions), default=0)
    return (
        f"[{elapsed_s:6.1f}s] source: produced {t.acked} | mirror: {worker.stats.records_out_total} mirrored, "
        f"{in_flight} in flight, {lag} | target: read {t.read_on_target} | canary: {probes.total('received')} "
        f"probes back, last e2e {latency * 1000:.0f} ms, {probes.total('lost')} lost | {_standby_line(running)}"
    )


def _standby_line(running: Running) -> str:
    views = [s.view() for s in running.standbys]
    group = next((g for v in views for g in v.groups if g.group == APP_GROUP), None)
    if group is None:
        return f"standby {APP_GROUP}: not translated yet"
    if not group.ready:
        return f"standby {APP_GROUP}: NOT ready ({group.why})"
    return f"standby {APP_GROUP}: ready on the target (a failover now reads {group.read_twice} twice)"


def _verdict(t: _Traffic, mirror_result: Mapping[str, int | MirrorwatchError], out: Callable[[str], None]) -> int:
    failure = next((r for r in mirror_result.values() if isinstance(r, MirrorwatchError)), None)
    if failure is not None:
        out(f"the mirror failed: {failure}")
        return 1
    complete = t.read_on_target >= t.acked == t.produced and not t.errors
    verdict = "every order arrived on the target" if complete else f"INCOMPLETE (errors: {t.errors[:3]})"
    out(
        f"produced {t.produced} orders to the source, {t.acked} acknowledged, {t.read_on_target} read from the "
        f"target through the mirror: {verdict}"
    )
    return 0 if complete else 1
