"""Where a test's seconds go, line by line: with `MIRRORWATCH_TEST_LINES=DIR`, each pytest process samples the thread
that runs its current test every quarter second and counts, per test, the line of the test's own code it stood on
(the outermost frame in tests/: the test function, or the fixture in its set-up or teardown) and the innermost line of
tests/ below it (the helper that waits). At the end of the session each process writes `DIR/lines-<pid>.json`, and
`DIR/cpu-<pid>.json`: per test, the CPU seconds of the process (its threads, librdkafka's of the test's clients among
them) and of the processes the test started and waited for (a mirror, a Spark driver, the JVMs of clusters of its
own). `python3 scripts/test_report.py lines DIR` prints the slowest tests' lines, then the costliest tests' CPU. The
suite's time is the sum of its tests' waits (scripts/test.sh) and, on a CPU-bound phase, of their CPU: this says
which waits and whose CPU, so that a slow test is shortened where it waits or burns, not guessed at.

Sampling reads the thread's frames from another thread (`sys._current_frames`): nothing is traced, the test runs at
its own speed (a few microseconds a sample)."""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

__all__ = ["LineSampler", "sampled_lines"]

INTERVAL_S = 0.25
ROOT = str(Path(__file__).resolve().parent.parent)
TESTS = os.path.join(ROOT, "tests") + os.sep


def sampled_lines(frame: FrameType | None) -> tuple[str, str] | None:
    """The outermost and innermost frames of tests/ in a stack (innermost frame given), as `path:line function`."""
    own: list[FrameType] = []
    while frame is not None:
        if frame.f_code.co_filename.startswith(TESTS):
            own.append(frame)
        frame = frame.f_back
    if not own:
        return None
    outer, inner = own[-1], own[0]
    return _where(outer), _where(inner)


def _where(frame: FrameType) -> str:
    return f"{os.path.relpath(frame.f_code.co_filename, ROOT)}:{frame.f_lineno} {frame.f_code.co_name}"


class LineSampler:
    """The pytest plugin (registered by tests/conftest.py when MIRRORWATCH_TEST_LINES is set)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._current: tuple[str, int] | None = None
        self._seconds: dict[str, dict[tuple[str, str], float]] = collections.defaultdict(
            lambda: collections.defaultdict(float)
        )
        # per test, the CPU seconds of this process (its threads: librdkafka's of the test's clients too) and of the
        # processes the test started and waited for (a mirror, a Spark driver, a JVM of its own clusters): on a
        # CPU-bound phase, what a test costs the others
        self._cpu: dict[str, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="test-line-sampler", daemon=True)
        self._thread.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self._current = (item.nodeid, threading.get_ident())
        before = os.times()
        try:
            yield
        finally:
            self._current = None
            after = os.times()
            self._cpu[item.nodeid] = (
                after.user + after.system - before.user - before.system,
                after.children_user + after.children_system - before.children_user - before.children_system,
            )

    def _sample(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            current = self._current
            if current is None:
                continue
            lines = sampled_lines(sys._current_frames().get(current[1]))
            if lines is not None:
                self._seconds[current[0]][lines] += INTERVAL_S

    def pytest_sessionfinish(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._directory.mkdir(parents=True, exist_ok=True)
        rows = [
            {"test": test, "outer": outer, "inner": inner, "seconds": seconds}
            for test, counter in self._seconds.items()
            for (outer, inner), seconds in counter.items()
        ]
        (self._directory / f"lines-{os.getpid()}.json").write_text(json.dumps(rows, indent=0), encoding="utf-8")
        cpu = [{"test": test, "own": own, "children": children} for test, (own, children) in self._cpu.items()]
        (self._directory / f"cpu-{os.getpid()}.json").write_text(json.dumps(cpu, indent=0), encoding="utf-8")
