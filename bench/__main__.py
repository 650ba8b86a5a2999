"""Every benchmark in one command, on one pair of local clusters started for the run:

    make bench          (or: .venv/bin/python -m bench [--json DIR])

B1 and B2 (bench.throughput: python engine with 1 and 2 workers, spark engine, kcat pipe, MirrorMaker 2 with defaults
and tuned; 3 interleaved runs each), B3 (bench.latency: steady-rate end-to-end latency, same peers but spark), B4
(bench.evaluator_scale), B7 (bench.exporter_scale: /metrics with 1,000 groups), B8 (bench.monitor_scale: 1,000 to
10,000 groups, both ways of reading commits), B9 (bench.history_memory: the monitor's history for 100 links and
10,000 groups over an hour), B6 (bench.failover: plan at scale, and against MirrorMaker 2), B12 (bench.dr_cycle: the
disaster-recovery cycle against MirrorMaker 2), the canary's overhead (bench.canary_overhead) and what one Python
thread can move through confluent-kafka (bench.binding_cost, the python engine's ceiling). On the 2-core reference
machine this takes well over an hour; each module also runs alone, B1 first, so partial results come early."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench import (
    binding_cost,
    canary_overhead,
    dr_cycle,
    evaluator_scale,
    exporter_scale,
    failover,
    history_memory,
    latency,
    monitor_scale,
    throughput,
)
from bench.common import exit_on_sigterm
from localkafka.local import LocalClusters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="directory for each benchmark's JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp:
        clusters = LocalClusters(Path(tmp) / "clusters", progress=lambda _line: None)
        clusters.up(tie_to_parent=True)
        try:
            common = ["--clusters", str(clusters.state_dir)]

            def out(name: str) -> list[str]:
                return ["--json", str(args.json / f"{name}.json")] if args.json else []

            if args.json:
                args.json.mkdir(parents=True, exist_ok=True)
            codes = [
                throughput.main(["--bench", "b1", *common, *out("b1")]),
                latency.main([*common, *out("b3")]),
                throughput.main(["--bench", "b2", *common, *out("b2")]),
                evaluator_scale.main([*common, *out("b4")]),
                exporter_scale.main([*common, *out("b7")]),
                monitor_scale.main([*common, *out("b8")]),
                history_memory.main(out("b9")),
                failover.main(["--bench", "scale", *common, *out("b6-scale")]),
                failover.main(["--bench", "mm2", *common, *out("b6-mm2")]),
                dr_cycle.main([*common, *out("b12")]),
                canary_overhead.main([*common, *out("canary")]),
                binding_cost.main([*common, *out("binding")]),
            ]
        finally:
            clusters.down()
    return max(codes)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
