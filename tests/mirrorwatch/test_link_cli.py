"""`mirrorwatch link pause|resume|budget|status` without a running worker (no broker is asked: the config's progress
topic is off, so the control document is this host's file alone): what it writes, what it says, and bad input refused
with the path and the reason, exit 2, the control document unchanged; with the progress topic on and the target not
answering, the change is made on this host and said to be made only here. The running mirror's side, on one host and
on several, is tests/mirror/test_pause.py."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kernel.link_control import control_path, read_control
from mirrorwatch.cli import cli

CONFIG = """
clusters:
  source: {bootstrap_servers: "127.0.0.1:1"}
  target: {bootstrap_servers: "127.0.0.1:2"}
state_dir: STATE
progress: {enabled: false}
links:
  - {name: dr, source: source, target: target, topics: {include: ["orders\\\\..*"]}}
  - {name: big, source: source, target: target, topics: {include: [".*"]}, engine: spark}
"""


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "mirrorwatch.yaml"
    path.write_text(CONFIG.replace("STATE", str(tmp_path / "state")))
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["link", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_pause_status_resume_of_a_link_that_no_worker_runs(tmp_path: Path) -> None:
    config = str(config_file(tmp_path))
    code, out, _ = run("pause", "--config", config, "--link", "dr", "--topic", "orders.eu", "--reason", "reindex")
    assert code == 0
    assert out.splitlines() == [
        "topics orders.eu of link dr: paused (link state: partly paused)",
        "no worker of link dr runs: it starts so",
    ]
    code, out, _ = run("status", "--config", config)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("link dr: partly paused (topics orders.eu) since ")
    assert lines[0].endswith(": reindex; bandwidth budget unlimited")
    assert lines[1:] == [
        "  no worker of it runs",
        "link big: active; bandwidth budget unlimited",
        "  no worker of it runs",
    ]
    code, out, _ = run("status", "--config", config, "--link", "dr", "--json")
    [entry] = json.loads(out)
    assert (entry["state"], entry["paused_topics"], entry["engine"], entry["workers"]) == (
        "partly paused",
        ["orders.eu"],
        "python",
        [],
    )
    assert run("resume", "--config", config, "--link", "dr", "--topic", "orders.eu")[0] == 0
    assert read_control(tmp_path / "state", "dr").state == "active"


def test_bad_input_is_refused_naming_what_and_changes_nothing(tmp_path: Path) -> None:
    config = str(config_file(tmp_path))
    assert run("pause", "--config", config, "--link", "dr")[0] == 0  # the whole link
    before = control_path(tmp_path / "state", "dr").read_text()
    for args, said in [
        (("pause", "--link", "nope"), "--link: no link named 'nope' (links: dr, big)"),
        (("pause", "--link", "big"), "links[1].engine: spark: a running Structured Streaming query cannot pause"),
        (("pause", "--link", "dr", "--topic", "payments"), "--topic: 'payments' is not a topic link dr mirrors"),
        (("resume", "--link", "dr", "--topic", "orders.eu"), "--topic: link dr is paused as a whole"),
    ]:
        code, out, err = run(*args, "--config", config)
        assert (code, out) == (2, ""), (args, out, err)
        assert said in err, (args, err)
    assert control_path(tmp_path / "state", "dr").read_text() == before


def test_budget_set_lifted_and_given_back_to_the_configs(tmp_path: Path) -> None:
    """`mirrorwatch link budget`: the operator's rate over the config's (`max_bytes_per_second: 2MB` here), `none`,
    `config`; a rate that is none is refused naming the flag, exit 2, nothing written. A running link obeying it:
    tests/mirror/test_budget.py."""
    path = config_file(tmp_path)
    path.write_text(path.read_text().replace("{name: dr,", "{name: dr, max_bytes_per_second: 2MB,"))
    config = str(path)
    assert run("status", "--config", config, "--link", "dr")[1].startswith("link dr: active; bandwidth budget 2.0 MB/s")
    code, out, _ = run("budget", "--config", config, "--link", "dr", "--max-bytes-per-second", "500KiB/s")
    assert (code, out.splitlines()[0]) == (0, "link dr: bandwidth budget 512.0 KB/s (set)")
    assert read_control(tmp_path / "state", "dr").max_bytes_per_second == 512_000
    assert run("budget", "--config", config, "--link", "dr", "--max-bytes-per-second", "none")[1].startswith(
        "link dr: bandwidth budget unlimited (set)"
    )
    assert run("budget", "--config", config, "--link", "dr", "--max-bytes-per-second", "config")[1].startswith(
        "link dr: bandwidth budget 2.0 MB/s (the config's)"
    )
    before = control_path(tmp_path / "state", "dr").read_text()
    code, out, err = run("budget", "--config", config, "--link", "dr", "--max-bytes-per-second", "fast")
    assert (code, out) == (2, "") and "--max-bytes-per-second: 'fast' is not a rate in bytes per second" in err
    assert control_path(tmp_path / "state", "dr").read_text() == before


def test_a_change_the_targets_progress_topic_does_not_take_is_made_here_and_said_to_be_only_here(
    tmp_path: Path,
) -> None:
    path = config_file(tmp_path)
    path.write_text(path.read_text().replace("progress: {enabled: false}\n", ""))
    code, out, err = run("pause", "--config", str(path), "--link", "dr", "--reason", "target away")
    assert code == 0, (out, err)
    assert out.splitlines()[0] == "link dr: paused (link state: paused)"
    assert "link dr: changed on this host only: " in err and "cluster 'target'" in err, err
    assert "the link's workers on other hosts do not know yet" in err
    assert read_control(tmp_path / "state", "dr").paused  # this host's workers obey it
