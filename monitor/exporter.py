"""The Prometheus exporter: metrics rendered from the monitor's published state.

Names and labels are the ones existing dashboards and alert rules query: kafka_exporter's (and its Grafana fork's, a
`cluster` label added), kafka-lag-exporter's (`cluster_name`, `group`, the member holding a partition),
burrow_exporter's, and mirrorwatch's own; `monitor.compatible_metrics` chooses which of the three borrowed styles are
served. Lag in seconds is mirrorwatch's measured age of the oldest unread record, never an extrapolation. Every
configured cluster and link has its own series from the first scrape (0 until known), so alerts never see "absent" by
accident; a group or topic that disappears from the state disappears from the scrape. Unknown values are left out,
never NaN.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator
from typing import Any

from kernel.histogram import Histogram
from kernel.worker_status import records_by_partition
from monitor.cardinality import partition_series_groups, series_exposition
from monitor.exposition import CounterFamily, Family, GaugeFamily, HistogramFamily
from monitor.link_families import drift_differences, link_budgets, link_lags, partition_states
from monitor.service import MonitorService
from monitor.snapshot import ClusterSnapshot, GroupInfo, Member
from monitor.state import GroupView, MonitorState

__all__ = ["METRIC_NAMES", "STYLES", "MonitorCollector"]

log = logging.getLogger("mirrorwatch.monitor")

# librdkafka statistics of each worker's clients: (metric name, ClientStats field, scale, help)
_CLIENT_GAUGES = (
    ("rtt_seconds", "rtt_avg_ms", 0.001, "Broker round trip, averaged over the brokers"),
    ("batch_size_bytes", "batch_size_avg_bytes", 1, "Producer: average bytes per batch"),
    ("batch_records", "batch_records_avg", 1, "Producer: average records per batch"),
    ("fetch_size_bytes", "fetch_size_avg_bytes", 1, "Consumer: average bytes per fetch response"),
    ("queued_records", "queued_records", 1, "Records in librdkafka's queues (producer: not yet acknowledged)"),
    ("queued_bytes", "queued_bytes", 1, "Bytes in librdkafka's queues"),
    ("fetch_queue_bytes", "fetch_queue_bytes", 1, "Consumer: fetched but not yet consumed"),
)
# A spark link's last micro-batch (from its driver's status).
_SPARK_GAUGES = (
    ("mirrorwatch_spark_batch_duration_seconds", "spark_batch_duration_seconds", "Duration of the last micro-batch"),
    ("mirrorwatch_spark_input_rows_per_second", "spark_input_rows_per_second", "Rows/s arriving, last micro-batch"),
    (
        "mirrorwatch_spark_processed_rows_per_second",
        "spark_processed_rows_per_second",
        "Rows/s mirrored, last micro-batch",
    ),
)
_CLIENT_COUNTERS = (
    ("requests_retried", "requests_retried_total", "Requests librdkafka sent again"),
    ("request_errors", "request_errors_total", "Request transmission errors"),
    ("rebalances", "rebalances_total", "Consumer group rebalances"),
)

# Families per exporter whose names and labels they reproduce; `monitor.compatible_metrics` picks the styles served.
KAFKA_EXPORTER_NAMES = (
    "kafka_brokers",
    "kafka_broker_info",
    "kafka_topic_partitions",
    "kafka_topic_partition_current_offset",
    "kafka_topic_partition_oldest_offset",
    "kafka_topic_partition_leader",
    "kafka_topic_partition_replicas",
    "kafka_topic_partition_in_sync_replica",
    "kafka_topic_partition_leader_is_preferred",
    "kafka_topic_partition_under_replicated_partition",
    "kafka_consumergroup_current_offset",
    "kafka_consumergroup_current_offset_sum",
    "kafka_consumergroup_lag",
    "kafka_consumergroup_lag_sum",
    "kafka_consumergroup_members",
    # Grafana's fork of kafka_exporter (the kafka-mixin dashboard, Grafana 7589)
    "kafka_consumergroup_uncommitted_offsets",
    "kafka_consumer_lag_millis",
)
LAG_EXPORTER_NAMES = (
    "kafka_consumergroup_group_offset",
    "kafka_consumergroup_group_lag",
    "kafka_consumergroup_group_lag_seconds",
    "kafka_consumergroup_group_max_lag",
    "kafka_consumergroup_group_max_lag_seconds",
    "kafka_consumergroup_group_sum_lag",
    "kafka_consumergroup_group_topic_sum_lag",
    "kafka_partition_latest_offset",
    "kafka_partition_earliest_offset",
    "kafka_consumergroup_poll_time_ms",
)
BURROW_NAMES = (
    "burrow_kafka_consumer_status",
    "burrow_kafka_consumer_partition_status",
    "burrow_kafka_consumer_partition_lag",
    "burrow_kafka_consumer_total_lag",
)
STYLES: dict[str, tuple[str, ...]] = {
    "kafka_exporter": KAFKA_EXPORTER_NAMES,
    "kafka_lag_exporter": LAG_EXPORTER_NAMES,
    "burrow": BURROW_NAMES,
}
OWN_NAMES = (
    "mirrorwatch_cluster_up",
    "mirrorwatch_cluster_last_success_timestamp_seconds",
    "mirrorwatch_cluster_collect_seconds",
    "mirrorwatch_cluster_commits_from_offsets_topic",
    "mirrorwatch_monitor_round_seconds",
    "mirrorwatch_monitor_interval_seconds",
    "mirrorwatch_monitor_round_overruns_total",
    "mirrorwatch_exporter_series",
    "mirrorwatch_exporter_groups_without_partition_series",
    "mirrorwatch_mirror_replication_lag_records",
    "mirrorwatch_mirror_replication_lag_seconds",
    "mirrorwatch_mirror_replication_lag_seconds_at_least",
    "mirrorwatch_mirror_inflight_records",
    "mirrorwatch_mirror_committed_lag_records",
    "mirrorwatch_mirror_records_total",
    "mirrorwatch_mirror_bytes_total",
    "mirrorwatch_mirror_send_errors_total",
    "mirrorwatch_mirror_replication_latency_seconds",
    "mirrorwatch_mirror_budget_bytes_per_second",
    "mirrorwatch_mirror_budget_throttled_seconds_total",
    "mirrorwatch_topic_config_drift",
    "mirrorwatch_link_drift_differences",
    "mirrorwatch_mirror_workers",
    "mirrorwatch_mirror_workers_gone",
    "mirrorwatch_mirror_records_lost_total",
    "mirrorwatch_mirror_partition_failed",
    "mirrorwatch_mirror_partition_paused",
    "mirrorwatch_consumergroup_records_lost",
    *(name for name, _key, _help in _SPARK_GAUGES),
    *(f"mirrorwatch_client_{name}" for name, _key, _scale, _help in _CLIENT_GAUGES),
    *(f"mirrorwatch_client_{name}_total" for name, _key, _help in _CLIENT_COUNTERS),
)
METRIC_NAMES = (*KAFKA_EXPORTER_NAMES, *LAG_EXPORTER_NAMES, *BURROW_NAMES, *OWN_NAMES)

_STYLE_OF = {name: style for style, names in STYLES.items() for name in names}


# kafka-lag-exporter's member labels for a partition no member holds
_NO_MEMBER = Member("unknown", "unknown", "unknown")


def _gauge(name: str, help_: str, *labels: str) -> GaugeFamily:
    return GaugeFamily(name, help_, labels=labels)


class MonitorCollector:
    """The monitor's families from its published state (`collect`), as exposition text (`render`)."""

    def __init__(self, service: MonitorService) -> None:
        self._service = service
        self._counts: dict[str, int] = {}  # series per style of the families last rendered (`_texts`)
        self._partition_groups: frozenset[tuple[str, str]] = frozenset()  # per-partition series: `collect`
        self._left_out = 0  # groups the partition series budget left out, last rendered
        self._said_left_out = False

    def render(self) -> bytes:
        """The families as exposition text, with `mirrorwatch_exporter_series` counting what they hold."""
        return b"".join(self._texts()) + self.render_served()

    def render_gzip(self, level: int = 1) -> tuple[bytes, Any]:
        """The same text but for the served families and the series count (`render_served`: for the moment of the
        scrape),
        gzip-compressed as it is rendered: only one family's text is in memory at a time, and what is kept between
        scrapes is a tenth of the text (a fleet's is hundreds of MB). What /metrics serves to Prometheus, which asks
        for gzip. The stream is left open (flushed, not finished) with its compressor: a scrape appends the served
        families to a copy of it and finishes that, so every reader sees one gzip stream."""
        packer = zlib.compressobj(level, zlib.DEFLATED, 31)  # 31: the gzip format
        chunks = [packer.compress(text) for text in self._texts()]
        chunks.append(packer.flush(zlib.Z_SYNC_FLUSH))
        return b"".join(chunks), packer

    def render_served(self) -> bytes:
        """The link lag families from the links as served now (`MonitorService.served_links`: a stuck link's age
        grows between rounds, second by second, as a scrape sees it), and `mirrorwatch_exporter_series` counting
        them with the families rendered for the round."""
        families = link_lags(self._service.served_links())
        counts = dict(self._counts)
        counts["mirrorwatch"] = counts.get("mirrorwatch", 0) + sum(f.samples for f in families)
        return b"".join(f.text() for f in families) + series_exposition(counts, self._left_out)

    def _texts(self) -> Iterator[bytes]:
        counts = dict.fromkeys((*STYLES, "mirrorwatch"), 0)
        for family in self.collect():  # one family's lines at a time, not all of them at once
            counts[_STYLE_OF.get(family.name, "mirrorwatch")] += family.samples
            yield family.text()
        self._counts = counts

    def collect(self) -> Iterator[Family]:
        """Every family but the served ones (`render_served`)."""
        state = self._service.state  # one round for the whole scrape
        styles = set(self._service.settings.compatible_metrics)
        self._budget_partition_series(state)
        yield from self._clusters(state)
        if "kafka_exporter" in styles:
            yield from self._kafka_exporter(state)
            yield from self._kafka_exporter_groups(state)
        if "kafka_lag_exporter" in styles:
            yield from self._lag_exporter(state)
        if "burrow" in styles:
            yield from self._burrow(state)
        yield from self._links(state)
        yield _group_losses(self._views(state))

    def _snapshots(self, state: MonitorState | None) -> Iterator[ClusterSnapshot]:
        """The configured clusters' snapshots that answered, in the configured order."""
        for alias in self._service.clusters:
            snapshot = state.clusters.get(alias) if state is not None else None
            if snapshot is not None and snapshot.up:
                yield snapshot

    def _views(self, state: MonitorState | None) -> list[tuple[tuple[str, str], GroupView]]:
        return sorted(state.groups.items()) if state is not None else []

    def _clusters(self, state: MonitorState | None) -> Iterator[Family]:
        up = _gauge("mirrorwatch_cluster_up", "1 when the last collection from the cluster succeeded", "cluster")
        last = _gauge(
            "mirrorwatch_cluster_last_success_timestamp_seconds",
            "When the cluster was last collected successfully",
            "cluster",
        )
        collect = _gauge(
            "mirrorwatch_cluster_collect_seconds", "How long the cluster's last collection took", "cluster"
        )
        from_topic = _gauge(
            "mirrorwatch_cluster_commits_from_offsets_topic",
            "1 when committed offsets are read by following __consumer_offsets, 0 with one OffsetFetch per group",
            "cluster",
        )
        for alias in self._service.clusters:
            snapshot = state.clusters.get(alias) if state is not None else None
            up.add_metric([alias], 1 if snapshot is not None and snapshot.up else 0)
            if state is not None and alias in state.last_success_ms:
                last.add_metric([alias], state.last_success_ms[alias] / 1000)
            if snapshot is not None and snapshot.up:
                collect.add_metric([alias], snapshot.collect_seconds)
                from_topic.add_metric([alias], int(snapshot.commits_from == "offsets-topic"))
        round_s = _gauge(
            "mirrorwatch_monitor_round_seconds", "How long the last collection round took (all clusters, evaluated)"
        )
        interval = _gauge("mirrorwatch_monitor_interval_seconds", "monitor.interval_seconds")
        overruns = CounterFamily(
            "mirrorwatch_monitor_round_overruns",
            "Rounds that took longer than the interval (the next started at once: the interval stretched)",
        )
        interval.add_metric([], self._service.settings.interval_seconds)
        overruns.add_metric([], self._service.overruns)
        if state is not None:
            round_s.add_metric([], state.round_seconds)
        yield from (up, last, collect, from_topic, round_s, interval, overruns)

    def _kafka_exporter(self, state: MonitorState | None) -> Iterator[Family]:
        """kafka_exporter's families (danielqsj/kafka_exporter and Grafana's fork), a `cluster` label added."""
        brokers = _gauge("kafka_brokers", "Number of brokers in the cluster's metadata", "cluster")
        broker_info = _gauge("kafka_broker_info", "1 for each broker: its address and id", "cluster", "address", "id")
        partitions = _gauge("kafka_topic_partitions", "Number of partitions of a topic", "cluster", "topic")
        tp = ("cluster", "topic", "partition")
        current = _gauge("kafka_topic_partition_current_offset", "High-watermark of a partition", *tp)
        oldest = _gauge("kafka_topic_partition_oldest_offset", "Log start offset of a partition", *tp)
        leader = _gauge("kafka_topic_partition_leader", "Broker id of the partition's leader (-1: none)", *tp)
        replicas = _gauge("kafka_topic_partition_replicas", "Number of replicas of a partition", *tp)
        isr = _gauge("kafka_topic_partition_in_sync_replica", "Number of in-sync replicas of a partition", *tp)
        preferred = _gauge(
            "kafka_topic_partition_leader_is_preferred", "1 when the partition's leader is its preferred replica", *tp
        )
        under = _gauge(
            "kafka_topic_partition_under_replicated_partition", "1 when a partition has fewer in-sync replicas", *tp
        )
        for snapshot in self._snapshots(state):
            alias = snapshot.alias
            brokers.add_metric([alias], len(snapshot.brokers))
            for broker_id, address in sorted(snapshot.brokers.items()):
                broker_info.add_metric([alias, address, str(broker_id)], 1)
            for topic, count in sorted(snapshot.topics().items()):
                partitions.add_metric([alias, topic], count)
            for (topic, partition), offsets in sorted(snapshot.partitions.items()):
                labels = [alias, topic, str(partition)]
                if offsets.latest is not None:
                    current.add_metric(labels, offsets.latest)
                if offsets.earliest is not None:
                    oldest.add_metric(labels, offsets.earliest)
            for (topic, partition), where in sorted(snapshot.replicas.items()):
                labels = [alias, topic, str(partition)]
                leader.add_metric(labels, where.leader)
                replicas.add_metric(labels, len(where.replicas))
                isr.add_metric(labels, len(where.isr))
                preferred.add_metric(labels, int(where.leader_is_preferred))
                under.add_metric(labels, int(where.under_replicated))
        yield from (brokers, broker_info, partitions, current, oldest, leader, replicas, isr, preferred, under)

    def _kafka_exporter_groups(self, state: MonitorState | None) -> Iterator[Family]:
        gtp = ("cluster", "consumergroup", "topic", "partition")
        offset = _gauge("kafka_consumergroup_current_offset", "Committed offset of a group", *gtp)
        offset_sum = _gauge(
            "kafka_consumergroup_current_offset_sum",
            "Committed offsets of a group summed over a topic",
            "cluster",
            "consumergroup",
            "topic",
        )
        lag = _gauge("kafka_consumergroup_lag", "High-watermark minus committed offset", *gtp)
        lag_sum = _gauge(
            "kafka_consumergroup_lag_sum", "Lag of a group summed over a topic", "cluster", "consumergroup", "topic"
        )
        members = _gauge("kafka_consumergroup_members", "Members of a group", "cluster", "consumergroup")
        uncommitted = _gauge(
            "kafka_consumergroup_uncommitted_offsets",
            "High-watermark minus committed offset (Grafana's kafka_exporter name for the lag)",
            *gtp,
        )
        millis = _gauge(
            "kafka_consumer_lag_millis",
            "Age of the oldest record the group has not consumed, in ms (measured, not extrapolated)",
            *gtp,
        )
        for (alias, group), view in self._views(state):
            members.add_metric([alias, group], view.members)
            lags: dict[str, int] = {}
            offsets: dict[str, int] = {}
            per_partition = self._per_partition(alias, group)
            for p in view.evaluation.partitions:
                if p.end is not None:
                    offsets[p.topic] = offsets.get(p.topic, 0) + p.end.offset
                lags[p.topic] = lags.get(p.topic, 0) + p.current_lag
                if not per_partition:
                    continue
                labels = [alias, group, p.topic, str(p.partition)]
                if p.end is not None:
                    offset.add_metric(labels, p.end.offset)
                lag.add_metric(labels, p.current_lag)
                uncommitted.add_metric(labels, p.current_lag)
                if p.lag_seconds is not None:
                    millis.add_metric(labels, p.lag_seconds * 1000)
            for topic, value in sorted(offsets.items()):
                offset_sum.add_metric([alias, group, topic], value)
            for topic, value in sorted(lags.items()):
                lag_sum.add_metric([alias, group, topic], value)
        yield from (offset, offset_sum, lag, lag_sum, members, uncommitted, millis)

    def _lag_exporter(self, state: MonitorState | None) -> Iterator[Family]:
        """kafka-lag-exporter's families: `cluster_name`, `group`, and the member holding each partition."""
        member_labels = ("cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id")
        offset = _gauge("kafka_consumergroup_group_offset", "Committed offset of a group", *member_labels)
        lag = _gauge("kafka_consumergroup_group_lag", "High-watermark minus committed offset", *member_labels)
        lag_s = _gauge(
            "kafka_consumergroup_group_lag_seconds",
            "Age of the oldest record not yet consumed (measured, not extrapolated)",
            *member_labels,
        )
        group_labels = ("cluster_name", "group", "is_simple_consumer")
        max_lag = _gauge("kafka_consumergroup_group_max_lag", "Largest lag of a group", *group_labels)
        max_lag_s = _gauge("kafka_consumergroup_group_max_lag_seconds", "Largest lag in seconds", *group_labels)
        sum_lag = _gauge("kafka_consumergroup_group_sum_lag", "Lag of a group summed", "cluster_name", "group")
        topic_sum = _gauge(
            "kafka_consumergroup_group_topic_sum_lag",
            "Lag of a group summed over a topic",
            "cluster_name",
            "group",
            "topic",
        )
        for (alias, group), view in self._views(state):
            info = self._group_info(state, alias, group)
            assignments = info.assignments if info is not None else {}
            simple = "true" if info is not None and info.is_simple else "false"
            lags: dict[str, int] = {}
            seconds: list[float] = []
            per_partition = self._per_partition(alias, group)
            for p in view.evaluation.partitions:
                lags[p.topic] = lags.get(p.topic, 0) + p.current_lag
                if p.lag_seconds is not None:
                    seconds.append(p.lag_seconds)
                if not per_partition:
                    continue
                holder = assignments.get((p.topic, p.partition), _NO_MEMBER)
                labels = [alias, group, p.topic, str(p.partition), holder.host, holder.consumer_id, holder.client_id]
                if p.end is not None:
                    offset.add_metric(labels, p.end.offset)
                lag.add_metric(labels, p.current_lag)
                if p.lag_seconds is not None:
                    lag_s.add_metric(labels, p.lag_seconds)
            if view.evaluation.partitions:
                max_lag.add_metric([alias, group, simple], max(p.current_lag for p in view.evaluation.partitions))
            if seconds:
                max_lag_s.add_metric([alias, group, simple], max(seconds))
            sum_lag.add_metric([alias, group], sum(lags.values()))
            for topic, value in sorted(lags.items()):
                topic_sum.add_metric([alias, group, topic], value)
        yield from (offset, lag, lag_s, max_lag, max_lag_s, sum_lag, topic_sum)

        latest = _gauge(
            "kafka_partition_latest_offset", "High-watermark of a partition", "cluster_name", "topic", "partition"
        )
        earliest = _gauge(
            "kafka_partition_earliest_offset", "Log start offset of a partition", "cluster_name", "topic", "partition"
        )
        poll = _gauge(
            "kafka_consumergroup_poll_time_ms", "How long the last collection of the cluster took", "cluster_name"
        )
        for snapshot in self._snapshots(state):
            poll.add_metric([snapshot.alias], snapshot.collect_seconds * 1000)
            for (topic, partition), offsets in sorted(snapshot.partitions.items()):
                labels = [snapshot.alias, topic, str(partition)]
                if offsets.latest is not None:
                    latest.add_metric(labels, offsets.latest)
                if offsets.earliest is not None:
                    earliest.add_metric(labels, offsets.earliest)
        yield from (latest, earliest, poll)

    def _budget_partition_series(self, state: MonitorState | None) -> None:
        self._partition_groups, self._left_out = _partition_budget(self._service, self._views(state))
        if self._left_out and not self._said_left_out:
            self._said_left_out = _say_left_out(len(self._partition_groups), self._left_out, self._service)

    def _per_partition(self, alias: str, group: str) -> bool:
        return (alias, group) in self._partition_groups

    @staticmethod
    def _group_info(state: MonitorState | None, alias: str, group: str) -> GroupInfo | None:
        snapshot = state.clusters.get(alias) if state is not None else None
        return snapshot.groups.get(group) if snapshot is not None else None

    def _burrow(self, state: MonitorState | None) -> Iterator[Family]:
        """The families of burrow_exporter, from mirrorwatch's Burrow evaluation."""
        status = _gauge(
            "burrow_kafka_consumer_status",
            "Burrow status of a group: 0 NOTFOUND, 1 OK, 2 WARN, 3 ERR",
            "cluster",
            "group",
        )
        gtp = ("cluster", "group", "topic", "partition")
        p_status = _gauge(
            "burrow_kafka_consumer_partition_status", "Burrow status of a partition: 0 NOTFOUND .. 6 REWIND", *gtp
        )
        p_lag = _gauge("burrow_kafka_consumer_partition_lag", "Current lag of a partition (Burrow)", *gtp)
        total = _gauge("burrow_kafka_consumer_total_lag", "Total lag of a group (Burrow)", "cluster", "group")
        for (alias, group), view in self._views(state):
            evaluation = view.evaluation
            status.add_metric([alias, group], int(evaluation.status))
            total.add_metric([alias, group], evaluation.total_lag)
            for p in evaluation.partitions if self._per_partition(alias, group) else ():
                labels = [alias, group, p.topic, str(p.partition)]
                p_status.add_metric(labels, int(p.status))
                p_lag.add_metric(labels, p.current_lag)
        yield from (status, p_status, p_lag, total)

    def _links(self, state: MonitorState | None) -> Iterator[Family]:
        part_labels = ["link", "topic", "partition"]
        inflight = GaugeFamily(
            "mirrorwatch_mirror_inflight_records", "Read but not yet acknowledged", labels=part_labels
        )
        committed = GaugeFamily(
            "mirrorwatch_mirror_committed_lag_records",
            "Source high-watermark minus the link's committed offset",
            labels=part_labels,
        )
        records = CounterFamily(
            "mirrorwatch_mirror_records",
            "Records read from the source (in) and acknowledged by the target (out)",
            labels=["link", "direction"],
        )
        bytes_ = CounterFamily(
            "mirrorwatch_mirror_bytes", "Key and value bytes in and out", labels=["link", "direction"]
        )
        errors = CounterFamily("mirrorwatch_mirror_send_errors", "Records the target refused", labels=["link"])
        latency = HistogramFamily(
            "mirrorwatch_mirror_replication_latency_seconds",
            "Target acknowledgement time minus source record timestamp",
            labels=["link"],
        )
        drift = GaugeFamily(
            "mirrorwatch_topic_config_drift",
            "1 for each topic config that differs between source and target",
            labels=["link", "source_topic", "target_topic", "config"],
        )
        workers = GaugeFamily(
            "mirrorwatch_mirror_workers",
            "Live workers of the link reporting their positions (0: its engine is not running where the monitor sees "
            "it)",
            labels=["link"],
        )
        workers_gone = GaugeFamily(
            "mirrorwatch_mirror_workers_gone",
            "Workers of the link whose last status stands but which died, froze or failed",
            labels=["link"],
        )
        lost = CounterFamily(
            "mirrorwatch_mirror_records_lost",
            "Records the link will never copy (reason: retention, truncated, recreated: gone from the source before it "
            "read them; target-deleted, target-recreated: gone from the target with its topic) or copied already older "
            "than the target's retention (target-retention), each gap counted once, a growing one once per offset",
            labels=[*part_labels, "reason"],
        )
        client_labels = ["link", "worker", "role"]
        client_gauges = {
            name: GaugeFamily(f"mirrorwatch_client_{name}", help_, labels=client_labels)
            for name, _key, _scale, help_ in _CLIENT_GAUGES
        }
        client_counters = {
            name: CounterFamily(f"mirrorwatch_client_{name}", help_, labels=client_labels)
            for name, _key, help_ in _CLIENT_COUNTERS
        }
        spark = {name: GaugeFamily(name, help_, labels=["link"]) for name, _key, help_ in _SPARK_GAUGES}
        for link in self._service.links:
            view = state.links.get(link.name) if state is not None else None
            stats = view.stats if view is not None else {}
            if view is not None:
                workers.add_metric([link.name], view.workers)
                workers_gone.add_metric([link.name], view.workers_gone)
            for name, key, _help in _SPARK_GAUGES:
                if link.engine == "spark":
                    spark[name].add_metric([link.name], float(stats.get(key, 0)))
            for client in view.clients if view is not None else ():
                labels = [link.name, client["worker"], client["role"]]
                for name, key, scale, _help in _CLIENT_GAUGES:
                    if client.get(key) is not None:
                        client_gauges[name].add_metric(labels, client[key] * scale)
                for name, key, _help in _CLIENT_COUNTERS:
                    client_counters[name].add_metric(labels, client.get(key, 0))
            for direction in ("in", "out"):
                records.add_metric([link.name, direction], stats.get(f"records_{direction}_total", 0))
                bytes_.add_metric([link.name, direction], stats.get(f"bytes_{direction}_total", 0))
            errors.add_metric([link.name], stats.get("send_errors_total", 0))
            histogram = stats.get("replication_latency_seconds")
            h = Histogram.from_counts(histogram["counts"], histogram["sum"]) if histogram else Histogram()
            latency.add_histogram([link.name], h.prometheus_buckets(), h.sum)
            for p in view.partitions if view is not None else ():
                labels = [link.name, p.topic, str(p.partition)]
                inflight.add_metric(labels, p.in_flight_records)
                if p.committed_lag_records is not None:
                    committed.add_metric(labels, p.committed_lag_records)
            by_reason = records_by_partition(view.gaps if view is not None else ())
            for (topic, partition, reason), count in sorted(by_reason.items()):
                lost.add_metric([link.name, topic, str(partition), reason], count)
            for d in view.config_drift if view is not None else ():
                drift.add_metric([link.name, d["source_topic"], d["target_topic"], d["config"]], 1)
        yield from (inflight, committed, records, bytes_, errors, latency, drift, workers, workers_gone, lost)
        yield from link_budgets([link.name for link in self._service.links], state)
        yield from partition_states(state)
        yield drift_differences(state)
        yield from client_gauges.values()
        yield from spark.values()
        yield from client_counters.values()


