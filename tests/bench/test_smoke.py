"""Tiny runs of the benchmarks, so the harness cannot rot (the figures themselves are not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import canary_overhead
from mirrorwatch.local import LocalClusters

pytestmark = pytest.mark.integration


def test_canary_overhead_smoke(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    argv = ["--seconds", "3", "--interval", "1", "--clusters", str(local_clusters.state_dir), "--json", str(out)]
    assert canary_overhead.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["probes_sent"] >= 1 and result["cpu_seconds"] >= 0
    assert "| canary interval |" in capsys.readouterr().out
