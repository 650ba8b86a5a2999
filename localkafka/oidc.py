"""A small OpenID Connect token endpoint for the local clusters' `oidc` mode (`mirrorwatch local up --security oidc`).

What an identity provider (Keycloak, Entra ID, Okta) is to a Kafka cluster that checks OAuth tokens, and no more: the
OAuth 2.0 client-credentials grant (RFC 6749 4.4) at `/token`, its signing keys at `/jwks` (RFC 7517) and the OpenID
discovery document at `/.well-known/openid-configuration`. A client sends its id and secret (HTTP Basic, as librdkafka
and Kafka's Java client do, or in the form) and the scopes it asks for; it gets an RS256-signed JWT whose `sub` is its
client id (the broker's principal, `User:<client id>`), `aud` the brokers' expected audience, `scope` what it asked for
(`kafka` by default), `iat` and `exp` its lifetime apart. Refused, with the OAuth error the specification names: an
unknown client or a wrong secret (401 `invalid_client`), another grant (400 `unsupported_grant_type`), a scope the
client may not have (400 `invalid_scope`).

`local up` starts it on 127.0.0.1 (`python -m localkafka.oidc --state-dir DIR`, its pid in DIR/oidc.pid) before the
brokers, which fetch its keys and log in to each other with its tokens; `local down` stops it after them. Its key is
made once (DIR/oidc/key.pem, 0600); clients and secrets are the local principals and their passwords
(security.json). A test may serve tokens the brokers must refuse (another audience, already expired) from a provider
of its own on the same key and issuer (`IdentityProvider`).

Never for real use: no TLS on the endpoint, secrets compared in memory, keys never rotated.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import hmac
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel.errors import LocalClusterError
from kernel.processes import die_with_parent

if TYPE_CHECKING:  # the key's type; cryptography itself is imported where a key is made or used (`local down`, every
    # command that imports localkafka.local, pays nothing for it: 60 ms a process start)
    from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = ["IdentityProvider", "load_key", "provider_running", "start_provider", "stop_provider"]

KEY_ID = "mirrorwatch-local-1"
_PID = "oidc.pid"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def load_key(state_dir: Path) -> rsa.RSAPrivateKey:
    """The provider's signing key, made the first time (RSA 2048, PEM, only the owner may read it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    path = state_dir / "oidc" / "key.pem"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, rsa.RSAPrivateKey):
        raise LocalClusterError(f"{path} is not an RSA key")
    return loaded


