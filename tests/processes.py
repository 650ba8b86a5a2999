"""Running mirrorwatch in tests: a command as a real process (its log, waiting for lines, stopping, killing), a link
worker on a thread of the test, and configs for the session's clusters."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.config import MirrorwatchConfig, parse_config, reveal
from kernel.wait import wait_until
from mirror.engine import LinkWorker


def wait_for_http(url: str, *, timeout_s: float = 60, description: str) -> None:
    """Until `url` answers 200 (connection refused and the like count as not yet)."""

    def answers() -> bool:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)

    wait_until(answers, timeout_s=timeout_s, interval_s=0.3, ignore=(OSError,), description=description)


def session_document(
    clusters_config: MirrorwatchConfig, links: list[dict[str, Any]] | None = None, **sections: Any
) -> dict[str, Any]:
    """A config document (as YAML would hold it) for the session's clusters with these links and sections.

    Its canary topic is the test's own (the same in every document of one test) unless the test names one: a link
    mirrors the canary topic of its config whenever it exists on the source, and a test that ran the canary under the
    default name on the worker's shared pair made every later link there mirror that topic as well (a partition 0 of
    another topic in their views: two tests failed on it, flaky29)."""
    clusters: dict[str, Any] = {}
    for alias, cluster in clusters_config.clusters.items():
        clusters[alias] = {"bootstrap_servers": cluster.bootstrap_servers}
        if cluster.properties:  # secured clusters (`--security`): their client settings, as the test's own file
            clusters[alias]["properties"] = reveal(cluster.properties)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    if test and "topic" not in (sections.get("canary") or {}):
        sections = {**sections, "canary": {**(sections.get("canary") or {}), "topic": canary_topic_of(test)}}
    return {"clusters": clusters, "links": links or [], **sections}


def canary_topic_of(test: str) -> str:
    """The canary topic of a test's configs (`session_document`), by its node id."""
    return f"mirrorwatch.canary-{hashlib.sha1(test.encode()).hexdigest()[:10]}"


def session_config(
    clusters_config: MirrorwatchConfig, links: list[dict[str, Any]] | None = None, **sections: Any
) -> MirrorwatchConfig:
    return parse_config(session_document(clusters_config, links, **sections), env={})


@contextlib.contextmanager
def running_worker(config: MirrorwatchConfig, link: int = 0) -> Iterator[LinkWorker]:
    """A link worker on a thread of the test; at the end it is stopped and must have exited 0."""
    stop = threading.Event()
    worker = LinkWorker(config, config.links[link], stop=stop)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), name=f"test-{worker.name}")
    thread.start()
    try:
        yield worker
    finally:
        stop.set()
        thread.join(timeout=60)
    assert result == [0], f"the worker exited with {result}"


_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def thread_lines(dump: str, own_frames: int = 3) -> list[str]:
    """Of a faulthandler dump (every thread, most recent call first), a line per thread: `  thread 0x..: ` then its
    innermost frame and the innermost `own_frames` of mirrorwatch's own code (not the standard library's or a
    package's), innermost first. A process that does not stop shows where each thread waits in a screenful."""
    lines: list[str] = []
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        head = _THREAD.match(block.lstrip("\n"))
        if head is None:
            continue
        frames = [m for m in map(_FRAME.match, block.splitlines()) if m is not None]
        own = [f for f in frames if "/lib/python" not in f["path"] and "-packages/" not in f["path"]]
        shown = frames[:1] + [f for f in own if f is not frames[0]][:own_frames]
        said = " < ".join(f"{f['function']} ({'/'.join(Path(f['path']).parts[-2:])}:{f['line']})" for f in shown)
        lines.append(f"  thread {head.group(1)}: {said or 'no frame'}")
    return lines


@dataclass
class MirrorProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def http_base(self, timeout_s: float = 60) -> str:
        """The base URL of the HTTP API this process serves on 127.0.0.1 (port 0 in its config: read from its log)."""
        self.wait_for_log("HTTP API on http://127.0.0.1:", timeout_s)
        match = re.search(r"HTTP API on http://127\.0\.0\.1:(\d+)", self.log())
        assert match is not None
        return f"http://127.0.0.1:{match.group(1)}"

    def wait_for_log(self, text: str, timeout_s: float = 60) -> None:
        def seen() -> bool:
            if self.process.poll() is not None and text not in self.log():
                raise AssertionError(
                    f"mirror exited ({self.process.returncode}) before logging {text!r}:\n{self.log()}"
                )
            return text in self.log()

        wait_until(seen, timeout_s=timeout_s, description=f"the mirror to log {text!r}")

    def running(self) -> bool:
        """True while the process runs; an AssertionError with its log once it has exited (for a wait that would
        otherwise wait out its timeout on a dead mirror)."""
        if self.process.poll() is not None:
            raise AssertionError(f"the mirror exited ({self.process.returncode}):\n{self.log()[-5000:]}")
        return True

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM, as an operator or systemd would; returns the exit code. A process still running after
        `timeout_s` is asked for every thread's stack (SIGUSR1: `mirrorwatch.cli.main` dumps them into its log) and
        the failure carries them, a line per thread (`thread_lines`: the closing report prints them), and the log's
        end before them."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            before = len(self.log())
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(2)
            dump = self.log()[before:]
            threads = "\n".join(thread_lines(dump))
            raise AssertionError(
                f"still running {timeout_s:g} s after SIGTERM; its threads (innermost frame first):\n{threads}\n"
                f"--- the log's end before them ---\n{self.log()[:before][-6000:]}"
            ) from None

    def kill(self) -> None:
        """SIGKILL to the runner and every worker process at once: no flush, no commit, like a crashed machine."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait_exit(self, timeout_s: float = 60) -> int:
        return self.process.wait(timeout=timeout_s)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def monitor_sees_link_caught_up(base: str, link: str, group: str, topic: str, partitions: int) -> dict[str, Any]:
    """Wait until the monitor at `base` says the link's replication lag is 0 on every partition of `topic` (from the
    link's published positions), then until its Burrow view of the link's group says total lag 0 (from the
    collector's own rounds, which may list the group a round later); returns that Burrow status."""

    def caught_up() -> bool:
        seen = get_json(f"{base}/mirror/links/{link}")
        rows = [p for p in seen["partitions"] if p["topic"] == topic]
        return bool(
            seen["engine_running"] and len(rows) == partitions and all(p["replication_lag_records"] == 0 for p in rows)
        )

    wait_until(caught_up, timeout_s=60, interval_s=0.5, ignore=(urllib.error.HTTPError,), description="link lag 0")
    burrow: dict[str, Any] = {}

    def group_caught_up() -> bool:
        burrow.update(get_json(f"{base}/v3/kafka/source/consumer/{group}/lag")["status"])
        return bool(burrow["totallag"] == 0)

    wait_until(group_caught_up, timeout_s=60, interval_s=0.5, ignore=(urllib.error.HTTPError,), description="lag 0")
    return burrow


def maps_file(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` mapped into its memory (False once it is gone)."""
    try:
        return str(path) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
