"""The mirrorwatch ops console: a Streamlit app that reads the HTTP API (never Kafka), and with `--prometheus URL`
Prometheus too: the Overview's charts over a span you choose (range queries) and the Alerts page's firing alerts.

    mirrorwatch console --config F [--prometheus URL]
    (or: streamlit run dashboards/console.py -- --api http://host:8000 [--prometheus URL])

Pages: Overview (each link's health and since when, its paused partitions, replication lag, in-flight, throughput,
canary latency and last probe, charts of lag and throughput over the monitor's history), Consumer groups (every group
from one request, sorted by status, lag or lag growth, with a filter; drill-down to partitions, their offset window and
the group's lag over time), Events (what changed, newest first, filtered by link, group or cluster), Canary (latency
over time per partition, loss and duplicates), Topics (source vs target partition counts, the drift report), Failover
(per standby group of each link with a checkpoint: section: ready or not and why, what a failover now would read twice
or not find, the translated offsets).
The page body is a fragment re-run every few seconds, so it refreshes without reloading the page.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pandas as pd
import streamlit as st

from dashboards.health import canary_of, lag_seconds, link_health, seconds, worst
from dashboards.prometheus import SPANS, Prometheus, PrometheusUnreachable
from dashboards.shards import ShardedApi
from kernel.byte_rate import format_byte_rate

DEFAULT_API = "http://127.0.0.1:8000"
# each alert's runbook (docs/runbooks/<alert>.md, at the rules' runbook_base_url), a link in the alerts' tables
RUNBOOK_COLUMN = {"runbook": st.column_config.LinkColumn("runbook", display_text="runbook")}
PAGES = ("Overview", "Consumer groups", "Events", "Alerts", "Canary", "Topics", "Failover")
DEFAULT_SPAN = "15 min"  # with --prometheus: what an operator opening the console in an incident wants first
SORTS = {  # how the groups table is ordered: worst status first, most lag first, fastest-growing lag first
    "status (worst first)": "_rank",
    "total lag": "total lag",
    "lag growth": "lag change / min",
}
PICKED_GROUP = "groups-picked"  # session state: the group whose partitions the groups page shows
STATUS_RANK = {"ERR": 0, "WARN": 1, "NOTFOUND": 2, "OK": 3}
# a group's status in the table: its word, in colour (no emoji: a browser without an emoji font shows empty boxes)
STATUS_COLOURS = {"OK": "green", "WARN": "orange", "ERR": "red", "STOP": "red", "STALL": "red", "REWIND": "red"}


class Unreachable(Exception):
    """The monitor's HTTP API did not answer."""


class Api:
    """The monitor's HTTP API; with `user` (the password from MIRRORWATCH_API_PASSWORD) and `ca_file` for an API
    behind basic auth and TLS (`http.web_config_file`)."""

    def __init__(self, base: str, timeout_s: float = 5.0, user: str | None = None, ca_file: str | None = None) -> None:
        self.base = base.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {}
        if user:
            pair = f"{user}:{os.environ.get('MIRRORWATCH_API_PASSWORD', '')}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        self._context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def get(self, path: str) -> Any | None:
        """The JSON at `path`; None for 404 and 503 (not there, or not collected yet)."""
        request = urllib.request.Request(self.base + path, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._context) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 503):
                return None
            if exc.code == 401:
                raise Unreachable(
                    f"the monitor at {self.base} wants other credentials (--api-user, MIRRORWATCH_API_PASSWORD)"
                ) from None
            raise Unreachable(f"the monitor at {self.base} answered {exc.code} for {path}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"monitor unreachable at {self.base} ({reason})") from None


MonitorApi = Api | ShardedApi  # one monitor, or the shards of a fleet read as one


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="console")
    parser.add_argument("--api", default=os.environ.get("MIRRORWATCH_API", DEFAULT_API))
    parser.add_argument("--prometheus", default=os.environ.get("MIRRORWATCH_PROMETHEUS") or None)
    parser.add_argument("--api-user", default=os.environ.get("MIRRORWATCH_API_USER") or None)
    parser.add_argument("--api-ca-file", default=os.environ.get("MIRRORWATCH_API_CA_FILE") or None)
    args, _unknown = parser.parse_known_args(argv)
    return args