class IdentityProvider:
    """The token endpoint, on a thread of this process (`serve`) until `close`. `clients`: id -> secret; `audience`:
    what every token says it is for; `scopes`: what any client may ask for (the first when it asks for none);
    `lifetime_s`: a token's, from its issue (negative: issued already expired)."""

    def __init__(
        self,
        key: rsa.RSAPrivateKey,
        issuer: str,
        clients: Mapping[str, str],
        *,
        audience: str,
        scopes: tuple[str, ...],
        lifetime_s: float = 3600,
        port: int = 0,
        clock: Callable[[], float] = time.time,
        say: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.issuer, self.audience, self.lifetime_s = issuer, audience, lifetime_s
        self._key, self._clients, self._scopes, self._clock, self._say = key, dict(clients), scopes, clock, say
        self.issued = 0  # tokens issued (a test counts the refreshes)
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/jwks":
                    self._json(200, provider.jwks())
                elif path == "/.well-known/openid-configuration":
                    self._json(200, provider.discovery())
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != "/token":
                    self._json(404, {"error": "not_found"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > 64 * 1024:
                    self._json(413, {"error": "invalid_request", "error_description": "request too large"})
                    return
                form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
                status, body = provider.token(self.headers.get("Authorization", ""), form)
                self._json(status, body)

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a line per request is noise; refusals are answered, not logged

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def serve(self) -> IdentityProvider:
        threading.Thread(target=self._server.serve_forever, name="oidc-provider", daemon=True).start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
        e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": KEY_ID, "n": _b64(n), "e": _b64(e)}]}

    def discovery(self) -> dict[str, Any]:
        base = f"http://127.0.0.1:{self.port}"
        return {
            "issuer": self.issuer,
            "token_endpoint": f"{base}/token",
            "jwks_uri": f"{base}/jwks",
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    def token(self, authorization: str, form: Mapping[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) of a token request."""
        client_id, secret = _credentials(authorization, form)
        known = self._clients.get(client_id or "")
        who = repr(client_id)[:80]  # whatever a client sent, one line, never its secret
        if client_id is None or known is None or not hmac.compare_digest(known.encode(), (secret or "").encode()):
            self._say(f"refused a token to {who}: invalid_client (unknown client or wrong secret)")
            return 401, {"error": "invalid_client", "error_description": "unknown client or wrong secret"}
        if form.get("grant_type", [""])[0] != "client_credentials":
            self._say(f"refused a token to {who}: unsupported_grant_type")
            return 400, {"error": "unsupported_grant_type", "error_description": "only client_credentials"}
        asked = " ".join(form.get("scope", [])).split() or list(self._scopes[:1])
        refused = [scope for scope in asked if scope not in self._scopes]
        if refused:
            self._say(f"refused a token to {who}: invalid_scope {' '.join(refused)[:80]!r}")
            return 400, {"error": "invalid_scope", "error_description": f"not granted: {' '.join(refused)}"}
        now = int(self._clock())
        claims = {
            "iss": self.issuer,
            "sub": client_id,
            "aud": self.audience,
            "scope": " ".join(asked),
            "iat": now,
            "nbf": now,
            "exp": now + int(self.lifetime_s),
            "jti": uuid.uuid4().hex,
            "client_id": client_id,
        }
        self.issued += 1
        lifetime = max(0, int(self.lifetime_s))
        self._say(f"issued a token to {who} (scope {claims['scope']!r}), expires in {int(self.lifetime_s)} s")
        return 200, {"access_token": self.sign(claims), "token_type": "Bearer", "expires_in": lifetime}

    def sign(self, claims: Mapping[str, Any]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        header = _b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": KEY_ID}).encode())
        payload = _b64(json.dumps(dict(claims)).encode())
        signature = self._key.sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{payload}.{_b64(signature)}"


def _credentials(authorization: str, form: Mapping[str, list[str]]) -> tuple[str | None, str | None]:
    """The client's id and secret: HTTP Basic (each part form-encoded, RFC 6749 2.3.1) or client_id/client_secret."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None, None
        client_id, colon, secret = decoded.partition(":")
        return (urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)) if colon else (None, None)
    return form.get("client_id", [None])[0], form.get("client_secret", [None])[0]


# -- the process `local up` starts -------------------------------------------------------------------------------


def provider_running(state_dir: Path) -> int | None:
    """The pid of the state dir's provider process if it runs (checked against /proc: a reused pid is not ours)."""
    try:
        pid = int((state_dir / _PID).read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"localkafka.oidc" in cmdline and str(state_dir).encode() in cmdline else None


def start_provider(state_dir: Path, port: int, *, tie_to_parent: bool) -> None:
    """Start the state dir's provider on `port` unless it runs, and wait until it serves its keys."""
    if provider_running(state_dir) is not None:
        return
    log = state_dir / "oidc" / "provider.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "localkafka.oidc", "--state-dir", str(state_dir), "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent if tie_to_parent else None,  # noqa: PLW1509 - only calls prctl
            cwd=Path(__file__).resolve().parent.parent,
        )
    (state_dir / _PID).write_text(str(process.pid))
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/jwks", timeout=2) as answer:
            if answer.status == 200:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise LocalClusterError(f"the local OIDC provider did not start on 127.0.0.1:{port}: {' | '.join(tail)}")
        time.sleep(0.1)


def stop_provider(state_dir: Path) -> str | None:
    """Stop the state dir's provider (SIGTERM); what it did, or None when none ran."""
    pid = provider_running(state_dir)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while provider_running(state_dir) is not None and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    (state_dir / _PID).unlink(missing_ok=True)
    return f"oidc: stopped (pid {pid})"


def main(argv: list[str] | None = None) -> int:
    from localkafka.local_security import OAUTH_AUDIENCE, OAUTH_SCOPE, load_security

    parser = argparse.ArgumentParser(description="The local clusters' OIDC token endpoint (localkafka.oidc).")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    security = load_security(args.state_dir)
    provider = IdentityProvider(
        load_key(args.state_dir),
        security.oidc_issuer,
        security.oidc_clients(),
        audience=OAUTH_AUDIENCE,
        scopes=(OAUTH_SCOPE,),
        lifetime_s=security.token_seconds,
        port=args.port,
        say=lambda line: print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} oidc: {line}", flush=True),
    )
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    provider.serve()
    print(f"oidc: serving tokens for {security.oidc_issuer} at {provider.token_url}", flush=True)
    stopped.wait()
    provider.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
