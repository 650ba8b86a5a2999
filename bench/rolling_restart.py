"""B11: a rolling restart of a busy link's workers (issue #45).

    .venv/bin/python -m bench.rolling_restart [--rate 5000] [--workers 3] [--settle-seconds 8] [--clusters DIR]

Steady traffic into a fresh topic of 6 partitions (`--rate` records/s, each record's source acknowledgement time
noted), a consumer following the target (each record's arrival noted): the truth, taken outside mirrorwatch, as in
B5. `--workers` `mirrorwatch mirror` processes share the link. Once the target is caught up, each worker in turn gets
SIGTERM (the stopwatch starts with the signal and stops when the process is gone), is started again at once, and the
next goes `--settle-seconds` later. Then `mirrorwatch run` joins the link as one more worker (its monitor and canary
with it) and `mirrorwatch monitor` and `mirrorwatch canary` run beside the workers, each SIGTERMed in turn after the
same settle under the same load. Measured: each process' exit code and seconds to exit (the goal: within 5 s),
the true lag's peak during the roll against the bound the hand-over promises (`LAG_BOUND_S`), and at the end the
records missing on the target and those that arrived twice (a clean hand-over flushes and commits what it sent
before the partitions move: none). Every process it starts is stopped; the clusters too when it started them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from bench.common import clusters_for, exit_on_sigterm, markdown_table, stop_all, total_records
from bench.truth_judge import Truth
from bench.truth_traffic import Traffic, in_process
from kernel.config import MirrorwatchConfig
from kernel.kafka import create_topics, new_admin
from kernel.processes import free_port
from kernel.wait import wait_until

__all__ = ["LAG_BOUND_S", "Roll", "roll"]

PARTITIONS = 6
# The promise of a cooperative hand-over: no partition waits for a session timeout (10 s, mirror.settings) to move,
# so the link is never that far behind during a rolling restart.
LAG_BOUND_S = 10.0
EXIT_GOAL_S = 5.0
OTHERS = ("run", "monitor", "canary")  # the other processes that must stop as promptly under load


@dataclass
class Roll:
    rate: int
    workers: int
    exit_seconds: list[float] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    peak_lag_seconds: float = 0.0  # the truth's largest lag from the first SIGTERM to the end of the last settle
    acked: int = 0
    missing: int = 0
    duplicates: int = 0
    # `run` (joining the link as one more worker, with its monitor and canary), then `monitor` and `canary` alone,
    # each SIGTERMed under the same load: kind -> [seconds to exit, exit code]
    others: dict[str, list[float]] = field(default_factory=dict)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:  # not listening yet (refused), or an HTTP error
        return False


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _config_file(config: MirrorwatchConfig, work: Path, topic: str, kind: str = "mirror", port: int = 0) -> Path:
    """The link's config for a process of `kind`: the workers' (no canary), or `run`'s, `monitor`'s or `canary`'s
    (the canary on, probing every second; each its own HTTP `port`)."""
    link = {"name": "roll", "source": "source", "target": "target", "topics": {"include": [topic.replace(".", "\\.")]}}
    document = {
        "clusters": {a: {"bootstrap_servers": c.bootstrap_servers} for a, c in config.clusters.items()},
        "links": [{**link, "group_id": f"{topic}-mirror"}],
        "canary": {"enabled": kind != "mirror", "topic": f"mirrorwatch.canary.{topic}", "interval_seconds": 1},
        "http": {"port": port},
        "state_dir": str(work / "state"),
    }
    path = work / f"roll-{kind}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


class _Fleet:
    """The workers of the link, each restartable, and the truth's lag as it is now."""

    def __init__(self, path: Path, work: Path, workers: int, truth: Truth) -> None:
        self._path, self._truth, self._work = path, truth, work
        names = [*(f"mirror-{i}" for i in range(workers)), *OTHERS]
        self._logs = [(work / f"{name}.log").open("ab") for name in names]
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, i: int, kind: str = "mirror", path: Path | None = None) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "mirrorwatch.cli", kind, "--config", str(path or self._path)]
        return subprocess.Popen(command, stdout=self._logs[i], stderr=subprocess.STDOUT, start_new_session=True)

    def behind(self) -> float:
        with self._truth.lock:
            return self._truth.behind_s(_now_ms())

    def wait_steady(self) -> None:
        """Until the target has been caught up within 1 s for 3 s running."""
        since = [time.monotonic()]

        def steady() -> bool:
            if self.behind() > 1.0 or not all(self._truth.acked_ms):
                since[0] = time.monotonic()
            return time.monotonic() - since[0] >= 3.0

        wait_until(steady, timeout_s=120, interval_s=0.1, description="the target caught up before the roll")

    def restart_each(self, result: Roll, settle_s: float) -> None:
        """SIGTERM each worker in turn (the stopwatch until it is gone), start it again, let the link settle."""
        for i, process in enumerate(self.processes):
            seconds, code = self._terminate(process, result)
            result.exit_seconds.append(seconds)
            result.exit_codes.append(code)
            self.processes[i] = self.start(i)
            self._settle(result, settle_s)

    def stop_each_other(self, result: Roll, topic: str, config: MirrorwatchConfig, settle_s: float) -> None:
        """`run`, `monitor` and `canary` in turn beside the workers, each SIGTERMed after `settle_s` under the load."""
        for n, kind in enumerate(OTHERS, start=len(self.processes)):
            port = free_port()
            process = self.start(n, kind, _config_file(config, self._work, topic, kind, port))
            # up first (its API answers): a process stopped while it starts dies of the signal, as any would
            wait_until(
                functools.partial(_answers, f"http://127.0.0.1:{port}/healthz"),
                timeout_s=120,
                interval_s=0.2,
                description=f"`mirrorwatch {kind}` to serve its API",
            )
            self._settle(result, settle_s)
            seconds, code = self._terminate(process, result)
            result.others[kind] = [round(seconds, 3), code]

    def _terminate(self, process: subprocess.Popen[bytes], result: Roll) -> tuple[float, int]:
        stopwatch = time.monotonic()
        process.send_signal(signal.SIGTERM)
        while process.poll() is None and time.monotonic() - stopwatch < 60:
            result.peak_lag_seconds = max(result.peak_lag_seconds, self.behind())
            time.sleep(0.05)
        seconds = time.monotonic() - stopwatch
        if process.poll() is None:
            stop_all([process])
        code = process.poll()
        return seconds, code if code is not None else -1

    def _settle(self, result: Roll, settle_s: float) -> None:
        until = time.monotonic() + settle_s
        while time.monotonic() < until:
            result.peak_lag_seconds = max(result.peak_lag_seconds, self.behind())
            time.sleep(0.05)

    def stop(self) -> None:
        stop_all([p for p in self.processes if p.poll() is None])

    def close(self) -> None:
        self.stop()
        for log in self._logs:
            log.close()


