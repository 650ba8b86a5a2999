"""Prometheus recording and alerting rules for mirrorwatch, as code (pure: builds a document, writes nothing).

`alerts/mirrorwatch.rules.yml` is this module's output with the default thresholds (a test fails when they differ);
`mirrorwatch alerts build --set replication_lag_seconds=300 --out my.rules.yml` writes it with yours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernel.alert_thresholds import BUDGET_HELD_SHARE, DEFAULT_THRESHOLDS, THRESHOLDS, check_threshold

__all__ = ["DEFAULT_THRESHOLDS", "METRICS_USED", "THRESHOLDS", "build_rules", "parse_overrides", "render"]

# The thresholds and their defaults are shared with the monitor's own evaluation (monitor.own_alerts).


# Every metric the rules read (the test checks each is exported).
METRICS_USED = (
    "mirrorwatch_mirror_replication_lag_seconds",
    "mirrorwatch_mirror_replication_lag_records",
    "mirrorwatch_mirror_records_total",
    "mirrorwatch_mirror_workers",
    "mirrorwatch_cluster_up",
    "burrow_kafka_consumer_status",
    "kafka_consumergroup_group_max_lag_seconds",
    "mirrorwatch_canary_e2e_latency_seconds",
    "mirrorwatch_canary_probes_lost_total",
    "mirrorwatch_canary_absent",
    "mirrorwatch_topic_config_drift",
    "mirrorwatch_failover_checkpoint_timestamp_seconds",
    "mirrorwatch_failover_checkpoint_interval_seconds",
    "mirrorwatch_mirror_records_lost_total",
    "mirrorwatch_mirror_partition_failed",
    "mirrorwatch_consumergroup_records_lost",
    "mirrorwatch_mirror_partition_paused",
    "mirrorwatch_mirror_budget_throttled_seconds_total",
)


# Monitors may run in pairs for availability (issue #45), scraped as two targets of one job: every series then comes
# twice, apart only in the labels that name the target. Each rule reads a series through `_one`, which keeps one of
# them (the larger: a lag, a status, a loss that either monitor sees counts; a cluster or a worker counts as up while
# either sees it), so that nothing is summed twice and no alert fires once per monitor.
_TARGET_LABELS = "instance, pod"


_RECORDS_OUT = 'rate(mirrorwatch_mirror_records_total{{direction="out"}}[{rate}])'


def _one(series: str) -> str:
    return f"max without ({_TARGET_LABELS}) ({series})"


# A partition's lag series, less those an operator paused; a link's series, while none of its partitions is paused
# (the canary's probes cross every partition of its topic, and a paused link holds them).
_UNLESS_PAUSED = f"unless on (link, topic, partition) {_one('mirrorwatch_mirror_partition_paused')} == 1"
_UNLESS_LINK_PAUSED = "unless on (link) mirrorwatch:mirror_partitions_paused:sum > 0"


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """`name=value` pairs, checked against the known thresholds; raises ValueError naming the bad one."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in THRESHOLDS:
            known = ", ".join(THRESHOLDS)
            raise ValueError(f"{pair!r}: expected NAME=VALUE with NAME one of {known}")
        check_threshold(name, value)
        out[name] = value
    return out


