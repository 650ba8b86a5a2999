"""B8: the monitor at fleet scale — 1,000 / 5,000 / 10,000 consumer groups x 12 partitions on the local cluster,
`mirrorwatch monitor` (a real process, `interval_seconds: 10`) reading committed offsets both ways side by side.

    .venv/bin/python -m bench.monitor_scale                               # 1,000, 5,000 and 10,000 groups
    .venv/bin/python -m bench.monitor_scale --groups 500 --rounds 2       # a quick look

For each size the groups commit on the 12 partitions of one topic (every tenth lags by 10 records), then, per mode
(`admin_api`: one OffsetFetch per group; `auto`: following `__consumer_offsets`), a monitor starts and is measured
once it reads that way: the time to its first collection (`/readyz` 200), how long collecting the cluster takes
(`mirrorwatch_cluster_collect_seconds`), the duration of its rounds (`/readyz`'s `round_seconds`: collection,
windows, evaluation; median of --rounds rounds) and whether any round with its rendering overran the interval, the
scrape as Prometheus makes it, asking for gzip (median time; text and wire size of `/metrics`), its peak resident
memory, and how many of the groups Burrow's group list
shows. `--compatible-metrics` sets the borrowed styles served (fleets trim them: docs/guides/monitor.md).

Goals on the 2-core reference machine (issue #27): 10,000 groups collected within a 10 s interval, a scrape under
1 s, RSS under 1 GB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench.common import clusters_for, exit_on_sigterm, load_groups, markdown_table, median
from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.kafka import new_admin
from kernel.processes import die_with_parent, free_port, stop_process

PARTITIONS = 12
RECORDS_PER_PARTITION = 100
MODES = ("admin_api", "auto")


def _get(url: str, timeout_s: float = 60) -> tuple[int, bytes, float]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status), response.read(), time.perf_counter() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), time.perf_counter() - started


def _scrape(url: str, timeout_s: float = 60) -> tuple[bytes, int, float]:
    """/metrics as Prometheus scrapes it (asking for gzip): the text, the bytes on the wire, the seconds until the
    whole answer was read (Prometheus then decompresses it on its side)."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body = response.read()
        seconds = time.perf_counter() - started
        packed = response.headers.get("Content-Encoding") == "gzip"
    return (gzip.decompress(body) if packed else body), len(body), seconds


def _series(text: bytes) -> int:
    """Series in an exposition text: its sample lines."""
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))


def _groups_in(text: bytes, topic: str) -> int:
    """The bench's groups (`<topic>-<n>`) that an exposition text holds a series of."""
    return len(set(re.findall(rb'"' + re.escape(topic.encode()) + rb'-(\d+)"', text)))


def _unload(source: ClusterConfig, topic: str, groups: int) -> None:
    admin = new_admin(source, "source")
    names = [f"{topic}-{g}" for g in range(groups)]
    for first in range(0, len(names), 2_000):
        for future in admin.delete_consumer_groups(names[first : first + 2_000]).values():
            future.exception(timeout=300)
    if topic in admin.list_topics(timeout=30).topics:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(timeout=60)


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _listed(base: str, mode: str, topic: str, groups: int) -> int:
    """How many of the bench's groups Burrow's group list shows (some that it misses, or why it shows none, said)."""
    _, body, _ = _get(f"{base}/v3/kafka/source/consumer")
    answer = json.loads(body)
    if "consumers" not in answer:  # the monitor cannot see the cluster (503)
        print(f"{mode}: Burrow's group list after the rounds: {answer.get('message', answer)}", flush=True)
    mine = {g for g in answer.get("consumers", ()) if g.startswith(topic)}
    if len(mine) < groups:
        print(f"{mode}: not listed: {sorted({f'{topic}-{g}' for g in range(groups)} - mine)[:5]}", flush=True)
    return len(mine)


