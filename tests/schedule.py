"""How the alone phase shares its tests among its workers (tests/conftest.py, scripts/test.sh)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

EXHAUSTIVE_UP_TO = 10  # tests; past that, longest first into the least loaded worker


def balanced(seconds: Sequence[float], workers: int) -> list[int]:
    """For each test (its seconds), the worker that runs it, so that the most loaded worker's seconds are as few as
    can be: every assignment tried for a few tests (3 workers, 8 tests: 6,561), else longest first into the least
    loaded (within 4/3 of the best)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if len(seconds) <= EXHAUSTIVE_UP_TO and workers ** len(seconds) <= 100_000:
        best: tuple[float, tuple[int, ...]] | None = None
        for assignment in itertools.product(range(workers), repeat=len(seconds)):
            loads = [0.0] * workers
            for worker, took in zip(assignment, seconds, strict=True):
                loads[worker] += took
            if best is None or max(loads) < best[0]:
                best = (max(loads), assignment)
        return list(best[1]) if best is not None else []
    loads = [0.0] * workers
    chosen = [0] * len(seconds)
    for index in sorted(range(len(seconds)), key=lambda i: -seconds[i]):
        worker = min(range(workers), key=loads.__getitem__)
        chosen[index] = worker
        loads[worker] += seconds[index]
    return chosen


def longest_files_first(nodeids: Sequence[str], seconds_of: dict[str, float]) -> list[int]:
    """The order to run tests in under pytest-xdist's `--dist loadfile`, as indexes into `nodeids`: whole files,
    the longest first (their `seconds_of` a file's path; a file without is the shortest), each file's tests in their
    own order. loadfile (with --no-loadscope-reorder) hands a free worker the next file in collection order, so the
    longest-first order is LPT scheduling: the phase no longer waits at its end on a long file one worker took last
    (test_spark_cluster.py, 150-231 s, started 853-1,036 s into phases of 1,191-1,243 s)."""
    files = list(dict.fromkeys(nodeid.split("::", 1)[0] for nodeid in nodeids))
    rank = {f: k for k, f in enumerate(sorted(files, key=lambda f: -seconds_of.get(f, 0.0)))}
    return sorted(range(len(nodeids)), key=lambda i: (rank[nodeids[i].split("::", 1)[0]], i))
