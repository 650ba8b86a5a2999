"""What B5's harness reads from the monitor while a truth run goes on: the link's figures as it serves them, and the
Burrow-style status of the link's own group (with a word on its largest lag, for a failure to show).

Imports: bench.truth_judge (what the figures are kept as), the standard library."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from bench.truth_judge import Sample

__all__ = ["CANNOT_SEE", "group_status", "poll_monitor"]

POLL_S = 0.25
CANNOT_SEE = "CANNOT_SEE"  # the link group's "status" when the monitor answers that it cannot see the source


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def poll_monitor(url: str, topic: str, samples: list[Sample], stop: threading.Event) -> None:
    last_observed = None
    while not stop.wait(POLL_S):
        asked = _now_ms()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body = response.read()
            answered = _now_ms()  # the answer in: its parsing is the poll's own time
            link = json.loads(body)
        except (OSError, ValueError):
            continue
        mine = [p for p in link["partitions"] if p["topic"] == topic]
        if not mine or any(p.get("observed_ms") is None for p in mine):
            continue
        observed = max(p["observed_ms"] for p in mine)
        key = tuple((p["partition"], p["observed_ms"]) for p in mine)
        if key == last_observed:
            continue
        last_observed = key
        seconds = [p["replication_lag_seconds"] for p in mine]
        records = [p["replication_lag_records"] for p in mine]
        samples.append(
            Sample(
                answered,
                observed,
                None if any(s is None for s in seconds) else max(seconds),
                None if any(r is None for r in records) else sum(records),
                [(p["partition"], p["observed_ms"]) for p in mine],  # the truth is taken at each one's moment
                [p for p in mine if p["replication_lag_seconds"] is None or p["replication_lag_records"] is None],
                positions_from=[str(p.get("position_from")) for p in mine],
                served=mine,
                target_silent_since_ms=link.get("target_silent_since_ms"),
                asked_ms=asked,
            )
        )


def group_status(url: str) -> tuple[str, list[dict[str, Any]] | None, str | None] | None:
    """The group's status, its partitions' detail and a word on its largest lag (`_largest_lag`); (CANNOT_SEE, None,
    None) when the monitor answers that it cannot see the cluster (503); None when there is no answer to note."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            body = json.load(response)["status"]
        keys = ("partition", "status", "complete", "start", "end", "current_lag")
        detail = [{k: p[k] for k in keys} for p in body.get("partitions", [])]
        return str(body["status"]), detail, _largest_lag(body)
    except urllib.error.HTTPError as exc:
        return (CANNOT_SEE, None, None) if exc.code == 503 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _largest_lag(body: dict[str, Any]) -> str | None:
    """The total lag, and the partition of the largest: its committed offset, how old that commit and the monitor's
    observation of it are. With the status, the timeline shows whether the offsets stood and the lag grew while it
    read OK, and whether what was served was old."""
    try:
        top, now_ms = body["maxlag"], _now_ms()
        end = top["end"]
        commit_s, seen_s = (now_ms - end["timestamp"]) / 1000, (now_ms - end["observedAt"]) / 1000
        return f"lag {body['totallag']} p{top['partition']}@{end['offset']} commit -{commit_s:.1f}s seen -{seen_s:.1f}s"
    except (KeyError, TypeError, ValueError):
        return None
