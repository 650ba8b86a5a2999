"""deploy/systemd: the units a host without Kubernetes runs (issue #68), checked as systemd reads them
(`systemd-analyze verify`, every warning counted: it exits 0 on an unknown key or a value it cannot parse and only
says so), and their command lines as mirrorwatch's own CLI parses them."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
UNITS = sorted((CHECKOUT / "deploy" / "systemd").glob("*.service"))
INSTALLED = "/opt/mirrorwatch/bin/mirrorwatch"  # where README's installation puts the command
MIRRORWATCH = Path(sys.executable).with_name("mirrorwatch")  # this suite's, for the check of ExecStart's command


def verify(units: list[Path], where: Path) -> str:
    """`systemd-analyze verify` on copies of the units whose ExecStart names this suite's mirrorwatch (verify checks
    that the command exists); a template is verified as an instance of it. What it said: nothing when all is well."""
    copies = []
    for unit in units:
        name = unit.name.replace("@.service", "@demo.service")
        text = unit.read_text().replace(INSTALLED, str(MIRRORWATCH))
        (where / name).write_text(text)
        copies.append(f"./{name}")
    done = subprocess.run(
        [shutil.which("systemd-analyze") or "systemd-analyze", "verify", *copies],
        capture_output=True,
        text=True,
        cwd=where,
        check=False,
    )
    return f"{done.stdout}{done.stderr}".strip() + ("" if done.returncode == 0 else f" (exit {done.returncode})")


def test_the_units_verify_without_a_word(tmp_path: Path) -> None:
    assert [u.name for u in UNITS] == [
        "mirrorwatch-canary.service",
        "mirrorwatch-mirror@.service",
        "mirrorwatch-monitor.service",
    ]
    assert verify(UNITS, tmp_path) == ""


@pytest.mark.parametrize(
    ("line", "wrong"),
    [("KillSignal=SIGTERM", "KillSignall=SIGTERM"), ("Restart=on-failure", "Restart=sometimes")],
)
def test_a_unit_systemd_would_read_otherwise_fails_the_check(tmp_path: Path, line: str, wrong: str) -> None:
    unit = tmp_path / "src" / "mirrorwatch-monitor.service"
    unit.parent.mkdir()
    unit.write_text((CHECKOUT / "deploy" / "systemd" / unit.name).read_text().replace(line, wrong))
    (tmp_path / "out").mkdir()
    assert "ignoring" in verify([unit], tmp_path / "out")


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_units_command_line_is_one_mirrorwatch_parses(unit: Path) -> None:
    """ExecStart's subcommand and options, as `mirrorwatch SUBCOMMAND --help` lists them (the config path and the
    link name are the host's)."""
    (exec_start,) = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert argv[0] == INSTALLED
    usage = subprocess.run([str(MIRRORWATCH), argv[1], "--help"], capture_output=True, text=True, check=True).stdout
    options = [a for a in argv[2:] if a.startswith("--")]
    assert options and all(o in usage for o in options), (options, usage)
