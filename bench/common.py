"""What every benchmark needs: the two local clusters, CPU and memory of a process tree from /proc, medians and
markdown tables. Every process a benchmark starts is stopped by it."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mirrorwatch.config import MirrorwatchConfig, load_config
from mirrorwatch.local import LocalClusters, stop_process

__all__ = [
    "ProcessTree",
    "clusters_for",
    "exit_on_sigterm",
    "markdown_table",
    "median",
    "percentile",
    "stop_peer",
    "stop_process",
]

TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@contextlib.contextmanager
def clusters_for(existing: Path | None, work: Path) -> Iterator[MirrorwatchConfig]:
    """Clusters already up (`--clusters DIR`) or two started here and stopped at the end."""
    clusters = LocalClusters(existing or work / "clusters", progress=lambda _line: None)
    if existing is None:
        clusters.up(tie_to_parent=True)
    try:
        yield load_config(clusters.config_path)
    finally:
        if existing is None:
            clusters.down()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


@dataclass
class ProcessTree:
    """CPU seconds and peak resident memory of a process and all its descendants, sampled from /proc."""

    root: int
    cpu_ticks: dict[int, int] = field(default_factory=dict)  # per pid, the latest (cumulative) user+system ticks
    peak_rss_kb: int = 0

    def sample(self) -> None:
        tree, pids, rss = _children(), [self.root], 0
        seen: list[int] = []
        while pids:
            pid = pids.pop()
            seen.append(pid)
            pids.extend(tree.get(pid, []))
        for pid in seen:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.cpu_ticks[pid] = max(self.cpu_ticks.get(pid, 0), int(fields[11]) + int(fields[12]))
            rss += int(fields[21]) * PAGE_KB
        self.peak_rss_kb = max(self.peak_rss_kb, rss)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu_ticks.values()) / TICKS


def exit_on_sigterm() -> None:
    """SIGTERM (a benchmark stopped from outside) unwinds like Ctrl-C, so every `finally` stops what it started."""

    def _raise(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)


def stop_peer(process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Stop a peer started with start_new_session=True and everything it started (a kcat pipe is a shell with two
    children that would outlive it): SIGTERM to its process group, then SIGKILL; returns once the peer is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # whatever of the group is left
    stop_process(process)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100) of values sorted ascending; nan when there are none."""
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(round(q * len(ordered) / 100, 9)))  # round: 99.9 * 1000 / 100 is 999.0000000000001
    return float(ordered[rank - 1])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def wait_seconds(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
