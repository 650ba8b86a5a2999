"""The HTTP API's protection (`http.web_config_file`), in the shape of the web configuration file of Prometheus'
exporters (`--web.config.file` of node_exporter or kafka_exporter), so that operators reuse the file they have:

    tls_server_config:
      cert_file: server.crt                 # PEM; relative paths are relative to this file
      key_file: server.key
      client_auth_type: NoClientCert        # or RequireAndVerifyClientCert, VerifyClientCertIfGiven
      client_ca_file: ca.crt                # the CA client certificates must be signed by
      min_version: TLS12                    # or TLS13
    basic_auth_users:                       # user: bcrypt hash (htpasswd -nBC 10 USER | cut -d: -f2)
      prometheus: $2y$10$...

Every request needs one of the users' credentials when `basic_auth_users` is set (`/healthz` too, as with the
exporters). The file is read when the HTTP API starts; a problem is a `ConfigError` naming the file and the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt

from kernel.errors import ConfigError, ConfigProblem
from kernel.yaml_file import read_yaml

__all__ = ["BasicAuth", "WebConfig", "load_web_config", "parse_web_config"]

CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version")
BCRYPT = re.compile(rb"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")


@dataclass(frozen=True)
class WebConfig:
    source: str
    cert_file: Path | None = None
    key_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    users: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    def describe(self) -> str:
        """What protects the API, for the log: "TLS, basic auth (2 users)"."""
        said = ["TLS" if self.tls else "no TLS"]
        if self.client_auth_type != "NoClientCert":
            said.append(f"client certificates ({self.client_auth_type})")
        said.append(f"basic auth ({len(self.users)} users)" if self.users else "no basic auth")
        return ", ".join(said)

    def server_context(self) -> ssl.SSLContext:
        """The TLS context the server listens with (call only when `tls`)."""
        assert self.cert_file is not None and self.key_file is not None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = VERSIONS[self.min_version]
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file is not None:
                context.load_verify_locations(cafile=self.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
            problem = ConfigProblem("tls_server_config", f"the certificate, key or CA cannot be used: {reason}")
            raise ConfigError([problem], self.source) from None
        context.verify_mode = CLIENT_AUTH[self.client_auth_type]
        return context


def load_web_config(path: str | Path) -> WebConfig:
    """Read and check the web configuration file at `path` (its certificate and key are loaded once, to say now
    rather than at the first connection that they do not fit)."""
    config = parse_web_config(read_yaml(path, "web config file"), source=str(path), base=Path(path).parent)
    if config.tls:
        config.server_context()
    return config


def parse_web_config(doc: object, *, source: str, base: Path) -> WebConfig:
    """The web configuration in `doc` (a loaded YAML document); every problem at once."""
    problems: list[ConfigProblem] = []
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise ConfigError([ConfigProblem("", "not a mapping of tls_server_config and basic_auth_users")], source)
    for key in doc:
        if key not in ("tls_server_config", "basic_auth_users"):
            problems.append(ConfigProblem(str(key), "not supported (tls_server_config and basic_auth_users are)"))
    tls = doc.get("tls_server_config") or {}
    users = doc.get("basic_auth_users") or {}
    if not isinstance(tls, dict):
        problems.append(ConfigProblem("tls_server_config", "must be a mapping"))
        tls = {}
    if not isinstance(users, dict):
        problems.append(ConfigProblem("basic_auth_users", "must be a mapping of user to bcrypt hash"))
        users = {}
    for key in tls:
        if key not in TLS_KEYS:
            problems.append(ConfigProblem(f"tls_server_config.{key}", f"not supported ({', '.join(TLS_KEYS)} are)"))

    def path_of(key: str) -> Path | None:
        value = tls.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            problems.append(ConfigProblem(f"tls_server_config.{key}", "must be a file path"))
            return None
        found = base / Path(value).expanduser()
        if not found.is_file():
            problems.append(ConfigProblem(f"tls_server_config.{key}", f"no such file: {found}"))
        return found

    cert, key, ca = path_of("cert_file"), path_of("key_file"), path_of("client_ca_file")
    if tls and (tls.get("cert_file") is None or tls.get("key_file") is None):
        problems.append(ConfigProblem("tls_server_config", "cert_file and key_file are both needed for TLS"))
    client_auth = tls.get("client_auth_type", "NoClientCert")
    if client_auth not in CLIENT_AUTH:
        problems.append(ConfigProblem("tls_server_config.client_auth_type", f"one of {', '.join(CLIENT_AUTH)}"))
    elif client_auth != "NoClientCert" and tls.get("client_ca_file") is None:
        problems.append(ConfigProblem("tls_server_config.client_ca_file", f"needed with {client_auth}"))
    min_version = tls.get("min_version", "TLS12")
    if min_version not in VERSIONS:
        problems.append(ConfigProblem("tls_server_config.min_version", f"one of {', '.join(VERSIONS)}"))
    hashes: dict[str, bytes] = {}
    for user, hashed in users.items():
        if not isinstance(user, str) or not user or ":" in user:
            problems.append(ConfigProblem("basic_auth_users", "a user name is a non-empty string without ':'"))
        elif not isinstance(hashed, str) or not BCRYPT.match(hashed.encode("ascii", "replace")):
            # never echo the value: someone may have put a password here instead of its hash
            problems.append(ConfigProblem(f"basic_auth_users.{user}", "not a bcrypt hash ($2y$10$... of 60 chars)"))
        else:
            hashes[user] = hashed.encode("ascii")
    if problems:
        raise ConfigError(problems, source)
    return WebConfig(
        source=source,
        cert_file=cert,
        key_file=key,
        client_auth_type=str(client_auth),
        client_ca_file=ca,
        min_version=str(min_version),
        users=hashes,
    )


class BasicAuth:
    """Checks an `Authorization: Basic ...` header against bcrypt hashes. A bcrypt check costs tens of milliseconds
    by design, so credentials that passed are remembered (as a keyed digest, never in clear) and a scrape every few
    seconds costs one check, not one per request; wrong credentials are checked every time."""

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self._users = dict(users)
        self._key = bcrypt.gensalt()  # random per process: the remembered digests mean nothing elsewhere
        self._passed: set[bytes] = set()
        self._lock = threading.Lock()

    def allows(self, authorization: str | None) -> bool:
        if not authorization or authorization[:6].lower() != "basic ":
            return False
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user_bytes, colon, password = decoded.partition(b":")
        hashed = self._users.get(user_bytes.decode("utf-8", "replace"))
        if not colon or hashed is None:
            return False
        digest = hmac.new(self._key, decoded, hashlib.sha256).digest()
        with self._lock:
            if digest in self._passed:
                return True
        try:
            ok = bcrypt.checkpw(password, hashed)
        except ValueError:  # a password over bcrypt's 72 bytes
            return False
        if ok:
            with self._lock:
                if len(self._passed) > 1000:
                    self._passed.clear()
                self._passed.add(digest)
        return ok
