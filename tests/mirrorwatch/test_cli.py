"""The CLI contract without a broker: config check/show exit codes and output, clear set-up errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirrorwatch.cli import cli

BAD_CONFIG = r"""
clusters:
  source: {bootstrap_servers: "localhost:19092"}
  target: {bootstrap_servers: "localhost:29092", colour: red}
links:
  - name: orders
    source: source
    target: nyc
    topics: {include: ["orders\\..*", "("]}
"""

SECRET_CONFIG = """
clusters:
  source:
    bootstrap_servers: localhost:19092
    properties: {security.protocol: SASL_SSL, sasl.username: mirror, sasl.password: "${MW_TEST_PW}",
                 ssl.key.password: literal-key-secret}
  target: {bootstrap_servers: "localhost:29092"}
"""


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_config_check_prints_each_problem_as_path_message_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_CONFIG)
    code, out, err = run("config", "check", str(path))
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"mirrorwatch: invalid config {path}:",
        "clusters.target.colour: unknown key 'colour'",
        "links[0].target: unknown cluster 'nyc' (clusters: source, target)",
        "links[0].topics.include[1]: invalid regex '(': missing ), unterminated subpattern",
    ]


def test_config_check_ok(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(SECRET_CONFIG)
    code, out, _ = run("config", "check", str(path), env={"MW_TEST_PW": "pw"})
    assert (code, out) == (0, f"{path}: ok (2 cluster(s), 0 link(s))\n")


def test_config_show_never_prints_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(SECRET_CONFIG)
    code, out, err = run("config", "show", str(path), env={"MW_TEST_PW": "from-the-environment"})
    assert code == 0, err
    assert "from-the-environment" not in out and "literal-key-secret" not in out
    assert "sasl.password: '**********'" in out
    assert "ssl.key.password: '**********'" in out
    assert "sasl.username: mirror" in out


def test_config_check_missing_file_exits_2(tmp_path: Path) -> None:
    code, _, err = run("config", "check", str(tmp_path / "absent.yaml"))
    assert code == 2
    assert "cannot read config file: No such file or directory" in err


def _mirrorwatch(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no java, no mvn
    result = _mirrorwatch(["local", "up", "--state-dir", str(tmp_path / "state")], env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "mirrorwatch: error: Java 17+ is needed to run Kafka but 'java' is not on PATH; "
        "install it with: apt-get install openjdk-17-jre-headless"
    ]
    assert not (tmp_path / "state").exists()


def test_missing_maven_is_one_clear_line(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = shutil.which("java")
    assert java is not None
    (bin_dir / "java").symlink_to(java)
    env = {**os.environ, "PATH": str(bin_dir), "MIRRORWATCH_JAR_CACHE": str(tmp_path / "empty-cache")}
    result = _mirrorwatch(["local", "up", "--state-dir", str(tmp_path / "state")], env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "mirrorwatch: error: Maven ('mvn') is needed once to fetch the kafka-4.1.1 jars from Maven Central; "
        "install it with: apt-get install maven"
    ]


def test_unknown_command_is_usage_error() -> None:
    result = CliRunner().invoke(cli, ["frobnicate"])
    assert result.exit_code == 2


def test_mirror_with_an_unknown_rename_policy_exits_2_without_touching_kafka(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "clusters: {a: {bootstrap_servers: 'h:1'}, b: {bootstrap_servers: 'h:2'}}\n"
        "links: [{name: l, source: a, target: b, rename: {policy: mirror-everything}}]\n"
    )
    code, _, err = run("mirror", "--config", str(path))
    assert code == 2
    assert (
        "links[0].rename: unknown policy 'mirror-everything' (expected one of 'identity', 'prefix', 'format', 'map')"
        in err
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give --config FILE, or the MirrorMaker 1 options"),
        (["--config", "x.yaml", "--whitelist", "a"], "use either --config or the MirrorMaker 1 options, not both"),
        (["--whitelist", "a"], "MirrorMaker 1 style needs --consumer.config, --producer.config and --whitelist"),
        (["--consumer.rebalance.listener", "com.X"], "Java rebalance listeners cannot run in mirrorwatch"),
    ],
)
def test_mirror_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["mirror", *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_a_crash_inside_the_native_client_is_said_in_the_log() -> None:
    """librdkafka bugs segfault the process (confluentinc/librdkafka#5040 killed a monitor): the process's stderr,
    its log, must say so and show where each Python thread was, not end mid-line."""
    crash = (
        "import os, signal; from mirrorwatch import cli; "
        "cli.cli = lambda: os.kill(os.getpid(), signal.SIGSEGV); cli.main()"
    )
    result = subprocess.run([sys.executable, "-c", crash], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "Fatal Python error: Segmentation fault" in result.stderr, result.stderr
    assert "Current thread" in result.stderr or "Thread 0x" in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["mirror", "canary", "run"])
def test_a_state_dir_that_cannot_be_written_exits_2_naming_it_before_any_cluster(tmp_path: Path, command: str) -> None:
    """As in a container with a read-only root filesystem (found so by tests/deploy/test_image.py: a worker's
    traceback when it first wrote its link's notes)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = tmp_path / "state.yaml"
    path.write_text(
        "clusters: {a: {bootstrap_servers: 'h:1'}, b: {bootstrap_servers: 'h:2'}}\n"
        f"links: [{{name: l, source: a, target: b}}]\nstate_dir: {blocker / 'state'}\n"
    )
    code, _, err = run(command, "--config", str(path))
    assert code == 2
    assert f"state_dir: {blocker / 'state'} is not a directory this process can write (Not a directory)" in err
    assert "Traceback" not in err
