"""The spark engine: a link run as a PySpark Structured Streaming query (Kafka source -> Kafka sink).

    mirrorwatch mirror --config F --link NAME [--master URL]

Local mode (`local[*]`) by default; `spark.master` (or `--master`) runs it on a cluster, and so does spark-submit:

    spark-submit --master spark://host:7077 \\
        --jars "$(ls ~/.cache/mirrorwatch/jars/spark-sql-kafka-4.0.0/*.jar | paste -sd,)" \\
        "$(python -c 'import mirror.spark_engine as m; print(m.__file__)')" --config F --link NAME

The connector jars (org.apache.spark:spark-sql-kafka-0-10_2.13 at pyspark's exact version) come from Maven Central
through the jar cache and are handed over with `spark.jars`; nothing is downloaded when the query starts.

Per record the query keeps key, value, headers and (with `partitioning: preserve`) the partition, renames the topic
with a Spark SQL expression equal to the link's rename policy, adds the same provenance headers as the python engine
and drops records that have already been on the target cluster (loop prevention). Spark's Kafka source commits
nothing; a query listener commits each micro-batch's end offsets to the link's consumer group (a group no consumer
joins) once the batch is written, and publishes the positions as a status file, so the monitor, the dashboards and
the alerts see a Spark link exactly like a python one. Progress survives restarts in the checkpoint directory.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kernel.access import require_access
from kernel.clock import SystemClock
from kernel.config import ClusterConfig, LinkConfig, MirrorwatchConfig
from kernel.errors import SetupError, require_extra
from kernel.kafka import error_text, new_admin, new_consumer
from kernel.progress_topic import StatusOut
from kernel.provenance import HOPS, PATH, PROVENANCE, SOURCE_CLUSTER, SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from kernel.worker_status import Gap, PartitionPosition, WorkerStatus
from localkafka.jars import SPARK_KAFKA, SPARK_KAFKA_VERSION, resolve_jars
from mirror.admin import link_cluster_ids
from mirror.failure import MirrorFailure
from mirror.java_client import java_kafka_options
from mirror.spark_archive import driver_archive_options
from mirror.spark_gaps import (
    SourceGenerations,
    hold_failed,
    keep_topics,
    query_error,
    refuse_start,
    source_gaps,
    stop_query,
    target_lost_gaps,
)
from mirror.spark_plan import (
    TOPIC,
    SparkLinkPlan,
    acked_during_batch,
    apply_rename,
    parse_end_offsets,
    parse_offset_log,
    plan_spark_link,
)
from mirror.spark_scratch import clear_scratch
from mirror.spark_written import TargetFront
from mirror.topic_keeper import TopicKeeper, refuse_loop
from mirror.worker import writer_fields

__all__ = ["run_spark_link", "spark_jars"]

log = logging.getLogger("mirrorwatch.mirror.spark")

STATUS_EVERY_S = 1.0  # the driver rewrites its status this often (the monitor's liveness check)
# ... and reads its checkpoint's commit log this often: a batch counts as written as soon as Spark committed it, not
# when the listener bus gets round to telling (seen 1.5 s late while the query caught up after a target freeze)
CHECKPOINT_POLL_S = 0.25
NOTES_EVERY_S = 5.0  # the partitions' notes on this host (`mirror.spark_gaps.SourceGenerations`)
# How long a status waits for the source's high-watermarks (a source not answering: the status goes out without them)
HIGH_READ_TIMEOUT_S = 0.5
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
_PROVENANCE = [PROVENANCE, SOURCE_CLUSTER, SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET, PATH, HOPS]


def spark_jars() -> list[Path]:
    """The connector jars, fetched into the jar cache the first time; checks pyspark's version matches them."""
    require_extra("pyspark", "spark", "the spark engine")
    import pyspark

    if pyspark.__version__ != SPARK_KAFKA_VERSION:
        raise SetupError(
            f"the spark engine needs pyspark {SPARK_KAFKA_VERSION} (the version of its Kafka connector jars), "
            f"found {pyspark.__version__}; run scripts/setup.sh"
        )
    return sorted(resolve_jars(SPARK_KAFKA, progress=log.info).glob("*.jar"))


