"""The monitor's replication lag against the truth, in the moments operators look (B5).

    .venv/bin/python -m bench.monitor_truth [--rate 1500] [--partitions 6] [--fault-seconds 30] [--clusters DIR]
                                            [--engine-run | --engine spark] [--faults LIST] [--json FILE]
                                            [--network] [--fleet N]

Steady traffic into a fresh topic; `mirrorwatch mirror` and `mirrorwatch monitor` (monitor.interval_seconds 2) as
separate processes, as an operator runs them (or, with --engine-run, both in one `mirrorwatch run`; with --engine
spark, the link on the spark engine: local Spark, the real Kafka connector, a 0.5 s trigger). Then, one after
another, each with a recovery after it: the mirror SIGKILLed and restarted 3 s later, the mirror frozen (SIGSTOP,
its whole process group: Spark's JVM with its driver), the target broker SIGKILLed and restarted, the target broker
frozen (--faults picks some of them).

The truth is taken outside mirrorwatch: the producer's own acknowledgement time of every record, and a consumer
following the target that notes when each record arrives there. At a moment t, the true replication lag of a
partition is t minus the acknowledgement time of its oldest record acknowledged by t and not on the target by t (0
when there is none), in records the acknowledged records from that one on. Every figure the monitor serves states the
moment it describes (`observed_ms`); it is compared with the truth at that moment, with the truth when the answer
was in (as read: what a dashboard shows), and with the truth over the request, from the poll's asking to the answer
being in (Prometheus stamps a scraped sample with its scrape's start; a process busy draining a backlog holds its
answer some milliseconds while the truth falls hundreds of seconds a second). Printed per phase: the median and
largest error in seconds (and records), samples that read 0 while the truth was above 2 s, samples without a figure,
and how old the served figure was when read (what a scrape sees), and the link group's Burrow-style status at the
phase's end with how long after the fault's removal it read OK for good (each recovery waits up to 60 s for it: a
windowed judgement of commits, measured, not timed). At the end every acknowledged record must be on the target.
Every process it starts is stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

from bench.common import exit_on_sigterm
from bench.netns import ClientHost, NetHost, clusters_apart
from bench.truth_harness import FAULTS, HELD_S, LINK, NET_FAULTS, run_truth
from bench.truth_judge import Phase, TruthRun, print_report
from localkafka.local import LocalClusters

__all__ = ["HELD_S", "LINK", "Phase", "TruthRun", "main", "print_report", "run_truth"]


def _faults(args: argparse.Namespace) -> tuple[str, ...]:
    """The faults asked for, in the harness' order (the defaults of the network, a fleet, one process)."""
    default: tuple[str, ...] = NET_FAULTS[:4] if args.network else FAULTS
    if args.fleet:
        default = ("mirror-kill", "mirror-stop", "target-kill")
    chosen = args.faults.split(",") if args.faults else list(default)
    faults = tuple(f for f in (*FAULTS, *NET_FAULTS) if f in chosen)
    if args.engine_run:
        faults = tuple(f for f in faults if f != "mirror-stop")
    return faults


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1500, help="records/s into the source [1500]")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of the topic [6]")
    parser.add_argument("--steady-seconds", type=float, default=30, help="the steady phase [30]")
    parser.add_argument("--fault-seconds", type=float, default=30, help="how long each freeze or outage lasts [30]")
    parser.add_argument("--recover-seconds", type=float, default=10, help="after catching up, before the next [10]")
    parser.add_argument("--engine-run", action="store_true", help="mirror and monitor in one `mirrorwatch run`")
    parser.add_argument("--exactly-once", action="store_true", help="the link's delivery: exactly-once")
    parser.add_argument("--engine", choices=("python", "spark"), default="python", help="the link's engine [python]")
    parser.add_argument(
        "--faults",
        default="",
        help=f"comma-separated, from {','.join(FAULTS)} [all; --engine-run leaves mirror-stop out]",
    )
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument(
        "--network",
        action="store_true",
        help=f"each cluster on a host of its own (a network namespace over a veth pair, root only) and the faults "
        f"of the network between: {','.join(NET_FAULTS)} (the first four the default then; monitor-target-cut puts "
        "the mirror on a host of its own, with doors into the clusters' (and then leaves the slow and flapping "
        "ones out); cannot go with --clusters)",
    )
    parser.add_argument(
        "--fleet",
        type=int,
        default=0,
        metavar="N",
        help="N `mirrorwatch mirror` workers, each on a host of its own (with --network's clusters apart; the monitor "
        "on one more sees them through the progress topic alone); the mirror faults hit the first [0: one mirror]",
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--logs", type=Path, help="keep the processes' logs and config in this directory")
    args = parser.parse_args(argv)
    if (args.network or args.fleet) and args.clusters:
        parser.error("--network starts clusters of its own: leave --clusters out")
    args.network = args.network or args.fleet > 0
    faults = _faults(args)
    with tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp:
        work = (args.logs or Path(tmp)).resolve()  # absolute: the processes run in it
        work.mkdir(parents=True, exist_ok=True)
        stack = contextlib.ExitStack()
        network: dict[str, NetHost] = {}
        mirror_host = None
        fleet: list[ClientHost] = []
        monitor_host = None
        if args.network:
            client = "monitor-target-cut" in faults
            apart = stack.enter_context(clusters_apart(Path(tmp) / "clusters", client=client))
            clusters, network, mirror_host = apart.clusters, dict(apart.hosts), apart.client
            if args.fleet:  # and the monitor on a host of its own too
                *fleet, monitor_host = stack.enter_context(apart.client_hosts(args.fleet + 1))
        else:
            clusters = LocalClusters(args.clusters or Path(tmp) / "clusters", progress=lambda _line: None)
        owned = args.clusters is None
        if owned and not args.network:
            clusters.up(tie_to_parent=True)
            stack.callback(clusters.down)
        with stack:
            run = run_truth(
                clusters,
                work,
                rate=args.rate,
                partitions=args.partitions,
                steady_s=args.steady_seconds,
                fault_s=args.fault_seconds,
                recover_s=args.recover_seconds,
                one_process=args.engine_run,
                engine=args.engine,
                faults=faults,
                tie_to_parent=owned,
                delivery="exactly-once" if args.exactly_once else "at-least-once",
                network=network,
                mirror_host=mirror_host,
                fleet=fleet,
                monitor_host=monitor_host,
            )
    print_report(run)
    if args.json:
        samples = [
            {
                "phase": run.phase_of(x.observed_ms).name,
                "poll_ms": x.poll_ms,
                "observed_ms": x.observed_ms,
                "seconds": x.seconds,
                "truth_seconds": x.truth_seconds,
                "truth_low_seconds": x.truth_low_seconds,
                "served_truth_seconds": x.served_truth_seconds,
                "asked_ms": x.asked_ms,
                "request_truth_seconds": x.request_truth_seconds,
                "request_truth_low_seconds": x.request_truth_low_seconds,
                "positions_from": x.positions_from,
                "target_silent_since_ms": x.target_silent_since_ms,
                "partitions": x.served,
                "records": x.records,
                "truth_records": x.truth_records,
                "unknown": x.unknown,
            }
            for x in run.samples
        ]
        args.json.write_text(
            json.dumps(
                {
                    "phases": run.report(),
                    "acked": run.acked,
                    "missing": run.missing_on_target,
                    "duplicates": run.duplicates,
                    "samples": samples,
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if run.missing_on_target == 0 else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
