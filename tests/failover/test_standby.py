"""Standby groups kept ready (`checkpoint:` with sync_group_offsets) under `mirrorwatch run`, on the real clusters:
an application consumes on the source while producers write and the mirror runs; once it stops, the standby
commits its exact translation to the idle target group, and that group, read on the target, yields exactly the
records the application had not read. The checkpoints endpoint and the metrics say so on the way."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from kernel.config import MirrorwatchConfig
from kernel.kafka import new_consumer
from kernel.wait import wait_until
from tests.failover.drills import consume_as_group, judge, keyed, link, source_truth
from tests.kafka_helpers import produce
from tests.processes import MirrorProcess
from tests.prometheus import get_json

pytestmark = pytest.mark.integration


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def test_a_standby_group_is_kept_at_the_exact_translation_and_fails_over_cleanly(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    partitions = 2
    topic, group = make_topic("source", partitions), unique("app")
    checkpoint = {"groups": {"include": [group]}, "interval_seconds": 1, "sync_group_offsets": True}
    config = write_config(
        [link("dr", topic, checkpoint=checkpoint)],
        monitor={"interval_seconds": 1},
        canary={"enabled": False},
        http={"host": "127.0.0.1", "port": 0},
    )
    process = start_mirror("--config", str(config), command="run")
    base = process.http_base()
    produce(source, "source", topic, keyed(0, 2000, partitions))

    # The application consumes on the source, committing as it goes, while more records arrive.
    stop = threading.Event()
    read_on_source: list[bytes] = []

    def application() -> None:
        app = new_consumer(source, "source", group, {"auto.offset.reset": "earliest", "auto.commit.interval.ms": 200})
        app.subscribe([topic])
        while not stop.is_set() and len(read_on_source) < 2500:
            for msg in app.consume(num_messages=50, timeout=0.2):
                if msg.error() is None:
                    read_on_source.append(msg.value() or b"")
            time.sleep(0.05)
        app.close()  # commits what it read

    app = threading.Thread(target=application)
    app.start()
    produce(source, "source", topic, keyed(2000, 2000, partitions))
    app.join(timeout=120)
    stop.set()
    assert not app.is_alive()

    def ready() -> dict[str, Any] | None:
        view = get_json(f"{base}/mirror/links/dr/checkpoints")
        groups = {g["group"]: g for g in view["groups"]}
        g = groups.get(group)
        return g if g is not None and g["ready"] and g["synced"] and view["updated_ms"] > closed_ms + 1000 else None

    closed_ms = int(time.time() * 1000)
    standby = wait_until(
        ready, timeout_s=60, interval_s=0.5, ignore=(urllib.error.HTTPError,), description="the standby group ready"
    )
    assert standby["read_twice"] == 0 and standby["target_state"] != "Stable"
    assert {t["method"] for t in standby["translations"]} == {"exact"}
    families = {f.name: f for f in text_string_to_metric_families(get_text(f"{base}/metrics"))}
    ready_series = [s for s in families["mirrorwatch_failover_group_ready"].samples if s.labels["group"] == group]
    assert [s.value for s in ready_series] == [1.0]
    ages = [
        s.value for s in families["mirrorwatch_failover_checkpoint_age_seconds"].samples if s.labels["group"] == group
    ]
    assert len(ages) == 1 and 0 <= ages[0] < 30
    assert {s.labels["group"] for s in families["mirrorwatch_failover_reread_records"].samples} >= {group}

    # The source is "lost": the application starts on the target with the group the standby kept.
    assert process.stop() == 0
    truth = source_truth(source, topic, partitions)
    commits_by_partition = {}
    app_view = new_consumer(source, "source", group, {"enable.auto.commit": False})
    for tp in app_view.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10):
        commits_by_partition[tp.partition] = tp.offset
    app_view.close()
    assert sorted(set(truth) - set(read_on_source)) == sorted(
        v for v, (p, o) in truth.items() if o >= commits_by_partition[p]
    ), "the application's commits are not what it read (the ground truth is off)"
    unread = {v for v, (p, o) in truth.items() if o >= commits_by_partition[p]}
    read = consume_as_group(target, group, topic, lambda got: {r.value for r in got} >= unread)
    assert judge(truth, commits_by_partition, read) == (set(), {})


def test_the_checkpoints_endpoint_of_a_link_without_a_standby_is_404(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    topic, group = make_topic("source", 1), unique("app")
    checkpoint = {"groups": {"include": [group]}, "interval_seconds": 1}
    config = write_config(
        [link("kept", topic, checkpoint=checkpoint), link("plain", topic, group_id=unique("g"))],
        monitor={"interval_seconds": 1},
        canary={"enabled": False},
        http={"host": "127.0.0.1", "port": 0},
    )
    process = start_mirror("--config", str(config), command="monitor")
    base = process.http_base()
    with pytest.raises(urllib.error.HTTPError) as missing:
        get_json(f"{base}/mirror/links/plain/checkpoints")
    assert missing.value.code == 404

    def first_round() -> dict[str, Any] | None:
        view: dict[str, Any] = get_json(f"{base}/mirror/links/kept/checkpoints")
        return view if view["updated_ms"] else None

    view = wait_until(first_round, timeout_s=60, description="a first checkpoint round")
    assert view["groups"] == [] and view["error"] is None and view["sync"] is False
    assert process.stop() == 0