def api_client(argv: list[str]) -> MonitorApi:
    """The monitor's API; several, comma-separated (the shards of a fleet, `monitor.shard`), read as one."""
    args = _arguments(argv)
    apis = [Api(url.strip(), user=args.api_user, ca_file=args.api_ca_file) for url in str(args.api).split(",")]
    return apis[0] if len(apis) == 1 else ShardedApi(apis, Unreachable)


def prometheus_base(argv: list[str]) -> str | None:
    """Where the console reads long ranges and firing alerts (--prometheus URL); None: the monitor's own."""
    url = _arguments(argv).prometheus
    return None if not url else str(url)


def refresh_seconds() -> float:
    return float(os.environ.get("MIRRORWATCH_CONSOLE_REFRESH", "5"))


# -- pages ------------------------------------------------------------------------------------------------------------


def overview(api: MonitorApi, prometheus: Prometheus | None = None, span: str = DEFAULT_SPAN) -> None:
    document = api.get("/mirror/links")
    links = (document or {}).get("links", [])
    if not links:
        st.info("No mirror links yet: the monitor has not collected, or the config has no links.")
        return
    canary = api.get("/canary")
    for link in links:
        name = link["link"]
        history = (api.get(f"/mirror/history/links/{_q(name)}") or {}).get("series", {})
        rate = _last(history.get("records_out_per_second"))  # the monitor's newest figure, not a range's
        charted, source = history, "the monitor's history"
        if prometheus is not None:
            try:
                charted = prometheus.link_history(name, SPANS[span], time.time())
                source = f"Prometheus, last {span}"
            except PrometheusUnreachable as exc:
                st.warning(f"{exc}: charts from the monitor's history")
        in_flight = sum(p.get("in_flight_records") or 0 for p in link["partitions"])
        st.subheader(f"{name}: {link['source']} → {link['target']}")
        st.caption(
            f"{link_health(link)} {since(api, name)} · consumer group {link['consumer_group']} · "
            f"workers {link.get('workers', 0)}{budget_said(link)}"
        )
        if link.get("failure"):
            st.error(link["failure"])
        paused = [f"{p['topic']}[{p['partition']}]" for p in link["partitions"] if p.get("paused")]
        if paused and link.get("state") != "paused":
            st.warning(f"paused by an operator: {', '.join(paused)}: they copy nothing, their lag grows")
        for gap in link.get("gaps") or []:  # records the link will never copy: said until they are out of the ledger
            st.error(gap["text"])
        if link.get("reason"):  # a figure the monitor does not know, and why
            st.info(link["reason"])
        records = link.get("replication_lag_records")
        cols = st.columns(5)
        cols[0].metric("Replication lag (records)", "n/a" if records is None else f"{records:,}")
        cols[1].metric("Replication lag (seconds)", lag_seconds(link))
        cols[2].metric("In flight", f"{in_flight:,}")
        cols[3].metric("Throughput", "n/a" if rate is None else f"{max(rate, 0):,.0f} rec/s")
        probes = canary_of(canary, name)
        if probes is None:
            cols[4].metric("Canary", "no canary")
        else:
            p99 = worst([p["e2e_latency"]["p99_seconds"] for p in probes["partitions"]])
            last = probes.get("last_received_ns")
            age = None if last is None else max(0.0, time.time() - last / 1e9)
            cols[4].metric(
                "Canary p99 / last probe",
                seconds(p99),
                delta="ABSENT" if probes["absent"] else f"{seconds(age)} ago",
                delta_color="inverse" if probes["absent"] else "off",
            )
        history_charts(charted, source)


def budget_said(link: dict[str, Any]) -> str:
    """The link's bandwidth budget in force and how long it has held the link's workers back (issue #44)."""
    budget = link.get("budget_bytes_per_second")
    if not budget:
        return ""
    held = float(link.get("budget_throttled_seconds_total") or 0)
    return f" · bandwidth budget {format_byte_rate(int(budget))} (held the workers back {seconds(held)} in all)"


