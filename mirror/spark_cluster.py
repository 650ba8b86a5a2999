"""A local Spark standalone cluster: a master and N workers, each its own JVM, from the Spark distribution the pinned
pyspark wheel ships (`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`; nothing downloaded).

The tests and `bench/` run the spark engine on it exactly as on a real cluster (`--master spark://...`, or
spark-submit). Each worker starts in a session of its own and its executors inherit its process group, so losing a
worker as a machine is lost (`kill_worker`: the worker and its executors SIGKILLed at once) and stopping the cluster
leave nothing behind; every JVM also dies with the process that started it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.errors import SetupError, require_extra
from kernel.processes import die_with_parent, free_port
from localkafka.jars import require_java

__all__ = ["LocalSparkCluster", "spark_home"]

log = logging.getLogger(__name__)

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark wheel (its bin/spark-class, bin/spark-submit, jars/)."""
    require_extra("pyspark", "spark", "a Spark standalone cluster")
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").is_file():
        raise SetupError(f"pyspark at {home} has no bin/spark-class; run scripts/setup.sh")
    return home


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path


class LocalSparkCluster:
    """`with LocalSparkCluster(directory) as spark:` a master on 127.0.0.1 and `workers` workers of `cores` cores and
    `memory` each; `spark.master_url` for `--master`. Logs and the workers' work directories go under `directory`."""

    def __init__(
        self,
        directory: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        progress: Callable[[str], None] = log.info,
    ) -> None:
        self.directory = directory
        self.worker_count = workers
        self.cores = cores
        self.memory = memory
        self._progress = progress
        self.port = free_port()
        self.ui_port = free_port()
        self._master: _Daemon | None = None
        self._workers: list[_Daemon | None] = []
        self._env: dict[str, str] | None = None

    @property
    def scratch(self) -> Path:
        """The scratch of its JVMs (block managers, native libraries unpacked), not /tmp: a worker killed as a machine
        is lost, or a driver spark-submit started, leaves it here."""
        return self.directory / "scratch"

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def __enter__(self) -> LocalSparkCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """The environment every Spark process here runs with (also what a spark-submit against it needs)."""
        if self._env is not None:
            return self._env
        java = Path(require_java()).resolve()
        self._env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "JAVA_HOME": str(java.parent.parent),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.directory / "logs"),
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOCAL_DIRS": str(self.scratch),
            "SPARK_DAEMON_JAVA_OPTS": f"-Djava.io.tmpdir={self.scratch}",
            "SPARK_SUBMIT_OPTS": f"-Djava.io.tmpdir={self.scratch}",
        }
        return self._env

    def start(self, timeout_s: float = 120) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._master = self._launch(
            "master", [MASTER, "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port)]
        )
        self._progress(f"spark: master at {self.master_url} (UI {self.ui_url})")
        for index in range(self.worker_count):
            self._workers.append(self._start_worker(index))
        self.wait_for_workers(self.worker_count, timeout_s)
        self._progress(f"spark: {self.worker_count} workers of {self.cores} core(s) and {self.memory} registered")

    def _start_worker(self, index: int) -> _Daemon:
        work = self.directory / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        args = [WORKER, self.master_url, "--host", "127.0.0.1", "--webui-port", str(free_port())]
        args += ["--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work)]
        # its executors' JVMs inherit its environment: their native libraries in the scratch too (after what the
        # environment already asks of every JVM)
        tool_options = f"{self.env().get('JAVA_TOOL_OPTIONS', '')} -Djava.io.tmpdir={self.scratch}".strip()
        return self._launch(f"worker-{index}", args, {"JAVA_TOOL_OPTIONS": tool_options})

    def _launch(self, name: str, args: list[str], env: dict[str, str] | None = None) -> _Daemon:
        log_path = self.directory / f"{name}.log"
        with log_path.open("ab") as out:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**self.env(), **(env or {})},
                cwd=self.directory,
                start_new_session=True,  # its executors join its process group: one killpg takes both
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only calls prctl
            )
        return _Daemon(name, process, log_path)

    def state(self) -> dict[str, Any]:
        """The master's own view (its web UI's /json/): workers, their state, cores, running applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=10) as response:
            return dict(json.load(response))

    def alive_workers(self) -> int:
        try:
            return sum(1 for worker in self.state().get("workers", []) if worker.get("state") == "ALIVE")
        except (OSError, urllib.error.URLError, ValueError):
            return 0

    def wait_for_workers(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < count:
            for daemon in [self._master, *self._workers]:
                if daemon is not None and daemon.process.poll() is not None:
                    tail = daemon.log_path.read_text(errors="replace")[-2000:]
                    raise SetupError(f"spark {daemon.name} exited ({daemon.process.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                raise SetupError(f"spark: {count} workers did not register with {self.master_url} in {timeout_s:.0f} s")
            time.sleep(0.5)

    def executors(self) -> list[int]:
        """The executor JVMs the workers run now: the members of a worker's process group, the worker left out."""
        workers = {daemon.process.pid for daemon in self._workers if daemon is not None}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in workers:
                continue
            try:
                if os.getpgid(int(entry.name)) in workers:
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile
                continue
        return found

    def kill_worker(self, index: int) -> None:
        """Lose worker `index` as a machine is lost: the worker JVM and its executors SIGKILLed at once."""
        daemon = self._workers[index]
        if daemon is None:
            return
        self._progress(f"spark: SIGKILL to {daemon.name} and its executors")
        _kill_group(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait(timeout=30)
        self._workers[index] = None

    def restart_worker(self, index: int, timeout_s: float = 120) -> None:
        """Start worker `index` again (after `kill_worker`) and wait until the master has every worker back."""
        if self._workers[index] is None:
            self._workers[index] = self._start_worker(index)
        self.wait_for_workers(self.worker_count, timeout_s)

    def stop(self) -> None:
        """Workers (with their executors) first, then the master; SIGTERM, SIGKILL after 30 s."""
        for daemon in [*reversed(self._workers), self._master]:
            if daemon is None:
                continue
            _kill_group(daemon.process.pid, signal.SIGTERM)
            try:
                daemon.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_group(daemon.process.pid, signal.SIGKILL)
                daemon.process.wait(timeout=30)
            _kill_group(daemon.process.pid, signal.SIGKILL)  # an executor that outlived its worker
        self._workers, self._master = [], None


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
