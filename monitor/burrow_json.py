"""Burrow's v3 JSON shapes for the monitor's HTTP API (`monitor.http`): the envelope, a partition's evaluation with
its window's ends, a group's status, and the answers for what is not found or cannot be seen now."""

from __future__ import annotations

import socket
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from monitor.evaluator import GroupEvaluation, OffsetSample, PartitionEvaluation, Status
from monitor.state import MonitorState

__all__ = ["burrow", "group_status_json", "not_found", "partition_json", "sample_json", "unseen"]


def burrow(request: Request, message: str, status_code: int = 200, **body: Any) -> JSONResponse:
    return JSONResponse(
        {
            "error": status_code >= 400,
            "message": message,
            **body,
            "request": {"url": request.url.path, "host": socket.gethostname()},
        },
        status_code=status_code,
    )


def not_found(request: Request, what: str) -> JSONResponse:
    return burrow(request, f"{what} not found", 404)


def unseen(request: Request, current: MonitorState | None) -> JSONResponse | None:
    """A cluster the monitor cannot read now: its topics, groups and statuses are not known, and are not served as
    if they were (a status judged before is no status now, and "not found" would say the group is gone). 503 with
    why and since when, Burrow's error shape; None when the cluster answers (or is not one of the monitor's)."""
    alias = request.path_params["cluster"]
    snapshot = current.clusters.get(alias) if current is not None else None
    if current is None or snapshot is None or snapshot.up:
        return None
    last = current.last_success_ms.get(alias)
    since = (
        f"since {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(last / 1000))}.{last % 1000:03d}Z"
        if last is not None
        else "since the monitor started"
    )
    return burrow(
        request,
        f"cannot see cluster {alias} {since} ({snapshot.error}): its topics and consumer groups are not known now",
        503,
        cannot_see={"cluster": alias, "since_ms": last, "reason": snapshot.error},
    )


def sample_json(sample: OffsetSample | None) -> dict[str, int] | None:
    if sample is None:
        return None
    return {
        "offset": sample.offset,
        "timestamp": sample.observed_ms if sample.commit_ms is None else sample.commit_ms,  # Burrow's: the commit's
        "observedAt": sample.observed_ms,
        "lag": sample.lag,
    }


def partition_json(p: PartitionEvaluation) -> dict[str, Any]:
    return {
        "topic": p.topic,
        "partition": p.partition,
        "owner": "",
        "client_id": "",
        "status": p.status.name,
        "start": sample_json(p.start),
        "end": sample_json(p.end),
        "current_lag": p.current_lag,
        "complete": p.complete,
        "records_lost": p.records_lost,  # mirrorwatch's: unread records below the log start (ERR, rule 0)
    }


def group_status_json(cluster: str, group: str, evaluation: GroupEvaluation, *, only_bad: bool) -> dict[str, Any]:
    partitions = [p for p in evaluation.partitions if not only_bad or p.status >= Status.WARN]
    return {
        "cluster": cluster,
        "group": group,
        "status": evaluation.status.name,
        "complete": evaluation.complete,
        "partitions": [partition_json(p) for p in partitions],
        "partition_count": len(evaluation.partitions),
        "maxlag": partition_json(evaluation.max_lag) if evaluation.max_lag is not None else None,
        "totallag": evaluation.total_lag,
    }
