"""The alert rules' thresholds (pure): one table for the Prometheus rules (alerts.rules) and for the monitor's own
evaluation of them on its history (monitor.own_alerts), so the two never disagree on a default."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

__all__ = ["BUDGET_HELD_SHARE", "DEFAULT_THRESHOLDS", "THRESHOLDS", "AlertThresholds", "check_threshold"]

_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
_URL = re.compile(r"^https?://[^\s\"'{}<>]+[^/\s\"'{}<>]$")
_NUMBER = re.compile(r"^\d+(\.\d+)?$")

# name -> (default, meaning). Durations are Prometheus durations ("5m"), numbers are plain.
THRESHOLDS: dict[str, tuple[str, str]] = {
    "replication_lag_seconds": ("120", "age of the oldest record the target has not acknowledged, per link"),
    "replication_lag_for": ("5m", "how long the replication lag must stay above it"),
    "mirror_stalled_for": ("10m", "no record mirrored while the replication lag grows, for this long"),
    "mirror_down_for": ("2m", "a link with no worker reporting, for this long"),
    "cluster_down_for": ("2m", "a cluster the monitor cannot collect, for this long"),
    "consumer_group_error_for": ("5m", "a consumer group at Burrow status ERR (STOP, STALL, REWIND), for this long"),
    "consumer_lag_seconds": ("600", "a consumer group's largest lag in seconds"),
    "consumer_lag_for": ("10m", "how long the consumer lag must stay above it"),
    "canary_p99_seconds": ("30", "p99 of the canary's end-to-end latency over canary_window, per link"),
    "canary_latency_for": ("10m", "how long the canary p99 must stay above it"),
    "canary_window": ("10m", "window of the canary latency and loss expressions"),
    "canary_lost_probes": ("0", "probes lost within canary_window above which the loss alert fires"),
    "canary_absent_for": ("1m", "a link the canary reports absent, for this long"),
    "drift_for": ("15m", "a topic config or partition count differing between source and target, for this long"),
    "rate_window": ("5m", "window of rate() in the recording rules and the stall check"),
    "checkpoint_stale_intervals": (
        "3",
        "checkpoint intervals without a good round after which a link's standby is stale",
    ),
    "checkpoint_stale_for": ("2m", "how long the standby must stay stale"),
    "mirror_paused_for": ("1h", "partitions an operator paused (mirrorwatch link pause), for this long"),
    "records_lost_window": ("1h", "records a link lost (a gap) keep MirrorwatchRecordsLost firing this long"),
    "runbook_base_url": (
        "https://github.com/mirrorwatch/mirrorwatch/blob/main/docs/runbooks",
        "each alert's runbook_url is <this>/<alert>.md (your copy of docs/runbooks, e.g. on an internal wiki)",
    ),
}
# A link whose bandwidth budget held its workers back more than this share of the rate window is behind on purpose:
# its lag alert is MirrorwatchReplicationLagHighByBudget (the rules and the monitor's own evaluation alike).
BUDGET_HELD_SHARE = 0.5
DEFAULT_THRESHOLDS: dict[str, str] = {name: default for name, (default, _meaning) in THRESHOLDS.items()}


def check_threshold(name: str, value: str) -> None:
    """Raises ValueError naming what is wrong: an unknown threshold, or a value of the wrong kind."""
    if name not in THRESHOLDS:
        raise ValueError(f"{name!r} is not a threshold; one of {', '.join(THRESHOLDS)}")
    if name.endswith("_url"):
        if not _URL.match(value):
            raise ValueError(f"{name}={value!r}: must be an http(s) URL without a trailing slash")
        return
    is_duration = name.endswith(("_for", "_window"))
    if not (_DURATION if is_duration else _NUMBER).match(value):
        kind = "a Prometheus duration like 5m" if is_duration else "a number"
        raise ValueError(f"{name}={value!r}: must be {kind}")


def _checked(thresholds: dict[str, str]) -> dict[str, str]:
    for name, value in thresholds.items():
        check_threshold(name, value)
    return thresholds


# A config field of threshold overrides (NAME: VALUE), each checked like `alerts build --set NAME=VALUE`.
AlertThresholds = Annotated[dict[str, str], AfterValidator(_checked)]