def run_monitor(
    config: MirrorwatchConfig,
    mode: str,
    topic: str,
    *,
    groups: int,
    rounds: int,
    interval_s: float,
    tmp: Path,
    compatible: list[str] | None = None,
) -> dict[str, Any]:
    port = free_port()
    document = {
        "clusters": {"source": {"bootstrap_servers": config.clusters["source"].bootstrap_servers}},
        "monitor": {
            "interval_seconds": interval_s,
            "commits_from": mode,
            **({"compatible_metrics": compatible} if compatible is not None else {}),
        },
        "canary": {"enabled": False},
        "http": {"host": "127.0.0.1", "port": port},
        "state_dir": str(tmp / f"state-{mode}"),
    }
    path = tmp / f"monitor-{mode}.yaml"
    path.write_text(yaml.safe_dump(document))
    log = (tmp / f"monitor-{mode}-{groups}.log").open("wb")
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "mirrorwatch.cli", "monitor", "--config", str(path)],
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,  # noqa: PLW1509 -- only prctl: dies with the benchmark
    )
    base = f"http://127.0.0.1:{port}"
    try:
        first_s = None
        round_s: list[float] = []
        seen: tuple[int, str] = (-1, "")
        deadline = time.monotonic() + 600
        # every 2 s from the first ready: seconds, series, at, the bench's groups with a series
        after_ready: list[tuple[float, int, float, int]] = []
        next_scrape = 0.0
        while len(round_s) < rounds and time.monotonic() < deadline:
            if first_s is not None and time.monotonic() >= next_scrape:
                next_scrape = time.monotonic() + 2.0
                text, _, took = _scrape(f"{base}/metrics")
                after_ready.append((took, _series(text), time.monotonic() - started, _groups_in(text, topic)))
            try:
                status, body, _ = _get(f"{base}/readyz", 10)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
                continue
            if status == 200:
                ready = json.loads(body)
                first_s = first_s if first_s is not None else time.monotonic() - started
                way = ready["commits_from"].get("source", "")
                wanted = "offsets-topic" if mode == "auto" else "admin-api"
                key = (round(ready["round_seconds"] * 1000), way)
                if way == wanted and key != seen:  # a new round, read the mode's way
                    round_s.append(ready["round_seconds"])
                seen = key
            time.sleep(0.5)
        scrapes = [_scrape(f"{base}/metrics") for _ in range(5)]
        if first_s is not None:  # these are scrapes after ready too
            at = time.monotonic() - started
            after_ready += [(took, _series(text), at, _groups_in(text, topic)) for text, _, took in scrapes]
        listed = _listed(base, mode, topic, groups)

        def figure(text: bytes, prefix: str) -> float:
            return next(float(line.split()[-1]) for line in text.decode().splitlines() if line.startswith(prefix))

        overruns = figure(scrapes[-1][0], "mirrorwatch_monitor_round_overruns_total")
        collect_s = median(
            [figure(body, 'mirrorwatch_cluster_collect_seconds{cluster="source"}') for body, _, _ in scrapes]
        )
        by_style = {
            line.split('"')[1]: int(float(line.split()[-1]))
            for line in scrapes[-1][0].decode().splitlines()
            if line.startswith("mirrorwatch_exporter_series{")
        }
        return {
            "mode": mode,
            "groups": groups,
            # every scrape from the first one after /readyz said ready: the slowest, and whether each was complete
            "scrapes_after_ready": len(after_ready),
            "scrape_after_ready_max_seconds": max((t for t, _, _, _ in after_ready), default=None),
            "series_after_ready": sorted({n for _, n, _, _ in after_ready}),
            "groups_after_ready_fewest": min((g for _, _, _, g in after_ready), default=None),
            "series": _series(scrapes[-1][0]),
            "series_by_style": by_style,
            "first_collection_seconds": first_s,
            "round_seconds": median(round_s) if round_s else None,
            "collect_seconds": collect_s,
            "rounds_measured": len(round_s),
            "overruns": overruns,
            "scrape_seconds": median([s for _, _, s in scrapes]),
            "scrape_bytes": len(scrapes[-1][0]),
            "scrape_wire_bytes": scrapes[-1][1],
            "peak_rss_mb": _peak_rss_mb(process.pid),
            "groups_listed": listed,
        }
    finally:
        stop_process(process)
        log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", default="1000,5000,10000", help="comma-separated group counts [1000,5000,10000]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds measured per monitor [3]")
    parser.add_argument("--interval", type=float, default=10.0, help="monitor.interval_seconds [10]")
    parser.add_argument(
        "--compatible-metrics",
        help="monitor.compatible_metrics, comma-separated ('' for none) [the default: all three styles]",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="admin_api,auto")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp,
        clusters_for(args.clusters, Path(tmp)) as config,
    ):
        source = config.clusters["source"]
        for groups in (int(n) for n in args.groups.split(",")):
            topic = f"bench.fleet.{groups}.{int(time.time())}"
            try:
                loading = time.monotonic()
                load_groups(source, topic, groups, PARTITIONS, RECORDS_PER_PARTITION)
                print(f"{groups:,} groups committed in {time.monotonic() - loading:.0f} s", flush=True)
                for mode in args.modes.split(","):
                    compatible = None if args.compatible_metrics is None else args.compatible_metrics.split(",")
                    result = run_monitor(
                        config,
                        mode,
                        topic,
                        groups=groups,
                        rounds=args.rounds,
                        interval_s=args.interval,
                        tmp=Path(tmp),
                        compatible=[c for c in compatible if c] if compatible is not None else None,
                    )
                    print(json.dumps(result), flush=True)
                    results.append(result)
            finally:
                _unload(source, topic, groups)
    for r in results:
        print(f"{r['groups']:,} groups, {r['mode']}: series per style {r['series_by_style']}")
    print(
        markdown_table(
            [
                "groups",
                "commits read by",
                "first collection",
                "collecting the cluster",
                "round",
                "overran",
                "scrape (gzip)",
                "slowest scrape after ready",
                "series (after ready: fewest / most)",
                "groups in every scrape after ready",
                "scrape MB (text / gzip)",
                "RSS MB",
                "listed",
            ],
            [
                [
                    f"{r['groups']:,}",
                    "OffsetFetch per group" if r["mode"] == "admin_api" else "__consumer_offsets",
                    f"{r['first_collection_seconds']:.1f} s" if r["first_collection_seconds"] else "never",
                    f"{r['collect_seconds']:.1f} s",
                    f"{r['round_seconds']:.1f} s" if r["round_seconds"] is not None else "not measured",
                    f"{r['overruns']:.0f}",
                    f"{r['scrape_seconds'] * 1000:.0f} ms",
                    f"{r['scrape_after_ready_max_seconds'] or 0:.2f} s ({r['scrapes_after_ready']} scrapes)",
                    f"{r['series']:,} ({min(r['series_after_ready'], default=0):,} / "
                    f"{max(r['series_after_ready'], default=0):,})",
                    f"{r['groups_after_ready_fewest'] or 0:,} of {r['groups']:,}",
                    f"{r['scrape_bytes'] / 1e6:.1f} / {r['scrape_wire_bytes'] / 1e6:.1f}",
                    f"{r['peak_rss_mb']:.0f}",
                    f"{r['groups_listed']:,}",
                ]
                for r in results
            ],
        )
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    complete = all(r["groups_listed"] == r["groups"] and r["rounds_measured"] == args.rounds for r in results)
    return 0 if complete else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
