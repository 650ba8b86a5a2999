"""Tiny runs of the benchmarks, so the harness cannot rot (the figures themselves are not asserted).

The side-by-side benchmarks run one peer of each way a peer is started (a python engine, the spark engine's driver,
kcat, MirrorMaker 2), not every variant of it: the variants (python-1/-2, spark local or on one or two executors of a
standalone cluster, mm2 default or tuned) differ only in the settings their command line carries, checked without
running them (`test_every_peer_variant_has_the_command_it_stands_for`); a link on a standalone cluster's workers is
tests/mirror/test_spark_cluster.py's. The whole list ran 262 s of a 25-minute suite (issue #40); the benchmarks
themselves (`make bench`) run every peer."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import (
    binding_cost,
    canary_overhead,
    dr_cycle,
    evaluator_scale,
    exporter_scale,
    failover,
    latency,
    monitor_scale,
    throughput,
)
from bench.common import bench_topics
from kernel.config import MirrorwatchConfig, load_config
from localkafka.local import LocalClusters

pytestmark = pytest.mark.integration

CHECKOUT = Path(__file__).resolve().parents[2]


def run_bench(main: Callable[[list[str]], int], args: list[str], clusters: LocalClusters, tmp_path: Path) -> Any:
    """One benchmark on the session clusters, which must exit 0 and delete the topics it created there; what it
    wrote as JSON."""
    config = load_config(clusters.config_path)
    before = {alias: bench_topics(config, alias) for alias in config.clusters}
    out = tmp_path / "result.json"
    assert main([*args, "--clusters", str(clusters.state_dir), "--json", str(out)]) == 0
    assert {alias: bench_topics(config, alias) for alias in config.clusters} == before
    return json.loads(out.read_text())


def test_canary_overhead_smoke(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_bench(canary_overhead.main, ["--seconds", "3", "--interval", "1"], local_clusters, tmp_path)
    assert result["probes_sent"] >= 1 and result["cpu_seconds"] >= 0
    assert "| canary interval |" in capsys.readouterr().out


def test_exporter_scale_smoke(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_bench(exporter_scale.main, ["--groups", "20", "--scrapes", "2"], local_clusters, tmp_path)
    assert result["groups_collected"] == 20
    # every group-partition has its series in each style (20 groups x 12 partitions, 7 per-partition families)
    assert result["series_per_style"]["kafka_lag_exporter"] >= 20 * 12 * 3
    assert result["own_only"]["series"] < result["series"]
    assert "| rendered per collection (now) |" in capsys.readouterr().out


def test_monitor_scale_smoke_both_ways_list_every_group_in_every_scrape_once_ready(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Thousands of groups, so that a cluster's first collection and the rendering of its round take long enough to
    be seen: every scrape from the first one after /readyz said ready holds every group (issue #67)."""
    groups = 2_000
    argv = ["--groups", str(groups), "--rounds", "1", "--interval", "5"]  # a collection of them takes seconds
    results = run_bench(monitor_scale.main, argv, local_clusters, tmp_path)
    assert [(r["mode"], r["groups_listed"], r["rounds_measured"]) for r in results] == [
        ("admin_api", groups, 1),
        ("auto", groups, 1),
    ]
    assert [(r["scrapes_after_ready"] > 0, r["groups_after_ready_fewest"]) for r in results] == [(True, groups)] * 2
    assert all(0 < r["scrape_wire_bytes"] < r["scrape_bytes"] for r in results)  # scraped as Prometheus does: gzip
    assert "| groups | commits read by |" in capsys.readouterr().out


# The spark engine runs here in local mode: on a standalone cluster (two workers, their executors and the driver: six
# JVMs) it is the same engine and command line (`test_every_peer_variant_has_the_command_it_stands_for`), and a link
# on the cluster's workers is tests/mirror/test_spark_cluster.py's; here, beside two other workers' tests on 2 cores,
# the cluster once took over 150 s to copy 600 records (issue #69).
THROUGHPUT_PEERS = ("python-1", "python-2", "spark", "kcat", "mm2")
# The latency harness (its steady sender, its reader in a process of its own, the trickle that drains a peer's
# buffers) is the same for every peer, and each peer is started and stopped by throughput's peer_command and
# stop_peer, which the throughput smoke runs for MirrorMaker 2: here a python engine and a pipe (a JVM's start, ~20 s
# of a CPU-bound phase, proved nothing more)
LATENCY_PEERS = ("python-1", "kcat")


def test_every_peer_variant_has_the_command_it_stands_for(clusters_config: MirrorwatchConfig, tmp_path: Path) -> None:
    def command(peer: str) -> list[str]:
        return throughput.peer_command(
            peer, tmp_path, clusters_config, "bench.src", "bench.dst", spark_master="spark://127.0.0.1:7077"
        )

    def link(peer: str) -> dict[str, Any]:
        argv = command(peer)
        (document,) = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())["links"]
        return dict(document)

    assert set(throughput.PEERS) >= set(THROUGHPUT_PEERS) and set(latency.PEERS) >= set(LATENCY_PEERS)
    assert [link(p)["num_streams"] for p in ("python-1", "python-2")] == [1, 2]
    assert link("spark")["engine"] == "spark" and "master" not in link("spark")["spark"]
    for peer, cores in (("spark-standalone-1", "1"), ("spark-standalone-2", "2")):
        spark = link(peer)["spark"]
        assert (spark["master"], spark["conf"]["spark.cores.max"]) == ("spark://127.0.0.1:7077", cores)
    plain, tuned = (Path(command(p)[-1]).read_text() for p in ("mm2", "mm2-tuned"))
    assert "tasks.max = 2" in tuned and "tasks.max" not in plain
    assert command("kcat")[0] == "bash" and "kcat -P" in command("kcat")[-1]


