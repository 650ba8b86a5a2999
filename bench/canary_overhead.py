"""How much CPU the canary costs: `mirrorwatch canary` probing one mirrored link, measured from /proc.

    .venv/bin/python -m bench.canary_overhead [--seconds 300] [--interval 60] [--clusters DIR] [--json FILE]

Starts two local clusters (or uses running ones), `mirrorwatch mirror` and `mirrorwatch canary` as separate
processes, waits for the first probes to come back, then reads the canary process's user+system CPU time from
/proc/<pid>/stat at the start and end of the measured span. Prints CPU seconds, the share of one core, and the
probes sent and received meanwhile. Every process it starts is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench.common import clusters_for, exit_on_sigterm, stop_all
from kernel.config import MirrorwatchConfig
from kernel.processes import free_port

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)


def canary_status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/canary", timeout=5) as response:
        link: dict[str, Any] = json.load(response)["links"][0]
        return link


def measure(base: MirrorwatchConfig, *, seconds: float, interval: float, work: Path) -> dict[str, Any]:
    port = free_port()
    probe_topic = f"mirrorwatch.canary.bench-{os.getpid()}"
    # The link mirrors the probe topic only (a link always takes its canary topic), not whatever else the cluster holds.
    link = {"name": "bench", "source": "source", "target": "target", "refresh_topics_interval_seconds": 2}
    document = {
        "clusters": {a: {"bootstrap_servers": c.bootstrap_servers} for a, c in base.clusters.items()},
        "links": [{**link, "topics": {"include": [re.escape(probe_topic)]}}],
        "canary": {"interval_seconds": interval, "topic": probe_topic},
        "http": {"host": "127.0.0.1", "port": port},
        "state_dir": str(work / "state"),
    }
    config = work / "bench.yaml"
    config.write_text(yaml.safe_dump(document))
    command = [sys.executable, "-m", "mirrorwatch.cli"]
    started = []
    try:
        for name in ("mirror", "canary"):
            log = (work / f"{name}.log").open("wb")
            started.append(subprocess.Popen([*command, name, "--config", str(config)], stdout=log, stderr=log))
        canary = started[1]
        deadline = time.monotonic() + max(120.0, 3 * interval)
        while True:  # warm up: until the first probe came back through the mirror
            try:
                if canary_status(port)["received_total"] > 0:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or canary.poll() is not None:
                raise SystemExit(f"no probe came back; see {work}/canary.log")
            time.sleep(0.5)
        before, cpu_before, at = canary_status(port), cpu_seconds(canary.pid), time.monotonic()
        time.sleep(seconds)
        after, cpu_after, elapsed = canary_status(port), cpu_seconds(canary.pid), time.monotonic() - at
    finally:
        stop_all(started)
    cpu = cpu_after - cpu_before
    return {
        "interval_seconds": interval,
        "measured_seconds": round(elapsed, 1),
        "cpu_seconds": round(cpu, 3),
        "share_of_one_core": cpu / elapsed,
        "probes_sent": after["sent_total"] - before["sent_total"],
        "probes_received": after["received_total"] - before["received_total"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300, help="measured span [300]")
    parser.add_argument("--interval", type=float, default=60, help="canary.interval_seconds [60, the default]")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp, clusters_for(args.clusters, Path(tmp)) as c:
        result = measure(c, seconds=args.seconds, interval=args.interval, work=Path(tmp))
    print("| canary interval | measured | canary CPU | share of one core | probes sent / received |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| {result['interval_seconds']:g} s | {result['measured_seconds']:g} s | {result['cpu_seconds']:.2f} s "
        f"| {result['share_of_one_core']:.3%} | {result['probes_sent']} / {result['probes_received']} |"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
