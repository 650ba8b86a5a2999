"""B9: the monitor's history (monitor.history) in memory, for a fleet over a span — no cluster needed.

    .venv/bin/python -m bench.history_memory                       # 100 links, 10,000 groups, 1 h at 10 s
    .venv/bin/python -m bench.history_memory --groups 1000 --span-seconds 600   # a quick look

Records `span / interval + 1` rounds of a state with L links and G groups (a round more than the ring holds, so
the ring is full and wraps) and reports what the history holds: series, the arrays' payload (`History.bytes`), the
memory tracemalloc sees allocated by the history (arrays, keys, dicts), and the time one round takes to record.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.common import exit_on_sigterm, markdown_table, median
from monitor.evaluator import GroupEvaluation, Status
from monitor.history import History
from monitor.links import LinkPartitionView, LinkView
from monitor.snapshot import ClusterSnapshot
from monitor.state import GroupView, MonitorState

T0 = 1_700_000_000_000


def _state(at_ms: int, links: int, groups: int, i: int) -> MonitorState:
    partition = LinkPartitionView("orders", 0, "orders", 100, 100, 90 + i % 10, 90, 10, 10, 10, 1.5)
    link_views = {
        f"link-{n:03d}": LinkView(
            f"link-{n:03d}",
            "source",
            "target",
            f"g-{n}",
            True,
            (partition,),
            {"records_out_total": 1000 * i},
            workers=1,
        )
        for n in range(links)
    }
    group_views = {
        ("source", f"group-{n:05d}"): GroupView(
            "source", f"group-{n:05d}", "Stable", 1, GroupEvaluation(Status.OK, 1.0, (), None, (n + i) % 100)
        )
        for n in range(groups)
    }
    clusters = {
        "source": ClusterSnapshot("source", at_ms, up=True),
        "target": ClusterSnapshot("target", at_ms, up=True),
    }
    return MonitorState(at_ms, clusters, group_views, link_views)


def measure(links: int, groups: int, span_s: float, interval_s: float) -> dict[str, Any]:
    interval_ms = int(interval_s * 1000)
    history = History(int(span_s * 1000), interval_ms)
    states = [_state(T0 + r * interval_ms, links, groups, r) for r in range(3)]  # built outside the measurement
    tracemalloc.start()
    timings = []
    for r in range(history.capacity + 1):
        state = states[r % 3]
        state = MonitorState(T0 + r * interval_ms, state.clusters, state.groups, state.links)
        started = time.perf_counter()
        history.record(state)
        timings.append(time.perf_counter() - started)
    allocated, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "links": links,
        "groups": groups,
        "span_seconds": span_s,
        "interval_seconds": interval_s,
        "rounds": history.capacity,
        "series": history.series,
        "arrays_mb": history.bytes / 1e6,
        "allocated_mb": allocated / 1e6,
        "record_ms": median(timings) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--links", type=int, default=100)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--span-seconds", type=float, default=3600)
    parser.add_argument("--interval-seconds", type=float, default=10)
    parser.add_argument("--json", type=Path, help="write the result here too")
    args = parser.parse_args(argv)
    result = measure(args.links, args.groups, args.span_seconds, args.interval_seconds)
    print(
        markdown_table(
            [
                "links",
                "groups",
                "span",
                "rounds",
                "series",
                "arrays",
                "allocated (tracemalloc)",
                "one round recorded (under tracemalloc)",
            ],
            [
                [
                    f"{result['links']:,}",
                    f"{result['groups']:,}",
                    f"{result['span_seconds']:g} s at {result['interval_seconds']:g} s",
                    f"{result['rounds']:,}",
                    f"{result['series']:,}",
                    f"{result['arrays_mb']:.1f} MB",
                    f"{result['allocated_mb']:.1f} MB",
                    f"{result['record_ms']:.1f} ms",
                ]
            ],
        )
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
