"""The Prometheus rules: committed file = generated file, promtool accepts them and their unit tests pass, every
metric they read is exported, thresholds can be overridden and bad overrides are refused."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from alerts.rules import DEFAULT_THRESHOLDS, METRICS_USED, build_rules, parse_overrides, render
from canary.exporter import CANARY_METRIC_NAMES
from failover.exporter import FAILOVER_METRIC_NAMES
from monitor.exporter import METRIC_NAMES

ALERTS = Path(__file__).resolve().parents[2] / "alerts"
RULES = ALERTS / "mirrorwatch.rules.yml"
RUNBOOKS = ALERTS.parent / "docs" / "runbooks"
PROMTOOL = shutil.which("promtool")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL, "promtool is missing: scripts/setup.sh installs Debian's prometheus package"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


def test_the_committed_rules_are_the_generated_ones() -> None:
    assert RULES.read_text() == render(build_rules()), (
        "run: mirrorwatch alerts build --out alerts/mirrorwatch.rules.yml"
    )


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(ALERTS / "tests" / "mirrorwatch.test.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout + tested.stderr


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    tests = yaml.safe_load((ALERTS / "tests" / "mirrorwatch.test.yml").read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    alerts = [r["alert"] for g in build_rules()["groups"] for r in g["rules"] if "alert" in r]
    for alert in alerts:
        expected = [case["exp_alerts"] for case in cases if case["alertname"] == alert]
        assert any(expected) and any(not e for e in expected), f"{alert}: needs a firing and a silent case"


def test_every_alert_names_its_subject_and_has_severity_and_annotations() -> None:
    for group in build_rules()["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
            assert "{{ $labels." in rule["annotations"]["summary"], rule["alert"]


def test_every_alert_links_its_runbook_which_says_what_it_means_how_to_confirm_act_and_escalate() -> None:
    """docs/runbooks/<alert>.md (issue #64): a page per alert, none for an alert that is gone, listed in the index."""
    alerts = {r["alert"]: r for g in build_rules()["groups"] for r in g["rules"] if "alert" in r}
    base = DEFAULT_THRESHOLDS["runbook_base_url"]
    pages = {path.stem: path for path in RUNBOOKS.glob("Mirrorwatch*.md")} | {
        path.stem: path for path in RUNBOOKS.glob("Kafka*.md")
    }
    assert sorted(pages) == sorted(alerts)
    index = (RUNBOOKS / "README.md").read_text()
    for name, rule in alerts.items():
        assert rule["annotations"]["runbook_url"] == f"{base}/{name}.md"
        text = pages[name].read_text()
        headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
        assert headings == ["What it means", "Confirm", "Act", "Escalate"], name
        assert text.startswith(f"# {name}\n\nSeverity: **{rule['labels']['severity']}**.")
        assert f"[{name}]({name}.md)" in index
    moved = build_rules(parse_overrides(["runbook_base_url=https://wiki.example/mirrorwatch"]))
    urls = {r["annotations"]["runbook_url"] for g in moved["groups"] for r in g["rules"] if "alert" in r}
    assert urls == {f"https://wiki.example/mirrorwatch/{name}.md" for name in alerts}
    for bad in ("wiki.example/mirrorwatch", "https://wiki.example/", "https://wiki.example/{{ $labels.link }}"):
        with pytest.raises(ValueError, match="runbook_base_url"):
            parse_overrides([f"runbook_base_url={bad}"])


def test_every_metric_the_rules_read_is_exported() -> None:
    exported = set(METRIC_NAMES) | set(CANARY_METRIC_NAMES) | set(FAILOVER_METRIC_NAMES)
    assert set(METRICS_USED) <= exported
    read = set()
    for group in build_rules()["groups"]:
        for rule in group["rules"]:
            read |= set(re.findall(r"\b((?:kafka|burrow|mirrorwatch)_[a-z0-9_]+)", rule["expr"]))
    read = {re.sub(r"_bucket$", "", name) for name in read}
    assert read == set(METRICS_USED)


def test_thresholds_are_overridden_and_bad_overrides_refused(tmp_path: Path) -> None:
    built = render(build_rules(parse_overrides(["replication_lag_seconds=300", "replication_lag_for=15m"])))
    assert "mirrorwatch:mirror_replication_lag_seconds:max > 300" in built and "for: 15m" in built
    path = tmp_path / "custom.rules.yml"
    path.write_text(built)
    assert promtool("check", "rules", str(path)).returncode == 0
    for bad, message in [
        ("replication_lag=5", "NAME one of"),
        ("replication_lag_seconds", "NAME=VALUE"),
        ("replication_lag_for=5 minutes", "Prometheus duration"),
        ("consumer_lag_seconds=lots", "a number"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_overrides([bad])
    assert set(DEFAULT_THRESHOLDS) >= {"replication_lag_seconds", "canary_p99_seconds", "consumer_lag_seconds"}


def test_cli_builds_the_rules_and_refuses_a_bad_threshold_with_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "r.yml"
    command = [sys.executable, "-m", "mirrorwatch.cli", "alerts", "build"]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and out.read_text() == RULES.read_text()
    bad = subprocess.run([*command, "--set", "nope=1"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "'nope=1'" in bad.stderr
