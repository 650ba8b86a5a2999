"""What a Spark link does, decided without Spark (pure): refusals, subscription, rename, offsets to commit.

The Spark engine runs the same link config as the python engine. What Spark cannot do is refused at start with what to
change; what it can is planned here as data (regexes, a rename spec of literal parts and map entries) that the
pipeline turns into Spark SQL expressions, so no record goes through per-row Python.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernel.config import (
    FormatRename,
    IdentityRename,
    LinkConfig,
    MapRename,
    MirrorwatchConfig,
    PrefixRename,
    reveal,
)
from kernel.errors import ConfigError, ConfigProblem
from kernel.provenance import ProvenanceForm
from mirror.topics import INTERNAL_TOPIC_PATTERNS

__all__ = [
    "RenameSpec",
    "SparkLinkPlan",
    "acked_during_batch",
    "apply_rename",
    "parse_end_offsets",
    "plan_spark_link",
    "spark_conf",
    "spark_problems",
    "subscription",
]

TOPIC = None  # in RenameSpec.parts: the source topic's name
# The sink's producer batches as the python engine's do (mirror.settings.PRODUCER_DEFAULTS): the Java client's 16 KB
# batches and 5 ms linger send a 100-byte record stream in many small requests.
SINK_DEFAULTS = {"linger.ms": "20", "batch.size": str(1024 * 1024)}
# The source reads what the python engine reads (mirror.settings.CONSUMER_DEFAULTS): committed transactions only, not
# aborted ones nor those still open (the Java client's default is read_uncommitted). And it polls in large steps: the
# connector's task consumer (one partition each) follows every poll with a seek to the partition's beginning and to
# its end to learn the available range (two ListOffsets round trips, and the position moved off any prefetched data),
# so the Java client's 500 records per poll cost that 4,000 times per 2,000,000 records. 10,000 records per poll and
# 4 MB per partition fetch: 1.24x records/s, 1.26x per core on B1 in one A/B run (bench.throughput, spark vs spark@old).
SOURCE_DEFAULTS = {
    "isolation.level": "read_committed",
    "max.poll.records": "10000",
    "max.partition.fetch.bytes": str(4 * 1024 * 1024),
}
# The JVMs (driver, executors) collect garbage with the throughput collector: a mirror allocates a row, a record and
# its headers per record and keeps none, which the parallel young collector handles with less CPU than G1's
# concurrent cycles (1.20x records/s per core on B1 in one A/B run). Not added where the link's spark.conf picks a
# collector itself (two collectors on one command line stop the JVM).
JVM_DEFAULT = "-XX:+UseParallelGC"
_PICKS_A_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")


@dataclass(frozen=True)
class RenameSpec:
    """target = concatenation of `parts` (literals, and TOPIC for the source topic's name), unless the topic is a key
    of `mapping` (the map policy), which gives its target directly."""

    parts: tuple[str | None, ...] = (TOPIC,)
    mapping: Mapping[str, str] = field(default_factory=dict)


def rename_spec(link: LinkConfig) -> RenameSpec:
    rename = link.rename
    if isinstance(rename, IdentityRename):
        return RenameSpec()
    if isinstance(rename, PrefixRename):
        return RenameSpec((link.source + rename.separator, TOPIC))
    if isinstance(rename, FormatRename):
        template = rename.format.replace("${source}", link.source)
        pieces = template.split("${topic}")
        parts: list[str | None] = []
        for index, piece in enumerate(pieces):
            if index:
                parts.append(TOPIC)
            if piece:
                parts.append(piece)
        return RenameSpec(tuple(parts))
    if isinstance(rename, MapRename):
        return RenameSpec(mapping=dict(rename.map))
    raise TypeError(f"unknown rename config {rename!r}")


def apply_rename(spec: RenameSpec, topic: str) -> str:
    """What the Spark expression computes, in Python (for tests and for planning target topics)."""
    if topic in spec.mapping:
        return spec.mapping[topic]
    return "".join(topic if part is TOPIC else part for part in spec.parts)


@dataclass(frozen=True)
class SparkLinkPlan:
    link: str
    # Kafka's pattern subscription (a full match): any include that no exclude matches, or the canary topic. The
    # excludes are a negative lookahead in it, so an excluded topic is never fetched (nor filtered row by row).
    subscribe_pattern: str
    rename: RenameSpec
    preserve_partition: bool  # True: target partition = source partition; False: the sink hashes the key
    provenance: ProvenanceForm
    starting_offsets: str
    max_offsets_per_trigger: int | None
    trigger_interval_seconds: float
    checkpoint: Path
    # Spark's scratch on this host (`spark.local.dir` and the driver JVM's java.io.tmpdir, unless the link's
    # spark.conf sets them): the link's own, under the state directory, so a driver that was killed leaves its block
    # manager and temp files where its next start clears them (`spark_scratch.clear_scratch`), not in /tmp for good
    scratch: Path
    master: str
    conf: Mapping[str, str]
    # The sink's Java producer settings (`kafka.*` options): SINK_DEFAULTS under the link's producer_properties
    producer: Mapping[str, str] = field(default_factory=dict)
    # The source's Java consumer settings: SOURCE_DEFAULTS under the link's consumer_properties
    consumer: Mapping[str, str] = field(default_factory=dict)


def spark_problems(link: LinkConfig, index: int) -> list[ConfigProblem]:
    """Everything this link asks of Spark that Spark cannot do, each with what to change."""
    at = f"links[{index}]"
    problems = []
    if link.delivery == "exactly-once":
        problems.append(
            ConfigProblem(
                f"{at}.delivery",
                "Spark's Kafka sink writes at least once (a retried micro-batch is written again); use delivery "
                "at-least-once with engine spark, or engine python for exactly-once",
            )
        )
    if link.handler is not None:
        problems.append(
            ConfigProblem(
                f"{at}.handler",
                "message handlers are Python code per record, which the spark engine does not run; remove the "
                "handler (rename topics with `rename` instead) or use engine python",
            )
        )
    if link.partitioning == "modulo":
        problems.append(
            ConfigProblem(
                f"{at}.partitioning",
                "the spark engine supports partitioning preserve or hash (the sink's key hash), not modulo",
            )
        )
    if link.dead_letter_topic is not None:
        problems.append(
            ConfigProblem(
                f"{at}.dead_letter_topic",
                "the spark engine has no dead-letter topic: a record the target refuses fails the micro-batch and "
                "stops the query (nothing is committed past it); remove dead_letter_topic or use engine python",
            )
        )
    if link.num_streams != 1:
        problems.append(
            ConfigProblem(
                f"{at}.num_streams",
                "Spark spreads partitions over its own executors; remove num_streams (use spark.master and "
                "spark.conf, e.g. spark.executor.instances) with engine spark",
            )
        )
    if link.on_gap == "skip":
        problems.append(
            ConfigProblem(
                f"{at}.on_gap",
                "the spark engine stops the link when retention took records it had not copied (Spark's Kafka "
                "source fails the query: failOnDataLoss), counting them; it cannot skip them and go on: use on_gap "
                "stop with engine spark, or engine python",
            )
        )
    if link.on_recreate == "restart":
        problems.append(
            ConfigProblem(
                f"{at}.on_recreate",
                "the spark engine stops the link when a source topic was deleted and created again (it counts the "
                "records of the old topic it had not copied); it cannot restart a topic's partitions in Spark's "
                "checkpoint: use on_recreate stop with engine spark, or engine python",
            )
        )
    if link.on_target_loss == "recopy":
        problems.append(
            ConfigProblem(
                f"{at}.on_target_loss",
                "the spark engine stops the link when a target topic was lost under it (it counts the records it "
                "had copied there); it cannot copy a topic's partitions again from Spark's checkpoint: use "
                "on_target_loss stop with engine spark, or engine python",
            )
        )
    for name in ("max_bytes_per_second", "worker_max_bytes_per_second"):
        if getattr(link, name) is not None:
            problems.append(
                ConfigProblem(
                    f"{at}.{name}",
                    "the spark engine does not keep a bandwidth budget (its sink writes each micro-batch as fast "
                    "as it can); remove it, bound a micro-batch with spark.max_offsets_per_trigger, or use "
                    "engine python",
                )
            )
    return problems


def plan_spark_link(config: MirrorwatchConfig, link: LinkConfig) -> SparkLinkPlan:
    index = config.links.index(link)
    problems = spark_problems(link, index)
    if problems:
        raise ConfigError(problems)
    includes = [p.pattern for p in link.topics.include]
    excludes = [p.pattern for p in link.topics.exclude]
    if link.exclude_internal_topics:
        excludes += [p.pattern for p in INTERNAL_TOPIC_PATTERNS]
    checkpoint = (
        Path(link.spark.checkpoint_dir).expanduser()
        if link.spark.checkpoint_dir
        else config.state_path / "checkpoints" / link.name
    )
    scratch = config.state_path / "spark" / link.name
    return SparkLinkPlan(
        link=link.name,
        subscribe_pattern=subscription(includes, excludes, config.canary.topic),
        rename=rename_spec(link),
        preserve_partition=link.partitioning == "preserve",
        provenance=link.provenance,
        starting_offsets=link.start_from,
        max_offsets_per_trigger=link.spark.max_offsets_per_trigger,
        trigger_interval_seconds=link.spark.trigger_interval_seconds,
        checkpoint=checkpoint,
        scratch=scratch,
        master=link.spark.master,
        conf=spark_conf(reveal(link.spark.conf), scratch),
        producer={**SINK_DEFAULTS, **reveal(link.producer_properties)},
        consumer={**SOURCE_DEFAULTS, **reveal(link.consumer_properties)},
    )


def spark_conf(conf: Mapping[str, str], scratch: Path) -> dict[str, str]:
    """The link's spark.conf with JVM_DEFAULT put before each JVM's extraJavaOptions, unless that JVM's options
    (extra or default) already pick a garbage collector; and Spark's scratch in `scratch` (`spark.local.dir`, and
    the driver JVM's java.io.tmpdir: native libraries it unpacks), unless the link's spark.conf says where. An
    executor on a cluster's worker keeps the worker's own (SPARK_LOCAL_DIRS there, its JVM's tmpdir)."""
    out = dict(conf)
    out.setdefault("spark.local.dir", str(scratch))
    for jvm in ("driver", "executor"):
        extra = f"spark.{jvm}.extraJavaOptions"
        options = f"{out.get(f'spark.{jvm}.defaultJavaOptions', '')} {out.get(extra, '')}"
        added = [] if _PICKS_A_COLLECTOR.search(options) else [JVM_DEFAULT]
        if jvm == "driver" and "-Djava.io.tmpdir=" not in options:
            added.append(f"-Djava.io.tmpdir={shlex.quote(str(scratch))}")  # Spark splits the options as a shell
        if added:
            out[extra] = " ".join([*added, out.get(extra, "")]).strip()
    return out


def subscription(includes: Sequence[str], excludes: Sequence[str], canary: str) -> str:
    """One regex whose full match (Kafka's pattern subscription; Python's `re.fullmatch` reads it alike) is a topic
    that fully matches an include and no exclude, or is the canary topic."""
    wanted = "|".join(f"(?:{p})" for p in includes)
    if excludes:
        wanted = "(?!(?:" + "|".join(f"(?:{p})" for p in excludes) + f")$)(?:{wanted})"
    return f"(?:{wanted})|{_escape(canary)}"


def _escape(topic: str) -> str:
    return "".join("\\" + c if c in ".-+*?[](){}^$|\\" else c for c in topic)


def parse_end_offsets(sources: Sequence[Mapping[str, object]]) -> dict[tuple[str, int], int]:
    """The end offsets of a micro-batch's Kafka sources (StreamingQueryProgress.sources[*].endOffset, JSON text
    like {"orders": {"0": 120, "1": 98}}): the next offset to read per partition, i.e. everything below is written."""
    offsets: dict[tuple[str, int], int] = {}
    for source in sources:
        end = source.get("endOffset")
        if not isinstance(end, str) or not end.startswith("{"):
            continue
        for topic, partitions in json.loads(end).items():
            for partition, offset in partitions.items():
                if int(offset) >= 0:
                    offsets[(topic, int(partition))] = int(offset)
    return offsets


def parse_offset_log(text: str) -> dict[tuple[str, int], int]:
    """The end offsets in one entry of a query's offset log (`<checkpoint>/offsets/<batch>`: a version line, the
    batch's metadata, then one line per source, the Kafka source's like {"orders": {"0": 120}}); {} when the entry is
    not in that form (a newer Spark, a partial file)."""
    lines = text.splitlines()
    if len(lines) < 3 or not lines[0].startswith("v"):
        return {}
    try:
        return parse_end_offsets([{"endOffset": line} for line in lines[2:]])
    except (ValueError, AttributeError, TypeError):
        return {}


def acked_during_batch(committed: int, running_end: int | None, written: int | None) -> int:
    """How far a partition's records are on the target while a micro-batch runs: the last committed batch's end,
    raised to what the target shows written (`written`: the source offset after the last copy on the target
    partition, by provenance) when that lies within the running batch (`running_end`: its planned end offset). A
    batch is committed only once all of it is written, so without this a figure states every record of a running
    batch as waiting until the last is written (seconds, after a target outage: issue #41). Outside the running
    batch the target's word is not taken (a copy from an earlier generation of the topic, or of a batch Spark runs
    again after a restart, names offsets this batch is not writing)."""
    if running_end is None or written is None or not committed < written <= running_end:
        return committed
    return written
