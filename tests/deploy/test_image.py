"""The container image as a platform team runs it (issue #68): built by `scripts/image.sh` (`make image`: mmdebstrap's
Debian base, podman, no Docker daemon, no registry; cached by its sources' digest, so a run builds it at most once),
then its `mirror`, `monitor` and `canary` run as three containers on the host's network against the local clusters,
as the chart runs them: read-only root filesystem, non-root user, config from a mounted file, a client property from
the environment. Judged from outside: every record read back from the target, the monitor's and the canary's
/metrics scraped (the canary's probes crossed the mirror container), and `podman stop --time 10` (SIGTERM, SIGKILL
after 10 s) ends each with exit 0, which a SIGKILL never gives."""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from kernel.config import MirrorwatchConfig
from tests.kafka_helpers import Record, produce, read_to_end, wait_for_commits

pytestmark = pytest.mark.integration

CHECKOUT = Path(__file__).resolve().parents[2]
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": str(CHECKOUT / "deploy" / "image" / "containers.conf")}
CONFIG_IN_IMAGE = "/etc/mirrorwatch/mirrorwatch.yaml"
RECORDS = 300


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, env=PODMAN_ENV, check=False)
    assert not check or done.returncode == 0, f"podman {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def image() -> str:
    done = subprocess.run(["bash", str(CHECKOUT / "scripts" / "image.sh")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return done.stdout.split()[-1]


class Container:
    """`podman run` of the image in the foreground (its output in a log file), on the host's network."""

    def __init__(self, image: str, name: str, config: Path, log: Path, *args: str, env: dict[str, str]) -> None:
        self.name, self.log_path = name, log
        environment = [f"--env={k}={v}" for k, v in env.items()]
        command = [
            "podman", "run", "--rm", f"--name={name}", "--network=host", "--read-only",
            "--tmpfs=/tmp", "--mount=type=tmpfs,destination=/var/lib/mirrorwatch,chown=true",
            f"--volume={config}:{CONFIG_IN_IMAGE}:ro", *environment, image, *args, "--config", CONFIG_IN_IMAGE,
        ]  # fmt: skip
        with log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=PODMAN_ENV)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def http_base(self, timeout_s: float = 90) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"{self.name} exited: {self.log()[-3000:]}"
            if found := re.search(r"HTTP API on http://127\.0\.0\.1:(\d+)", self.log()):
                return f"http://127.0.0.1:{found.group(1)}"
            time.sleep(0.2)
        raise AssertionError(f"{self.name} served no HTTP API: {self.log()[-3000:]}")

    def stop(self) -> int:
        """`podman stop --time 10`: SIGTERM to tini (PID 1), which forwards it; SIGKILL after 10 s. Exit code."""
        podman("stop", "--time=10", self.name, check=False)
        return self.process.wait(timeout=60)


@pytest.fixture
def containers(tmp_path: Path) -> Iterator[Callable[..., Container]]:
    started: list[Container] = []

    def start(image: str, command: str, config: Path, *args: str, env: dict[str, str]) -> Container:
        name = f"mirrorwatch-test-{command}-{os.getpid()}-{len(started)}"
        container = Container(image, name, config, tmp_path / f"{name}.log", command, *args, env=env)
        started.append(container)
        return container

    yield start
    for container in started:
        if container.process.poll() is None:
            podman("rm", "--force", "--time=0", container.name, check=False)
            container.process.wait(timeout=60)


def sample(base: str, family: str, accept: Callable[[float], bool], timeout_s: float = 120, **labels: str) -> float:
    """The sample of `family` with these labels (among others) on base/metrics, once `accept` takes its value."""
    deadline, seen = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
            seen = answer.read().decode()
        for found in re.finditer(rf"^{family}{{([^}}]*)}} (\S+)$", seen, flags=re.MULTILINE):
            has = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
            if labels.items() <= has.items() and accept(float(found.group(2))):
                return float(found.group(2))
        time.sleep(1)
    raise AssertionError(f"no {family} with {labels} as expected at {base}/metrics:\n{seen[-3000:]}")


def test_the_image_mirrors_monitors_and_probes_and_stops_cleanly_on_sigterm(
    image: str,
    containers: Callable[..., Container],
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    unique: Callable[[str], str],
) -> None:
    version = podman("run", "--rm", image, "--version").stdout
    assert version.startswith("mirrorwatch 0.1.0\nlibrdkafka ")
    # no Streamlit, pandas or pyarrow in the image: the console's extra is named, not a traceback
    console = podman("run", "--rm", image, "console", "--api", "http://127.0.0.1:9", check=False)
    assert console.returncode == 1 and "pip install 'mirrorwatch[console]'" in console.stderr, console.stderr
    assert "Traceback" not in console.stderr

    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", 2)
    produce(source, "source", topic, [Record(value=f"v{i}".encode(), partition=i % 2) for i in range(RECORDS)])
    link, group = unique("image"), unique("image-group")
    path = write_config(
        [{"name": link, "source": "source", "target": "target", "topics": {"include": [topic]}, "group_id": group}],
        canary={"enabled": True, "interval_seconds": 2, "topic": unique("mirrorwatch.canary")},
        monitor={"interval_seconds": 2},
        http={"host": "127.0.0.1", "port": 0},
    )
    document = yaml.safe_load(path.read_text())
    # a value the config takes from the container's environment, as a password would be
    document["clusters"]["source"].setdefault("properties", {})["client.id"] = "${MIRRORWATCH_CLIENT_ID}"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o644)  # read by the image's user
    env = {"MIRRORWATCH_CLIENT_ID": "from-the-environment"}

    mirror = containers(image, "mirror", path, "--link", link, env=env)
    monitor = containers(image, "monitor", path, env=env)
    canary = containers(image, "canary", path, env=env)
    wait_for_commits(source, "source", group, topic, 2, timeout_s=120)
    got = sorted(r.value or b"" for r in read_to_end(target, "target", topic, 2))
    assert got == sorted(f"v{i}".encode() for i in range(RECORDS))  # every record, none twice

    # the monitor sees the mirror container's worker (its progress topic) and the link caught up on every partition
    api = monitor.http_base()
    assert sample(api, "mirrorwatch_mirror_workers", lambda v: v >= 1, link=link) >= 1
    for partition in ("0", "1"):
        lag = sample(api, "mirrorwatch_mirror_replication_lag_records", lambda v: True, link=link, topic=topic,
                     partition=partition)  # fmt: skip
        assert lag == 0
    # the canary's probes crossed the mirror container and were read back
    assert sample(canary.http_base(), "mirrorwatch_canary_probes_received_total", lambda v: v >= 1, link=link) >= 1

    codes = {c.name.split("-")[2]: c.stop() for c in (mirror, monitor, canary)}
    assert codes == {"mirror": 0, "monitor": 0, "canary": 0}, "\n".join(
        c.log()[-2000:] for c in (mirror, monitor, canary)
    )
    for container in (mirror, monitor, canary):
        assert "Traceback" not in container.log(), container.log()[-3000:]
