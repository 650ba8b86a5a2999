"""The exporter's borrowed families (kafka_exporter, its Grafana fork, kafka-lag-exporter, burrow_exporter) from a
monitor state built by the same pure steps the service runs, and /metrics rendered once per collection."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from kernel.config import ClusterConfig, MonitorConfig
from monitor.exporter import STYLES, MonitorCollector
from monitor.http import create_app
from monitor.service import MonitorService, evaluator_config
from monitor.snapshot import ClusterSnapshot, GroupInfo, Member, PartitionOffsets, Replicas
from monitor.state import MonitorState, evaluate_groups, observe_snapshot
from monitor.windows import OffsetWindows

T0 = 1_700_000_000_000
ORDERS = "orders"
HOLDER = Member("/10.0.0.7", "billing-1-5f1c", "billing-1")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _snapshot(at_ms: int, committed: tuple[int, int, int]) -> ClusterSnapshot:
    """Three partitions of `orders` (high-watermarks 100, 50, 10) on brokers 1-3: partition 1 led by a replica
    that is not its preferred one, partition 2 with one replica out of sync. Group `billing` (a member holds
    partitions 0 and 1), group `spark-link` (commits only)."""
    billing = GroupInfo(
        "billing",
        "STABLE",
        1,
        False,
        {(ORDERS, p): committed[p] for p in range(3)},
        assignments={(ORDERS, 0): HOLDER, (ORDERS, 1): HOLDER},
    )
    spark = GroupInfo("spark-link", "EMPTY", 0, True, {(ORDERS, 0): 100})
    return ClusterSnapshot(
        "source",
        at_ms,
        up=True,
        partitions={
            (ORDERS, 0): PartitionOffsets(0, 100),
            (ORDERS, 1): PartitionOffsets(5, 50),
            (ORDERS, 2): PartitionOffsets(0, 10),
        },
        groups={"billing": billing, "spark-link": spark},
        collect_seconds=0.25,
        brokers={1: "b1:9092", 2: "b2:9092", 3: "b3:9092"},
        replicas={
            (ORDERS, 0): Replicas(1, (1, 2, 3), (1, 2, 3)),
            (ORDERS, 1): Replicas(3, (2, 3, 1), (3, 1, 2)),
            (ORDERS, 2): Replicas(1, (1, 2, 3), (1, 3)),
        },
    )


def _state() -> MonitorState:
    windows = OffsetWindows(10)
    for at_ms, committed in ((T0, (60, 20, 10)), (T0 + 10_000, (70, 30, 10))):
        observe_snapshot(windows, _snapshot(at_ms, committed))
    last = _snapshot(T0 + 10_000, (70, 30, 10))
    # the records at the committed offsets of billing's lagging partitions: 12 s and 10 s old (both were below the
    # high-watermark at the first observation, T0: written no later)
    times = {("source", ORDERS, 0, 70): T0 - 2_000, ("source", ORDERS, 1, 30): T0}
    groups = evaluate_groups(windows, last, evaluator_config(MonitorConfig()), times)
    return MonitorState(T0 + 10_000, {"source": last}, groups, {}, {"source": T0 + 10_000})


@pytest.fixture
def service() -> Iterator[MonitorService]:
    monitor = MonitorService(MonitorConfig(), {"source": ClusterConfig(bootstrap_servers="b1:9092")})
    monitor.state = _state()
    yield monitor
    monitor.stop()


def _samples(service: MonitorService) -> Samples:
    text = MonitorCollector(service).render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _of(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_kafka_exporter_families_carry_the_metadata_and_the_groups(service: MonitorService) -> None:
    s = _samples(service)
    assert _of(s, "kafka_brokers", cluster="source") == 3
    assert _of(s, "kafka_broker_info", cluster="source", address="b2:9092", id="2") == 1
    assert _of(s, "kafka_topic_partitions", cluster="source", topic=ORDERS) == 3
    p = {"cluster": "source", "topic": ORDERS}
    assert [_of(s, "kafka_topic_partition_leader", **p, partition=str(i)) for i in range(3)] == [1, 3, 1]
    assert [_of(s, "kafka_topic_partition_replicas", **p, partition=str(i)) for i in range(3)] == [3, 3, 3]
    assert [_of(s, "kafka_topic_partition_in_sync_replica", **p, partition=str(i)) for i in range(3)] == [3, 3, 2]
    assert [_of(s, "kafka_topic_partition_leader_is_preferred", **p, partition=str(i)) for i in range(3)] == [1, 0, 1]
    under = [_of(s, "kafka_topic_partition_under_replicated_partition", **p, partition=str(i)) for i in range(3)]
    assert under == [0, 0, 1]
    g = {"cluster": "source", "consumergroup": "billing", "topic": ORDERS}
    assert [_of(s, "kafka_consumergroup_lag", **g, partition=str(i)) for i in range(3)] == [30, 20, 0]
    assert [_of(s, "kafka_consumergroup_uncommitted_offsets", **g, partition=str(i)) for i in range(3)] == [30, 20, 0]
    assert _of(s, "kafka_consumergroup_lag_sum", **g) == 50
    assert _of(s, "kafka_consumergroup_current_offset_sum", **g) == 70 + 30 + 10
    # measured ages of the records at the committed offsets, in ms; a caught-up partition is 0 ms behind
    assert [_of(s, "kafka_consumer_lag_millis", **g, partition=str(i)) for i in range(3)] == [12_000, 10_000, 0]


def test_kafka_lag_exporter_families_name_the_member_and_aggregate_the_group(service: MonitorService) -> None:
    s = _samples(service)
    held = {"cluster_name": "source", "group": "billing", "topic": ORDERS, "member_host": "/10.0.0.7"}
    held |= {"consumer_id": "billing-1-5f1c", "client_id": "billing-1"}
    unheld = held | {"member_host": "unknown", "consumer_id": "unknown", "client_id": "unknown"}
    assert _of(s, "kafka_consumergroup_group_lag", **held, partition="0") == 30
    assert _of(s, "kafka_consumergroup_group_offset", **held, partition="1") == 30
    assert _of(s, "kafka_consumergroup_group_lag_seconds", **held, partition="0") == 12
    assert _of(s, "kafka_consumergroup_group_lag", **unheld, partition="2") == 0
    billing = {"cluster_name": "source", "group": "billing"}
    assert _of(s, "kafka_consumergroup_group_max_lag", **billing, is_simple_consumer="false") == 30
    assert _of(s, "kafka_consumergroup_group_max_lag_seconds", **billing, is_simple_consumer="false") == 12
    assert _of(s, "kafka_consumergroup_group_sum_lag", **billing) == 50
    assert _of(s, "kafka_consumergroup_group_topic_sum_lag", **billing, topic=ORDERS) == 50
    spark = {"cluster_name": "source", "group": "spark-link", "is_simple_consumer": "true"}
    assert _of(s, "kafka_consumergroup_group_max_lag", **spark) == 0
    tp = {"cluster_name": "source", "topic": ORDERS, "partition": "1"}
    assert (_of(s, "kafka_partition_latest_offset", **tp), _of(s, "kafka_partition_earliest_offset", **tp)) == (50, 5)
    assert _of(s, "kafka_consumergroup_poll_time_ms", cluster_name="source") == 250


@pytest.mark.parametrize("style", sorted(STYLES))
def test_a_style_left_out_of_compatible_metrics_is_not_served(service: MonitorService, style: str) -> None:
    kept = tuple(other for other in STYLES if other != style)
    service.settings = MonitorConfig(compatible_metrics=kept)
    names = {name for name, _labels in _samples(service)}
    assert not names & set(STYLES[style])
    for other in kept:
        assert set(STYLES[other]) <= names
    assert "mirrorwatch_cluster_up" in names


def test_metrics_are_rendered_once_per_collection(service: MonitorService, monkeypatch: pytest.MonkeyPatch) -> None:
    renders: list[int] = []
    original = MonitorCollector.collect

    def counted(self: MonitorCollector) -> Iterator[object]:
        renders.append(1)
        return original(self)

    monkeypatch.setattr(MonitorCollector, "collect", counted)
    client = TestClient(create_app(service))
    first, second = client.get("/metrics").text, client.get("/metrics").text
    assert first == second and len(renders) == 1
    assert (
        'kafka_consumergroup_lag{cluster="source",consumergroup="billing",topic="orders",partition="0"} 30\n' in first
    )
    service.state = _state()  # the next collection
    client.get("/metrics")
    assert len(renders) == 2
    families = {f.name for f in text_string_to_metric_families(first)}
    assert "kafka_topic_partition_in_sync_replica" in families


def test_a_scrape_during_a_rounds_rendering_gets_the_last_complete_one_without_waiting(
    service: MonitorService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet's rendering takes seconds (issue #45: the first full scrape took 10.5 s, past Prometheus' timeout): a
    scrape while the monitor's thread renders the new round gets the previous rendering at once, whole."""
    client = TestClient(create_app(service))
    before = client.get("/metrics").text
    assert 'consumergroup="billing"' in before
    started, release = threading.Event(), threading.Event()
    original = MonitorCollector.collect

    def slow(self: MonitorCollector) -> Iterator[object]:
        started.set()
        release.wait(30)
        return original(self)

    monkeypatch.setattr(MonitorCollector, "collect", slow)
    newer = _state()
    service.publishing = True  # the loop's round: it publishes, then renders for /metrics (`on_publish`)
    service.state = newer
    renderer = threading.Thread(target=lambda: [listener(newer) for listener in service.on_publish])
    renderer.start()
    try:
        assert started.wait(10)
        answers: list[str] = []  # the rendering goes on until released: a scrape that waits for it answers nothing
        scraper = threading.Thread(target=lambda: answers.append(client.get("/metrics").text))
        scraper.start()
        scraper.join(10)
        assert answers, "the scrape waited for the round's rendering"
        assert 'consumergroup="billing"' in answers[0] and answers[0].count("\n") == before.count("\n")
    finally:
        release.set()
        renderer.join(30)
        service.publishing = False


