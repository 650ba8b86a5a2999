"""The monitor on the real local clusters: groups driven into each state, exact lag in seconds, the mirror's
replication lag while the target is down, and the HTTP API (Burrow's JSON shape, Prometheus text)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from jsonschema import validate
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from kernel.config import MirrorwatchConfig
from kernel.kafka import new_consumer
from kernel.wait import WaitTimeout, wait_until
from localkafka.local import LocalClusters
from monitor.evaluator import Status
from monitor.exporter import METRIC_NAMES
from monitor.http import create_app
from monitor.service import MonitorService
from tests.kafka_helpers import (
    Record,
    by_partition,
    committed_offsets,
    end_offsets,
    produce,
    produce_transactions,
    read_to_end,
)
from tests.processes import running_worker, session_config

pytestmark = pytest.mark.integration

BASE_TS = 1_700_000_000_000
WEEK_MS = 7 * 24 * 3_600_000


def monitor_config(clusters_config: MirrorwatchConfig, **extra: Any) -> MirrorwatchConfig:
    # short windows and thresholds so that the states appear within seconds
    monitor = {"interval_seconds": 1, "window": 3, "min_stop_seconds": 2, "max_commit_interval_seconds": 1}
    return session_config(clusters_config, extra.pop("links", None), monitor=monitor, **extra)


def member(config: MirrorwatchConfig, group: str, topic: str) -> Consumer:
    """A consumer that joins `group` (and stays a member while open) without reading."""
    consumer = new_consumer(config.clusters["source"], "source", group, {"enable.auto.commit": False})
    consumer.subscribe([topic])
    wait_until(
        lambda: consumer.poll(0.2) is None and bool(consumer.assignment()), timeout_s=30, description=f"{group} to join"
    )
    return consumer


def commit(consumer: Consumer, topic: str, offset: int) -> None:
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)


@pytest.fixture
def service_for(clusters_config: MirrorwatchConfig) -> Iterator[Callable[..., MonitorService]]:
    made: list[MonitorService] = []

    def make(config: MirrorwatchConfig, **kwargs: Any) -> MonitorService:
        made.append(MonitorService(config.monitor, config.clusters, config.links, **kwargs))
        return made[-1]

    yield make
    for service in made:
        service.stop()


def observe_source_after(service: MonitorService, moment_ms: float) -> int:
    """Collect until a round holds a collection of the source that began after `moment_ms` (a round publishes the
    newest finished one, which is older when a collection outlasts the round's wait); its moment."""

    def observed() -> bool:
        source = service.collect().clusters["source"]
        return source.up and source.observed_ms >= moment_ms

    wait_until(observed, timeout_s=30, interval_s=0.05, description="the source collected")
    return service.state.clusters["source"].observed_ms  # type: ignore[union-attr]


@pytest.mark.secured("oidc")  # a client like any other: with signed tokens (tests/conftest.py)
def test_groups_are_evaluated_stop_stall_rewind_catching_up_idle_and_lag_seconds(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    service_for: Callable[..., MonitorService],
) -> None:
    topic, idle_topic = make_topic("source", 1), make_topic("source", 1)
    source = clusters_config.clusters["source"]
    # Record i was written 10 s after record i-1: a lag at offset k is exactly (now - BASE_TS - 10 k s) old.
    produce(source, "source", topic, [Record(value=b"x", timestamp_ms=BASE_TS + i * 10_000) for i in range(1000)])
    produce(source, "source", idle_topic, [Record(value=b"y") for _ in range(50)])
    g = {name: unique(name) for name in ("stopper", "stuck", "rewinder", "catcher", "idle")}
    stopper, stuck = member(clusters_config, g["stopper"], topic), member(clusters_config, g["stuck"], topic)
    rewinder, catcher = member(clusters_config, g["rewinder"], topic), member(clusters_config, g["catcher"], topic)
    idle = member(clusters_config, g["idle"], idle_topic)
    service = service_for(monitor_config(clusters_config))
    try:
        commit(idle, idle_topic, 50)
        idle.close()  # caught up, then gone: an idle partition
        commit(stuck, topic, 100)
        commit(rewinder, topic, 500)
        last_ms = 0
        for round_ in range(3):  # three observations of progress, at least one monitor interval (1 s) apart
            wait_until(
                lambda last_ms=last_ms: time.time() * 1000 - last_ms >= 1000,  # type: ignore[misc]
                timeout_s=5,
                interval_s=0.05,
                description="one monitor interval",
            )
            commit(stopper, topic, 100 + round_ * 100)
            commit(catcher, topic, 400 + round_ * 200)
            commit(stuck, topic, 100)
            last_ms = observe_source_after(service, time.time() * 1000)
        catching_up = service.state.groups[("source", g["catcher"])].evaluation  # type: ignore[union-attr]
        assert (catching_up.status, catching_up.complete) == (Status.OK, 1.0)  # lag 600, 400, 200: not WARN
        stopper.close()  # stops committing and leaves: nobody consumes
        commit(rewinder, topic, 200)  # reset backwards, stays there
        rewound = service.collect().groups[("source", g["rewinder"])].evaluation
        assert (rewound.partitions[0].status, rewound.status) == (Status.REWIND, Status.ERR)

        def status(name: str) -> Status:
            state = service.collect()
            return state.groups[("source", g[name])].evaluation.status

        # STOP and STALL need the offset to stand still longer than the window (3 s) and min_stop_seconds (2 s)
        try:
            wait_until(
                lambda: status("stopper") == Status.ERR, timeout_s=90, interval_s=0.5, description="stopper: ERR"
            )
        except WaitTimeout:
            key = ("source", g["stopper"], topic, 0)
            seen = service.state.groups[("source", g["stopper"])] if service.state else None  # what the monitor saw
            raise AssertionError(f"stopper not STOP: {seen}; window {service.windows.samples(key)}") from None
        state = service.collect()
        by_group = {name: state.groups[("source", gid)].evaluation for name, gid in g.items()}
        assert by_group["stopper"].partitions[0].status == Status.STOP
        wait_until(
            lambda: service.collect().groups[("source", g["stuck"])].evaluation.partitions[0].status == Status.STALL,
            timeout_s=90,
            interval_s=0.5,
            description="stuck: STALL",
        )
        assert by_group["idle"].status == Status.OK  # idle, caught up, consumer gone: never STOP
        # lag in seconds: the age of the record at the committed offset, within a second
        stuck_partition = service.collect().groups[("source", g["stuck"])].evaluation.partitions[0]
        assert stuck_partition.current_lag == 900
        expected = (service.state.observed_ms - (BASE_TS + 100 * 10_000)) / 1000  # type: ignore[union-attr]
        assert stuck_partition.lag_seconds is not None and abs(stuck_partition.lag_seconds - expected) < 1
    finally:
        for consumer in (stuck, rewinder, catcher):
            consumer.close()


def test_record_timestamps_from_a_backfill_or_a_clock_ahead_do_not_date_the_lag(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    service_for: Callable[..., MonitorService],
) -> None:
    """Producers choose record timestamps (CreateTime): a backfill writes last week's event times, a producer whose
    clock runs ahead writes the future. Records written now with such timestamps, behind a group that consumed
    everything before them and a link with no worker (a dead mirror), are seconds behind: the stopwatch around
    their writing says how many. Believed, the timestamps would read a week behind, and caught up (0 s, 0 records:
    "written after the status") for the clock ahead, for as long as it runs ahead."""
    source = clusters_config.clusters["source"]
    past, ahead = make_topic("source", 1), make_topic("source", 1)
    group = {past: unique("backfilled"), ahead: unique("ahead")}
    for topic in (past, ahead):
        produce(source, "source", topic, [Record(value=b"before") for _ in range(10)])
        consumer = member(clusters_config, group[topic], topic)
        commit(consumer, topic, 10)  # caught up, then gone
        consumer.close()
    link = {"name": "dead", "source": "source", "target": "target", "topics": {"include": [ahead]}}
    service = service_for(monitor_config(clusters_config, links=[{**link, "group_id": group[ahead]}]))
    observe_source_after(service, time.time() * 1000)  # the monitor has seen both partitions caught up
    written_from = time.time() * 1000
    produce(source, "source", past, [Record(value=b"old", timestamp_ms=int(written_from) - WEEK_MS)] * 100)
    produce(source, "source", ahead, [Record(value=b"new", timestamp_ms=int(written_from) + 20 * 60_000)] * 100)
    written_by = time.time() * 1000

    def ages() -> dict[str, tuple[int | None, float | None]] | None:
        state = service.collect()
        partitions = {t: state.groups[("source", group[t])].evaluation.partitions[0] for t in (past, ahead)}
        out: dict[str, tuple[int | None, float | None]] = {
            t: (p.current_lag, p.lag_seconds) for t, p in partitions.items()
        }
        dead = state.links["dead"].partitions[0]
        out["link"] = (dead.replication_lag_records, dead.replication_lag_seconds)
        return out if all(seconds is not None and seconds > 0 for _lag, seconds in out.values()) else None

    seen = wait_until(ages, timeout_s=60, interval_s=0.5, description="every lag dated")
    at = service.state.observed_ms  # type: ignore[union-attr]
    oldest, youngest = (at - written_from) / 1000, (at - written_by) / 1000  # the truth, by the stopwatch
    interval_s = 1.0  # the monitor's: its observations bound each arrival to within one
    for name, (records, seconds) in seen.items():
        assert records == 100, name
        assert seconds is not None and youngest - interval_s <= seconds <= oldest + interval_s, (name, seen, oldest)


def test_mirror_replication_lag_rises_while_the_target_is_down_and_returns_to_zero(
    clusters_config: MirrorwatchConfig,
    local_clusters: LocalClusters,
    owns_clusters: bool,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    service_for: Callable[..., MonitorService],
) -> None:
    source = clusters_config.clusters["source"]
    topic = make_topic("source", 2)
    config = monitor_config(
        clusters_config,
        links=[
            {
                "name": "watched",
                "source": "source",
                "target": "target",
                "topics": {"include": [topic]},
                "group_id": unique("g"),
                "offset_commit_interval_ms": 200,
            }
        ],
    )
    with running_worker(config) as worker:
        service = service_for(config, link_statuses=lambda: {"watched": [worker.worker_status()]})
        wait_until(lambda: len(worker.positions()) == 2, timeout_s=60, description="the link to own its partitions")
        wait_until(lambda: service.collect().clusters["target"].up, timeout_s=60, description="the target collected")
        killed_ms = int(time.time() * 1000)
        local_clusters.kill("target")
        produce(source, "source", topic, [Record(value=b"x", partition=i % 2) for i in range(500)])

        def lag() -> int | None:
            return service.collect().links["watched"].replication_lag_records

        def lagging() -> bool:
            # all 500 counted, their age read from the source (known once it is collected), and the group's first
            # commits seen: the worker commits 0 only once it has read a record (the topic was empty), and a round
            # may come before its commit does (a clean clone's CI run: committed lag not known yet)
            view = service.collect().links["watched"]
            return (
                view.replication_lag_records == 500
                and view.replication_lag_seconds is not None
                and all(p.committed is not None for p in view.partitions)
            )

        wait_until(lagging, timeout_s=60, description="replication lag to count all 500 records, with their age")
        view = service.state.links["watched"]  # type: ignore[union-attr]
        assert view.replication_lag_seconds is not None and view.replication_lag_seconds > 0
        seen = [(p.partition, p.high_watermark, p.committed, p.committed_lag_records) for p in view.partitions]
        assert all(p.committed_lag_records == 250 for p in view.partitions), seen
        local_clusters.up(["target"], tie_to_parent=owns_clusters)
        wait_until(lambda: lag() == 0, timeout_s=120, description="replication lag back to 0")
        assert service.state.links["watched"].replication_lag_seconds == 0.0  # type: ignore[union-attr]
        wait_until(
            lambda: service.collect().clusters["target"].up, timeout_s=60, description="the target collected again"
        )
    # what the monitor remembers of the outage: the target going down and coming back, the lag's rise and fall (of
    # this outage: a round before it may have found the target still starting after an earlier test's)
    changes = [(e.before, e.after) for e in reversed(service.events.query(cluster="target")) if e.at_ms >= killed_ms]
    assert changes[:1] == [("up", "down")] and changes[-1] == ("down", "up"), changes
    lag_history = [v for _, v in service.history.link("watched")["replication_lag_records"]]
    assert 500 in lag_history and lag_history[-1] == 0


BURROW_REQUEST = {"type": "object", "required": ["url", "host"]}
BURROW_OFFSET = {
    "type": ["object", "null"],
    "required": ["offset", "timestamp", "lag"],
    "properties": {"offset": {"type": "integer"}, "timestamp": {"type": "integer"}, "lag": {"type": "integer"}},
}
BURROW_PARTITION = {
    "type": "object",
    "required": ["topic", "partition", "status", "start", "end", "current_lag", "complete"],
    "properties": {
        "topic": {"type": "string"},
        "partition": {"type": "integer"},
        "status": {"enum": [s.name for s in Status]},
        "start": BURROW_OFFSET,
        "end": BURROW_OFFSET,
        "current_lag": {"type": "integer"},
        "complete": {"type": "number"},
    },
}
BURROW_STATUS = {
    "type": "object",
    "required": ["error", "message", "status", "request"],
    "properties": {
        "error": {"const": False},
        "request": BURROW_REQUEST,
        "status": {
            "type": "object",
            "required": [
                "cluster",
                "group",
                "status",
                "complete",
                "partitions",
                "partition_count",
                "maxlag",
                "totallag",
            ],
            "properties": {
                "status": {"enum": ["NOTFOUND", "OK", "WARN", "ERR"]},
                "partitions": {"type": "array", "items": BURROW_PARTITION},
                "maxlag": {"anyOf": [{"type": "null"}, BURROW_PARTITION]},
                "totallag": {"type": "integer"},
                "partition_count": {"type": "integer"},
            },
        },
    },
}


def _list_schema(key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["error", "message", key, "request"],
        "properties": {
            "error": {"const": False},
            key: {"type": "array", "items": {"type": "string"}},
            "request": BURROW_REQUEST,
        },
    }


def test_an_idle_transactional_topic_reads_caught_up_for_the_link_and_for_an_application_below_the_final_marker(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    service_for: Callable[..., MonitorService],
) -> None:
    """A transactional producer commits two transactions in three and aborts the other, the last one committed, so
    each partition ends with a commit marker. The python engine reads read_committed: the target holds exactly the
    committed records, in order, and the link's group commits the source's end offsets (the aborted records and the
    markers passed, as a Java consumer's position passes them). Before, it committed its last record + 1, one below
    the final marker: the idle link read 1 record of replication lag per partition for ever, and its group, stuck
    with that "lag", STALL. An application that commits there (librdkafka's do) is read as caught up too: OK, not
    STOP, its lag 1 offset per partition and 0 s."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    partitions = 3
    topic = make_topic("source", partitions)
    kept = produce_transactions(source, "source", topic, partitions, unique("tx"), transactions=9, size=30)
    group = unique("g")
    link = {"name": "tx", "source": "source", "target": "target", "topics": {"include": [topic]}, "group_id": group}
    config = monitor_config(clusters_config, links=[{**link, "offset_commit_interval_ms": 200}])
    ends = end_offsets(source, "source", topic, partitions)
    assert all(end > len(kept[p]) for p, end in enumerate(ends))  # the markers and aborted records take offsets
    with running_worker(config) as worker:
        wait_until(
            lambda: committed_offsets(source, "source", group, topic, partitions) == ends,
            timeout_s=60,
            description=f"{group} to commit the source's end offsets {ends}",
        )
        got = by_partition(read_to_end(target, "target", topic, partitions))
        assert {p: [r.value for r in rows] for p, rows in got.items()} == kept
        # An application that commits its last record + 1 (librdkafka's, as the engine did) stands one below each
        # partition's final marker: ground truth, a read_committed consumer starting there reads nothing, one offset
        # earlier it reads the last record.
        app_group = unique("app")
        app = new_consumer(source, "source", app_group, {"enable.auto.commit": False})
        app.commit(offsets=[TopicPartition(topic, p, ends[p] - 1) for p in range(partitions)], asynchronous=False)
        app.close()
        assert read_to_end(source, "source", topic, partitions, starts=[e - 1 for e in ends]) == []
        last = by_partition(read_to_end(source, "source", topic, partitions, starts=[e - 2 for e in ends]))
        assert {p: [r.value for r in rows] for p, rows in last.items()} == {p: [kept[p][-1]] for p in range(partitions)}
        service = service_for(config, link_statuses=lambda: {"tx": [worker.worker_status()]})
        wait_until(
            lambda: {("source", group), ("source", app_group)} <= service.collect().groups.keys(),
            timeout_s=30,
            description="the groups seen",
        )
        views = []
        for _ in range(6):  # longer than the short windows' STOP and STALL thresholds (min_stop_seconds 2)
            state = service.collect()
            views.append(
                (
                    state.links["tx"].replication_lag_records,
                    state.groups[("source", group)].evaluation,
                    state.groups[("source", app_group)].evaluation,
                )
            )
            time.sleep(1)
    assert [lag for lag, _, _ in views] == [0] * len(views), views
    assert all(e.status == Status.OK and e.total_lag == 0 for _, e, _ in views), views
    # the application's lag counts offsets, as Burrow's and kafka_exporter's do; it is caught up, not stopped
    assert all(e.status == Status.OK and e.total_lag == partitions for _, _, e in views), views
    assert all(p.lag_seconds == 0 for _, _, e in views for p in e.partitions), views


def collect_until_ready(service: MonitorService, client: TestClient) -> None:
    """Rounds until `/readyz` says ready, which is once a round holds every cluster's answer: under the loaded suite a
    collection of the worker's shared pair can outlast a round's wait (half an interval) and join the round after it
    (flaky30: 503 after two rounds)."""

    def ready_or_another_round() -> bool:
        if client.get("/readyz").status_code == 200:
            return True
        service.collect()
        return False

    wait_until(ready_or_another_round, timeout_s=60, interval_s=0, description="a round holding every cluster")


def test_the_http_api_speaks_burrow_v3_and_prometheus(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    service_for: Callable[..., MonitorService],
) -> None:
    topic = make_topic("source", 2)
    produce(
        clusters_config.clusters["source"], "source", topic, [Record(value=b"x", partition=i % 2) for i in range(40)]
    )
    group = unique("api")
    consumer = member(clusters_config, group, topic)
    config = monitor_config(
        clusters_config,
        links=[
            {
                "name": "api-link",
                "source": "source",
                "target": "target",
                "topics": {"include": [topic]},
                "group_id": group,
            }
        ],
    )
    service = service_for(config)
    client = TestClient(create_app(service))
    assert client.get("/readyz").status_code == 503  # nothing collected yet
    try:
        commit(consumer, topic, 5)
        for _ in range(2):
            service.collect()
        collect_until_ready(service, client)
    finally:
        consumer.close()
    assert client.get("/healthz").json() == {"status": "ok"}
    validate(client.get("/v3/kafka").json(), _list_schema("clusters"))
    assert client.get("/v3/kafka").json()["clusters"] == ["source", "target"]
    detail = client.get("/v3/kafka/source").json()
    assert detail["module"]["class-name"] == "kafka" and detail["error"] is False
    validate(client.get("/v3/kafka/source/topic").json(), _list_schema("topics"))
    assert client.get(f"/v3/kafka/source/topic/{topic}").json()["offsets"] == [20, 20]
    validate(client.get("/v3/kafka/source/consumer").json(), _list_schema("consumers"))
    assert group in client.get("/v3/kafka/source/consumer").json()["consumers"]
    windows = client.get(f"/v3/kafka/source/consumer/{group}").json()["topics"][topic]
    assert windows[0]["offsets"][-1]["offset"] == 5 and windows[0]["current-lag"] == 15
    lag = client.get(f"/v3/kafka/source/consumer/{group}/lag").json()
    validate(lag, BURROW_STATUS)
    assert lag["status"]["partition_count"] == 1 and lag["status"]["totallag"] == 15
    status = client.get(f"/v3/kafka/source/consumer/{group}/status").json()
    validate(status, BURROW_STATUS)
    assert all(p["status"] != "OK" for p in status["status"]["partitions"])  # /status lists WARN or worse only
    missing = client.get("/v3/kafka/source/consumer/no-such-group/status")
    assert missing.status_code == 404 and missing.json()["error"] is True
    assert client.get("/v3/kafka/nowhere/topic").status_code == 404
    link = client.get("/mirror/links/api-link").json()
    assert link["consumer_group"] == group and not link["engine_running"]
    assert [p["committed_lag_records"] for p in link["partitions"]] == [15]
    assert client.get("/mirror/links/nope").status_code == 404

    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
    exported = {name.removesuffix("_total") for name in METRIC_NAMES}
    assert exported <= set(families), exported - set(families)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert (
        samples[
            (
                "kafka_consumergroup_lag",
                (("cluster", "source"), ("consumergroup", group), ("partition", "0"), ("topic", topic)),
            )
        ]
        == 15
    )
    assert samples[("mirrorwatch_cluster_up", (("cluster", "source"),))] == 1
    assert samples[("mirrorwatch_mirror_send_errors_total", (("link", "api-link"),))] == 0  # there from the start
    assert not any(math.isnan(v) for v in samples.values())