def _last(points: list[list[float]] | None) -> float | None:
    return points[-1][1] if points else None


def since(api: MonitorApi, link: str) -> str:
    """How long the link has been in its state: from its newest state change among the monitor's events."""
    events = (api.get(f"/mirror/events?link={_q(link)}&limit=200") or {}).get("events", [])
    change = next((e for e in events if e["kind"] == "link"), None)
    if change is None:
        return "(since the monitor started)"
    return f"for {seconds(max(0.0, time.time() - change['at_ms'] / 1000))} (was {change['before']})"


def history_charts(history: dict[str, list[list[float]]], source: str = "the monitor's history") -> None:
    """Lag (records, seconds), throughput (records/s in and out) and, when there is one, the canary's p99 latency,
    over the monitor's history or a range read from Prometheus (`source` says which)."""
    if not any(history.values()):
        st.caption(f"No history yet in {source} (the monitor keeps monitor.history_seconds of its rounds).")
        return

    def frame(names: dict[str, str]) -> pd.DataFrame:
        return pd.DataFrame(
            {
                label: pd.Series({pd.to_datetime(t, unit="ms"): v for t, v in history.get(name, [])}, dtype=float)
                for name, label in names.items()
            }
        )

    charts = [
        ("lag (records)", {"replication_lag_records": "lag (records)"}),
        ("lag (seconds)", {"replication_lag_seconds": "lag (seconds)"}),
        ("throughput (records/s)", {"records_in_per_second": "in (rec/s)", "records_out_per_second": "out (rec/s)"}),
    ]
    if history.get("canary_e2e_latency_p99_seconds"):
        charts.append(("canary p99 latency (seconds)", {"canary_e2e_latency_p99_seconds": "canary p99 (s)"}))
    for column, (title, names) in zip(st.columns(len(charts)), charts, strict=True):
        column.caption(f"{title}, UTC · {source}")
        column.line_chart(frame(names), height=160)


def consumer_groups(api: MonitorApi) -> None:
    document = api.get("/mirror/groups") or {}
    groups = document.get("groups", [])
    if not groups:
        st.info("No consumer groups found yet (the monitor has not collected, or no group has committed).")
        return
    rows = [
        {
            "cluster": g["cluster"],
            "group": g["group"],
            "status": g["status"],
            "total lag": g["total_lag"],
            "lag change / min": g["lag_change_per_minute"],
            "worst lag": seconds(g["max_lag_seconds"]),
            "members": g["members"],
            "complete": g["complete"],
            "partitions": g["partitions"],
            "_rank": STATUS_RANK.get(g["status"], 2),
        }
        for g in groups
    ]
    cols = st.columns(2)
    wanted = cols[0].text_input("Filter groups", placeholder="part of a group name")
    column = SORTS[cols[1].selectbox("Sort by", list(SORTS))]
    table = pd.DataFrame([r for r in rows if wanted.lower() in r["group"].lower()])
    if table.empty:
        st.info("No group matches the filter.")
        return
    ascending = column == "_rank"  # the worst status has the lowest rank; lag and growth: largest first
    table = table.sort_values([column, "group"], ascending=[ascending, True], na_position="last")
    st.caption(f"lag change: records per minute over the last {document.get('trend_seconds', 300):g} s")
    styled = table.drop(columns=["_rank"]).style.map(
        lambda status: f"color: {STATUS_COLOURS.get(status, 'gray')}; font-weight: bold", subset=["status"]
    )
    st.dataframe(styled, hide_index=True, width="stretch")
    shown = table.to_dict("records")
    # the group picked stays picked while the table's order changes under it (a refresh, a group going WARN, a new
    # group): a selectbox whose options change starts over at its first one
    labels = [f"{r['cluster']} / {r['group']}" for r in shown]
    picked = st.session_state.get(PICKED_GROUP)
    choice = st.selectbox("Partitions of", labels, index=labels.index(picked) if picked in labels else 0)
    st.session_state[PICKED_GROUP] = choice
    row = shown[labels.index(choice)]
    status = (api.get(f"/v3/kafka/{_q(row['cluster'])}/consumer/{_q(row['group'])}/lag") or {}).get("status")
    if status is None:
        st.info("That group is gone.")
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "topic": p["topic"],
                    "partition": p["partition"],
                    "status": p["status"],
                    "current lag": p["current_lag"],
                    "start offset": (p.get("start") or {}).get("offset"),
                    "end offset": (p.get("end") or {}).get("offset"),
                    "complete": p["complete"],
                }
                for p in status["partitions"]
            ]
        ),
        hide_index=True,
        width="stretch",
    )
    detail = api.get(f"/v3/kafka/{_q(row['cluster'])}/consumer/{_q(row['group'])}") or {}
    points = []
    for topic, partitions in detail.get("topics", {}).items():
        for partition, window in enumerate(partitions):
            for sample in window.get("offsets") or []:
                if sample:
                    points.append(
                        {
                            "time": pd.to_datetime(sample["timestamp"], unit="ms"),
                            "partition": f"{topic}[{partition}]",
                            "lag": sample["lag"],
                        }
                    )
    if points:
        st.caption("Offset window: lag at each observed commit")
        frame = pd.DataFrame(points).pivot_table(index="time", columns="partition", values="lag", aggfunc="last")
        st.line_chart(frame)
    path = f"/mirror/history/groups/{_q(row['cluster'])}/{_q(row['group'])}"
    total = (api.get(path) or {}).get("series", {}).get("total_lag", [])
    if total:
        st.caption("Total lag over the monitor's history")
        st.line_chart(pd.DataFrame({"total lag": {pd.to_datetime(t, unit="ms"): v for t, v in total}}), height=200)


