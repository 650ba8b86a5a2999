"""Tiny runs of the benchmarks, so the harness cannot rot (the figures themselves are not asserted)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from bench import canary_overhead, evaluator_scale, latency, throughput
from bench.common import EventBodies, percentile
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


def test_throughput_smoke_every_peer_mirrors_and_verifies(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs.json"
    argv = ["--records", "600", "--repeat", "1", "--clusters", str(local_clusters.state_dir), "--json", str(out)]
    assert throughput.main(argv) == 0
    (case,) = json.loads(out.read_text())
    assert [r["peer"] for r in case["runs"]] == list(throughput.PEERS)
    assert {r["verified"] for r in case["runs"]} == {"ok"}
    # figures are not asserted (600 records take less CPU than /proc's 10 ms tick); only that each was measured
    assert all(r["records_per_second"] > 0 and r["peak_rss_mb"] > 0 for r in case["runs"])
    printed = capsys.readouterr().out
    assert "| peer | records/s |" in printed and "python-1 / kcat = " in printed


def test_evaluator_scale_smoke(local_clusters: LocalClusters, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    argv = ["--group-partitions", "200", "--groups", "15", "--repeat", "1"]
    assert evaluator_scale.main([*argv, "--clusters", str(local_clusters.state_dir), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["collection"]["groups_collected"] == 15 and result["evaluation"]["sweep_seconds"] > 0


def test_latency_smoke_every_peer_delivers_each_measured_record_once(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "latency.json"
    argv = ["--rates", "200", "--seconds", "2", "--repeat", "1", "--clusters", str(local_clusters.state_dir)]
    assert latency.main([*argv, "--json", str(out)]) == 0
    runs = json.loads(out.read_text())
    assert [r["peer"] for r in runs] == list(latency.PEERS)
    assert all(r["sent"] == 400 and r["received"] == 400 and r["duplicates"] == 0 for r in runs)
    assert all(0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"] for r in runs)
    printed = capsys.readouterr().out
    assert "| records/s | peer |" in printed and "python-1 / mm2 at 200/s = " in printed


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 1001)]  # 1..1000
    assert percentile(values, 50) == 500.0
    assert percentile(values, 99) == 990.0
    assert percentile(values, 99.9) == 999.0
    assert percentile(values, 100) == 1000.0
    assert percentile([7.0], 99.9) == 7.0
    assert percentile([], 50) != percentile([], 50)  # nan


def test_a_measured_value_carries_its_sequence_and_send_time() -> None:
    value = latency.measured_value(42, 1_700_000_000_123_456_789, 1024)
    assert len(value) == 1024
    assert latency.parse_measured(value) == (42, 1_700_000_000_123_456_789)
    assert latency.parse_measured(b"W") is None


def test_event_bodies_are_sized_deterministic_and_compress_like_events() -> None:
    bodies, again = EventBodies(seed=3), EventBodies(seed=3)
    assert [len(bodies.body(seq, 1011)) for seq in range(50)] == [1011] * 50
    assert bodies.body(17, 87) == again.body(17, 87)
    assert bodies.body(1, 1011) != bodies.body(2, 1011)
    # what a source batch of one partition holds: neither one repeated byte (~60x) nor incompressible noise (1x)
    batch = b"".join(bodies.body(seq, 1011) for seq in range(0, 12_000, 12))
    assert 1.5 < len(batch) / len(zlib.compress(batch, 1)) < 6
    with pytest.raises(ValueError, match="larger than the pool"):
        bodies.body(0, 2 * EventBodies.POOL_BYTES)
