"""The suite's own harness: a test that hangs where no Python signal handler can reach it, or aborts its worker, ends
as a failure with what it last wrote to stderr, and the run goes on (tests/conftest.py). Without it, one librdkafka
abort held a CI run until its limit, its assertion message lost with pytest's capture file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_test_that_hangs_or_aborts_its_worker_fails_saying_why_and_the_others_run(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # none of the repo's settings (pytest-timeout's 600 s)
    (tmp_path / "test_hang.py").write_text(
        "import os, time\n"
        "def test_before(): pass\n"
        "def test_hangs(): time.sleep(300)\n"
        "def test_aborts():\n"
        "    os.write(2, b'*** rdkafka_fake.c:1:f: assert: what a C library says before it aborts ***\\n')\n"
        "    os.abort()\n"
        "def test_after(): pass\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "MIRRORWATCH_TEST_HANG_EXIT_S": "3"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-c",
            str(tmp_path / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadfile",
            "-rf",
            str(tmp_path / "test_hang.py"),
        ],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 failed, 2 passed, 2 skipped" in out, out  # a crashed test is not run again by the next worker
    assert "crashed while running 'test_hang.py::test_hangs'" in out, out
    assert "Timeout (0:00:03)!" in out and "in test_hangs" in out, out  # every thread's stack, the hung one's too
    # the message a C library wrote to fd 2 before it aborted the worker (pytest's capture would have lost it)
    assert "crashed while running 'test_hang.py::test_aborts'" in out, out
    assert "*** rdkafka_fake.c:1:f: assert: what a C library says before it aborts ***" in out, out
