"""A sharded monitor fleet (`monitor.shard`, issue #27): two `mirrorwatch monitor` processes on the same clusters,
one watching groups by regex, the other one cluster and its own groups; each serves only its share (Burrow API,
/mirror/groups, /metrics: a group's series come from exactly one shard, so Prometheus adds them up without
doubles), and the console's `--api A,B` reads both as one. Ground truth: the groups the test committed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from dashboards.console import Api, Unreachable, api_client
from dashboards.shards import ShardedApi
from kernel.config import MirrorwatchConfig
from kernel.kafka import new_consumer
from kernel.processes import free_port
from kernel.wait import wait_until
from tests.kafka_helpers import Record, produce
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        if answer.headers.get_content_type() == "application/json":
            return json.load(answer)
        return answer.read().decode()


def _commit(config: MirrorwatchConfig, alias: str, group: str, topic: str, offset: int) -> None:
    consumer = new_consumer(config.clusters[alias], alias, group, {"enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _answer(api: ShardedApi, path: str) -> Any:
    answer = api.get(path)
    assert answer is not None, path
    return answer


def _consumers(base: str, cluster: str) -> set[str]:
    """The groups a shard lists on a cluster (none before its first collection, when the API answers 404)."""
    try:
        return set(_get(f"{base}/v3/kafka/{cluster}/consumer")["consumers"])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return set()
        raise


def test_each_shard_serves_only_its_groups_and_the_console_reads_the_fleet_as_one(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
) -> None:
    source_topic, target_topic = make_topic("source"), make_topic("target")
    produce(clusters_config.clusters["source"], "source", source_topic, [Record(b"x")] * 10)
    produce(clusters_config.clusters["target"], "target", target_topic, [Record(b"y")] * 10)
    prefix = unique("s")
    a1, b1, a_target = f"{prefix}-a-1", f"{prefix}-b-1", f"{prefix}-a-target"
    _commit(clusters_config, "source", a1, source_topic, 4)
    _commit(clusters_config, "source", b1, source_topic, 7)
    _commit(clusters_config, "target", a_target, target_topic, 2)

    by_groups = write_config(
        [], monitor={"interval_seconds": 1, "shard": {"groups": {"include": [f"{prefix}-a-.*"]}}}, http={"port": 0}
    )
    by_cluster = write_config(
        [],
        monitor={"interval_seconds": 1, "shard": {"clusters": ["source"], "groups": {"include": [f"{prefix}-b-.*"]}}},
        http={"port": 0},
    )
    shard_a = start_mirror("--config", str(by_groups), command="monitor").http_base()
    shard_b = start_mirror("--config", str(by_cluster), command="monitor").http_base()
    wait_until(lambda: a1 in _consumers(shard_a, "source"), timeout_s=60, description="shard A to list its group")
    wait_until(lambda: b1 in _consumers(shard_b, "source"), timeout_s=60, description="shard B to list its group")

    ours = {a1, b1, a_target}
    assert _consumers(shard_a, "source") & ours == {a1}
    assert _consumers(shard_a, "target") & ours == {a_target}
    assert _consumers(shard_b, "source") & ours == {b1}
    assert _get(f"{shard_b}/v3/kafka")["clusters"] == ["source"]  # B collects its cluster only
    metrics_a, metrics_b = _get(f"{shard_a}/metrics"), _get(f"{shard_b}/metrics")
    assert f'group="{a1}"' in metrics_a and f'group="{b1}"' not in metrics_a
    assert f'group="{b1}"' in metrics_b and f'group="{a1}"' not in metrics_b
    assert f'group="{a_target}"' not in metrics_b

    fleet = api_client(["--api", f"{shard_a},{shard_b}"])
    assert isinstance(fleet, ShardedApi)
    listed = [(g["cluster"], g["group"]) for g in _answer(fleet, "/mirror/groups")["groups"] if g["group"] in ours]
    assert sorted(listed) == sorted([("source", a1), ("source", b1), ("target", a_target)])
    assert sorted(_answer(fleet, "/v3/kafka")["clusters"]) == ["source", "target"]
    lag = fleet.get(f"/v3/kafka/source/consumer/{b1}/lag")  # only shard B has it: its answer
    assert lag is not None and lag["status"]["group"] == b1

    # A shard that does not answer is named; what the others watch still shows.
    gone = f"http://127.0.0.1:{free_port()}"
    partial = ShardedApi([Api(shard_a), Api(gone)], Unreachable)
    groups = {g["group"] for g in _answer(partial, "/mirror/groups")["groups"]}
    assert a1 in groups and b1 not in groups
    assert len(partial.unreachable) == 1 and gone in partial.unreachable[0]
    with pytest.raises(Unreachable):
        ShardedApi([Api(gone)], Unreachable).get("/mirror/groups")
