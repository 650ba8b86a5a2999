"""Failover translation as a library (`failover.api`, issue #42), on the real clusters: the target topic holds records
of its own before the copies, so a group's position there is not its source offset, and `translate_offsets` gives,
per partition, the offset of the copy of the first record the group had not read (found by reading the target
directly), from a config file's path as from a loaded config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from failover.api import plan_groups, translate_offsets
from failover.plan import FailoverUsageError
from kernel.config import MirrorwatchConfig, load_config
from tests.failover.drills import commit_source_group, keyed, link
from tests.kafka_helpers import Record, produce, read_to_end, wait_for_records
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

PARTITIONS = 2


def test_translate_offsets_finds_the_copy_of_the_first_unread_record(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    a, b = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, name, group = make_topic("source", PARTITIONS), unique("link"), unique("app")
    make_topic("target", PARTITIONS, name=topic)
    own = [Record(value=f"own{i}".encode(), partition=i % PARTITIONS) for i in range(2 * 7 + 3)]  # 9 and 8
    produce(b, "target", topic, own)
    config = write_config([link(name, topic)], canary={"enabled": False})
    produce(a, "source", topic, keyed(0, 200, PARTITIONS))
    commit_source_group(a, group, topic, {0: 30, 1: 55})
    mirror = start_mirror("--config", str(config), "--link", name)
    wait_for_records(b, "target", topic, PARTITIONS, len(own) + 200)
    assert mirror.stop() == 0

    source = {(r.partition, r.offset): r.value for r in read_to_end(a, "source", topic, PARTITIONS)}
    target = {(r.partition, r.value): r.offset for r in read_to_end(b, "target", topic, PARTITIONS)}
    truth = {(topic, p): target[(p, source[(p, o)])] for p, o in ((0, 30), (1, 55))}
    assert truth == {(topic, 0): 39, (topic, 1): 63}  # the shift is the target's own records
    assert translate_offsets(config, name, group) == truth
    assert translate_offsets(load_config(config), name, group) == truth
    (plan,) = plan_groups(config, name, [group]).groups
    assert {t.method for t in plan.translations} == {"exact"} and plan.read_twice == 0

    with pytest.raises(FailoverUsageError, match="no consumer group"):
        translate_offsets(config, name, unique("nobody"))
    with pytest.raises(FailoverUsageError, match="no link 'no-such-link' in the config"):
        translate_offsets(config, "no-such-link", group)