def test_partition_series_can_be_trimmed_to_some_groups(service: MonitorService) -> None:
    service.settings = MonitorConfig.model_validate({"partition_series_groups": {"exclude": ["billing"]}})
    s = _samples(service)
    names_for_billing = {
        name for name, labels in s if ("consumergroup", "billing") in labels or ("group", "billing") in labels
    }
    # billing keeps its per-group and per-topic series, not one per partition
    assert (
        _of(s, "kafka_consumergroup_group_max_lag", cluster_name="source", group="billing", is_simple_consumer="false")
        == 30
    )
    assert _of(s, "kafka_consumergroup_lag_sum", cluster="source", consumergroup="billing", topic=ORDERS) == 50
    assert not names_for_billing & {
        "kafka_consumergroup_lag",
        "kafka_consumergroup_group_lag",
        "kafka_consumer_lag_millis",
        "burrow_kafka_consumer_partition_lag",
    }
    assert (
        _of(s, "kafka_consumergroup_lag", cluster="source", consumergroup="spark-link", topic=ORDERS, partition="0")
        == 0
    )


def test_the_series_served_are_counted_per_style(service: MonitorService) -> None:
    text = TestClient(create_app(service)).get("/metrics").text
    counted = {
        s.labels["style"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "mirrorwatch_exporter_series"
        for s in f.samples
    }
    own = ("mirrorwatch_exporter_series", "mirrorwatch_exporter_groups_without_partition_series")
    served = [f for f in text_string_to_metric_families(text) if f.name not in own]
    lag_exporter = sum(len(f.samples) for f in served if f.name in STYLES["kafka_lag_exporter"])
    assert counted["kafka_lag_exporter"] == lag_exporter > 0
    assert sum(counted.values()) == sum(len(f.samples) for f in served)


def test_a_scraper_asking_for_gzip_gets_the_text_compressed_once_per_collection(service: MonitorService) -> None:
    client = TestClient(create_app(service))
    packed = client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    plain = client.get("/metrics", headers={"Accept-Encoding": "identity"})
    refused = client.get("/metrics", headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert packed.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
    assert "content-encoding" not in refused.headers
    # Two gzip members (the monitor's text, compressed when rendered; the other collectors'): one stream to a reader.
    assert packed.text == plain.text == refused.text
    assert packed.num_bytes_downloaded < plain.num_bytes_downloaded / 3
    assert "mirrorwatch_exporter_series" in plain.text and "kafka_consumergroup_lag{" in plain.text
