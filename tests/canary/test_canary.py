"""The canary on the real clusters with a real mirror process: latency, loss, absence, late arrivals, duplicates."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka import Message, TopicPartition
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from canary.exporter import CANARY_METRIC_NAMES, CanaryCollector
from canary.probe import HEADER_SIGNATURE, Probe, decode_probe, signature
from canary.service import CanaryService
from canary.tracker import LinkView
from kernel.config import ClusterConfig, MirrorwatchConfig, load_config
from kernel.kafka import create_topics, new_admin, new_consumer
from kernel.wait import wait_until
from tests.kafka_helpers import Record, produce
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

PARTITIONS = 3
INTERVAL_S = 1
SLA_S = 4
ABSENT_AFTER = 3


@pytest.fixture
def canary_config(
    clusters_config: MirrorwatchConfig, write_config: Callable[..., Path], unique: Callable[[str], str]
) -> Path:
    topic = unique("canary")
    # An existing probe topic with more partitions than brokers is kept as it is.
    create_topics(new_admin(clusters_config.clusters["source"], "source"), {topic: PARTITIONS})
    return write_config(
        [
            {
                "name": "probed",
                "source": "source",
                "target": "target",
                "topics": {"include": ["nothing-else"]},  # the probe topic is always part of the selection
                "group_id": unique("g"),
                "offset_commit_interval_ms": 500,
            }
        ],
        canary={
            "interval_seconds": INTERVAL_S,
            "topic": topic,
            "sla_seconds": SLA_S,
            "absent_after_intervals": ABSENT_AFTER,
        },
    )


@pytest.fixture
def canary(canary_config: Path) -> Iterator[CanaryService]:
    config = load_config(canary_config)
    service = CanaryService(config.canary, config.clusters, config.links, state_path=config.state_path)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def link_view(canary: CanaryService) -> LinkView:
    (view,) = canary.view()
    return view


@pytest.mark.secured("oidc")  # a client like any other: with signed tokens (tests/conftest.py)
def test_probes_through_a_stopped_and_restarted_mirror(
    canary: CanaryService,
    canary_config: Path,
    clusters_config: MirrorwatchConfig,
    start_mirror: Callable[..., MirrorProcess],
) -> None:
    mirror = start_mirror("--config", str(canary_config))

    # 1. Latency for every partition once the mirror runs.
    def every_partition_measured() -> bool:
        view = link_view(canary)
        return len(view.partitions) == PARTITIONS and all(p.e2e.count >= 3 for p in view.partitions)

    wait_until(every_partition_measured, timeout_s=90, interval_s=0.5, description="probes on every partition")
    # The canary probed before the mirror ran: on a loaded machine a start can outlast the SLA, and those probes are
    # rightly counted lost, then late (each once). From here on, with the mirror running, nothing more is.
    start = link_view(canary)
    assert start.total("lost") == start.total("late") and start.total("duplicated") == 0
    seen = {p.partition: p.e2e.count for p in start.partitions}
    wait_until(
        lambda: all(p.e2e.count >= seen[p.partition] + 3 for p in link_view(canary).partitions),
        timeout_s=90,
        interval_s=0.5,
        description="three more probes on every partition",
    )
    view = link_view(canary)
    assert not view.absent
    assert all(p.roundtrip.count >= 3 and p.produce.count >= 3 for p in view.partitions)
    assert all(p.last_e2e_seconds is not None and 0 < p.last_e2e_seconds < SLA_S for p in view.partitions)
    assert [(p.lost, p.duplicated, p.late) for p in view.partitions] == [
        (p.lost, p.duplicated, p.late) for p in start.partitions
    ]

    # 2. The mirror stops: probes are counted lost after the SLA, the link goes absent.
    assert mirror.stop() == 0
    wait_until(
        lambda: link_view(canary).absent,
        timeout_s=ABSENT_AFTER * INTERVAL_S + 10,
        interval_s=0.2,
        description="the link to be reported absent",
    )
    lost_before = {p.partition: p.lost for p in view.partitions}
    wait_until(
        lambda: all(p.lost >= lost_before[p.partition] + 2 for p in link_view(canary).partitions),
        timeout_s=SLA_S + 10,
        interval_s=0.2,
        description="probes counted lost on every partition",
    )

    # 3. The mirror comes back: probes flow again, every lost one arrives late and is counted once.
    mirror = start_mirror("--config", str(canary_config))

    def recovered() -> bool:
        view = link_view(canary)
        return not view.absent and view.total("late") > 0 and view.total("late") == view.total("lost")

    wait_until(recovered, timeout_s=90, interval_s=0.5, description="late probes to arrive, each counted once")
    before = link_view(canary)
    assert before.total("duplicated") == 0  # a clean stop committed everything the target had acknowledged

    # 4. A probe produced again (a replay) is a duplicate, not a new arrival.
    source = clusters_config.clusters["source"]
    first = first_record(source, canary.settings.topic, partition=0)
    probe = decode_probe(first.value())
    assert probe is not None and probe.instance == canary.instance and probe.sequence == 0
    produce(
        source,
        "source",
        canary.settings.topic,
        [
            Record(
                key=first.key(),
                value=first.value(),
                partition=0,
                headers=tuple(cast(list[tuple[str, bytes]], first.headers())),
            )
        ],
    )
    wait_until(
        lambda: link_view(canary).total("duplicated") == 1,
        timeout_s=30,
        interval_s=0.2,
        description="the replayed probe counted as a duplicate",
    )
    after = link_view(canary)
    assert after.total("late") == before.total("late")

    # 5. The metrics carry every canary series per link and partition.
    registry = CollectorRegistry()
    registry.register(CanaryCollector(canary.view))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    for name in CANARY_METRIC_NAMES:
        family = name.removesuffix("_total")
        assert family in families, name
    duplicated = {s.labels["partition"]: s.value for s in families["mirrorwatch_canary_probes_duplicated"].samples}
    assert duplicated == {"0": 1.0, "1": 0.0, "2": 0.0}
    absent = families["mirrorwatch_canary_absent"].samples
    assert [(s.labels, s.value) for s in absent] == [({"link": "probed"}, 0.0)]
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()


def signed(value: bytes | None, key: bytes) -> tuple[tuple[str, bytes], ...]:
    return ((HEADER_SIGNATURE, signature(value or b"", key)),)


def first_record(cluster: ClusterConfig, topic: str, *, partition: int) -> Message:
    consumer = new_consumer(cluster, "source", "mirrorwatch-test-reader", {"enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        while True:
            (msg,) = consumer.consume(1, timeout=10) or (None,)
            assert msg is not None, f"no record at {topic}[{partition}]@0"
            if msg.error() is None:
                return msg
    finally:
        consumer.close()


def test_forged_probes_change_no_counter_and_create_no_series_with_a_signing_key(
    clusters_config: MirrorwatchConfig,
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue #22, case 5: anyone who can write the probe topic sees the instance id at /canary. Probes with partitions
    that do not exist, sequences not handed out, or a right-looking value without the right signature are
    ignored: no counter moves and no series appears."""
    topic = unique("canary")
    create_topics(new_admin(clusters_config.clusters["source"], "source"), {topic: PARTITIONS})
    config_path = write_config(
        [
            {
                "name": "probed",
                "source": "source",
                "target": "target",
                "topics": {"include": ["nothing-else"]},
                "group_id": unique("g"),
                "offset_commit_interval_ms": 500,
            }
        ],
        canary={"interval_seconds": INTERVAL_S, "topic": topic, "sla_seconds": SLA_S, "signing_key": "k" * 24},
    )
    config = load_config(config_path)
    canary = CanaryService(config.canary, config.clusters, config.links, state_path=config.state_path)
    canary.start()
    mirror = start_mirror("--config", str(config_path))
    try:
        wait_until(
            lambda: (
                all(p.e2e.count >= 2 for p in link_view(canary).partitions)
                and len(link_view(canary).partitions) == PARTITIONS
            ),
            timeout_s=90,
            interval_s=0.5,
            description="signed probes measured on every partition",
        )
        source = clusters_config.clusters["source"]
        real = first_record(source, topic, partition=0)
        probe = decode_probe(real.value())
        assert probe is not None and probe.instance == canary.instance
        wrong_key = b"another-key-entirely-123"
        forged = [
            Probe(canary.instance, "probed", -7, 0, probe.created_ns),  # partitions that do not exist ...
            Probe(canary.instance, "probed", 99999, 0, probe.created_ns),
            Probe(canary.instance, "probed", 0, 10**9, probe.created_ns),  # ... a sequence not handed out
        ]
        records = [
            Record(key=p.key(), value=p.value(), partition=0, headers=signed(p.value(), wrong_key)) for p in forged
        ]
        # A real probe's value again (without a key this counts as a duplicate: see the test above), signed with the
        # wrong key, and with no signature at all
        records.append(Record(key=real.key(), value=real.value(), partition=0, headers=signed(real.value(), wrong_key)))
        records.append(Record(key=real.key(), value=real.value(), partition=0))
        before, forged_ns = link_view(canary), time.time_ns()
        produce(source, "source", topic, records)
        # Probes produced after the forged ones on the same partition arrive after them: then they were all read
        sent_after = before.partitions[0].sent + 2
        wait_until(
            lambda: link_view(canary).partitions[0].received >= sent_after,
            timeout_s=60,
            interval_s=0.2,
            description="real probes after the forged ones",
        )
        after = link_view(canary)
        assert [p.partition for p in after.partitions] == list(range(PARTITIONS))
        # the forged probes moved no counter (what the canary counted before them is not theirs: on a loaded run the
        # first probe of each partition can wait out the 4 s SLA for the mirror to start, and be late)
        counters = ("duplicated", "reordered", "late")
        assert [after.total(c) - before.total(c) for c in counters] == [0, 0, 0]
        assert all(r["counted_as"] == "received" for r in after.recent if r["received_ns"] >= forged_ns)
        assert "probe(s) on" in caplog.text and "without a valid signature ignored" in caplog.text
        registry = CollectorRegistry()
        registry.register(CanaryCollector(canary.view))
        labels = {
            s.labels.get("partition")
            for f in text_string_to_metric_families(generate_latest(registry).decode())
            for s in f.samples
        }
        assert labels - {None} == {"0", "1", "2"}
    finally:
        canary.stop()
    assert mirror.stop() == 0
