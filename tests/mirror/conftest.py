"""Fixtures for mirror integration tests: configs for the session clusters, and real `mirrorwatch mirror` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirrorwatch.config import MirrorwatchConfig
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


@pytest.fixture
def write_config(clusters_config: MirrorwatchConfig, tmp_path: Path) -> Callable[..., Path]:
    """A config file with the session clusters and the given links (dicts as in YAML)."""
    counter = iter(range(1000))

    def write(links: list[dict[str, Any]], **sections: Any) -> Path:
        document: dict[str, Any] = {
            "clusters": {
                alias: {"bootstrap_servers": c.bootstrap_servers} for alias, c in clusters_config.clusters.items()
            },
            "links": links,
            **sections,
        }
        path = tmp_path / f"mirrorwatch-{next(counter)}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    return write


@pytest.fixture
def start_mirror(tmp_path: Path) -> Iterator[Callable[..., MirrorProcess]]:
    """Start `mirrorwatch mirror ARGS...` as a real process; whatever is still running at teardown gets SIGTERM."""
    started: list[MirrorProcess] = []
    counter = iter(range(1000))

    def start(*args: str) -> MirrorProcess:
        log_path = tmp_path / f"mirror-{next(counter)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "mirrorwatch.cli", "mirror", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() takes the workers down with it
            )
        started.append(MirrorProcess(process, log_path))
        return started[-1]

    yield start
    for mirror in started:
        if mirror.process.poll() is None:
            mirror.process.send_signal(signal.SIGTERM)
            try:
                mirror.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                mirror.process.kill()
                mirror.process.wait(timeout=10)
