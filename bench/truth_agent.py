"""The truth's producer or reader on a cluster's own host (bench.truth_harness runs it in the cluster's network
namespace, `ip netns exec`, when the clusters are apart): what it sees, one line each on stdout, until stdin closes.

    produce: `<partition> <acknowledged ms>`          the source acknowledged a record (in order per partition)
    follow:  `<partition> <sequence> <arrived ms>`    a record arrived on the target
"""

from __future__ import annotations

import argparse
import sys
import threading

from bench.truth_traffic import Traffic, follow_truth, produce_truth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=("produce", "follow"))
    parser.add_argument("--source", required=True, help="the source's bootstrap servers")
    parser.add_argument("--target", required=True, help="the target's bootstrap servers")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--rate", type=int, default=1000, help="records/s (produce)")
    args = parser.parse_args(argv)
    traffic = Traffic(args.source, args.target, args.topic, args.partitions)
    stop, lock = threading.Event(), threading.Lock()

    def say(*fields: int) -> None:
        with lock:
            sys.stdout.write(" ".join(map(str, fields)) + "\n")

    def flush() -> None:
        while not stop.wait(0.05):
            with lock:
                sys.stdout.flush()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    flusher = threading.Thread(target=flush)
    flusher.start()
    try:
        if args.role == "produce":
            produce_truth(traffic, args.rate, say, stop)
        else:
            follow_truth(traffic, say, stop)
    finally:
        stop.set()
        flusher.join()
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