# Five peers, a Spark driver and MirrorMaker 2 among them, started one after another (with a standalone cluster it ran
# 337 s on a quiet run, too near the suite's 360 s hang watchdog); the watchdog is for hangs.
@pytest.mark.timeout(600)
def test_throughput_smoke_each_way_of_running_a_peer_mirrors_and_verifies(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a peer stuck past 150 s fails the run with its own log (the default 900 s outlasts this test's timeout, which
    # said only "Timeout" when kcat once never delivered its records)
    argv = ["--records", "600", "--repeat", "1", "--peers", ",".join(THROUGHPUT_PEERS), "--peer-timeout", "150"]
    (case,) = run_bench(throughput.main, argv, local_clusters, tmp_path)
    assert [r["peer"] for r in case["runs"]] == list(THROUGHPUT_PEERS)
    assert {r["verified"] for r in case["runs"]} == {"ok"}
    # figures are not asserted (600 records take less CPU than /proc's 10 ms tick); only that each was measured
    assert all(r["records_per_second"] > 0 and r["peak_rss_mb"] > 0 for r in case["runs"])
    assert all(r["second_half_per_core"] > 0 for r in case["runs"])
    printed = capsys.readouterr().out
    assert "| peer | records/s |" in printed and "| per core, 2nd half |" in printed
    assert "  warm-up python-1: " in printed and printed.count(" (not counted)") == 1  # the first peer, once
    assert "records/s ratios (median): python-1 / mm2 = " in printed
    assert "per core, 2nd half ratios (median): python-1 / mm2 = " in printed


def test_throughput_against_a_commit_runs_its_engine_beside_this_one_in_both_orders(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--against REV`: an A/B of two engines in one run, the commit's tree beside this checkout's (here HEAD, written
    out by git archive), in both orders."""
    head = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()[:7]  # as checkout_at names the tree; --short may give more  # fmt: skip
    argv = ["--records", "300", "--repeat", "2", "--peers", "python-1", "--against", "HEAD"]
    (case,) = run_bench(throughput.main, argv, local_clusters, tmp_path)
    runs = [(r["peer"], r["verified"]) for r in case["runs"]]
    other = runs[1][0]
    assert other.startswith("python-1@") and other.endswith(f"/against-{head}")
    assert runs == [("python-1", "ok"), (other, "ok"), (other, "ok"), ("python-1", "ok")]
    assert f"python-1 / {other} = " in capsys.readouterr().out


@pytest.mark.usefixtures("gc_restored")  # binding_cost tunes the collector as the engine does
def test_binding_cost_smoke_every_variant_moves_every_record(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each variant consumes every record, and those that produce get every delivery reported (else SystemExit)."""
    runs = run_bench(binding_cost.main, ["--records", "500", "--repeat", "1"], local_clusters, tmp_path)
    assert [r["variant"] for r in runs] == list(binding_cost.VARIANTS)
    assert all(r["records"] == 500 and r["seconds"] > 0 for r in runs)
    assert "| +1 header, dr/record |" in capsys.readouterr().out


def test_evaluator_scale_smoke(local_clusters: LocalClusters, tmp_path: Path) -> None:
    argv = ["--group-partitions", "200", "--groups", "15", "--repeat", "1"]
    result = run_bench(evaluator_scale.main, argv, local_clusters, tmp_path)
    assert result["collection"]["groups_collected"] == 15 and result["evaluation"]["sweep_seconds"] > 0


def test_latency_smoke_a_python_peer_and_a_pipe_deliver_each_measured_record_once(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--rates", "200", "--seconds", "2", "--repeat", "1", "--peers", ",".join(LATENCY_PEERS)]
    runs = run_bench(latency.main, argv, local_clusters, tmp_path)
    assert [r["peer"] for r in runs] == list(LATENCY_PEERS)
    assert all(r["sent"] == 400 and r["received"] == 400 and r["duplicates"] == 0 for r in runs)
    assert all(0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"] for r in runs)
    printed = capsys.readouterr().out
    assert "| records/s | peer |" in printed and "python-1 / kcat at 200/s = " in printed


def test_failover_scale_smoke(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--bench", "scale", "--groups", "5", "--partitions", "2", "--records", "400"]
    result = run_bench(failover.main, args, local_clusters, tmp_path)
    assert result["groups"] == 5 and result["translations"] == 10 and result["records_scanned"] == 400
    assert [r["new_records"] for r in result["standby_rounds"]] == [0, 40]
    assert "| failover plan | 5 groups x 2 partitions |" in capsys.readouterr().out


def test_dr_cycle_smoke_mirrorwatch_goes_round_the_cycle(
    local_clusters: LocalClusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mirrorwatch's side of B12 (MirrorMaker 2's runs in `make bench`): the figures are the drill's
    (tests/failover/test_cycle.py), here only that the harness goes round and counts a tail."""
    (result,) = run_bench(
        dr_cycle.main, ["--tools", "mirrorwatch", "--records", "600", "--quiet-seconds", "3"], local_clusters, tmp_path
    )
    assert result["tool"] == "mirrorwatch" and result["tail"] > 0 and result["listed"] == result["tail"]
    assert "| mirrorwatch | 0 / 0 |" in capsys.readouterr().out
