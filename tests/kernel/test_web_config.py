"""The HTTP API's web config (TLS, basic auth) in the shape of Prometheus' exporters' --web.config.file: what is
accepted, every problem named with its key (never the value of a would-be hash), and the credentials check."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

from kernel.config import parse_config
from kernel.errors import ConfigError
from kernel.web_config import BasicAuth, load_web_config, parse_web_config
from tests.tls import make_certificates

HASH = bcrypt.hashpw(b"s3cret-pw", bcrypt.gensalt(rounds=4)).decode()
HASH_2Y = "$2y$" + HASH[4:]  # htpasswd's prefix, as exporters' docs generate it


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _problems(doc: Any, base: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_web_config(doc, source="web.yml", base=base)
    return [str(p) for p in info.value.problems]


def test_the_api_listens_on_loopback_unless_told_otherwise() -> None:
    config = parse_config({"clusters": {"a": {"bootstrap_servers": "x:9092"}}}, env={})
    assert config.http.host == "127.0.0.1"
    assert config.http.web_config_file is None


def test_an_exporters_web_config_is_read_paths_relative_to_it(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "tls")
    (tmp_path / "web.yml").write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {
                    "cert_file": "tls/server.crt",
                    "key_file": "tls/server.key",
                    "client_auth_type": "RequireAndVerifyClientCert",
                    "client_ca_file": "tls/ca.crt",
                    "min_version": "TLS13",
                },
                "basic_auth_users": {"prometheus": HASH_2Y, "console": HASH},
            }
        )
    )
    web = load_web_config(tmp_path / "web.yml")
    assert web.tls and web.cert_file == certs.cert and web.client_ca_file == certs.ca
    assert set(web.users) == {"prometheus", "console"}
    assert web.describe() == "TLS, client certificates (RequireAndVerifyClientCert), basic auth (2 users)"
    assert web.server_context().verify_mode.name == "CERT_REQUIRED"


def test_basic_auth_alone_and_an_empty_file_are_fine(tmp_path: Path) -> None:
    web = parse_web_config({"basic_auth_users": {"p": HASH}}, source="web.yml", base=tmp_path)
    assert not web.tls and web.describe() == "no TLS, basic auth (1 users)"
    assert parse_web_config(None, source="web.yml", base=tmp_path).describe() == "no TLS, no basic auth"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"http_server_config": {"http2": True}}, "http_server_config: not supported"),
        ({"tls_server_config": {"cert_file": "a.crt"}}, "tls_server_config: cert_file and key_file are both needed"),
        (
            {"tls_server_config": {"cert_file": "a.crt", "key_file": "a.key"}},
            "tls_server_config.cert_file: no such file",
        ),
        ({"tls_server_config": {"cipher_suites": []}}, "tls_server_config.cipher_suites: not supported"),
        ({"tls_server_config": {"client_auth_type": "Sometimes"}}, "tls_server_config.client_auth_type: one of"),
        (
            {"tls_server_config": {"client_auth_type": "RequireAndVerifyClientCert"}},
            "tls_server_config.client_ca_file: needed with RequireAndVerifyClientCert",
        ),
        ({"tls_server_config": {"min_version": "SSL3"}}, "tls_server_config.min_version: one of TLS12, TLS13"),
        ({"basic_auth_users": ["p"]}, "basic_auth_users: must be a mapping"),
        ({"basic_auth_users": {"a:b": HASH}}, "basic_auth_users: a user name is a non-empty string without ':'"),
        ({"basic_auth_users": {"p": "$2b$04$short"}}, "basic_auth_users.p: not a bcrypt hash"),
        (["tls_server_config"], "not a mapping"),
    ],
)
def test_each_problem_is_named_by_its_key(doc: Any, expected: str, tmp_path: Path) -> None:
    problems = _problems(doc, tmp_path)
    assert any(p.startswith(expected) for p in problems), problems


def test_a_password_written_where_its_hash_belongs_is_never_echoed(tmp_path: Path) -> None:
    problems = _problems({"basic_auth_users": {"prometheus": "hunter2-in-clear"}}, tmp_path)
    assert problems == ["basic_auth_users.prometheus: not a bcrypt hash ($2y$10$... of 60 chars)"]
    assert "hunter2" not in " ".join(problems)


def test_a_certificate_that_does_not_load_is_said_when_the_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.crt").write_text("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")
    (tmp_path / "a.key").write_text("nor this\n")
    (tmp_path / "web.yml").write_text("tls_server_config: {cert_file: a.crt, key_file: a.key}\n")
    with pytest.raises(ConfigError) as info:
        load_web_config(tmp_path / "web.yml")
    assert str(info.value.problems[0]).startswith("tls_server_config: the certificate, key or CA cannot be used")
    assert info.value.source == str(tmp_path / "web.yml")


def test_a_missing_or_broken_web_config_file_is_one_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read web config file"):
        load_web_config(tmp_path / "nope.yml")
    (tmp_path / "bad.yml").write_bytes(b"basic_auth_users: {p: \xff}\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_web_config(tmp_path / "bad.yml")


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        (_basic("prometheus", "s3cret-pw"), True),
        ("basic " + _basic("prometheus", "s3cret-pw")[6:], True),  # the scheme is case-insensitive
        (_basic("prometheus", "s3cret-px"), False),
        (_basic("nobody", "s3cret-pw"), False),
        (_basic("prometheus", "x" * 100), False),  # over bcrypt's 72 bytes: refused, not an error
        ("Basic !!!not-base64", False),
        ("Basic " + base64.b64encode(b"no-colon").decode(), False),
        ("Bearer abc", False),
        ("", False),
        (None, False),
    ],
)
def test_credentials(header: str | None, allowed: bool) -> None:
    assert BasicAuth({"prometheus": HASH_2Y.encode()}).allows(header) is allowed


def test_credentials_that_passed_are_not_hashed_again_wrong_ones_always(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuth({"prometheus": HASH.encode()})
    checks: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        checks.append(password)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    for _ in range(3):
        assert auth.allows(_basic("prometheus", "s3cret-pw"))
        assert not auth.allows(_basic("prometheus", "wrong"))
    assert checks == [b"s3cret-pw", b"wrong", b"wrong", b"wrong"]
