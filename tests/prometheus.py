"""A real Prometheus (Debian's package) for tests: started on a free port, scraping a mirrorwatch HTTP API every
second with the shipped rules, stopped at the end."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from alerts.rules import build_rules, render
from kernel.processes import die_with_parent, free_port, stop_process
from kernel.wait import wait_until

__all__ = ["firing", "get_json", "prometheus_server"]


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@contextlib.contextmanager
def prometheus_server(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """`start(port, thresholds, labels=None, scrape=None)`: a real Prometheus scraping 127.0.0.1:PORT every second
    with the shipped rules and these thresholds, adding `labels` to every series of the target (as a Kubernetes
    scrape adds `namespace`) and `scrape`'s keys to the scrape config (scheme, tls_config, basic_auth); returns its
    URL. Every Prometheus started is stopped at the end."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: scripts/setup.sh installs Debian's prometheus package"
    started: list[subprocess.Popen[bytes]] = []

    def start(
        target_port: int,
        thresholds: Mapping[str, str],
        labels: Mapping[str, str] | None = None,
        scrape: Mapping[str, Any] | None = None,
    ) -> str:
        rules = tmp_path / "mirrorwatch.rules.yml"
        rules.write_text(render(build_rules(dict(thresholds))))
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(rules)],
                    "scrape_configs": [
                        {
                            "job_name": "mirrorwatch",
                            "static_configs": [{"targets": [f"127.0.0.1:{target_port}"], "labels": dict(labels or {})}],
                            **(scrape or {}),
                        }
                    ],
                }
            )
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        started.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,  # noqa: PLW1509 -- only prctl: dies with pytest, never orphaned
            )
        )
        url = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: get_json(f"{url}/api/v1/status/runtimeinfo")["status"] == "success",
            timeout_s=60,
            interval_s=0.5,
            ignore=(urllib.error.URLError, ConnectionError),
            description="Prometheus to start",
        )
        return url

    try:
        yield start
    finally:
        for process in started:
            stop_process(process)


def firing(url: str) -> set[tuple[str, str]]:
    alerts = get_json(f"{url}/api/v1/alerts")["data"]["alerts"]
    return {(a["labels"]["alertname"], a["labels"].get("link", "")) for a in alerts if a["state"] == "firing"}
