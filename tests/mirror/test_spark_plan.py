"""The Spark link plan (pure): refusals with what to change, the rename spec equal to the rename policy, the
subscription pattern (the python engine's topic selection in one regex), the batch end offsets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.config import MirrorwatchConfig, parse_config
from kernel.errors import ConfigError
from kernel.rename import rename_policy
from mirror.spark_plan import (
    JVM_DEFAULT,
    acked_during_batch,
    apply_rename,
    parse_end_offsets,
    parse_offset_log,
    plan_spark_link,
    rename_spec,
)
from mirror.topics import select_topics


def document(**link: Any) -> dict[str, Any]:
    return {
        "clusters": {"dc1": {"bootstrap_servers": "a:9092"}, "dc2": {"bootstrap_servers": "b:9092"}},
        "links": [{"name": "l", "source": "dc1", "target": "dc2", "engine": "spark", **link}],
        "state_dir": "/var/lib/mw",
    }


def config(**link: Any) -> MirrorwatchConfig:
    return parse_config(document(**link), env={})


def test_what_spark_cannot_do_is_refused_with_what_to_change() -> None:
    cfg = config(
        delivery="exactly-once",
        handler="pkg.mod:factory",
        partitioning="modulo",
        dead_letter_topic="dlq",
        num_streams=2,
        on_gap="skip",
        on_recreate="restart",
        on_target_loss="recopy",
    )
    with pytest.raises(ConfigError) as raised:
        plan_spark_link(cfg, cfg.links[0])
    messages = {p.path: p.message for p in raised.value.problems}
    assert set(messages) == {
        "links[0].delivery",
        "links[0].handler",
        "links[0].partitioning",
        "links[0].dead_letter_topic",
        "links[0].num_streams",
        "links[0].on_gap",
        "links[0].on_recreate",
        "links[0].on_target_loss",
    }
    assert "use on_gap stop with engine spark, or engine python" in messages["links[0].on_gap"]
    assert "use on_recreate stop with engine spark, or engine python" in messages["links[0].on_recreate"]
    assert "use on_target_loss stop with engine spark, or engine python" in messages["links[0].on_target_loss"]
    assert "use delivery at-least-once with engine spark, or engine python" in messages["links[0].delivery"]
    assert "use engine python" in messages["links[0].handler"]


def test_plan_subscribes_to_the_includes_and_the_canary_and_excludes_internal_topics() -> None:
    cfg = config(topics={"include": ["orders\\..*", "payments", "mirrorwatch.*"], "exclude": ["orders\\.tmp"]})
    plan = plan_spark_link(cfg, cfg.links[0])
    pattern = re.compile(plan.subscribe_pattern)  # Kafka full-matches it (Java's syntax here is Python's)
    topics = {
        "orders.eu": True,
        "payments": True,
        "mirrorwatch.canary": True,  # excluded as internal, but the canary topic is always mirrored
        "paymentsX": False,
        "orders.tmp": False,  # the link's exclude
        "orders.tmp2": True,  # an exclude is a full match too
        "orders.x-internal": False,  # internal topics, excluded by default
        "__consumer_offsets": False,
        "mirrorwatch.status": False,
        "orders.eu.internalX": True,
    }
    assert {t: bool(pattern.fullmatch(t)) for t in topics} == topics
    selection = cfg.links[0].topics  # the python engine's selection of the same topics agrees
    assert select_topics(topics, selection, always=["mirrorwatch.canary"]) == sorted(t for t, y in topics.items() if y)
    assert str(plan.checkpoint) == "/var/lib/mw/checkpoints/l"
    assert plan.preserve_partition and plan.starting_offsets == "earliest" and plan.master == "local[*]"
    kept = config(topics={"include": ["orders\\..*"]}, exclude_internal_topics=False)
    assert re.fullmatch(plan_spark_link(kept, kept.links[0]).subscribe_pattern, "orders.x-internal")


@given(st.lists(st.text(alphabet="ab._-mirowtchnl", max_size=14), max_size=30))
def test_the_subscription_selects_what_the_python_engine_selects(topics: list[str]) -> None:
    cfg = config(topics={"include": ["a.*", "b[._].*", "mirror.*"], "exclude": ["a_.*", ".*b"]})
    pattern = re.compile(plan_spark_link(cfg, cfg.links[0]).subscribe_pattern)
    expected = select_topics(set(topics), cfg.links[0].topics, always=[cfg.canary.topic])
    assert sorted({t for t in topics if pattern.fullmatch(t)}) == expected


def test_the_sink_batches_as_the_python_engine_does_and_the_links_client_properties_go_to_the_source_and_sink() -> None:
    plain = config()
    assert plan_spark_link(plain, plain.links[0]).producer == {"linger.ms": "20", "batch.size": "1048576"}
    tuned = config(producer_properties={"linger.ms": 50, "compression.type": "lz4"})
    assert plan_spark_link(tuned, tuned.links[0]).producer == {
        "linger.ms": "50",
        "batch.size": "1048576",
        "compression.type": "lz4",
    }
    assert plan_spark_link(plain, plain.links[0]).consumer == {
        "isolation.level": "read_committed",
        "max.poll.records": "10000",
        "max.partition.fetch.bytes": "4194304",
    }
    fetching = config(consumer_properties={"max.poll.records": 500, "isolation.level": "read_uncommitted"})
    assert plan_spark_link(fetching, fetching.links[0]).consumer == {
        "isolation.level": "read_uncommitted",
        "max.poll.records": "500",
        "max.partition.fetch.bytes": "4194304",
    }


RENAMES = [
    {"policy": "identity"},
    {"policy": "prefix"},
    {"policy": "prefix", "separator": "_"},
    {"policy": "format", "format": "${source}.mirror.${topic}"},
    {"policy": "format", "format": "${topic}-${topic}-copy"},
    {"policy": "map", "map": {"orders": "orders-dc1", "a.b": "c"}},
]
topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=30)


@pytest.mark.parametrize("rename", RENAMES, ids=lambda r: r["policy"] + "-" + str(len(str(r))))
@given(topic=st.one_of(topics, st.sampled_from(["orders", "a.b", "c"])))
def test_the_spark_rename_is_the_rename_policy(rename: dict[str, Any], topic: str) -> None:
    cfg = config(rename=rename)
    link = cfg.links[0]
    assert apply_rename(rename_spec(link), topic) == rename_policy(link.rename, link.source).target_topic(topic)


def test_batch_end_offsets_are_read_from_the_progress_json() -> None:
    sources: list[dict[str, object]] = [
        {"endOffset": '{"orders": {"0": 120, "1": 98}, "payments": {"0": 5}}'},
        {"endOffset": None},
        {"endOffset": '{"x": {"0": -1}}'},  # Spark's "latest" marker, not an offset
    ]
    assert parse_end_offsets(sources) == {("orders", 0): 120, ("orders", 1): 98, ("payments", 0): 5}


def test_an_offset_log_entry_gives_the_batch_end_offsets_and_nothing_when_not_in_that_form() -> None:
    """The driver reads its checkpoint's offset log for a batch the commit log says is done (as Spark 4 writes it)."""
    entry = (
        "v1\n"
        '{"batchWatermarkMs":0,"batchTimestampMs":1795500797847,"conf":{"spark.sql.shuffle.partitions":"4"}}\n'
        '{"orders":{"0":23942,"1":23941},"mirrorwatch.canary":{"0":-2}}'
    )
    assert parse_offset_log(entry) == {("orders", 0): 23942, ("orders", 1): 23941}
    for broken in ("", "v1\n{}", "v1\n{}\nnot json", "v1\n{}\n[1, 2]", "garbage\n{}\n{}"):
        assert parse_offset_log(broken) == {}


