"""The shipped alert rules' thresholds judged on the monitor's own history, for installations without Prometheus
(pure). Not Prometheus: a condition "holds for D" when every round of the last D met it and the history reaches back
that far; the console labels these as the monitor's own evaluation, and says which rules it cannot judge.

Judged here (same names and thresholds as alerts/mirrorwatch.rules.yml): MirrorwatchReplicationLagHigh (or
MirrorwatchReplicationLagHighByBudget, when the link's bandwidth budget held its workers back over half of the rate
window) and MirrorwatchMirrorStalled (both on the partitions no operator paused), MirrorwatchMirrorPaused,
MirrorwatchMirrorDown,
MirrorwatchClusterDown, KafkaConsumerGroupError. Left to Prometheus: the canary's rules (the canary is not part of the
monitor's rounds), consumer lag in seconds, topic drift and stale checkpoints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kernel.alert_thresholds import BUDGET_HELD_SHARE, DEFAULT_THRESHOLDS
from monitor.evaluator import Status
from monitor.history import History, Point

__all__ = ["NOT_JUDGED", "OwnAlert", "duration_ms", "firing"]

NOT_JUDGED = (
    "MirrorwatchCanaryLatencyHigh",
    "MirrorwatchCanaryProbesLost",
    "MirrorwatchCanaryAbsent",
    "KafkaConsumerLagSecondsHigh",
    "MirrorwatchTopicDrift",
    "MirrorwatchCheckpointsStale",
    "MirrorwatchRecordsLost",
    "MirrorwatchPartitionStopped",
    "KafkaConsumerGroupRecordsLost",
)
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def duration_ms(text: str) -> int:
    """A Prometheus duration ("1h30m", "90s") in milliseconds."""
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True, slots=True)
class OwnAlert:
    name: str
    labels: Mapping[str, str]
    since_ms: int  # the first round of the run of rounds that met the condition
    severity: str
    summary: str
    runbook_url: str = ""  # <runbook_base_url>/<name>.md, as the Prometheus rules' annotation

    def as_dict(self) -> dict[str, object]:
        return {
            "alert": self.name,
            "labels": dict(self.labels),
            "since_ms": self.since_ms,
            "severity": self.severity,
            "summary": self.summary,
            "runbook_url": self.runbook_url,
        }


def _run_start(points: Sequence[Point], met: Sequence[bool]) -> int | None:
    """The time of the first point of the newest run of points meeting the condition; None if the newest does not."""
    since = None
    for point, ok in zip(reversed(points), reversed(met), strict=True):
        if not ok:
            break
        since = point[0]
    return since


def _stalled(points: Sequence[Point], out_rate: Mapping[int, float], window_ms: int) -> list[bool]:
    """Per round: records waiting, none written in that round, and more waiting than `window_ms` earlier."""
    flags = []
    for at, lag in points:
        earlier = [v for when, v in points if at - window_ms <= when < at]
        flags.append(lag > 0 and out_rate.get(at) == 0 and bool(earlier) and lag > earlier[0])
    return flags


def firing(history: History, now_ms: int, thresholds: Mapping[str, str] | None = None) -> list[OwnAlert]:
    """Every judged rule whose condition held for its `for` duration up to the newest round."""
    t = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    out: list[OwnAlert] = []

    def fire(name: str, since: int | None, for_: str, *, labels: dict[str, str], severity: str, summary: str) -> None:
        if since is not None and now_ms - since >= duration_ms(t[for_]):
            out.append(OwnAlert(name, labels, since, severity, summary, f"{t['runbook_base_url']}/{name}.md"))

    lag_limit = float(t["replication_lag_seconds"])
    for key in history.keys("link"):
        link, series, points = key[1], key[2], history.points(key)
        # the lag of the partitions not paused (`mirrorwatch link pause`): a paused one's lag grows by design
        if series == "unpaused_lag_seconds":
            since = _run_start(points, [v > lag_limit for _, v in points])
            summary = f"link {link} is more than {lag_limit:g} s behind its source"
            window = duration_ms(t["rate_window"])
            held = [v for at, v in history.points(("link", link, "budget_throttled_share")) if now_ms - at < window]
            by_budget = bool(held) and sum(held) / len(held) > BUDGET_HELD_SHARE
            fire(
                "MirrorwatchReplicationLagHighByBudget" if by_budget else "MirrorwatchReplicationLagHigh",
                since,
                "replication_lag_for",
                labels={"link": link},
                severity="warning",
                summary=summary + (", held back by its bandwidth budget" if by_budget else ""),
            )
        elif series == "paused_partitions":
            fire(
                "MirrorwatchMirrorPaused",
                _run_start(points, [v > 0 for _, v in points]),
                "mirror_paused_for",
                labels={"link": link},
                severity="warning",
                summary=f"link {link} has partitions an operator paused",
            )
        elif series == "workers":
            since = _run_start(points, [v == 0 for _, v in points])
            fire(
                "MirrorwatchMirrorDown",
                since,
                "mirror_down_for",
                labels={"link": link},
                severity="critical",
                summary=f"no worker of link {link} is running",
            )
        elif series == "unpaused_lag_records":
            out_rate = dict(history.points(("link", link, "records_out_per_second")))
            since = _run_start(points, _stalled(points, out_rate, duration_ms(t["rate_window"])))
            fire(
                "MirrorwatchMirrorStalled",
                since,
                "mirror_stalled_for",
                labels={"link": link},
                severity="critical",
                summary=f"link {link} mirrors nothing while its source grows",
            )
    for key in history.keys("cluster"):
        points = history.points(key)
        fire(
            "MirrorwatchClusterDown",
            _run_start(points, [v == 0 for _, v in points]),
            "cluster_down_for",
            labels={"cluster": key[1]},
            severity="critical",
            summary=f"cluster {key[1]} does not answer the monitor",
        )
    for key in history.keys("group"):
        if key[3] != "status":
            continue
        points = history.points(key)
        since = _run_start(points, [v >= Status.ERR for _, v in points])
        summary = f"consumer group {key[2]} on {key[1]} is in error (STOP, STALL or REWIND)"
        fire(
            "KafkaConsumerGroupError",
            since,
            "consumer_group_error_for",
            labels={"cluster": key[1], "group": key[2]},
            severity="warning",
            summary=summary,
        )
    return out