def roll(config: MirrorwatchConfig, work: Path, *, rate: int, workers: int, settle_s: float) -> Roll:
    """Run the rolling restart once on these clusters (see the module docstring)."""
    topic = f"bench.roll-{time.time_ns() % 10**9}"
    create_topics(new_admin(config.clusters["source"], "source"), {topic: PARTITIONS})
    source, target = (config.clusters[a].bootstrap_servers for a in ("source", "target"))
    traffic, truth, result = Traffic(source, target, topic, PARTITIONS), Truth(PARTITIONS), Roll(rate, workers)
    stop_traffic, stop_reading = threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=in_process, args=("produce", traffic, truth, stop_traffic), kwargs={"rate": rate}),
        threading.Thread(target=in_process, args=("follow", traffic, truth, stop_reading)),
    ]
    fleet = _Fleet(_config_file(config, work, topic), work, workers, truth)
    try:
        for thread in threads:
            thread.start()
        fleet.processes = [fleet.start(i) for i in range(workers)]
        fleet.wait_steady()
        fleet.restart_each(result, settle_s)
        fleet.stop_each_other(result, topic, config, settle_s)
        stop_traffic.set()
        threads[0].join(timeout=90)
        wait_until(lambda: fleet.behind() == 0.0, timeout_s=120, interval_s=0.2, description="the target to catch up")
        fleet.stop()  # nothing is written after this: every record on the target, a repeat too, is read and counted
        end = total_records(config.clusters["target"], "target", topic, PARTITIONS)
        wait_until(lambda: truth.seen() >= end, timeout_s=60, interval_s=0.1, description="the target read to its end")
    finally:
        stop_traffic.set()
        stop_reading.set()
        for thread in threads:
            thread.join(timeout=90)
        fleet.close()
        for alias in ("source", "target"):
            admin = new_admin(config.clusters[alias], alias)
            for done in admin.delete_topics([topic, f"mirrorwatch.canary.{topic}"]).values():
                with contextlib.suppress(Exception):  # the canary's is there only once a canary created it
                    done.result(30)
    with truth.lock:
        result.acked = sum(len(a) for a in truth.acked_ms)
        result.missing = truth.missing()
        result.duplicates = truth.duplicates
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=5000, help="records/s into the source [5000]")
    parser.add_argument("--workers", type=int, default=3, help="`mirrorwatch mirror` processes [3]")
    parser.add_argument("--settle-seconds", type=float, default=8, help="from a restart to the next SIGTERM [8]")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp, clusters_for(args.clusters, Path(tmp)) as c:
        r = roll(c, Path(tmp), rate=args.rate, workers=args.workers, settle_s=args.settle_seconds)
    exits = ", ".join(f"{s:.2f} s ({code})" for s, code in zip(r.exit_seconds, r.exit_codes, strict=True))
    header = ["rate", "workers", "exit after SIGTERM (code)", "peak lag (bound)", "records", "missing", "twice"]
    lag = f"{r.peak_lag_seconds:.2f} s ({LAG_BOUND_S:g} s)"
    print(markdown_table(header, [[f"{r.rate:,}/s", r.workers, exits, lag, f"{r.acked:,}", r.missing, r.duplicates]]))
    others = [[kind, f"{seconds:.2f} s", int(code)] for kind, (seconds, code) in r.others.items()]
    print(markdown_table(["process", "exit after SIGTERM", "code"], others))
    if args.json:
        args.json.write_text(json.dumps(asdict(r), indent=2))
    slow = [s for s in [*r.exit_seconds, *(seconds for seconds, _code in r.others.values())] if s > EXIT_GOAL_S]
    return 0 if not slow and r.missing == 0 and r.peak_lag_seconds <= LAG_BOUND_S else 1


if __name__ == "__main__":
    sys.exit(main())