def events_page(api: MonitorApi) -> None:
    cols = st.columns(3)
    filters = {
        "link": cols[0].text_input("Link", placeholder="a link's name"),
        "group": cols[1].text_input("Group", placeholder="a group id"),
        "cluster": cols[2].text_input("Cluster", placeholder="a cluster alias"),
    }
    query = urllib.parse.urlencode({k: v.strip() for k, v in filters.items() if v.strip()} | {"limit": 500})
    events = (api.get(f"/mirror/events?{query}") or {}).get("events", [])
    if not events:
        st.info("No events: nothing has changed since the monitor started (or nothing matches the filter).")
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "time": pd.to_datetime(e["at_ms"], unit="ms"),
                    "what": e["kind"],
                    "about": e["subject"],
                    "cluster": e["cluster"],
                    "event": e["text"],
                }
                for e in events
            ]
        ),
        hide_index=True,
        width="stretch",
    )


def prometheus_alerts(prometheus: Prometheus) -> None:
    """What Prometheus has firing (and pending), from whatever rules it runs: the reference when there is one."""
    alerts = prometheus.alerts()
    st.caption(f"Alerts of Prometheus at {prometheus.base} (its rules, e.g. alerts/mirrorwatch.rules.yml).")
    firing = [a for a in alerts if a.get("state") == "firing"]
    pending = [a for a in alerts if a.get("state") == "pending"]
    if not firing:
        st.success("No alert is firing in Prometheus.")
    else:
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "alert": a["labels"].get("alertname", ""),
                        "on": ", ".join(
                            f"{k}={v}" for k, v in sorted(a["labels"].items()) if k not in ("alertname", "severity")
                        ),
                        "severity": a["labels"].get("severity", ""),
                        "since": a.get("activeAt", ""),
                        "summary": a.get("annotations", {}).get("summary", ""),
                        "runbook": a.get("annotations", {}).get("runbook_url", ""),
                    }
                    for a in firing
                ]
            ),
            hide_index=True,
            width="stretch",
            column_config=RUNBOOK_COLUMN,
        )
    if pending:
        st.caption("pending (waiting out their `for`): " + ", ".join(a["labels"].get("alertname", "") for a in pending))


