"""`mirrorwatch demo` is the first quick-start command: it must run from nothing and stop cleanly on Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mirrorwatch.test_local import _kafka_pids

pytestmark = pytest.mark.integration


def test_demo_runs_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    state_dir = tmp_path / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "mirrorwatch.cli", "demo", "--state-dir", str(state_dir), "--rate", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:  # read progress until traffic has flowed for one progress period
            lines.append(line.rstrip())
            if line.startswith("[") and "consumed" in line:
                break
        demo.send_signal(signal.SIGINT)
        rest, err = demo.communicate(timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()
    lines += rest.splitlines()
    assert demo.returncode == 0, "\n".join(lines) + err
    assert "SIGINT received, stopping cleanly" in err
    assert any(line.startswith("source: produced") and line.endswith("all read back") for line in lines), lines
    assert any(line.startswith("target: produced") and line.endswith("all read back") for line in lines), lines
    assert "source: stopped (pid" in "\n".join(lines)
    assert _kafka_pids(state_dir) == []
