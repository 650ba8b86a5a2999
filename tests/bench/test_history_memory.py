"""B9 runs without a cluster: a small fleet, and its figures add up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import history_memory


def test_the_history_memory_bench_measures_a_full_ring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b9.json"
    argv = ["--links", "3", "--groups", "50", "--span-seconds", "60", "--interval-seconds", "10", "--json", str(out)]
    assert history_memory.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["rounds"] == 7 and result["series"] == 3 * 9 + 50 * 2 + 2  # links, groups, clusters
    assert result["arrays_mb"] == pytest.approx(7 * (8 + 4 * result["series"]) / 1e6)
    assert result["allocated_mb"] >= result["arrays_mb"] > 0
    assert "| 3 | 50 | 60 s at 10 s | 7 |" in capsys.readouterr().out