def alerts_page(api: MonitorApi, prometheus: Prometheus | None = None) -> None:
    if prometheus is not None:
        try:
            prometheus_alerts(prometheus)
            return
        except PrometheusUnreachable as exc:
            st.warning(f"{exc}: the monitor's own judgement instead")
    document = api.get("/mirror/alerts")
    if document is None:
        st.info("This monitor does not evaluate alerts.")
        return
    st.caption(
        f"Evaluated by {document['evaluated_by']}. With Prometheus, its own alerts "
        "(alerts/mirrorwatch.rules.yml) are the reference."
    )
    firing = document["alerts"]
    if not firing:
        st.success("No alert is firing.")
    else:
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "alert": a["alert"],
                        "on": ", ".join(f"{k}={v}" for k, v in sorted(a["labels"].items())),
                        "severity": a["severity"],
                        "since": pd.to_datetime(a["since_ms"], unit="ms"),
                        "summary": a["summary"],
                        "runbook": a.get("runbook_url", ""),
                    }
                    for a in firing
                ]
            ),
            hide_index=True,
            width="stretch",
            column_config=RUNBOOK_COLUMN,
        )
    st.caption("not judged here (Prometheus only): " + ", ".join(document["not_judged"]))


def canary_page(api: MonitorApi) -> None:
    canary = api.get("/canary")
    if canary is None:
        st.info("No canary is running (mirrorwatch run starts one; or run mirrorwatch canary).")
        return
    st.caption(
        f"Probe topic {canary['topic']} · every {canary['interval_seconds']:g} s · SLA {canary['sla_seconds']:g} s "
        f"· instance {canary['instance'][:8]}"
    )
    for link in canary["links"]:
        st.subheader(f"{link['link']}{' — ABSENT' if link['absent'] else ''}")
        cols = st.columns(5)
        for col, key in zip(cols, ("received", "lost", "late", "duplicated", "reordered"), strict=True):
            col.metric(key.capitalize(), link[f"{key}_total"])
        recent = link.get("recent") or []
        if recent:
            frame = pd.DataFrame(
                {
                    "time": [pd.to_datetime(r["received_ns"], unit="ns") for r in recent],
                    "partition": [str(r["partition"]) for r in recent],
                    "e2e seconds": [r["e2e_seconds"] for r in recent],
                }
            ).pivot_table(index="time", columns="partition", values="e2e seconds", aggfunc="last")
            st.line_chart(frame, y_label="end-to-end latency (s)")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "partition": p["partition"],
                        "sent": p["sent"],
                        "received": p["received"],
                        "lost": p["lost"],
                        "late": p["late"],
                        "duplicated": p["duplicated"],
                        "reordered": p["reordered"],
                        "p50": seconds(p["e2e_latency"]["p50_seconds"]),
                        "p99": seconds(p["e2e_latency"]["p99_seconds"]),
                        "last": seconds(p["last_e2e_seconds"]),
                    }
                    for p in link["partitions"]
                ]
            ),
            hide_index=True,
            width="stretch",
        )


