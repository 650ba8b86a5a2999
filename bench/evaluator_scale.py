"""B4: the evaluator at scale and the collector against a cluster with many consumer groups.

    .venv/bin/python -m bench.evaluator_scale                      # 100,000 group-partitions; 1,000 groups
    .venv/bin/python -m bench.evaluator_scale --group-partitions 1000 --groups 20 --repeat 1   # a quick look

Evaluation: synthetic offset windows (10 samples each) for N group-partitions in groups of 10 partitions, a mix of
caught-up, lagging, stopped and rewound consumers; one full sweep evaluates every partition and every group, as the
monitor does each interval. Reported: sweep time (median of --repeat), and the memory the windows hold (resident
set growth while building them). Collector: G consumer groups with committed offsets on a local cluster, then the
time of one full collection (offsets, groups described, every group's commits), median of --repeat.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from bench.common import clusters_for, exit_on_sigterm, markdown_table, median
from kernel.kafka import create_topics, new_admin
from monitor.collector import collect_cluster
from monitor.evaluator import EvaluatorConfig, OffsetSample, evaluate_group, evaluate_partition
from monitor.windows import OffsetWindows

PARTITIONS_PER_GROUP = 10
T0 = 1_700_000_000_000


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_windows(group_partitions: int) -> OffsetWindows:
    windows = OffsetWindows(10)
    for i in range(group_partitions):
        group, partition = divmod(i, PARTITIONS_PER_GROUP)
        key = ("source", f"group-{group}", "orders", partition)
        kind = i % 4  # 0 caught up, 1 lagging and catching up, 2 stopped, 3 rewound
        for s in range(10):
            hwm = 1000 + s * 100
            offset = {0: hwm, 1: hwm - 500 + s * 20, 2: 900, 3: 1000 + s * 50 if s < 8 else 100}[kind]
            windows.observe(key, OffsetSample(offset, T0 + s * 10_000, hwm, has_members=kind != 2))
    return windows


def sweep(windows: OffsetWindows, group_partitions: int) -> int:
    config = EvaluatorConfig(min_stop_seconds=30)
    now = T0 + 100_000
    groups = 0
    for group in range(group_partitions // PARTITIONS_PER_GROUP):
        evaluations = [
            evaluate_partition(
                "orders",
                p,
                windows.samples(("source", f"group-{group}", "orders", p)),
                high_watermark_now=2000,
                now_ms=now,
                config=config,
            )
            for p in range(PARTITIONS_PER_GROUP)
        ]
        evaluate_group(evaluations)
        groups += 1
    return groups


def evaluation_bench(group_partitions: int, repeat: int) -> dict[str, Any]:
    before = _rss_mb()
    started = time.perf_counter()
    windows = build_windows(group_partitions)
    build_s = time.perf_counter() - started
    memory_mb = _rss_mb() - before
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        sweep(windows, group_partitions)
        times.append(time.perf_counter() - started)
    return {
        "group_partitions": group_partitions,
        "build_seconds": build_s,
        "sweep_seconds": median(times),
        "windows_memory_mb": memory_mb,
    }


def collector_bench(existing: Path | None, groups: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp, clusters_for(existing, Path(tmp)) as config:
        source = config.clusters["source"]
        admin = new_admin(source, "source")
        topic = f"bench.groups.{int(time.time())}"
        create_topics(admin, {topic: 4})
        prefix = f"bench-{int(time.time())}"
        futures: list[Any] = []
        for g in range(groups):  # one request per group (the API's limit), all in flight at once
            offsets = [TopicPartition(topic, p, 0) for p in range(4)]
            futures += admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(f"{prefix}-{g}", offsets)]
            ).values()
        for future in futures:
            future.result(timeout=60)
        times = []
        found = 0
        for _ in range(repeat):
            started = time.perf_counter()
            snapshot = collect_cluster(admin, "source", int(time.time() * 1000), cluster=source, timeout_s=60)
            times.append(time.perf_counter() - started)
            found = sum(1 for g in snapshot.groups if g.startswith(prefix))
        return {"groups": groups, "groups_collected": found, "collect_seconds": median(times)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group-partitions", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1_000, help="consumer groups for the collector [1000]")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    evaluation = evaluation_bench(args.group_partitions, args.repeat)
    collection = collector_bench(args.clusters, args.groups, args.repeat)
    print(
        markdown_table(
            ["what", "size", "time", "memory"],
            [
                [
                    "one evaluation sweep",
                    f"{evaluation['group_partitions']:,} group-partitions",
                    f"{evaluation['sweep_seconds']:.2f} s",
                    f"{evaluation['windows_memory_mb']:.0f} MB of windows",
                ],
                [
                    "one collection",
                    f"{collection['groups']:,} groups ({collection['groups_collected']:,} seen)",
                    f"{collection['collect_seconds']:.2f} s",
                    "",
                ],
            ],
        )
    )
    if args.json:
        args.json.write_text(json.dumps({"evaluation": evaluation, "collection": collection}, indent=2) + "\n")
    return 0 if collection["groups_collected"] == collection["groups"] else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
