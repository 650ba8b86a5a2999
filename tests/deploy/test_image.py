"""The container image as a platform team runs it (issue #68): built by `scripts/image.sh` (`make image`: mmdebstrap's
Debian base, podman, no Docker daemon, no registry; cached by its sources' digest, so a run builds it at most once),
then its `mirror`, `monitor` and `canary` run as three containers on the host's network against the local clusters,
as the chart runs them: read-only root filesystem, non-root user, config from a mounted file, a client property from
the environment. Judged from outside: every record read back from the target, the monitor's and the canary's
/metrics scraped (the canary's probes crossed the mirror container), and `podman stop --time 10` (SIGTERM, SIGKILL
after 10 s) ends each with exit 0, which a SIGKILL never gives."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kernel.config import MirrorwatchConfig
from kernel.wait import wait_until
from tests.kafka_helpers import Record, produce, read_to_end, wait_for_commits
from tests.processes import MirrorProcess

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


@dataclass
class Container(MirrorProcess):
    """`podman run` of the image in the foreground (its output in the log file), on the host's network: the log,
    the HTTP API's URL and the waits are MirrorProcess's; only the stop is podman's."""

    name: str = ""

    def stop(self, timeout_s: float = 60) -> int:
        """`podman stop --time 10`: SIGTERM to tini (PID 1), which forwards it; SIGKILL after 10 s. Exit code."""
        podman("stop", "--time=10", self.name, check=False)
        return self.process.wait(timeout=timeout_s)


@pytest.fixture
def containers(tmp_path: Path) -> Iterator[Callable[..., Container]]:
    started: list[Container] = []

    def start(image: str, command: str, config: Path, *args: str, env: dict[str, str]) -> Container:
        name = f"mirrorwatch-test-{command}-{os.getpid()}-{len(started)}"
        run = [
            "podman", "run", "--rm", f"--name={name}", "--network=host", "--read-only",
            "--tmpfs=/tmp", "--mount=type=tmpfs,destination=/var/lib/mirrorwatch,chown=true",
            f"--volume={config}:{CONFIG_IN_IMAGE}:ro", *(f"--env={k}={v}" for k, v in env.items()),
            image, command, *args, "--config", CONFIG_IN_IMAGE,
        ]  # fmt: skip
        log = tmp_path / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(run, stdout=out, stderr=subprocess.STDOUT, env=PODMAN_ENV)
        started.append(Container(process, log, name))
        return started[-1]

    yield start
    for container in started:
        if container.process.poll() is None:
            podman("rm", "--force", "--time=0", container.name, check=False)
            container.process.wait(timeout=60)


def sample(base: str, family: str, accept: Callable[[float], bool], timeout_s: float = 120, **labels: str) -> float:
    """The sample of `family` with these labels (among others) on base/metrics, once `accept` takes its value."""

    def found() -> tuple[float] | None:  # a tuple: a value of 0 is an answer too
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        for metrics in text_string_to_metric_families(text):
            for s in metrics.samples:
                if s.name == family and labels.items() <= s.labels.items() and accept(s.value):
                    return (s.value,)
        return None

    (value,) = wait_until(found, timeout_s=timeout_s, description=f"{family} with {labels} at {base}/metrics")
    return value


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