def build_rules(overrides: Mapping[str, str] | None = None) -> dict[str, Any]:
    t = {**DEFAULT_THRESHOLDS, **(overrides or {})}
    rate = t["rate_window"]
    window = t["canary_window"]
    recording = [
        # The lag of the partitions not paused by an operator (`mirrorwatch link pause`): a paused partition's lag
        # grows by design, and MirrorwatchMirrorPaused says a pause that lasts.
        {
            "record": "mirrorwatch:mirror_replication_lag_seconds:max",
            "expr": f"max by (link) ({_one('mirrorwatch_mirror_replication_lag_seconds')} {_UNLESS_PAUSED})",
        },
        {
            "record": "mirrorwatch:mirror_replication_lag_records:sum",
            "expr": f"sum by (link) ({_one('mirrorwatch_mirror_replication_lag_records')} {_UNLESS_PAUSED})",
        },
        {
            "record": "mirrorwatch:mirror_partitions_paused:sum",
            "expr": f"sum by (link) ({_one('mirrorwatch_mirror_partition_paused')})",
        },
        {
            "record": f"mirrorwatch:mirror_records_out:rate{rate}",
            "expr": f"sum by (link) ({_one(_RECORDS_OUT.format(rate=rate))})",
        },
        # The share of the time the link's workers were held back by its bandwidth budget (`max_bytes_per_second`,
        # `mirrorwatch link budget`): over half, the link is as far behind as its budget makes it, on purpose.
        {
            "record": f"mirrorwatch:mirror_budget_throttled:ratio{rate}",
            "expr": (
                f"sum by (link) ({_one(f'rate(mirrorwatch_mirror_budget_throttled_seconds_total[{rate}])')})"
                f" / clamp_min(sum by (link) ({_one('mirrorwatch_mirror_workers')}), 1)"
            ),
        },
        {
            "record": f"mirrorwatch:canary_e2e_latency_seconds:p99_{window}",
            "expr": (
                "histogram_quantile(0.99, sum by (link, le) "
                f"({_one(f'rate(mirrorwatch_canary_e2e_latency_seconds_bucket[{window}])')}))"
            ),
        },
        {
            "record": f"mirrorwatch:canary_e2e_latency_seconds:p50_{window}",
            "expr": (
                "histogram_quantile(0.50, sum by (link, le) "
                f"({_one(f'rate(mirrorwatch_canary_e2e_latency_seconds_bucket[{window}])')}))"
            ),
        },
    ]
    throttled = f"mirrorwatch:mirror_budget_throttled:ratio{rate} > {BUDGET_HELD_SHARE:g}"
    alerts = [
        _alert(
            "MirrorwatchReplicationLagHigh",
            f"mirrorwatch:mirror_replication_lag_seconds:max > {t['replication_lag_seconds']}"
            f" unless on (link) {throttled}",
            t["replication_lag_for"],
            "warning",
            "Link {{ $labels.link }} is {{ $value | humanizeDuration }} behind its source",
            "The oldest record of link {{ $labels.link }} not yet acknowledged by the target is "
            "{{ $value | humanizeDuration }} old (threshold " + t["replication_lag_seconds"] + "s). "
            "See /mirror/links/{{ $labels.link }} for the partitions.",
        ),
        _alert(
            "MirrorwatchReplicationLagHighByBudget",
            f"mirrorwatch:mirror_replication_lag_seconds:max > {t['replication_lag_seconds']}"
            f" and on (link) {throttled}",
            t["replication_lag_for"],
            "warning",
            "Link {{ $labels.link }} is {{ $value | humanizeDuration }} behind its source, held back by its "
            "bandwidth budget",
            "The oldest record of link {{ $labels.link }} not yet acknowledged by the target is "
            "{{ $value | humanizeDuration }} old (threshold " + t["replication_lag_seconds"] + "s), and its "
            "bandwidth budget held its workers back over half of the last " + rate + ": the source takes more "
            "than the budget lets through (mirrorwatch_mirror_budget_bytes_per_second). Raise it "
            "(mirrorwatch link budget --max-bytes-per-second) or expect this lag while the source is this busy.",
        ),
        _alert(
            "MirrorwatchMirrorStalled",
            "mirrorwatch:mirror_replication_lag_records:sum > 0"
            f" and on (link) mirrorwatch:mirror_records_out:rate{rate} == 0"
            f" and on (link) delta(mirrorwatch:mirror_replication_lag_records:sum[{rate}]) > 0",
            t["mirror_stalled_for"],
            "critical",
            "Link {{ $labels.link }} mirrors nothing while its source grows",
            "Link {{ $labels.link }} acknowledged no record in the last " + rate + " while its replication lag grew "
            "(now {{ $value }} records). Check the workers' logs and the target cluster.",
        ),
        _alert(
            "MirrorwatchMirrorDown",
            f"{_one('mirrorwatch_mirror_workers')} == 0",
            t["mirror_down_for"],
            "critical",
            "No worker of link {{ $labels.link }} is running",
            "The monitor sees no worker of link {{ $labels.link }} (not in its process, its status files or the "
            "progress topic); its replication lag is now measured from the group's commits only.",
        ),
        _alert(
            "MirrorwatchClusterDown",
            f"{_one('mirrorwatch_cluster_up')} == 0",
            t["cluster_down_for"],
            "critical",
            "Cluster {{ $labels.cluster }} does not answer the monitor",
            "The monitor could not collect offsets from cluster {{ $labels.cluster }} for "
            + t["cluster_down_for"]
            + ".",
        ),
        _alert(
            "KafkaConsumerGroupError",
            f"{_one('burrow_kafka_consumer_status')} >= 3",
            t["consumer_group_error_for"],
            "warning",
            "Consumer group {{ $labels.group }} on {{ $labels.cluster }} is in error",
            "Burrow status of group {{ $labels.group }} on cluster {{ $labels.cluster }} is ERR (a partition is "
            "STOP, STALL or REWIND). See /v3/kafka/{{ $labels.cluster }}/consumer/{{ $labels.group }}/status.",
        ),
        _alert(
            "KafkaConsumerGroupRecordsLost",
            f"{_one('mirrorwatch_consumergroup_records_lost')} > 0",
            "0m",
            "critical",
            "Group {{ $labels.group }} on {{ $labels.cluster }} lost records of {{ $labels.topic }}"
            "[{{ $labels.partition }}]",
            "{{ $value | humanize }} records of {{ $labels.topic }} partition {{ $labels.partition }} were deleted "
            "(retention, delete-records) before group {{ $labels.group }} on cluster {{ $labels.cluster }} read them: "
            "its committed offset is below the log start. See /v3/kafka/{{ $labels.cluster }}/consumer/"
            "{{ $labels.group }}/status.",
        ),
        _alert(
            "KafkaConsumerLagSecondsHigh",
            f"{_one('kafka_consumergroup_group_max_lag_seconds')} > {t['consumer_lag_seconds']}",
            t["consumer_lag_for"],
            "warning",
            "Consumer group {{ $labels.group }} is {{ $value | humanizeDuration }} behind",
            "The oldest unread record of group {{ $labels.group }} on cluster {{ $labels.cluster_name }} is "
            "{{ $value | humanizeDuration }} old (threshold " + t["consumer_lag_seconds"] + "s).",
        ),
        _alert(
            "MirrorwatchCanaryLatencyHigh",
            f"mirrorwatch:canary_e2e_latency_seconds:p99_{window} > {t['canary_p99_seconds']} {_UNLESS_LINK_PAUSED}",
            t["canary_latency_for"],
            "warning",
            "Canary p99 through link {{ $labels.link }} is {{ $value | humanizeDuration }}",
            "99% of the canary probes through link {{ $labels.link }} arrived within {{ $value | humanizeDuration }} "
            "over the last " + window + " (threshold " + t["canary_p99_seconds"] + "s).",
        ),
        _alert(
            "MirrorwatchCanaryProbesLost",
            f"sum by (link, partition) ({_one(f'increase(mirrorwatch_canary_probes_lost_total[{window}])')}) > "
            f"{t['canary_lost_probes']} {_UNLESS_LINK_PAUSED}",
            "0m",
            "warning",
            "Canary probes lost on link {{ $labels.link }} partition {{ $labels.partition }}",
            "{{ $value | humanize }} canary probe(s) on link {{ $labels.link }}, source partition "
            "{{ $labels.partition }}, were not read back at the target within the SLA in the last " + window + ".",
        ),
        _alert(
            "MirrorwatchCanaryAbsent",
            f"{_one('mirrorwatch_canary_absent')} == 1 {_UNLESS_LINK_PAUSED}",
            t["canary_absent_for"],
            "critical",
            "No canary probe arrives through link {{ $labels.link }}",
            "No probe arrived at the target of link {{ $labels.link }} for canary.absent_after_intervals intervals: "
            "the path from source to target is broken even if other metrics look fine.",
        ),
        _alert(
            "MirrorwatchTopicDrift",
            f"{_one('mirrorwatch_topic_config_drift')} == 1",
            t["drift_for"],
            "warning",
            "Topic {{ $labels.target_topic }} differs from its source in {{ $labels.config }}",
            "Link {{ $labels.link }}: {{ $labels.config }} of target topic {{ $labels.target_topic }} differs from "
            "source topic {{ $labels.source_topic }}.",
        ),
        _alert(
            "MirrorwatchCheckpointsStale",
            f"time() - {_one('mirrorwatch_failover_checkpoint_timestamp_seconds')}"
            f" > {t['checkpoint_stale_intervals']} * {_one('mirrorwatch_failover_checkpoint_interval_seconds')}",
            t["checkpoint_stale_for"],
            "warning",
            "Standby groups of link {{ $labels.link }} are not kept ready",
            "The last good checkpoint round of link {{ $labels.link }} read the source groups' commits "
            "{{ $value | humanizeDuration }} ago: a failover now would start the target groups where they were "
            "then. See /mirror/links/{{ $labels.link }}/checkpoints for the error.",
        ),
        _alert(
            "MirrorwatchRecordsLost",
            # A series born with its first gap has no sample `offset` the window ago: it counts from 0.
            f"sum by (link, topic, partition, reason) ({_one('mirrorwatch_mirror_records_lost_total')} - "
            f"({_one('mirrorwatch_mirror_records_lost_total offset ' + t['records_lost_window'])}"
            f" or {_one('mirrorwatch_mirror_records_lost_total')} * 0)) > 0",
            "0m",
            "critical",
            "Link {{ $labels.link }} lost records of {{ $labels.topic }}[{{ $labels.partition }}]",
            "{{ $value | humanize }} records of {{ $labels.topic }} partition {{ $labels.partition }} are missing "
            "from what link {{ $labels.link }} copies ({{ $labels.reason }}), in the last "
            + t["records_lost_window"]
            + ". retention, truncated, recreated: gone from the source before the link read them; target-deleted, "
            "target-recreated: gone from the target with its topic (the source still has them); target-retention: "
            "the target took them already older than its retention.ms (the link lags by more than the target keeps "
            "records), and deletes them at its next retention check. The offsets: "
            "/mirror/links/{{ $labels.link }}.",
        ),
        _alert(
            "MirrorwatchPartitionStopped",
            f"{_one('mirrorwatch_mirror_partition_failed')} == 1",
            "0m",
            "critical",
            "Link {{ $labels.link }} stopped mirroring {{ $labels.topic }}[{{ $labels.partition }}]",
            "Link {{ $labels.link }} mirrors no more of {{ $labels.topic }} partition {{ $labels.partition }} "
            "(its other partitions go on) until you choose: records it had not copied are gone from the source "
            "(on_gap, on_recreate: stop) or its target topic was deleted (on_target_loss: stop). The reason and "
            "what to change: /mirror/links/{{ $labels.link }}.",
        ),
        _alert(
            "MirrorwatchMirrorPaused",
            "mirrorwatch:mirror_partitions_paused:sum > 0",
            t["mirror_paused_for"],
            "warning",
            "Link {{ $labels.link }} has {{ $value }} partition(s) paused",
            "An operator paused {{ $value }} partition(s) of link {{ $labels.link }} (mirrorwatch link pause) "
            + t["mirror_paused_for"]
            + " ago or more: they copy nothing and their lag grows (the lag and canary alerts leave them out). "
            "Who and why: mirrorwatch link status, or /mirror/links/{{ $labels.link }}. Resume with mirrorwatch "
            "link resume.",
        ),
    ]
    for alert in alerts:  # docs/runbooks/<alert>.md: what it means, how to confirm it, what to do, when to escalate
        alert["annotations"]["runbook_url"] = f"{t['runbook_base_url']}/{alert['alert']}.md"
    # One group: its rules are evaluated in order, so every alert sees the recording rules of the same evaluation.
    return {"groups": [{"name": "mirrorwatch", "rules": recording + alerts}]}


def _alert(  # noqa: PLR0917 -- one positional argument per rule field reads like the rule itself
    name: str, expr: str, for_: str, severity: str, summary: str, description: str
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ not in ("0", "0s", "0m"):
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def render(document: Mapping[str, Any]) -> str:
    import yaml  # only here: the builder itself stays dependency-free

    header = "# Generated by `mirrorwatch alerts build` from alerts/rules.py; edit thresholds there or with --set.\n"
    return header + yaml.safe_dump(dict(document), sort_keys=False, width=200, allow_unicode=True)
