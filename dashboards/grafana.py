"""Grafana dashboards as code, with grafana-foundation-sdk (Grafana's own SDK, generated from its schemas; 11.6 build).

`mirrorwatch dashboards build [--out DIR]` writes one JSON file per dashboard; the committed copies under
`dashboards/grafana/` are these files (a test rebuilds them and fails on any difference). Every dashboard has a
Prometheus data source variable and the cluster, link or group variables its queries filter on; queries use only
metrics the exporter serves (checked by a test), never recording rules, so they work without alerts/ loaded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.dashboard import Dashboard as DashboardBuilder
from grafana_foundation_sdk.builders.dashboard import DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

__all__ = ["DASHBOARDS", "build_all", "dashboard_json", "write_all"]

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
TAGS = ["mirrorwatch", "kafka"]


def _query(expr: str, legend: str = "", *, instant: bool = False, table_format: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant()
    if table_format:
        q = q.format(PromQueryFormat.TABLE)
    return q


def _series(title: str, unit: str, *queries: prometheus.Dataquery, description: str = "") -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).datasource(DATASOURCE).height(8).span(12)
    if description:
        panel = panel.description(description)
    for q in queries:
        panel = panel.with_target(q)
    return panel


def _stat(title: str, unit: str, query: prometheus.Dataquery, description: str = "") -> stat.Panel:
    panel = stat.Panel().title(title).unit(unit).datasource(DATASOURCE).height(4).span(6).with_target(query)
    return panel.description(description) if description else panel


def _table(title: str, query: prometheus.Dataquery, description: str = "") -> table.Panel:
    panel = table.Panel().title(title).datasource(DATASOURCE).height(8).span(24).with_target(query)
    return panel.description(description) if description else panel


def _datasource_variable() -> DatasourceVariable:
    return DatasourceVariable("datasource").label("Data source").type("prometheus")


def _label_variable(name: str, label: str, query: str, *, multi: bool = True) -> QueryVariable:
    return (
        QueryVariable(name)
        .label(label)
        .query(query)
        .datasource(DATASOURCE)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(multi)
        .all_value(".*" if multi else "")
    )


def _dashboard(uid: str, title: str, description: str) -> DashboardBuilder:
    return (
        DashboardBuilder(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(_datasource_variable())
    )


def mirror_overview() -> DashboardBuilder:
    sel = 'link=~"$link"'
    return (
        _dashboard(
            "mirrorwatch-mirror",
            "mirrorwatch / Mirror overview",
            "Per link: throughput, replication lag in records and seconds, in-flight, errors, latency, topic drift.",
        )
        .with_variable(_label_variable("link", "Link", "label_values(mirrorwatch_mirror_records_total, link)"))
        .with_row(Row("Health"))
        .with_panel(
            _stat(
                "Replication lag (worst link)",
                "s",
                _query(f"max(mirrorwatch_mirror_replication_lag_seconds{{{sel}}})", instant=True),
                "Age of the oldest record not yet acknowledged by the target.",
            )
        )
        .with_panel(
            _stat(
                "Records not yet safe at the target",
                "short",
                _query(f"sum(mirrorwatch_mirror_replication_lag_records{{{sel}}})", instant=True),
            )
        )
        .with_panel(
            _stat(
                "Workers reporting",
                "short",
                _query(f"sum(mirrorwatch_mirror_workers{{{sel}}})", instant=True),
                "0: the link's engine is not running where the monitor can see it.",
            )
        )
        .with_panel(
            _stat(
                "Send errors (range)",
                "short",
                _query(f"sum(increase(mirrorwatch_mirror_send_errors_total{{{sel}}}[$__range]))", instant=True),
            )
        )
        .with_row(Row("Throughput"))
        .with_panel(
            _series(
                "Records/s in and out",
                "rps",
                _query(
                    f"sum by (link, direction) (rate(mirrorwatch_mirror_records_total{{{sel}}}[{RATE}]))",
                    "{{link}} {{direction}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Bytes/s in and out",
                "Bps",
                _query(
                    f"sum by (link, direction) (rate(mirrorwatch_mirror_bytes_total{{{sel}}}[{RATE}]))",
                    "{{link}} {{direction}}",
                ),
            )
        )
        .with_row(Row("Lag"))
        .with_panel(
            _series(
                "Replication lag (records)",
                "short",
                _query(f"sum by (link) (mirrorwatch_mirror_replication_lag_records{{{sel}}})", "{{link}} replication"),
                _query(f"sum by (link) (mirrorwatch_mirror_committed_lag_records{{{sel}}})", "{{link}} committed"),
                description="Replication lag: source high-watermark minus what the target acknowledged. Committed "
                "lag: minus the link's committed offset (what Burrow and kafka_exporter would show).",
            )
        )
        .with_panel(
            _series(
                "Replication lag (seconds)",
                "s",
                _query(f"max by (link) (mirrorwatch_mirror_replication_lag_seconds{{{sel}}})", "{{link}}"),
            )
        )
        .with_panel(
            _series(
                "In flight",
                "short",
                _query(f"sum by (link) (mirrorwatch_mirror_inflight_records{{{sel}}})", "{{link}}"),
                description="Read from the source, not yet acknowledged by the target.",
            )
        )
        .with_panel(
            _series(
                "Send errors/s",
                "short",
                _query(f"sum by (link) (rate(mirrorwatch_mirror_send_errors_total{{{sel}}}[{RATE}]))", "{{link}}"),
            )
        )
        .with_panel(
            _series(
                "Bytes out and bandwidth budget",
                "Bps",
                _query(
                    f'sum by (link) (rate(mirrorwatch_mirror_bytes_total{{direction="out", {sel}}}[{RATE}]))',
                    "{{link}} out",
                ),
                _query(f"sum by (link) (mirrorwatch_mirror_budget_bytes_per_second{{{sel}}})", "{{link}} budget"),
                description="Key and value bytes the target acknowledged, and the link's max_bytes_per_second "
                "(mirrorwatch link budget changes it at run time; no line: no budget).",
            )
        )
        .with_panel(
            _series(
                "Held back by the budget",
                "percentunit",
                _query(
                    f"sum by (link) (rate(mirrorwatch_mirror_budget_throttled_seconds_total{{{sel}}}[{RATE}])) "
                    f"/ clamp_min(sum by (link) (mirrorwatch_mirror_workers{{{sel}}}), 1)",
                    "{{link}}",
                ),
                description="The share of the time the link's workers waited for their bandwidth budget; over half "
                "for the lag alert's duration, the lag alert is MirrorwatchReplicationLagHighByBudget.",
            )
        )
        .with_panel(
            heatmap.Panel()
            .title("Replication latency (acknowledged minus record timestamp)")
            .datasource(DATASOURCE)
            .height(8)
            .span(24)
            .calculate(False)
            .with_target(
                _query(
                    f"sum by (le) (increase(mirrorwatch_mirror_replication_latency_seconds_bucket{{{sel}}}[{RATE}]))",
                    "{{le}}",
                ).format(PromQueryFormat.HEATMAP)
            )
        )
        .with_row(Row("Spark links"))
        .with_panel(
            _series(
                "Micro-batch duration",
                "s",
                _query(f"mirrorwatch_spark_batch_duration_seconds{{{sel}}}", "{{link}}"),
                description="Links with engine spark: duration of the last micro-batch.",
            )
        )
        .with_panel(
            _series(
                "Rows per second (input and processed)",
                "rps",
                _query(f"mirrorwatch_spark_input_rows_per_second{{{sel}}}", "{{link}} input"),
                _query(f"mirrorwatch_spark_processed_rows_per_second{{{sel}}}", "{{link}} processed"),
            )
        )
        .with_row(Row("Topics"))
        .with_panel(
            _table(
                "Topic drift between source and target",
                _query(f"mirrorwatch_topic_config_drift{{{sel}}} == 1", instant=True, table_format=True),
                "Topic configs and partition counts that differ between a source topic and its target.",
            )
        )
        .with_row(Row("Failover readiness (standby groups)"))
        .with_panel(
            _series(
                "Checkpoint age",
                "s",
                _query(f"time() - mirrorwatch_failover_checkpoint_timestamp_seconds{{{sel}}}", "{{link}}"),
                _query(f"3 * mirrorwatch_failover_checkpoint_interval_seconds{{{sel}}}", "{{link}} stale above"),
                description="Links with a checkpoint: section: how old the last good translation of the standby "
                "groups is (the MirrorwatchCheckpointsStale alert fires above three intervals).",
            )
        )
        .with_panel(
            _series(
                "Records a failover now would read twice or not find",
                "short",
                _query(f"sum by (link) (mirrorwatch_failover_reread_records{{{sel}}})", "{{link}} read twice"),
                _query(
                    f"sum by (link) (mirrorwatch_failover_unmirrored_records{{{sel}}})", "{{link}} not mirrored yet"
                ),
                description="Summed over the standby groups: records a consumer started on the target now would "
                "read twice, and offsets at or after the groups' commits the target does not have yet.",
            )
        )
        .with_panel(
            _table(
                "Standby groups not ready",
                _query(f"mirrorwatch_failover_group_ready{{{sel}}} == 0", instant=True, table_format=True),
                "Why: /mirror/links/<link>/checkpoints, or the console's Failover page.",
            )
        )
    )


def consumer_lag() -> DashboardBuilder:
    group_sel = 'cluster=~"$cluster", consumergroup=~"$group"'
    burrow_sel = 'cluster=~"$cluster", group=~"$group"'
    seconds_sel = 'cluster_name=~"$cluster", group=~"$group"'
    status_names = ValueMap(
        {
            "0": ValueMappingResult(text="NOTFOUND", color="text", index=0),
            "1": ValueMappingResult(text="OK", color="green", index=1),
            "2": ValueMappingResult(text="WARN", color="orange", index=2),
            "3": ValueMappingResult(text="ERR", color="red", index=3),
        }
    )
    return (
        _dashboard(
            "mirrorwatch-consumers",
            "mirrorwatch / Consumer lag",
            "Burrow status, lag in records and seconds per consumer group, topic and partition.",
        )
        .with_variable(_label_variable("cluster", "Cluster", "label_values(kafka_consumergroup_lag, cluster)"))
        .with_variable(
            _label_variable(
                "group", "Group", 'label_values(kafka_consumergroup_lag{cluster=~"$cluster"}, consumergroup)'
            )
        )
        .with_row(Row("Status"))
        .with_panel(
            _table(
                "Burrow status per group",
                _query(f"burrow_kafka_consumer_status{{{burrow_sel}}}", instant=True, table_format=True),
                "OK, WARN or ERR (a partition STOP, STALL or REWIND) by Burrow's rules with mirrorwatch's fixes.",
            ).mappings([status_names])
        )
        .with_row(Row("Lag"))
        .with_panel(
            _series(
                "Lag per group and topic (records)",
                "short",
                _query(
                    f"sum by (cluster, consumergroup, topic) (kafka_consumergroup_lag{{{group_sel}}})",
                    "{{consumergroup}} {{topic}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Largest lag per group (seconds)",
                "s",
                _query(f"kafka_consumergroup_group_max_lag_seconds{{{seconds_sel}}}", "{{group}}"),
            )
        )
        .with_panel(
            _series(
                "Lag per partition (seconds)",
                "s",
                _query(f"kafka_consumergroup_group_lag_seconds{{{seconds_sel}}}", "{{group}} {{topic}}[{{partition}}]"),
            ).span(24)
        )
        .with_panel(
            _table(
                "Worst partitions",
                _query(
                    f"topk(20, burrow_kafka_consumer_partition_lag{{{burrow_sel}}})", instant=True, table_format=True
                ),
                "The 20 partitions with the most lag (records) right now.",
            )
        )
        .with_panel(
            _series(
                "Members per group",
                "short",
                _query(f"kafka_consumergroup_members{{{group_sel}}}", "{{consumergroup}}"),
            )
        )
    )


def canary() -> DashboardBuilder:
    sel = 'link=~"$link"'

    def quantile(q: str, metric: str) -> prometheus.Dataquery:
        return _query(
            f"histogram_quantile({q}, sum by (link, le) (rate({metric}_bucket{{{sel}}}[{RATE}])))",
            f"{{{{link}}}} p{q[2:] or '100'}",
        )

    return (
        _dashboard(
            "mirrorwatch-canary",
            "mirrorwatch / Canary",
            "Probes through each link: end-to-end latency, produce latency, loss, duplicates, reordering, absence.",
        )
        .with_variable(_label_variable("link", "Link", "label_values(mirrorwatch_canary_absent, link)"))
        .with_row(Row("Arrival"))
        .with_panel(
            _stat(
                "Last probe age",
                "s",
                _query(
                    f"time() - max by (link) (mirrorwatch_canary_last_received_timestamp_seconds{{{sel}}})",
                    "{{link}}",
                    instant=True,
                ),
                "Seconds since a probe was last read back at the target.",
            )
        )
        .with_panel(
            _stat(
                "Absent links",
                "short",
                _query(f"sum(mirrorwatch_canary_absent{{{sel}}})", instant=True),
                "Links with no probe for canary.absent_after_intervals intervals.",
            )
        )
        .with_row(Row("Latency"))
        .with_panel(
            _series(
                "End-to-end latency p50 / p99",
                "s",
                quantile("0.50", "mirrorwatch_canary_e2e_latency_seconds"),
                quantile("0.99", "mirrorwatch_canary_e2e_latency_seconds"),
                description="Probe created at the source until read back at the target (broker + mirror).",
            )
        )
        .with_panel(
            _series(
                "Produce latency and source round trip p99",
                "s",
                quantile("0.99", "mirrorwatch_canary_produce_latency_seconds"),
                quantile("0.99", "mirrorwatch_canary_source_roundtrip_seconds"),
                description="Broker only: acks=all acknowledgement, and read back from the source topic.",
            )
        )
        .with_row(Row("Loss"))
        .with_panel(
            _series(
                "Lost, late, duplicated, reordered probes",
                "short",
                *(
                    _query(
                        f"sum by (link) (increase(mirrorwatch_canary_probes_{kind}_total{{{sel}}}[{RATE}]))",
                        f"{{{{link}}}} {kind}",
                    )
                    for kind in ("lost", "late", "duplicated", "reordered")
                ),
            ).span(24)
        )
        .with_panel(
            _series(
                "Probes sent and received per second",
                "rps",
                *(
                    _query(
                        f"sum by (link) (rate(mirrorwatch_canary_probes_{kind}_total{{{sel}}}[{RATE}]))",
                        f"{{{{link}}}} {kind}",
                    )
                    for kind in ("sent", "received")
                ),
            ).span(24)
        )
    )


def clients() -> DashboardBuilder:
    sel = 'link=~"$link"'
    by = "{{link}} #{{worker}} {{role}}"
    return (
        _dashboard(
            "mirrorwatch-clients",
            "mirrorwatch / Clients",
            "librdkafka statistics of each mirror worker's consumer and producer.",
        )
        .with_variable(_label_variable("link", "Link", "label_values(mirrorwatch_client_queued_records, link)"))
        .with_panel(_series("Broker round trip", "s", _query(f"mirrorwatch_client_rtt_seconds{{{sel}}}", by)))
        .with_panel(
            _series(
                "Producer batch size",
                "bytes",
                _query(f'mirrorwatch_client_batch_size_bytes{{{sel}, role="producer"}}', by),
            )
        )
        .with_panel(
            _series(
                "Producer records per batch",
                "short",
                _query(f'mirrorwatch_client_batch_records{{{sel}, role="producer"}}', by),
            )
        )
        .with_panel(
            _series(
                "Consumer fetch size",
                "bytes",
                _query(f'mirrorwatch_client_fetch_size_bytes{{{sel}, role="consumer"}}', by),
            )
        )
        .with_panel(
            _series(
                "Retries and errors per second",
                "short",
                _query(f"rate(mirrorwatch_client_requests_retried_total{{{sel}}}[{RATE}])", f"{by} retried"),
                _query(f"rate(mirrorwatch_client_request_errors_total{{{sel}}}[{RATE}])", f"{by} errors"),
            )
        )
        .with_panel(
            _series(
                "Queued in librdkafka",
                "short",
                _query(f"mirrorwatch_client_queued_records{{{sel}}}", f"{by} records"),
                _query(f'mirrorwatch_client_fetch_queue_bytes{{{sel}, role="consumer"}}', f"{by} fetched bytes"),
            )
        )
        .with_panel(
            _series(
                "Consumer group rebalances",
                "short",
                _query(f'increase(mirrorwatch_client_rebalances_total{{{sel}, role="consumer"}}[{RATE}])', by),
            )
        )
    )


DASHBOARDS: dict[str, Callable[[], DashboardBuilder]] = {
    "mirror-overview": mirror_overview,
    "consumer-lag": consumer_lag,
    "canary": canary,
    "clients": clients,
}


def dashboard_json(builder: DashboardBuilder) -> str:
    model = builder.build()
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number  # unique panel ids (links and "view panel" use them)
        for index, target in enumerate(getattr(panel, "targets", None) or []):
            target.ref_id = chr(ord("A") + index)  # each query of a panel needs its own refId
    document: dict[str, Any] = json.loads(json.dumps(model, cls=JSONEncoder))
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def build_all() -> dict[str, str]:
    """File name -> dashboard JSON."""
    return {f"{name}.json": dashboard_json(make()) for name, make in DASHBOARDS.items()}


def write_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in build_all().items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written
