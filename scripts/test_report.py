"""What `make test` prints at its end, and what the flakiness script sums up, read from the JUnit XML files pytest
writes for each phase.

Imports: the standard library only (it runs before and without the virtualenv too).

    python3 scripts/test_report.py durations DIR [--budget tests/durations.json]
        the slowest 20 tests, every test file's time against its budget (files over it are named; timing is
        information here, never a failure), the tests that failed, how far a phase that left no XML came, and the
        totals as one closing line: `total: N passed, N failed, N skipped`
    python3 scripts/test_report.py flakiness RUN_DIR [RUN_DIR ...]
        over several runs of the whole suite (scripts/flakiness.sh), how often each test failed: every test that
        failed at least once, then the count of tests that never did
    python3 scripts/test_report.py lines DIR [--tests N] [--lines N]
        where the slowest tests' seconds went, line by line (sampled with MIRRORWATCH_TEST_LINES=DIR,
        tests/line_profile.py): per test, its own line and the helper's line below it that it stood on longest
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

SLOWEST = 20
THREADS = 80  # of a process that did not stop, the threads printed


@dataclass(frozen=True)
class Case:
    phase: str  # the XML file's stem: main, sasl_ssl, mtls; alone for each of its shares (alone-0, alone-1, ...)
    file: str  # tests/monitor/test_truth.py
    name: str
    seconds: float
    outcome: str  # passed, failed, error, skipped
    message: str = ""  # a failure's or error's message, its first line (CI keeps only part of the log)
    threads: tuple[str, ...] = ()  # a process that did not stop: a line per thread (tests/processes.py)

    @property
    def test_id(self) -> str:
        return f"{self.file}::{self.name}"


def read_cases(directory: Path) -> list[Case]:
    cases = []
    for path in sorted(directory.glob("*.xml")):
        for case in ET.parse(path).getroot().iter("testcase"):
            classname = case.get("classname", "")
            parts = classname.split(".")
            # tests.monitor.test_truth (a module) or tests.monitor.test_truth.TestX (a class in it)
            module = parts if not parts or not parts[-1][:1].isupper() else parts[:-1]
            outcome, message = "passed", ""
            threads: tuple[str, ...] = ()
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = "failed" if child.tag == "failure" else child.tag
                    if child.tag != "skipped" and not message:
                        text = child.get("message") or child.text or ""
                        message = _first_line(text)
                        threads = tuple(line for line in text.splitlines() if line.startswith("  thread 0x"))
            cases.append(
                Case(
                    re.sub(r"-\d+$", "", path.stem),  # a phase run as shares side by side is one phase
                    "/".join(module) + ".py",
                    case.get("name", ""),
                    float(case.get("time", 0)),
                    outcome,
                    message,
                    threads[:THREADS],
                )
            )
    return cases


def _first_line(text: str, limit: int = 1600) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def durations(directory: Path, budget_path: Path | None) -> int:
    cases = read_cases(directory)
    if not cases:
        print(f"test_report: no results in {directory}", file=sys.stderr)
        print("\n".join(unfinished_phases(directory)))
        return 1
    print(f"\n== the {SLOWEST} slowest tests (seconds, phase)")
    for case in sorted(cases, key=lambda c: -c.seconds)[:SLOWEST]:
        print(f"{case.seconds:8.1f}  {case.phase:8}  {case.test_id}")
    budget: dict[str, float] = json.loads(budget_path.read_text()) if budget_path and budget_path.exists() else {}
    per_file: dict[tuple[str, str], float] = defaultdict(float)
    for case in cases:
        per_file[(case.phase, case.file)] += case.seconds
    print("\n== seconds per test file and phase (budget: tests/durations.json; over it is said, never failed)")
    over = []
    for (phase, file), seconds in sorted(per_file.items(), key=lambda item: -item[1]):
        allowed = budget.get(f"{phase}:{file}")
        mark = ""
        if allowed is not None and seconds > allowed:
            mark = f"  OVER its budget of {allowed:g} s"
            over.append(f"{phase}:{file}")
        elif allowed is None and seconds >= 30:
            mark = "  (no budget)"
        print(f"{seconds:8.1f}  {phase:8}  {file}{mark}")
    if over:
        print(f"{len(over)} file(s) over their budget: {', '.join(over)}")
    broken = [case for case in cases if case.outcome in ("failed", "error")]
    if broken:
        print(f"\n== the {len(broken)} test(s) that failed (phase)")
        for case in broken[:SLOWEST]:
            print(f"  {case.phase:8}  {case.test_id}  ({case.seconds:.0f} s)")
            if case.message:
                print(f"            {case.message}")
            for line in case.threads:
                print(f"          {line}")
    for unfinished in unfinished_phases(directory):
        print(unfinished)
    counts = {outcome: sum(1 for c in cases if c.outcome == outcome) for outcome in ("passed", "failed", "skipped")}
    print(f"\ntotal: {counts['passed']} passed, {len(broken)} failed, {counts['skipped']} skipped")
    return 0


def unfinished_phases(directory: Path) -> list[str]:
    """A line for each phase that left no JUnit XML (ended at its time limit, or pytest itself failed): how far
    its progress file (tests/conftest.py) says it came. Its tests are not in the totals."""
    lines = []
    for progress in sorted(directory.glob("*.progress")):
        if (directory / f"{progress.stem}.xml").exists():
            continue
        outcomes: dict[str, int] = defaultdict(int)
        for line in progress.read_text(errors="replace").splitlines():
            fields = line.split("\t")
            if len(fields) > 3 and fields[1] == "end":
                outcomes[fields[3]] += 1
        told = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())) or "none"
        lines.append(f"{progress.stem}: no JUnit XML (the phase did not finish); tests that had ended: {told}")
    return lines


def flakiness(runs: list[Path]) -> int:
    failures: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for run in runs:
        for case in read_cases(run):
            key = f"{case.phase}:{case.test_id}"
            seen.add(key)
            if case.outcome in ("failed", "error"):
                failures[key].append(run.name)
    print(f"== flakiness over {len(runs)} runs: {len(seen)} tests (per phase)")
    for key, where in sorted(failures.items(), key=lambda item: -len(item[1])):
        print(f"{len(where)}/{len(runs)} failed  {key}  ({', '.join(where)})")
    print(f"{len(seen) - len(failures)} tests failed 0 times, {len(failures)} failed at least once")
    return 1 if failures else 0


def lines(directory: Path, tests: int, per_test: int) -> int:
    seconds: dict[str, dict[tuple[str, str], float]] = defaultdict(lambda: defaultdict(float))
    for path in sorted(directory.glob("lines-*.json")):
        for row in json.loads(path.read_text(encoding="utf-8")):
            seconds[row["test"]][(row["outer"], row["inner"])] += row["seconds"]
    if not seconds:
        print(f"no lines-*.json in {directory} (run pytest with MIRRORWATCH_TEST_LINES={directory})")
        return 1
    totals = sorted(((sum(lines.values()), test) for test, lines in seconds.items()), reverse=True)
    for total, test in totals[:tests]:
        print(f"{total:7.1f}  {test}")
        for (outer, inner), spent in sorted(seconds[test].items(), key=lambda item: -item[1])[:per_test]:
            print(f"  {spent:6.1f}  {outer}" + (f"  <  {inner}" if inner != outer else ""))
    cpu: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for path in sorted(directory.glob("cpu-*.json")):
        for row in json.loads(path.read_text(encoding="utf-8")):
            cpu[row["test"]][0] += row["own"]
            cpu[row["test"]][1] += row["children"]
    if cpu:
        print(
            f"== the {tests} costliest tests' CPU seconds: the test's process, the processes it started and waited for"
        )
        for test, (own, children) in sorted(cpu.items(), key=lambda item: -sum(item[1]))[:tests]:
            print(f"{own + children:7.1f}  {own:6.1f} + {children:6.1f}  {test}")
        print(f"total: {sum(o for o, _ in cpu.values()):.0f} + {sum(c for _, c in cpu.values()):.0f} CPU-s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("durations", help="the slowest tests, time per file against its budget, totals")
    one.add_argument("directory", type=Path)
    one.add_argument("--budget", type=Path, default=Path(__file__).resolve().parents[1] / "tests" / "durations.json")
    many = commands.add_parser("flakiness", help="per test, how many of the runs it failed in")
    many.add_argument("runs", type=Path, nargs="+")
    where = commands.add_parser("lines", help="the slowest tests' seconds, line by line (tests/line_profile.py)")
    where.add_argument("directory", type=Path)
    where.add_argument("--tests", type=int, default=SLOWEST)
    where.add_argument("--lines", type=int, default=8)
    args = parser.parse_args(argv)
    if args.command == "lines":
        return lines(args.directory, args.tests, args.lines)
    if args.command == "durations":
        return durations(args.directory, args.budget)
    return flakiness(args.runs)


if __name__ == "__main__":
    sys.exit(main())
