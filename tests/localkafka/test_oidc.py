"""The local OIDC provider (localkafka.oidc) answers as an identity provider does, no broker: tokens a JWKS verifies,
the OAuth errors for what it refuses, never a secret in what it says. (The brokers taking its tokens, and refusing
the wrong ones: tests/localkafka/test_local_secured.py on the oidc pair.)"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from localkafka.oidc import IdentityProvider, load_key

NOW = 1_800_000_000


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[tuple[IdentityProvider, list[str]]]:
    said: list[str] = []
    idp = IdentityProvider(
        load_key(tmp_path),
        "http://issuer",
        {"mirror": "s3cret:/+"},
        audience="kafka",
        scopes=("kafka",),
        lifetime_s=60,
        clock=lambda: NOW,
        say=said.append,
    )
    yield idp.serve(), said
    idp.close()


def _request(idp: IdentityProvider, form: dict[str, str], auth: tuple[str, str] | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(idp.token_url, data=urllib.parse.urlencode(form).encode(), method="POST")
    if auth is not None:  # RFC 6749 2.3.1: each part form-encoded, then Basic
        pair = f"{urllib.parse.quote_plus(auth[0])}:{urllib.parse.quote_plus(auth[1])}"
        request.add_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_a_client_gets_a_signed_token_naming_it_that_the_jwks_verifies(
    provider: tuple[IdentityProvider, list[str]],
) -> None:
    idp, said = provider
    status, body = _request(idp, {"grant_type": "client_credentials", "scope": "kafka"}, ("mirror", "s3cret:/+"))
    assert status == 200 and body["token_type"] == "Bearer" and body["expires_in"] == 60, body
    header, payload, signature = body["access_token"].split(".")
    claims = json.loads(_unb64(payload))
    assert claims | {"jti": "x"} == {
        "iss": "http://issuer", "sub": "mirror", "aud": "kafka", "scope": "kafka", "iat": NOW, "nbf": NOW,
        "exp": NOW + 60, "jti": "x", "client_id": "mirror",
    }  # fmt: skip
    with urllib.request.urlopen(f"http://127.0.0.1:{idp.port}/jwks", timeout=5) as answer:
        (key,) = json.loads(answer.read())["keys"]
    assert json.loads(_unb64(header)) == {"alg": "RS256", "typ": "JWT", "kid": key["kid"]}
    public = rsa.RSAPublicNumbers(int.from_bytes(_unb64(key["e"])), int.from_bytes(_unb64(key["n"]))).public_key()
    public.verify(_unb64(signature), f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())  # or raises
    # the form's client_id/client_secret work as Basic does
    form = {"grant_type": "client_credentials", "client_id": "mirror", "client_secret": "s3cret:/+"}
    assert _request(idp, form, None)[0] == 200
    assert said == ["issued a token to 'mirror' (scope 'kafka'), expires in 60 s"] * 2


@pytest.mark.parametrize(
    ("form", "auth", "status", "error"),
    [
        ({"grant_type": "client_credentials"}, ("mirror", "wr0ng-Pa55"), 401, "invalid_client"),
        ({"grant_type": "client_credentials"}, ("stranger", "s3cret:/+"), 401, "invalid_client"),
        ({"grant_type": "client_credentials"}, None, 401, "invalid_client"),
        ({"grant_type": "password"}, ("mirror", "s3cret:/+"), 400, "unsupported_grant_type"),
        ({"grant_type": "client_credentials", "scope": "kafka admin"}, ("mirror", "s3cret:/+"), 400, "invalid_scope"),
    ],
)
def test_what_it_refuses_gets_the_oauth_error_and_a_line_without_the_secret(
    provider: tuple[IdentityProvider, list[str]],
    form: dict[str, str],
    auth: tuple[str, str] | None,
    status: int,
    error: str,
) -> None:
    idp, said = provider
    got, body = _request(idp, form, auth)
    assert (got, body["error"]) == (status, error), body
    assert idp.issued == 0 and len(said) == 1 and said[0].startswith("refused a token to ") and error in said[0], said
    assert "s3cret" not in said[0] and "wr0ng-Pa55" not in said[0]
    # a Basic header that is not base64, and a body larger than any token request: refused, never a traceback
    request = urllib.request.Request(idp.token_url, data=b"grant_type=client_credentials", method="POST")
    request.add_header("Authorization", "Basic %%%")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401
