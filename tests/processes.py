"""A mirrorwatch command running as a real process in a test: its log, waiting for lines, stopping and killing it."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mirrorwatch.wait import wait_until


@dataclass
class MirrorProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout_s: float = 60) -> None:
        def seen() -> bool:
            if self.process.poll() is not None and text not in self.log():
                raise AssertionError(
                    f"mirror exited ({self.process.returncode}) before logging {text!r}:\n{self.log()}"
                )
            return text in self.log()

        wait_until(seen, timeout_s=timeout_s, description=f"the mirror to log {text!r}")

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM, as an operator or systemd would; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL to the runner and every worker process at once: no flush, no commit, like a crashed machine."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait_exit(self, timeout_s: float = 60) -> int:
        return self.process.wait(timeout=timeout_s)
