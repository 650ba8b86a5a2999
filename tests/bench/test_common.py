"""The benchmarks' pure helpers: percentiles, payloads, measured values, peer names (no clusters)."""

from __future__ import annotations

import argparse
import subprocess
import zlib
from pathlib import Path

import pytest

from bench import latency
from bench.common import (
    EventBodies,
    checkout_at,
    checkout_of,
    chosen_peers,
    engine_file,
    in_turn,
    peer_kind,
    percentile,
    topic_label,
)

CHECKOUT = Path(__file__).resolve().parents[2]


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
    assert len(zlib.compress(value, 1)) > len(value) / 6  # an event body after the header, not one repeated byte
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


def test_peers_may_name_another_checkout_of_mirrorwatch(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    peers = ("python-1", "python-2", "spark", "kcat")

    def chosen(value: str) -> list[str]:
        return chosen_peers(parser, argparse.Namespace(peers=value), peers)

    assert chosen(f"python-1,python-1@{CHECKOUT}") == ["python-1", f"python-1@{CHECKOUT}"]
    assert peer_kind(f"python-2@{CHECKOUT}") == "python-2" and checkout_of("python-2") is None
    assert checkout_of(f"spark@{tmp_path}/x/..") == tmp_path.resolve()
    assert topic_label("python-1@/tmp/old engine") == "python-1-tmp-old-engine"
    broken = tmp_path / "broken"  # a checkout whose engine does not import
    for module in ("mirror/__init__.py", "mirrorwatch/cli.py"):
        (broken / module).parent.mkdir(parents=True, exist_ok=True)
        (broken / module).write_text("raise ImportError('half a checkout')\n" if module.startswith("mirror/") else "")
    for bad in ("python-3,nope", f"kcat@{CHECKOUT}", f"python-1@{tmp_path}", f"python-1@{broken}"):
        with pytest.raises(SystemExit) as exited:
            chosen(bad)
        assert exited.value.code == 2


def test_a_peer_of_another_checkout_runs_that_checkout_even_from_this_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m` puts the working directory first on sys.path: run from this checkout (as the benchmarks are), an
    A/B would silently compare this engine with itself."""
    other = tmp_path / "old"
    for module in ("mirror/__init__.py", "mirror/engine.py", "mirrorwatch/__init__.py", "mirrorwatch/cli.py"):
        (other / module).parent.mkdir(parents=True, exist_ok=True)
        (other / module).write_text("")
    monkeypatch.chdir(CHECKOUT)
    assert engine_file(None) == CHECKOUT / "mirror" / "engine.py"
    assert engine_file(other) == other.resolve() / "mirror" / "engine.py"
    parser = argparse.ArgumentParser()
    assert chosen_peers(parser, argparse.Namespace(peers=f"python-1@{other}"), ("python-1",)) == [f"python-1@{other}"]


def test_peers_take_turns_in_both_orders() -> None:
    assert [in_turn(["a", "b", "c"], repeat) for repeat in range(3)] == [
        ["a", "b", "c"],
        ["c", "b", "a"],
        ["a", "b", "c"],
    ]


def test_against_writes_out_a_commits_tree_and_refuses_a_name_git_does_not_know(tmp_path: Path) -> None:
    tree = checkout_at("HEAD", tmp_path)
    committed = subprocess.run(["git", "-C", str(CHECKOUT), "show", "HEAD:mirror/engine.py"], capture_output=True,
                               check=True).stdout  # fmt: skip
    assert (tree / "mirror" / "engine.py").read_bytes() == committed  # the commit's file, not the work tree's
    with pytest.raises(SystemExit, match="not a commit"):
        checkout_at("no-such-revision-anywhere", tmp_path)
