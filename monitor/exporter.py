"""The Prometheus exporter: metrics rendered from the monitor's current state at scrape time.

Names are the ones existing dashboards query: kafka_exporter's (with a `cluster` label added), kafka-lag-exporter's
lag in seconds (`cluster_name`, `group`), Burrow's status gauges, and mirrorwatch's own. Every configured cluster
and link has its series from the first scrape (0 until known), so alerts never see "absent" by accident; a group or
topic that disappears from the state disappears from the scrape. Unknown values are left out, never NaN.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from mirrorwatch.histogram import Histogram
from monitor.service import MonitorService
from monitor.state import MonitorState

__all__ = ["METRIC_NAMES", "MonitorCollector"]

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

METRIC_NAMES = (
    "kafka_topic_partition_current_offset",
    "kafka_topic_partition_oldest_offset",
    "kafka_consumergroup_current_offset",
    "kafka_consumergroup_lag",
    "kafka_consumergroup_lag_sum",
    "kafka_consumergroup_members",
    "kafka_consumergroup_group_lag_seconds",
    "kafka_consumergroup_group_max_lag_seconds",
    "burrow_kafka_consumer_status",
    "burrow_kafka_consumer_partition_status",
    "burrow_kafka_consumer_partition_lag",
    "burrow_kafka_consumer_total_lag",
    "mirrorwatch_cluster_up",
    "mirrorwatch_cluster_last_success_timestamp_seconds",
    "mirrorwatch_mirror_replication_lag_records",
    "mirrorwatch_mirror_replication_lag_seconds",
    "mirrorwatch_mirror_inflight_records",
    "mirrorwatch_mirror_committed_lag_records",
    "mirrorwatch_mirror_records_total",
    "mirrorwatch_mirror_bytes_total",
    "mirrorwatch_mirror_send_errors_total",
    "mirrorwatch_mirror_replication_latency_seconds",
    "mirrorwatch_topic_config_drift",
    "mirrorwatch_mirror_workers",
    "mirrorwatch_mirror_workers_gone",
    *(name for name, _key, _help in _SPARK_GAUGES),
    *(f"mirrorwatch_client_{name}" for name, _key, _scale, _help in _CLIENT_GAUGES),
    *(f"mirrorwatch_client_{name}_total" for name, _key, _help in _CLIENT_COUNTERS),
)


class MonitorCollector(Collector):
    def __init__(self, service: MonitorService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        state = self._service.state  # one round for the whole scrape
        yield from self._clusters(state)
        yield from self._groups(state)
        yield from self._links(state)

    def _clusters(self, state: MonitorState | None) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "mirrorwatch_cluster_up", "1 when the last collection from the cluster succeeded", labels=["cluster"]
        )
        last = GaugeMetricFamily(
            "mirrorwatch_cluster_last_success_timestamp_seconds",
            "When the cluster was last collected successfully",
            labels=["cluster"],
        )
        current = GaugeMetricFamily(
            "kafka_topic_partition_current_offset",
            "High-watermark of a partition",
            labels=["cluster", "topic", "partition"],
        )
        oldest = GaugeMetricFamily(
            "kafka_topic_partition_oldest_offset",
            "Log start offset of a partition",
            labels=["cluster", "topic", "partition"],
        )
        for alias in self._service.clusters:
            snapshot = state.clusters.get(alias) if state is not None else None
            up.add_metric([alias], 1 if snapshot is not None and snapshot.up else 0)
            if state is not None and alias in state.last_success_ms:
                last.add_metric([alias], state.last_success_ms[alias] / 1000)
            if snapshot is None or not snapshot.up:
                continue
            for (topic, partition), offsets in sorted(snapshot.partitions.items()):
                labels = [alias, topic, str(partition)]
                if offsets.latest is not None:
                    current.add_metric(labels, offsets.latest)
                if offsets.earliest is not None:
                    oldest.add_metric(labels, offsets.earliest)
        yield from (up, last, current, oldest)

    def _groups(self, state: MonitorState | None) -> Iterator[Metric]:
        g_offset = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "Committed offset of a group",
            labels=["cluster", "consumergroup", "topic", "partition"],
        )
        g_lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High-watermark minus committed offset",
            labels=["cluster", "consumergroup", "topic", "partition"],
        )
        g_lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "Lag of a group summed over a topic",
            labels=["cluster", "consumergroup", "topic"],
        )
        g_members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of a group", labels=["cluster", "consumergroup"]
        )
        lag_s = GaugeMetricFamily(
            "kafka_consumergroup_group_lag_seconds",
            "Age of the oldest record not yet consumed",
            labels=["cluster_name", "group", "topic", "partition"],
        )
        max_lag_s = GaugeMetricFamily(
            "kafka_consumergroup_group_max_lag_seconds",
            "Largest lag in seconds of a group",
            labels=["cluster_name", "group"],
        )
        status = GaugeMetricFamily(
            "burrow_kafka_consumer_status",
            "Burrow status of a group: 0 NOTFOUND, 1 OK, 2 WARN, 3 ERR",
            labels=["cluster", "group"],
        )
        p_status = GaugeMetricFamily(
            "burrow_kafka_consumer_partition_status",
            "Burrow status of a partition: 0 NOTFOUND .. 6 REWIND",
            labels=["cluster", "group", "topic", "partition"],
        )
        p_lag = GaugeMetricFamily(
            "burrow_kafka_consumer_partition_lag",
            "Current lag of a partition (Burrow)",
            labels=["cluster", "group", "topic", "partition"],
        )
        total = GaugeMetricFamily(
            "burrow_kafka_consumer_total_lag", "Total lag of a group (Burrow)", labels=["cluster", "group"]
        )
        for (alias, group), view in sorted((state.groups if state is not None else {}).items()):
            evaluation = view.evaluation
            g_members.add_metric([alias, group], view.members)
            status.add_metric([alias, group], int(evaluation.status))
            total.add_metric([alias, group], evaluation.total_lag)
            sums: dict[str, int] = {}
            seconds = []
            for p in evaluation.partitions:
                labels = [alias, group, p.topic, str(p.partition)]
                if p.end is not None:
                    g_offset.add_metric(labels, p.end.offset)
                g_lag.add_metric(labels, p.current_lag)
                p_status.add_metric(labels, int(p.status))
                p_lag.add_metric(labels, p.current_lag)
                sums[p.topic] = sums.get(p.topic, 0) + p.current_lag
                if p.lag_seconds is not None:
                    lag_s.add_metric(
                        [alias, group, p.topic, str(p.partition), p.lag_seconds_method or "record"], p.lag_seconds
                    )
                    seconds.append(p.lag_seconds)
            for topic, lag in sorted(sums.items()):
                g_lag_sum.add_metric([alias, group, topic], lag)
            if seconds:
                max_lag_s.add_metric([alias, group], max(seconds))
        yield from (g_offset, g_lag, g_lag_sum, g_members, lag_s, max_lag_s, status, p_status, p_lag, total)

    def _links(self, state: MonitorState | None) -> Iterator[Metric]:
        part_labels = ["link", "topic", "partition"]
        repl = GaugeMetricFamily(
            "mirrorwatch_mirror_replication_lag_records",
            "Source high-watermark minus the offset the target acknowledged",
            labels=part_labels,
        )
        repl_s = GaugeMetricFamily(
            "mirrorwatch_mirror_replication_lag_seconds",
            "Age of the oldest record not yet acknowledged by the target",
            labels=part_labels,
        )
        inflight = GaugeMetricFamily(
            "mirrorwatch_mirror_inflight_records", "Read but not yet acknowledged", labels=part_labels
        )
        committed = GaugeMetricFamily(
            "mirrorwatch_mirror_committed_lag_records",
            "Source high-watermark minus the link's committed offset",
            labels=part_labels,
        )
        records = CounterMetricFamily(
            "mirrorwatch_mirror_records",
            "Records read from the source (in) and acknowledged by the target (out)",
            labels=["link", "direction"],
        )
        bytes_ = CounterMetricFamily(
            "mirrorwatch_mirror_bytes", "Key and value bytes in and out", labels=["link", "direction"]
        )
        errors = CounterMetricFamily("mirrorwatch_mirror_send_errors", "Records the target refused", labels=["link"])
        latency = HistogramMetricFamily(
            "mirrorwatch_mirror_replication_latency_seconds",
            "Target acknowledgement time minus source record timestamp",
            labels=["link"],
        )
        drift = GaugeMetricFamily(
            "mirrorwatch_topic_config_drift",
            "1 for each topic config that differs between source and target",
            labels=["link", "source_topic", "target_topic", "config"],
        )
        workers = GaugeMetricFamily(
            "mirrorwatch_mirror_workers",
            "Live workers of the link reporting their positions (0: its engine is not running where the monitor sees "
            "it)",
            labels=["link"],
        )
        workers_gone = GaugeMetricFamily(
            "mirrorwatch_mirror_workers_gone",
            "Workers of the link whose last status stands but which died, froze or failed",
            labels=["link"],
        )
        client_labels = ["link", "worker", "role"]
        client_gauges = {
            name: GaugeMetricFamily(f"mirrorwatch_client_{name}", help_, labels=client_labels)
            for name, _key, _scale, help_ in _CLIENT_GAUGES
        }
        client_counters = {
            name: CounterMetricFamily(f"mirrorwatch_client_{name}", help_, labels=client_labels)
            for name, _key, help_ in _CLIENT_COUNTERS
        }
        spark = {name: GaugeMetricFamily(name, help_, labels=["link"]) for name, _key, help_ in _SPARK_GAUGES}
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
            latency.add_metric([link.name], h.prometheus_buckets(), h.sum)
            for p in view.partitions if view is not None else ():
                labels = [link.name, p.topic, str(p.partition)]
                if p.replication_lag_records is not None:
                    repl.add_metric(labels, p.replication_lag_records)
                if p.replication_lag_seconds is not None:
                    repl_s.add_metric(
                        [*labels, p.replication_lag_seconds_method or "record"], p.replication_lag_seconds
                    )
                inflight.add_metric(labels, p.in_flight_records)
                if p.committed_lag_records is not None:
                    committed.add_metric(labels, p.committed_lag_records)
            for d in view.config_drift if view is not None else ():
                drift.add_metric([link.name, d["source_topic"], d["target_topic"], d["config"]], 1)
        yield from (repl, repl_s, inflight, committed, records, bytes_, errors, latency, drift, workers, workers_gone)
        yield from client_gauges.values()
        yield from spark.values()
        yield from client_counters.values()