class _Progress:
    """After each micro-batch: commit its end offsets to the link's group and publish the positions. A batch is
    learnt of from whichever comes first: the query listener, or the checkpoint's commit log (`poll_checkpoint`)."""

    def __init__(
        self,
        config: MirrorwatchConfig,
        link: LinkConfig,
        plan: SparkLinkPlan,
        keeper: TopicKeeper | None = None,
        source_admin: AdminClient | None = None,
        *,
        front: TargetFront | None = None,
    ) -> None:
        self.link, self.plan = link, plan
        self.front = front  # what the target shows written of the running batch (partitioning preserve)
        self._running: dict[tuple[str, int], int] = {}  # the running batch's planned end offsets
        self._source_admin = source_admin  # for the high-watermarks each status states (`_read_highs`)
        self._committer: Consumer = new_consumer(
            config.clusters[link.source],
            link.source,
            link.consumer_group,
            {"enable.auto.commit": False, "client.id": f"mirrorwatch-{link.name}-spark-commits"},
        )
        self._board = StatusOut(config, link.target, f"{link.name}-spark", link.source)
        self._writer = writer_fields(config, link, 0)
        self._clock = SystemClock()
        self.keeper = keeper  # the link's topic keeper, for the drift in the status
        self._positions: dict[tuple[str, int], int] = {}
        self.highs: dict[tuple[str, int], int] = {}  # the source's, as the last status read them
        self._lock = threading.Lock()
        self._publishing = threading.Lock()
        self.stats: dict[str, float] = {"records_in_total": 0, "records_out_total": 0}
        self.batches = 0
        self._batch_id = -1  # the newest batch whose end offsets are the positions
        self._failure: str | None = None  # the query failed on records the source no longer has (`fail`)
        self._gaps: tuple[Gap, ...] = ()

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def positions(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._positions)

    def fail(self, failure: str, gaps: list[Gap]) -> None:
        """The link stopped on these gaps: its statuses say so from now on (`mirror.spark_gaps`)."""
        with self._lock:
            self._failure, self._gaps = failure, tuple(gaps)

    def batch_done(self, progress: Any) -> None:
        offsets = parse_end_offsets([{"endOffset": s.endOffset} for s in progress.sources])
        rows = int(progress.numInputRows or 0)
        batch_id = int(progress.batchId)
        with self._lock:
            self.batches += 1
            self.stats["records_in_total"] += rows
            self.stats["records_out_total"] += rows  # the batch is committed: its rows are written
            self.stats["spark_batch_duration_seconds"] = float(progress.batchDuration or 0) / 1000
            self.stats["spark_input_rows_per_second"] = float(progress.inputRowsPerSecond or 0)
            self.stats["spark_processed_rows_per_second"] = float(progress.processedRowsPerSecond or 0)
        self._advance(batch_id, offsets)
        self.publish()

    def poll_checkpoint(self) -> bool:
        """Take the end offsets of the newest batch in the checkpoint's commit log when it is newer than the
        positions; True when it was. Only for a checkpoint on the local file system (elsewhere the listener alone
        tells)."""
        checkpoint = self.plan.checkpoint
        try:
            committed = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
            newest = max(committed, default=-1)
            self._note_running(newest)
            if newest <= self._batch_id:
                return False
            offsets = parse_offset_log((checkpoint / "offsets" / str(newest)).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return bool(offsets) and self._advance(newest, offsets)

    def _note_running(self, newest_committed: int) -> None:
        """The batch planned after the newest committed one (its offset log entry is written before it runs): its
        end offsets, and the partitions it writes for the target front to read."""
        if self.front is None:
            return
        logged = [int(p.name) for p in (self.plan.checkpoint / "offsets").iterdir() if p.name.isdigit()]
        planned = max(logged, default=-1)
        running: dict[tuple[str, int], int] = {}
        if planned > newest_committed:
            running = parse_offset_log((self.plan.checkpoint / "offsets" / str(planned)).read_text(encoding="utf-8"))
        with self._lock:
            self._running = running
            writing = [tp for tp, end in running.items() if end > self._positions.get(tp, 0)]
        self.front.want(writing)

    def _advance(self, batch_id: int, offsets: dict[tuple[str, int], int]) -> bool:
        """Batch `batch_id` is written: its end offsets become the positions and are committed to the group."""
        with self._lock:
            if batch_id <= self._batch_id:
                return False
            self._batch_id = batch_id
            changed = {tp: o for tp, o in offsets.items() if self._positions.get(tp, -1) < o}
            self._positions.update(changed)
        if changed:
            try:
                self._committer.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(changed.items())], asynchronous=False
                )
            except KafkaException as exc:  # the checkpoint holds the truth; the next batch commits again
                log.warning("link %s: committing batch offsets failed: %s", self.link.name, error_text(exc))
                with self._lock:
                    for tp in changed:
                        self._positions.pop(tp, None)
        return True

    def _read_highs(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The source's high-watermarks of these partitions, read now ({} for those the source did not tell within
        HIGH_READ_TIMEOUT_S: the monitor then measures them against its own read)."""
        if self._source_admin is None or not keys:
            return {}
        futures = self._source_admin.list_offsets(
            {TopicPartition(t, p): _LATEST for t, p in keys}, request_timeout=HIGH_READ_TIMEOUT_S
        )
        highs: dict[tuple[str, int], int] = {}
        for tp, future in futures.items():
            try:
                highs[(tp.topic, tp.partition)] = int(future.result(timeout=HIGH_READ_TIMEOUT_S).offset)
            except (KafkaException, TimeoutError):
                continue
        return highs

    def status(self) -> WorkerStatus:
        """The end offsets of the last committed micro-batch: every record below them is on the target (the sink
        wrote the batch with acks=all before the batch counts as done), at the status's moment; and as the
        high-watermarks the worker saw, the source's read after that moment (an honest bound: what the source took
        by then is below it). Not the high-watermarks a batch was planned against: those are as old as the batch
        (seconds, while a frozen target holds it), and stated at the status's moment they read a link caught up
        while records waited (issue #41, a CI run of the truth test)."""
        written = self.front.upto() if self.front is not None else {}
        with self._lock:
            positions = sorted(self._positions.items())
            acked = {tp: acked_during_batch(o, self._running.get(tp), written.get(tp)) for tp, o in positions}
            now_ms = self._clock.now_ms()
            stats = dict(self.stats)
            failure, gaps = self._failure, self._gaps
        stopped = {(g.topic, g.partition): g.describe(self.link.name) for g in gaps}
        latest = self.highs = self._read_highs([key for key, _ in positions])
        return WorkerStatus(
            link=self.link.name,
            worker=0,
            engine="spark",
            observed_ms=now_ms,
            publish_interval_ms=int(STATUS_EVERY_S * 1000),
            state="failed" if failure is not None else "running",
            failure=failure,
            gaps=gaps,
            partitions=tuple(
                PartitionPosition(
                    topic=t,
                    partition=p,
                    target_topic=apply_rename(self.plan.rename, t),
                    consumed=acked[(t, p)],
                    acked=acked[(t, p)],
                    committed=o,
                    in_flight_records=0,
                    high_watermark=latest.get((t, p)),
                    failed=stopped.get((t, p)),
                )
                for (t, p), o in positions
            ),
            stats=stats,
            **self._writer,
            config_drift=tuple(asdict(d) for d in keeper.drift) if (keeper := self.keeper) is not None else (),
            config_synced=keeper.synced if keeper is not None else (),
            drift_report=keeper.drift_report if keeper is not None else {},
        )

    def publish(self) -> None:
        """From the listener (a batch done) and the driver's heartbeat: one at a time, so that a status (which waits
        for the source's high-watermarks) never overwrites a newer one."""
        with self._publishing:
            status = self.status()
            self._board.publish("links", self.link.name, 0, status.as_json(), status.observed_ms)

    def close(self) -> None:
        if self.front is not None:
            self.front.close()
        self._board.withdraw("links", self.link.name, 0)
        self._board.close()
        self._committer.close()


def _session(link: LinkConfig, plan: SparkLinkPlan, jars: list[Path], master: str | None) -> Any:
    """The link's Spark session (local, the plan's master, or spark-submit's)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if master or not os.environ.get("PYSPARK_GATEWAY_PORT"):  # under spark-submit its --master stands
        builder = builder.master(master or plan.master)
    builder = (
        builder.appName(f"mirrorwatch-{link.name}")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.streaming.stopTimeout", "60s")
    )
    conf = dict(plan.conf)
    if not os.environ.get("PYSPARK_GATEWAY_PORT") and (archive := driver_archive_options()):  # its JVM starts here
        key = "spark.driver.extraJavaOptions"  # first: an archive the link's own options name wins
        conf[key] = " ".join([*archive, conf.get(key, "")]).strip()
    for key, value in conf.items():
        builder = builder.config(key, value)
    if cleared := clear_scratch(plan.scratch):  # what a driver of the link killed before left there
        log.info("link %s: removed %d entries an earlier driver left in %s", link.name, cleared, plan.scratch)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _drive(query: Any, progress: _Progress, stop: threading.Event, generations: SourceGenerations) -> None:
    """The driver's heartbeat until stopped or the query ends: the positions of the last batch still stand, and
    the monitor knows the driver is alive (micro-batches come at the trigger interval, or not at all while nothing
    arrives); every NOTES_EVERY_S the partitions' notes (`mirror.spark_gaps.SourceGenerations`)."""
    published = noted = 0.0
    keeper = progress.keeper
    assert keeper is not None
    while not stop.is_set() and query.isActive and not keeper.lost_targets:  # a target lost: the link stops
        if progress.poll_checkpoint() or time.monotonic() - published >= STATUS_EVERY_S:
            progress.publish()
            published = time.monotonic()
        if time.monotonic() - noted >= NOTES_EVERY_S:
            _note(generations, progress, keeper)
            noted = time.monotonic()
        stop.wait(CHECKPOINT_POLL_S)


def _target_front(
    config: MirrorwatchConfig, link: LinkConfig, plan: SparkLinkPlan, source_id: str
) -> TargetFront | None:
    """The reader of what the target shows written, started; only where a target partition holds one source
    partition's copies, in order (`partitioning: preserve`)."""
    if link.partitioning != "preserve":
        return None
    rename = plan.rename
    front = TargetFront(config.clusters[link.target], link.target, source_id, lambda t: apply_rename(rename, t))
    front.start()
    return front


def _listener(progress: _Progress) -> Any:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            try:
                progress.batch_done(event.progress)
            except Exception:  # a listener error must not go unnoticed, nor kill Spark's listener bus
                log.exception("link %s: progress listener failed", progress.link.name)

        def onQueryIdle(self, event: Any) -> None:
            progress.publish()  # keep the status fresh while nothing arrives

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Listener()


def _records(spark: Any, plan: SparkLinkPlan, source: ClusterConfig, source_id: str, target_id: str) -> Any:
    """The source stream turned into the sink's columns (key, value, headers, topic[, partition])."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .options(**{f"kafka.{name}": value for name, value in plan.consumer.items()})
        .options(**java_kafka_options("kafka.", source))
        .option("subscribePattern", plan.subscribe_pattern)
        .option("includeHeaders", "true")
        .option("startingOffsets", plan.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if plan.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(plan.max_offsets_per_trigger))
    rows = reader.load()  # the subscription leaves the link's excludes out: no row of theirs is read
    headers = F.col("headers")  # null or empty for a record without headers
    # Everything that looks into the headers is in a branch taken only for a record that has some: a record without
    # them (most streams) costs no array function, and the higher-order `filter`s, which Spark interprets instead of
    # generating code for, run only where there is a header to filter.
    has_headers = F.coalesce(F.size(headers) > 0, F.lit(False))

    def first(name: str) -> Any:
        return F.try_element_at(F.filter(headers, lambda h: h["key"] == name), F.lit(1))["value"].cast("string")

    # The path a record has been on, from either provenance form (compact: its text before the last three fields, or
    # all of it when it has fewer, as `kernel.provenance` reads it); a forged `;` separates ids like a `,`.
    compact = first(PROVENANCE)
    last_three = F.substring_index(compact, ";", -3)
    compact_path = F.when(
        F.size(F.split(compact, ";")) >= 4, compact.substr(F.lit(1), F.length(compact) - F.length(last_three) - 1)
    ).otherwise(compact)
    path = F.when(has_headers, F.coalesce(first(PATH), compact_path, F.lit(""))).otherwise(F.lit(""))
    # never back onto a cluster it was on: the target's id is not one of the path's ids (`,` or `;` between them)
    visited = F.concat(F.lit(","), F.translate(path, ";", ","), F.lit(","))
    rows = rows.filter(~(has_headers & visited.contains(f",{target_id},")))
    new_path = F.when(path == "", F.lit(source_id)).otherwise(F.concat(path, F.lit(","), F.lit(source_id)))

    def header(name: str, value: Any) -> Any:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    if plan.provenance == "compact":
        provenance = F.array(
            header(
                PROVENANCE,
                F.concat_ws(
                    ";", new_path, F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string")
                ),
            )
        )
    else:
        provenance = F.array(
            header(SOURCE_CLUSTER, F.lit(source_id)),
            header(SOURCE_TOPIC, F.col("topic")),
            header(SOURCE_PARTITION, F.col("partition").cast("string")),
            header(SOURCE_OFFSET, F.col("offset").cast("string")),
            header(PATH, new_path),
            header(HOPS, F.size(F.split(new_path, ",")).cast("string")),
        )
    kept = F.filter(headers, lambda h: ~h["key"].isin(_PROVENANCE))  # the record's own headers, in their order
    if plan.rename.mapping:
        pairs = [F.lit(x) for item in sorted(plan.rename.mapping.items()) for x in item]
        target_topic = F.coalesce(F.try_element_at(F.create_map(*pairs), F.col("topic")), F.col("topic"))
    elif plan.rename.parts == (TOPIC,):
        target_topic = F.col("topic")
    else:
        target_topic = F.concat(*[F.col("topic") if part is TOPIC else F.lit(part) for part in plan.rename.parts])
    columns = [
        F.col("key"),
        F.col("value"),
        F.when(has_headers, F.concat(kept, provenance)).otherwise(provenance).alias("headers"),
        target_topic.alias("topic"),
    ]
    if plan.preserve_partition:
        columns.append(F.col("partition"))
    return rows.select(*columns)


def _start_query(
    spark: Any,
    config: MirrorwatchConfig,
    link: LinkConfig,
    plan: SparkLinkPlan,
    ids: tuple[str, str],
    *,
    master: str | None,
) -> Any:
    """The link's streaming query, started: the source stream into the target's topics (`ids`: source and target
    cluster ids, for the records' provenance and loop check)."""
    plan.checkpoint.mkdir(parents=True, exist_ok=True)
    query = (
        _records(spark, plan, config.clusters[link.source], *ids)
        .writeStream.format("kafka")
        .options(**{f"kafka.{name}": value for name, value in plan.producer.items()})
        .options(**java_kafka_options("kafka.", config.clusters[link.target]))
        .option("kafka.acks", "all")
        .option("checkpointLocation", str(plan.checkpoint))
        .queryName(f"mirrorwatch-{link.name}")
        .trigger(processingTime=f"{plan.trigger_interval_seconds} seconds")
        .start()
    )
    log.info(
        "link %s: Spark query started (master %s, checkpoint %s, pattern %s)",
        link.name,
        master or plan.master,
        plan.checkpoint,
        plan.subscribe_pattern,
    )
    return query


def _failure_gaps(
    progress: _Progress,
    generations: SourceGenerations,
    source_admin: AdminClient,
    keeper: TopicKeeper,
    *,
    starting: bool = False,
) -> list[Gap]:
    """What the link will never copy, or copied into a target topic lost under it (`mirror.spark_gaps`): per
    partition where the checkpoint says it was written up to, its topic deleted and created again, its target topic
    lost, or (`starting` False: the query failed) its position gone from the source's log (retention) or above its
    end (truncated)."""
    progress.poll_checkpoint()
    positions, now_ms = progress.positions(), progress.now_ms()
    gaps = generations.recreated(positions, now_ms)
    positions = {k: o for k, o in positions.items() if k[0] not in {g.topic for g in gaps}}
    gaps += target_lost_gaps(source_admin, keeper, positions, now_ms)
    if not starting:
        positions = {k: o for k, o in positions.items() if k not in {(g.topic, g.partition) for g in gaps}}
        gaps += source_gaps(source_admin, positions, now_ms)
    return gaps


def _note(generations: SourceGenerations, progress: _Progress, keeper: TopicKeeper) -> None:
    """The partitions' notes: topic ids, positions, highs, and the target topic ids they were copied into."""
    positions = progress.positions()
    targets = {t: keeper.target_ids.get(keeper.target_topic(t), "") for t, _ in positions}
    generations.write(positions, progress.highs, targets)


def run_spark_link(
    config: MirrorwatchConfig, link: LinkConfig, stop: threading.Event, *, master: str | None = None
) -> int:
    """Run the link's query until `stop` is set (0) or the query fails (MirrorFailure)."""
    plan = plan_spark_link(config := config.as_client("mirror"), link)  # its own principal, if it has one
    require_access(config, (link.source, link.target), ("mirror",))
    jars = spark_jars()
    source_admin = new_admin(config.clusters[link.source], link.source)
    target_admin = new_admin(config.clusters[link.target], link.target)
    ids = link_cluster_ids(config, link, (source_admin, target_admin), stop, name=link.name, checkpoint=plan.checkpoint)
    if ids is None:
        return 0
    source_id, target_id = ids
    refuse_loop(config, link, source_id, target_id)
    keeper = TopicKeeper(
        config,
        link,
        name=link.name,
        source_admin=source_admin,
        target_admin=target_admin,
        same_cluster=source_id == target_id,
    )
    generations = SourceGenerations(config.state_path / "topics", link.name, source_admin)
    keeper.watch_targets = True  # the target topics the notes say the link wrote to: one lost is not created anew
    keeper.target_ids.update(generations.noted_targets(keeper.target_topic))
    keeper_stop, keeper_thread = keep_topics(keeper, link)

    progress = _Progress(config, link, plan, keeper, source_admin, front=_target_front(config, link, plan, source_id))
    progress.poll_checkpoint()  # where an earlier run left each partition
    if held := _failure_gaps(progress, generations, source_admin, keeper, starting=True):
        keeper_stop.set()  # never started on a new source topic from the old one's offsets, nor into a lost target
        refuse_start(config, link, progress, held, stop, status_every_s=STATUS_EVERY_S)
    spark = _session(link, plan, jars, master)
    if progress.front is not None:  # what reached the target goes out at once, not with the next heartbeat
        progress.front.on_news = progress.publish
    spark.streams.addListener(_listener(progress))
    query = _start_query(spark, config, link, plan, (source_id, target_id), master=master)
    failure: str | None = None
    gaps: list[Gap] = []
    try:
        try:
            _drive(query, progress, stop, generations)
            _note(generations, progress, keeper)  # as the driver leaves them
            error = query_error(query, keeper, keeper_stop, keeper_thread)
            if error is not None or keeper.lost_targets:
                failure = (
                    f"link {link.name}: the Spark query failed: {getattr(error, 'desc', error)}"
                    if error is not None
                    else f"link {link.name}: target topic(s) lost under the link: {', '.join(keeper.lost_targets)}"
                )
                gaps = _failure_gaps(progress, generations, source_admin, keeper)
        finally:
            keeper_stop.set()
            stop_query(query, link.name)
            time.sleep(0.5)  # let the listener bus deliver the last progress
            spark.stop()
        if failure is not None and gaps:
            hold_failed(config, link, progress, (failure, gaps), stop, status_every_s=STATUS_EVERY_S)
    finally:
        progress.close()
    if failure is not None:
        raise MirrorFailure(failure)
    log.info("link %s: Spark query stopped after %d micro-batch(es)", link.name, progress.batches)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point for spark-submit (see the module docstring)."""
    import signal

    from kernel.config import load_config

    parser = argparse.ArgumentParser(description="Run one mirrorwatch link with the spark engine.")
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--link", required=True)
    parser.add_argument("--master", help="Spark master (spark-submit's --master wins when given there)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = load_config(args.config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return run_spark_link(config, config.link(args.link), stop, master=args.master)


if __name__ == "__main__":
    sys.exit(main())
