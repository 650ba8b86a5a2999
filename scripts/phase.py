"""Run one phase of the test suite with a time limit, and say what it was doing when the limit ended it.

Imports: the standard library only.

    python3 scripts/phase.py --limit SECONDS --name NAME --dir DIR -- COMMAND...

The command (pytest) runs in a process group of its own with two variables set for tests/conftest.py:
MIRRORWATCH_TEST_PROGRESS (DIR/NAME.progress: the controller writes a line as each test starts and ends) and
MIRRORWATCH_TEST_STACKS (DIR/NAME.stacks/: every pytest process writes its pid there and dumps every thread's stack
to a file there on SIGUSR1). At the limit: SIGUSR1 to each of them, then SIGTERM to the group, SIGKILL a minute
later; DIR/NAME.diagnosis then says what was running, for how long, and where its threads stood, and is printed (and
printed again at the end of `make test`, where a CI log's tail shows it). Exit code: the command's, 124 at the limit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DUMP_WAIT_S = 5.0
TERM_WAIT_S = 60.0
FRAMES = 14  # of each thread's stack: the innermost, where it waits


def progress_of(path: Path, now: float) -> tuple[list[str], list[str], int]:
    """From a progress file: (tests started and not ended, each with its seconds; tests failed; tests ended)."""
    started: dict[str, float] = {}
    failed: list[str] = []
    ended = 0
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            fields = line.split("\t")
            if len(fields) < 3:
                continue
            at, what, nodeid = float(fields[0]), fields[1], fields[2]
            if what == "start":
                started[nodeid] = at
            elif what == "end":
                ended += 1
                started.pop(nodeid, None)
                if len(fields) > 3 and fields[3] in ("failed", "error"):
                    failed.append(nodeid)
    running = [f"{now - at:7.0f} s  {nodeid}" for nodeid, at in sorted(started.items(), key=lambda item: item[1])]
    return running, failed, ended


def test_stacks(dump: str) -> list[str]:
    """Of a faulthandler dump (all threads), the threads in test code, each cut to its innermost frames."""
    kept: list[str] = []
    for block in dump.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or not any("/tests/" in line for line in lines):
            continue
        if any("/tests/line_profile.py" in line for line in lines):  # the line sampler's own thread, not a test's
            continue
        kept.append(lines[0])
        kept.extend(lines[1 : 1 + FRAMES])
        if len(lines) > 1 + FRAMES:
            kept.append(f"  ... {len(lines) - 1 - FRAMES} more frames")
    return kept


def diagnosis(name: str, limit_s: float, progress: Path, stacks: Path, now: float) -> str:
    running, failed, ended = progress_of(progress, now)
    out = [f"== {name}: ended at its limit of {limit_s:g} s; {ended} test(s) had ended, {len(failed)} failed"]
    out += [f"   failed: {nodeid}" for nodeid in failed]
    out.append(f"   still running ({len(running)}):" if running else "   no test was running (a hang outside tests)")
    out += [f"   {line}" for line in running]
    for dump in sorted(stacks.glob("*.stacks")):
        text = dump.read_text(errors="replace")
        threads = test_stacks(text)
        if threads:
            out.append(f"-- {dump.stem}: its threads in test code (innermost frame first)")
            out += threads
        elif text.strip():
            blocks = [b for b in text.split("\n\n") if b.strip()]
            current = next((b for b in blocks if b.lstrip().startswith("Current thread")), blocks[-1])
            out.append(f"-- {dump.stem}: no thread in test code; the thread the signal found:")
            out += current.strip("\n").splitlines()[: FRAMES + 1]
    return "\n".join(out) + "\n"


def run(limit_s: float, name: str, directory: Path, command: list[str]) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    progress = directory / f"{name}.progress"
    stacks = directory / f"{name}.stacks"
    stacks.mkdir(exist_ok=True)
    env = {**os.environ, "MIRRORWATCH_TEST_PROGRESS": str(progress), "MIRRORWATCH_TEST_STACKS": str(stacks)}
    process = subprocess.Popen(command, env=env, start_new_session=True)
    # The command runs in a session of its own (its group is ended as one): a phase interrupted or terminated (an
    # interrupted scripts/flakiness.sh) ends it too, instead of leaving it to run on beside what comes next.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        return process.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        pass
    except KeyboardInterrupt:
        end_group(process)
        return 130
    for pidfile in stacks.glob("*.pid"):
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(pidfile.read_text()), signal.SIGUSR1)
    time.sleep(DUMP_WAIT_S)
    report = diagnosis(name, limit_s, progress, stacks, time.time())
    (directory / f"{name}.diagnosis").write_text(report)
    end_group(process)
    print(report, flush=True)
    return 124


def _interrupted(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def end_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the command's process group, SIGKILL to what is left of it a minute later; returns once every
    process of the group is gone (pytest-xdist's workers outlive their controller by a moment)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    for then in (signal.SIGKILL, None):
        deadline = time.monotonic() + TERM_WAIT_S
        while _group_lives(process) and time.monotonic() < deadline:
            time.sleep(0.2)
        if then is None or not _group_lives(process):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, then)


def _group_lives(process: subprocess.Popen[bytes]) -> bool:
    process.poll()  # reaps the leader; the others are reaped by whoever inherits them
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=float, required=True, metavar="SECONDS")
    parser.add_argument("--name", required=True, help="the phase: main, alone, sasl_ssl, mtls")
    parser.add_argument("--dir", type=Path, required=True, help="where the progress, stacks and diagnosis go")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    return run(args.limit, args.name, args.dir, command)


if __name__ == "__main__":
    sys.exit(main())