def topics(api: MonitorApi) -> None:
    links = (api.get("/mirror/links") or {}).get("links", [])
    if not links:
        st.info("No mirror links yet.")
        return
    for link in links:
        st.subheader(f"{link['link']}: {link['source']} → {link['target']}")
        pairs = sorted({(p["topic"], p["target_topic"]) for p in link["partitions"]})
        rows = []
        for source_topic, target_topic in pairs:
            source = api.get(f"/v3/kafka/{_q(link['source'])}/topic/{_q(source_topic)}") or {}
            target = api.get(f"/v3/kafka/{_q(link['target'])}/topic/{_q(target_topic)}") or {}
            s_count, t_count = len(source.get("offsets", [])), len(target.get("offsets", []))
            same = "✅" if s_count == t_count else "❌"
            rows.append({"source topic": source_topic, "target topic": target_topic, "source partitions": s_count,
                         "target partitions": t_count or None, "same": same})  # fmt: skip
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        report = api.get(f"/mirror/links/{_q(link['link'])}/drift") or {}
        found, ago = report.get("differences") or [], seconds(time.time() - (report.get("at_ms") or 0) / 1000)
        if report.get("count") is None:
            st.caption(report.get("reason") or "No drift report.")
        elif not found:
            st.caption(f"In step at the last topic refresh, {ago} ago (ACLs {report['acls']}).")
        else:
            st.warning(f"{report['count']} difference(s) at the last topic refresh, {ago} ago (ACLs {report['acls']})")
            rows = [{**d, "synced": "✅ by that round" if d["synced"] else "left"} for d in found]
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def failover_page(api: MonitorApi) -> None:
    links = (api.get("/mirror/links") or {}).get("links", [])
    views = [v for v in (api.get(f"/mirror/links/{_q(link['link'])}/checkpoints") for link in links) if v is not None]
    if not views:
        st.info(
            "No link keeps standby groups: give a link a checkpoint: section (groups, interval_seconds, "
            "sync_group_offsets) to have its consumer groups translated to the target and kept ready."
        )
        return
    for view in views:
        ready = sum(1 for g in view["groups"] if g["ready"])
        st.subheader(f"{view['link']}: {ready} of {len(view['groups'])} standby group(s) ready")
        age = None if not view["updated_ms"] else max(0.0, time.time() - view["updated_ms"] / 1000)
        stale = age is None or age > 3 * view["interval_s"]
        mode = (
            "target groups kept at the translation" if view["sync"] else "translated only (apply with failover apply)"
        )
        st.caption(f"checkpoint {seconds(age)} old · every {view['interval_s']:g} s · {mode}")
        if view["error"]:
            st.error(f"the last checkpoint round failed: {view['error']}")
        elif stale:
            st.warning("checkpoints are stale: no good round for three intervals")
        if not view["groups"]:
            st.caption("No source group matches checkpoint.groups yet.")
            continue
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "group": g["group"],
                        "ready": "✅" if g["ready"] else "❌",
                        "why not": g["why"],
                        "read twice": "?" if g["read_twice"] is None else g["read_twice"],
                        "not mirrored yet": g["not_mirrored"],
                        "target group": f"{g['target_state']} ({g['target_members']} members)",
                        "offsets": ", ".join(
                            f"{t['topic']}[{t['partition']}]@{t['offset']} {t['method']}" for t in g["translations"]
                        ),
                    }
                    for g in view["groups"]
                ]
            ),
            hide_index=True,
            width="stretch",
        )


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


RENDER = {
    "Overview": overview,
    "Consumer groups": consumer_groups,
    "Events": events_page,
    "Alerts": alerts_page,
    "Canary": canary_page,
    "Topics": topics,
    "Failover": failover_page,
}


def main() -> None:
    st.set_page_config(page_title="mirrorwatch", page_icon="🪞", layout="wide")
    api = api_client(sys.argv[1:])
    url = prometheus_base(sys.argv[1:])
    prometheus = Prometheus(url) if url else None
    page = st.sidebar.radio("Page", PAGES)
    st.sidebar.caption(f"API: {api.base} · refresh every {refresh_seconds():g} s")
    render = dict(RENDER)
    if prometheus is not None:
        span = st.sidebar.selectbox("Charts over", list(SPANS), index=list(SPANS).index(DEFAULT_SPAN))
        st.sidebar.caption(f"Prometheus: {prometheus.base} (charts and alerts)")
        render["Overview"] = functools.partial(overview, prometheus=prometheus, span=span)
        render["Alerts"] = functools.partial(alerts_page, prometheus=prometheus)
    st.title(f"mirrorwatch · {page}")

    @st.fragment(run_every=refresh_seconds())
    def body() -> None:
        try:
            render[page](api)
        except Unreachable as exc:
            st.error(str(exc))
        for missing in getattr(api, "unreachable", []):  # a shard of a fleet: the others still show
            st.warning(f"{missing}: what it watches is missing from this page")

    body()


main()
