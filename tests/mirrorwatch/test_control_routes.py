"""Pause and resume through the HTTP API (mirrorwatch.control_routes), served by the monitor's real HTTP server
with its basic auth (no broker is asked): a change needs credentials, an API without basic auth refuses every change
(403), bad input is refused with the reason and writes nothing. The running mirror's side: tests/mirror/test_pause.py
(the same control document)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from starlette.applications import Starlette

from kernel.config import MirrorwatchConfig, load_config
from kernel.link_control import control_path, read_control
from kernel.web_config import WebConfig
from mirrorwatch.control_routes import control_routes
from monitor.http import HttpServer
from tests.mirrorwatch.test_link_cli import config_file

PASSWORD = "ops-Pw-2231"


def _call(url: str, method: str = "POST", password: str | None = PASSWORD) -> tuple[int, dict[str, Any]]:
    headers = (
        {} if password is None else {"Authorization": "Basic " + base64.b64encode(f"ops:{password}".encode()).decode()}
    )
    request = urllib.request.Request(url, method=method, headers=headers, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.load(response)
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return int(exc.code), json.loads(body) if body.startswith(b"{") else {}


def _serve(config: MirrorwatchConfig, web: WebConfig | None) -> Iterator[str]:
    server = HttpServer(Starlette(routes=control_routes(config, web)), "127.0.0.1", 0, web)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/mirror/links"
    finally:
        server.stop()


@pytest.fixture
def config(tmp_path: Path) -> MirrorwatchConfig:
    return load_config(config_file(tmp_path))


@pytest.fixture
def protected(config: MirrorwatchConfig) -> Iterator[str]:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4))
    yield from _serve(config, WebConfig(source="test", users={"ops": hashed}))


@pytest.fixture
def open_api(config: MirrorwatchConfig) -> Iterator[str]:
    yield from _serve(config, None)


def test_a_link_is_paused_and_resumed_with_the_apis_credentials(protected: str, config: MirrorwatchConfig) -> None:
    assert _call(f"{protected}/dr/pause", password=None)[0] == 401
    assert _call(f"{protected}/dr/pause", password="wrong")[0] == 401
    code, body = _call(f"{protected}/dr/pause?topic=orders.eu&topic=orders.us&reason=reindex")
    assert code == 200
    assert (body["state"], body["paused_topics"], body["reason"], body["by"]) == (
        "partly paused",
        ["orders.eu", "orders.us"],
        "reindex",
        "ops@http",
    )
    assert read_control(config.state_path, "dr").as_json() == body  # what the workers read
    assert _call(f"{protected}/dr/control", method="GET") == (200, body)
    code, body = _call(f"{protected}/dr/resume?topic=orders.eu")
    assert (code, body["state"], body["paused_topics"]) == (200, "partly paused", ["orders.us"])
    code, body = _call(f"{protected}/dr/resume")
    assert (code, body["state"]) == (200, "active")


def test_a_links_budget_is_set_lifted_and_given_back_to_the_config_with_the_apis_credentials(
    protected: str, config: MirrorwatchConfig
) -> None:
    """`POST /mirror/links/{link}/budget?max_bytes_per_second=`: a rate as the config writes one, `none`, `config`;
    what the workers read (tests/mirror/test_budget.py: a running link obeys it)."""
    assert _call(f"{protected}/dr/budget?max_bytes_per_second=1MB", password=None)[0] == 401
    code, body = _call(f"{protected}/dr/budget?max_bytes_per_second=1MB")
    assert (code, body["max_bytes_per_second"], body["state"], body["by"]) == (200, 1_000_000, "active", "ops@http")
    assert read_control(config.state_path, "dr").as_json() == body
    assert _call(f"{protected}/dr/budget?max_bytes_per_second=none")[1]["max_bytes_per_second"] == 0
    assert _call(f"{protected}/dr/budget?max_bytes_per_second=config")[1]["max_bytes_per_second"] is None
    before = control_path(config.state_path, "dr").read_text()
    for query in ("max_bytes_per_second=fast", "max_bytes_per_second=-1MB", ""):
        code, body = _call(f"{protected}/dr/budget?{query}")
        assert (code, body.get("error")) == (400, True), (query, body)
        assert "is not a rate in bytes per second" in body["message"] or "at least 1 byte" in body["message"]
    assert control_path(config.state_path, "dr").read_text() == before


def test_bad_requests_are_refused_with_the_reason_and_write_nothing(protected: str, config: MirrorwatchConfig) -> None:
    assert _call(f"{protected}/dr/pause")[0] == 200  # the whole link
    before = control_path(config.state_path, "dr").read_text()
    for path, status, said in [
        ("/nope/pause", 404, "no link named 'nope'"),
        ("/big/pause", 400, "spark: a running Structured Streaming query cannot pause"),
        ("/dr/pause?topic=payments", 400, "'payments' is not a topic link dr mirrors"),
        ("/dr/resume?topic=orders.eu", 400, "link dr is paused as a whole"),
        ("/dr/pause?reason=" + "x" * 1001, 400, "at most 1000 topics"),
    ]:
        code, body = _call(protected + path)
        assert (code, body.get("error")) == (status, True), (path, body)
        assert said in body["message"], (path, body)
    assert _call(f"{protected}/dr/pause", method="GET")[0] == 405
    assert control_path(config.state_path, "dr").read_text() == before


def test_an_api_without_basic_auth_reads_the_state_but_never_changes_it(
    open_api: str, config: MirrorwatchConfig
) -> None:
    code, body = _call(f"{open_api}/dr/pause", password=None)
    assert code == 403 and "needs the API's basic auth" in body["message"]
    assert not control_path(config.state_path, "dr").exists()
    assert _call(f"{open_api}/dr/control", method="GET", password=None) == (
        200,
        read_control(config.state_path, "dr").as_json(),
    )