def test_the_jvms_collect_with_the_throughput_collector_and_spark_scratches_in_the_state_dir_unless_the_link_says() -> (
    None
):
    plain = config()
    plan = plan_spark_link(plain, plain.links[0])
    assert plan.scratch == Path("/var/lib/mw/spark/l")
    assert plan.conf == {
        "spark.local.dir": "/var/lib/mw/spark/l",
        "spark.driver.extraJavaOptions": f"{JVM_DEFAULT} -Djava.io.tmpdir=/var/lib/mw/spark/l",
        "spark.executor.extraJavaOptions": JVM_DEFAULT,  # an executor elsewhere: its worker's own scratch
    }
    own = config(
        spark={
            "conf": {
                "spark.driver.extraJavaOptions": "-Dx=1 -XX:+UseG1GC -Djava.io.tmpdir=/scratch",
                "spark.executor.defaultJavaOptions": "-XX:+UseZGC",
                "spark.executor.extraJavaOptions": "-Dy=2",
                "spark.executor.memory": "2g",
                "spark.local.dir": "/fast",
            }
        }
    )
    assert plan_spark_link(own, own.links[0]).conf == {
        "spark.driver.extraJavaOptions": "-Dx=1 -XX:+UseG1GC -Djava.io.tmpdir=/scratch",
        "spark.executor.defaultJavaOptions": "-XX:+UseZGC",
        "spark.executor.extraJavaOptions": "-Dy=2",
        "spark.executor.memory": "2g",
        "spark.local.dir": "/fast",
    }
    spaced = parse_config({**document(), "state_dir": "/var/lib/my state"}, env={})
    assert plan_spark_link(spaced, spaced.links[0]).conf["spark.driver.extraJavaOptions"] == (
        f"{JVM_DEFAULT} -Djava.io.tmpdir='/var/lib/my state/spark/l'"
    )
    options = config(spark={"conf": {"spark.driver.extraJavaOptions": "-Dx=1"}})
    assert (
        plan_spark_link(options, options.links[0]).conf["spark.driver.extraJavaOptions"]
        == f"{JVM_DEFAULT} -Djava.io.tmpdir=/var/lib/mw/spark/l -Dx=1"
    )


@pytest.mark.parametrize(
    ("committed", "running_end", "written", "acked"),
    [
        (100, 500, 340, 340),  # a running batch, the target shows it written up to 340
        (100, 500, 500, 500),  # all of it written, not yet committed
        (100, None, 340, 100),  # no batch running: the committed end stands
        (100, 500, None, 100),  # the target has not told
        (100, 500, 90, 100),  # older than the committed end (a batch run again): never backwards
        (100, 500, 100, 100),
        (100, 500, 9_000, 100),  # beyond the running batch: an earlier generation's copy, not this batch's
    ],
)
def test_a_running_batch_counts_what_the_target_shows_written_within_it(
    committed: int, running_end: int | None, written: int | None, acked: int
) -> None:
    assert acked_during_batch(committed, running_end, written) == acked