def _partition_budget(
    service: MonitorService, views: list[tuple[tuple[str, str], GroupView]]
) -> tuple[frozenset[tuple[str, str]], int]:
    return partition_series_groups(
        ((key, len(view.evaluation.partitions)) for key, view in views),
        service.settings.partition_series_groups.matches,
        frozenset(link.consumer_group for link in service.links),
        service.settings.partition_series_limit,
    )


def _say_left_out(served: int, left_out: int, service: MonitorService) -> bool:
    log.warning(
        "monitor: per-partition series of the borrowed families for %d group(s) only: %d more would pass "
        "monitor.partition_series_limit (%d group-partitions); their per-group series are served",
        served,
        left_out,
        service.settings.partition_series_limit,
    )
    return True


def _group_losses(views: list[tuple[tuple[str, str], GroupView]]) -> Family:
    """Records each group will never read (below the log start: rule 0), only where there are any."""
    lost = _gauge(
        "mirrorwatch_consumergroup_records_lost",
        "Records below the partition's log start that the group's committed offset had not reached: deleted "
        "(retention, delete-records) before the group read them",
        "cluster",
        "group",
        "topic",
        "partition",
    )
    for (alias, group), view in views:
        for p in view.evaluation.partitions:
            if p.records_lost:
                lost.add_metric([alias, group, p.topic, str(p.partition)], p.records_lost)
    return lost
