"""The Grafana dashboards: committed JSON = rebuilt JSON, the SDK's model reads every byte back, every metric a
panel queries is one the exporters serve, and the variables the queries use are defined."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from canary.exporter import CANARY_METRIC_NAMES
from dashboards.grafana import build_all
from failover.exporter import FAILOVER_METRIC_NAMES
from monitor.exporter import METRIC_NAMES

COMMITTED = Path(__file__).resolve().parents[2] / "dashboards" / "grafana"
BUILT = build_all()


def exprs(document: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in document["panels"] for t in p.get("targets", [])]


def test_the_committed_dashboards_are_the_built_ones() -> None:
    assert sorted(p.name for p in COMMITTED.glob("*.json")) == sorted(BUILT)
    for name, text in BUILT.items():
        assert (COMMITTED / name).read_text() == text, f"{name}: run `mirrorwatch dashboards build`"


@pytest.mark.parametrize("name", sorted(BUILT))
def test_each_dashboard_round_trips_through_the_sdk_model(name: str) -> None:
    document = json.loads(BUILT[name])
    again = json.loads(json.dumps(Dashboard.from_json(document), cls=JSONEncoder))
    assert again == document


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_metric_a_panel_queries_is_exported(name: str) -> None:
    exported = set(METRIC_NAMES) | set(CANARY_METRIC_NAMES) | set(FAILOVER_METRIC_NAMES)
    document = json.loads(BUILT[name])
    queried = set()
    for expr in exprs(document):
        queried |= {
            re.sub(r"_bucket$", "", m) for m in re.findall(r"\b((?:kafka|burrow|mirrorwatch)_[a-z0-9_]+)", expr)
        }
    for variable in document["templating"]["list"]:
        if variable["type"] == "query":
            queried |= set(re.findall(r"\b((?:kafka|burrow|mirrorwatch)_[a-z0-9_]+)", variable["query"]))
    assert queried, name
    assert queried <= exported, f"{name} queries metrics nobody exports: {sorted(queried - exported)}"


@pytest.mark.parametrize("name", sorted(BUILT))
def test_panels_have_unique_ids_and_ref_ids_and_use_only_defined_variables(name: str) -> None:
    document = json.loads(BUILT[name])
    ids = [p["id"] for p in document["panels"]]
    assert len(ids) == len(set(ids)) and 0 not in ids
    defined = {v["name"] for v in document["templating"]["list"]} | {"__rate_interval", "__range"}
    assert "datasource" in defined and len(defined) >= 4  # data source + a link, cluster or group variable
    for panel in document["panels"]:
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)) and all(refs)
        assert panel.get("type") != "graph" and panel.get("type") != "singlestat"  # no deprecated Angular panels
    for expr in exprs(document):
        assert set(re.findall(r"\$(\w+)", expr)) <= defined, expr


def test_cli_writes_the_dashboards(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", "dashboards", "build", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert {p.name: p.read_text() for p in tmp_path.glob("*.json")} == BUILT
