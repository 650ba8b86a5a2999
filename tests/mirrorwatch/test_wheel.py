"""The package as a platform team installs it (issue #68): an sdist and a wheel built from the sources (`twine check`
accepts both); the wheel, installed into a fresh virtualenv outside the checkout, runs `mirrorwatch --version` and
`mirrorwatch run` against the local clusters from a directory with no source tree in it. Only the wheel's own files can be imported: the virtualenv sees the pinned
dependencies of the suite's .venv through a path entry, never its editable install of this checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import venv
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from kernel.config import MirrorwatchConfig
from tests.kafka_helpers import Record, produce, read_to_end, wait_for_commits
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

CHECKOUT = Path(__file__).resolve().parents[2]
# what setuptools packages (pyproject.toml, [tool.setuptools.packages.find]) and what the build reads besides
_FIND = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
ROOMS = tuple(pattern.rstrip("*") for pattern in _FIND["include"])
RECORDS = 300


def build_dists(out: Path) -> tuple[Path, Path]:
    """`python -m build` on a copy of the sources (building in the checkout leaves build/ and *.egg-info there, beside
    the tests that read its folders), with the setuptools the lock pins (no download): the sdist, then the wheel built
    from that sdist (so a file the sdist leaves out is missing from the wheel too); both pass `twine check --strict`.
    Returns (sdist, wheel)."""
    source = out / "source"
    for room in ROOMS:
        shutil.copytree(CHECKOUT / room, source / room, ignore=shutil.ignore_patterns("__pycache__", "tests"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(CHECKOUT / name, source / name)
    dist = out / "dist"
    build = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)]
    subprocess.run(build, check=True, capture_output=True)
    (sdist,), (wheel,) = dist.glob("mirrorwatch-*.tar.gz"), dist.glob("mirrorwatch-*.whl")
    twine = [str(Path(sys.executable).parent / "twine"), "check", "--strict", str(sdist), str(wheel)]
    checked = subprocess.run(twine, check=False, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return sdist, wheel


def fresh_virtualenv(where: Path, wheel: Path) -> Path:
    """A virtualenv with the wheel installed by its own pip; the suite's dependencies on its path (a .pth line adds
    the directory only: the editable install's own .pth there is not run). Returns its bin/."""
    venv.EnvBuilder(with_pip=True).create(where)
    bin_dir = where / "bin"
    purelib = Path(
        subprocess.run(
            [str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (purelib / "suite-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(pip, check=True, capture_output=True, cwd=where)
    return bin_dir


def test_the_wheel_installed_outside_the_checkout_runs_the_mirror(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    sdist, wheel = build_dists(tmp_path / "build")
    names = zipfile.ZipFile(wheel).namelist()
    assert "localkafka/resources/kafka-pom.xml" in names and "mirrorwatch/py.typed" in names
    # what it serves and writes out, as package data: the alert rules and the dashboards as committed
    assert {"alerts/mirrorwatch.rules.yml", "dashboards/grafana/mirror-overview.json"} <= set(names)
    assert (
        zipfile.ZipFile(wheel).read("alerts/mirrorwatch.rules.yml")
        == (CHECKOUT / "alerts/mirrorwatch.rules.yml").read_bytes()
    )
    with tarfile.open(sdist) as archive:
        assert "mirrorwatch-0.1.0/README.md" in archive.getnames()
    assert not [n for n in names if n.startswith(("tests/", "bench/", "scripts/"))]
    bin_dir = fresh_virtualenv(tmp_path / "venv", wheel)
    away = tmp_path / "elsewhere"  # no source tree here or above that Python would look at
    away.mkdir()

    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import mirror, mirrorwatch; print(mirrorwatch.__file__, mirror.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=away,
    ).stdout.split()
    assert all(Path(p).is_relative_to(tmp_path / "venv") for p in where), where
    version = subprocess.run(
        [str(bin_dir / "mirrorwatch"), "--version"], check=True, capture_output=True, text=True, cwd=away
    ).stdout
    assert version.startswith("mirrorwatch 0.1.0\nlibrdkafka ") and "tested with Apache Kafka 4." in version

    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", 2)
    produce(source, "source", topic, [Record(value=f"v{i}".encode(), partition=i % 2) for i in range(RECORDS)])
    group = unique("wheel")
    config = write_config(
        [{"name": "wheel", "source": "source", "target": "target", "topics": {"include": [topic]},
          "group_id": group}],
        canary={"enabled": False},
        http={"host": "127.0.0.1", "port": 0},
        state_dir=str(tmp_path / "state"),
    )  # fmt: skip
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(bin_dir / "mirrorwatch"), "run", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=away,
        )
    run = MirrorProcess(process, log)
    try:
        run.http_base()  # it serves its API
        wait_for_commits(source, "source", group, topic, 2, timeout_s=120, while_running=run.running)
    finally:
        exit_code = run.stop(timeout_s=30)
    got = [r.value for r in read_to_end(target, "target", topic, 2)]
    assert sorted(v or b"" for v in got) == sorted(f"v{i}".encode() for i in range(RECORDS))
    assert exit_code == 0 and "Traceback" not in run.log(), run.log()[-3000:]
