"""The HTTP API behind an exporter-style web config (issue #23, must-show 4), on the real clusters: `mirrorwatch
monitor` serves TLS with basic auth on loopback (the default bind, read from the kernel's socket table); a request
without credentials or with wrong ones gets 401, plain HTTP gets nothing; a real Prometheus scrapes it with
credentials and the CA; the console started with a user (its password from the environment) shows the link."""

from __future__ import annotations

import base64
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import bcrypt
import pytest
import yaml

from kernel.config import MirrorwatchConfig
from kernel.processes import free_port, stop_process
from kernel.wait import wait_until
from tests.dashboards.browser import headless_chromium
from tests.processes import MirrorProcess, wait_for_http
from tests.prometheus import get_json
from tests.tls import make_certificates

pytestmark = pytest.mark.integration

SCRAPER_PASSWORD = "scrape-Pw-4417"
CONSOLE_PASSWORD = "console-Pw-9021"


def _listening(port: int) -> set[str]:
    """The local addresses of the sockets listening on `port`, from /proc/net/tcp and tcp6 (the kernel's word)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                if len(address) == 8:
                    found.add(".".join(str(b) for b in reversed(bytes.fromhex(address))))
                else:
                    found.add(address)
    return found


def _status(url: str, context: ssl.SSLContext, user: str | None = None, password: str = "") -> int:
    """The status a GET gets (-401: a 401 without the Basic challenge)."""
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        challenge = exc.headers["WWW-Authenticate"]
        return int(exc.code) if exc.code != 401 or challenge == 'Basic realm="mirrorwatch"' else -401


def test_tls_and_basic_auth_on_loopback_prometheus_and_the_console_get_in_with_credentials(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    prometheus: Callable[..., str],
    tmp_path: Path,
) -> None:
    certs = make_certificates(tmp_path / "tls")
    web = tmp_path / "web.yml"
    users = {"prometheus": SCRAPER_PASSWORD, "console": CONSOLE_PASSWORD}
    hashes = {u: bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=10)).decode() for u, p in users.items()}
    web.write_text(
        yaml.safe_dump({"tls_server_config": {"cert_file": "tls/server.crt", "key_file": "tls/server.key"}})
        + yaml.safe_dump({"basic_auth_users": hashes})
    )
    topic, port = make_topic("source", 1), free_port()
    config = write_config(
        [{"name": "guarded", "source": "source", "target": "target", "topics": {"include": [re.escape(topic)]}}],
        monitor={"interval_seconds": 1},
        canary={"enabled": False},
        http={"port": port, "web_config_file": str(web)},  # no host: the default
    )
    monitor = start_mirror("--config", str(config), command="monitor")
    api = f"https://127.0.0.1:{port}"
    trusted = ssl.create_default_context(cafile=str(certs.ca))
    wait_until(
        lambda: _status(f"{api}/healthz", trusted, "prometheus", SCRAPER_PASSWORD) == 200,
        timeout_s=60,
        interval_s=0.3,
        ignore=(OSError,),
        description="the monitor's API over TLS",
    )

    assert _listening(port) == {"127.0.0.1"}
    assert _status(f"{api}/healthz", trusted) == 401
    assert _status(f"{api}/metrics", trusted, "prometheus", "wrong") == 401
    assert _status(f"{api}/v3/kafka", trusted, "nobody", SCRAPER_PASSWORD) == 401
    assert _status(f"{api}/v3/kafka", trusted, "console", CONSOLE_PASSWORD) == 200
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP on the TLS port: no answer
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)

    url = prometheus(
        port,
        {},
        scrape={
            "scheme": "https",
            "tls_config": {"ca_file": str(certs.ca)},
            "basic_auth": {"username": "prometheus", "password": SCRAPER_PASSWORD},
        },
    )

    def scraped() -> bool:
        query = 'count({job="mirrorwatch",__name__=~"mirrorwatch_mirror_.*",link="guarded"})'
        answer = get_json(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}")["data"]["result"]
        up = get_json(f"{url}/api/v1/query?query=up")["data"]["result"]
        return bool(answer) and [s["value"][1] for s in up] == ["1"]

    wait_until(scraped, timeout_s=60, interval_s=1, description="Prometheus scraping the guarded API (up == 1)")

    console_port = free_port()
    console = subprocess.Popen(
        [
            *(sys.executable, "-m", "mirrorwatch.cli", "console", "--config", str(config)),
            *("--port", str(console_port), "--api-user", "console", "--api-ca-file", str(certs.ca)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "MIRRORWATCH_API_PASSWORD": CONSOLE_PASSWORD, "MIRRORWATCH_CONSOLE_REFRESH": "2"},
    )
    try:
        wait_for_http(f"http://127.0.0.1:{console_port}/_stcore/health", description="the console to serve")
        command_line = Path(f"/proc/{console.pid}/cmdline").read_bytes()
        assert b"--api-user\x00console" in command_line and api.encode() in command_line
        assert CONSOLE_PASSWORD.encode() not in command_line
        with headless_chromium(tmp_path / "profile") as browser:
            tab = browser.open(f"http://127.0.0.1:{console_port}")
            wait_until(
                lambda: "guarded: source → target" in browser.text(tab),
                timeout_s=90,
                interval_s=0.5,
                description="the console's Overview read through TLS and basic auth",
            )
    finally:
        stop_process(console)
        output = console.stdout.read() if console.stdout else b""
    assert monitor.process.poll() is None
    for secret in (SCRAPER_PASSWORD, CONSOLE_PASSWORD):
        assert secret.encode() not in output
        assert secret.encode() not in monitor.log_path.read_bytes()
    assert "basic auth (2 users)" in monitor.log_path.read_text()
