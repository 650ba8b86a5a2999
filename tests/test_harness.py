"""The suite's own harness: a test that hangs where no Python signal handler can reach it ends as a failure, and the
run goes on (tests/conftest.py's watchdog). Without it, one librdkafka call blocked on a broker held a CI run until
its limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_test_that_hangs_fails_with_its_stacks_and_the_others_run(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # none of the repo's settings (pytest-timeout's 600 s)
    (tmp_path / "test_hang.py").write_text(
        "import time\ndef test_before(): pass\ndef test_hangs(): time.sleep(300)\ndef test_after(): pass\n"
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
    assert "1 failed, 2 passed, 1 skipped" in out, out  # the crashed test is not run again by the next worker
    assert "crashed while running 'test_hang.py::test_hangs'" in out, out
    assert "Timeout (0:00:03)!" in out and "in test_hangs" in out, out  # every thread's stack, the hung one's too
