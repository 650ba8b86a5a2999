"""The session's clusters are secured as `--security` says (CI runs the `secured` tests on a sasl_ssl, an mtls, an
oauthbearer and an oidc pair): a client without the generated settings, or with a wrong password,
secret, scope, audience or an expired token, gets nothing; the generated config works and holds no secret."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kernel.access import refusal
from kernel.config import ClusterConfig, MirrorwatchConfig
from kernel.processes import free_port
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from localkafka.local_security import OAUTH_AUDIENCE, OAUTH_SCOPE, LocalSecurity
from localkafka.oidc import IdentityProvider, load_key
from tests.kafka_helpers import Record, produce, read_all
from tests.processes import MirrorProcess
from tests.tls import make_certificates

pytestmark = [pytest.mark.integration, pytest.mark.secured]


def _metadata_error(settings: dict[str, Any]) -> str | None:
    """None when the cluster answers a metadata request with these client settings, else the error seen."""
    errors: list[str] = []
    config: dict[str, Any] = {**settings, "log_level": 0, "error_cb": lambda e: errors.append(e.str())}
    admin = AdminClient(config)
    try:
        admin.list_topics(timeout=4)
    except KafkaException as exc:
        admin.poll(0.5)  # serves error_cb: the reason the broker gave
        return f"{exc} {errors}"
    return None


def test_only_clients_with_the_generated_settings_get_an_answer(local_clusters: LocalClusters) -> None:
    security = local_clusters.security
    written = local_clusters.config_path.read_text()
    for secret in (security.client_password, security.broker_password, security.keystore_password):
        assert not secret or secret not in written
    for cluster in local_clusters.clusters():
        bootstrap = {"bootstrap.servers": cluster.bootstrap_servers}
        generated = bootstrap | security.client_properties(reveal=True)
        assert _metadata_error(generated) is None, cluster.alias
        bare = _metadata_error(bootstrap)
        if security.mode == "plaintext":
            assert bare is None
            continue
        assert bare is not None, f"{cluster.alias} ({security.mode}) answered a client without its settings"
        if security.scram:
            wrong = _metadata_error(generated | {"sasl.password": "not-" + security.client_password})
            assert wrong is not None and "uthentication" in wrong, wrong
        if security.mode == "oidc":
            wrong = _metadata_error(generated | {"sasl.oauthbearer.client.secret": "not-" + security.client_password})
            assert wrong is not None, cluster.alias
        if security.mode == "oauthbearer":  # an unsigned token names any principal; without the scope it is refused
            wrong = _metadata_error(generated | {"sasl.oauthbearer.config": "principal=mirrorwatch scope=other"})
            assert wrong is not None and "uthentication" in wrong, wrong
        if security.mode == "mtls":
            no_certificate = {
                k: v for k, v in generated.items() if k not in ("ssl.certificate.location", "ssl.key.location")
            }
            assert _metadata_error(no_certificate) is not None, (
                f"{cluster.alias} answered a client without a certificate"
            )


def _mirror_with(local_clusters: LocalClusters, tmp_path: Path, name: str, changes: dict[str, str]) -> tuple[int, str]:
    """`mirrorwatch mirror` on the generated config with these client properties changed on both clusters."""
    document = yaml.safe_load(local_clusters.config_path.read_text())
    for cluster in document["clusters"].values():
        cluster["properties"] = {**cluster.get("properties", {}), **changes}
    document["links"] = [{"name": "l", "source": "source", "target": "target", "topics": {"include": ["nothing"]}}]
    document["state_dir"] = str(tmp_path / "run")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    done = subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", "mirror", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def _rogue(security: LocalSecurity, key_dir: Path | None = None, **changes: Any) -> IdentityProvider:
    """A provider of the test's own that signs as the clusters' issuer with their key (or one of `key_dir`), its
    tokens changed."""
    key = load_key(key_dir or security.state_dir)
    settings: dict[str, Any] = {"audience": OAUTH_AUDIENCE, "scopes": (OAUTH_SCOPE,), "lifetime_s": 3600} | changes
    return IdentityProvider(key, security.oidc_issuer, security.oidc_clients(), **settings)


def _refusal_cases(
    security: LocalSecurity, tmp_path: Path, wrong: str, providers: contextlib.ExitStack
) -> dict[str, tuple[dict[str, str], str]]:
    """What to change in the generated client settings to be refused, and what the line must say was tried."""
    cases: dict[str, tuple[dict[str, str], str]] = {}
    token = "SASL authentication (OAUTHBEARER as 'mirrorwatch')"
    if security.mode == "oauthbearer":
        cases["missing scope"] = ({"sasl.oauthbearer.config": "principal=mirrorwatch scope=other"}, token)
    if security.mode == "oidc":  # what the provider refuses, and tokens the brokers must refuse
        cases["wrong client secret"] = ({"sasl.oauthbearer.client.secret": wrong}, token)
        cases["scope not granted"] = ({"sasl.oauthbearer.scope": "kafka admin"}, token)
        rogues: list[tuple[str, dict[str, Any]]] = [
            ("audience", {"audience": "other"}),
            ("expired token", {"lifetime_s": -120}),
            ("signing key", {"key_dir": tmp_path / "rogue"}),  # the brokers check the signature against the JWKS
        ]
        for name, changes in rogues:
            provider = _rogue(security, **changes).serve()
            providers.callback(provider.close)
            cases[f"another {name}"] = ({"sasl.oauthbearer.token.endpoint.url": provider.token_url}, token)
    if security.scram:
        cases["wrong password"] = ({"sasl.password": wrong}, "SASL authentication (SCRAM-SHA-512 as 'mirrorwatch')")
        cases["wrong mechanism"] = ({"sasl.mechanism": "SCRAM-SHA-256"}, "SASL authentication (SCRAM-SHA-256 as")
    if security.tls:
        other = make_certificates(tmp_path / "other", "stranger")  # another CA, and a certificate it signed
        cases["untrusted broker"] = ({"ssl.ca.location": str(other.ca)}, f"the TLS handshake (trusting {other.ca}")
    if security.mode == "mtls":
        own = tmp_path / "own"  # the clusters' CA, copied: nothing is written into their state dir
        own.mkdir()
        for name in ("ca.crt", "ca.key"):
            (own / name).write_bytes((security.tls_dir / name).read_bytes())
        expired = make_certificates(own, "expired", days=-1)
        cases["expired client certificate"] = (
            {"ssl.certificate.location": str(expired.cert), "ssl.key.location": str(expired.key)},
            "with a client certificate) failed",
        )
        cases["client certificate of another CA"] = (
            {"ssl.certificate.location": str(other.cert), "ssl.key.location": str(other.key)},
            "with a client certificate) failed",
        )
    return cases


def test_a_refused_credential_stops_a_command_at_once_with_one_line_per_cluster(
    local_clusters: LocalClusters, tmp_path: Path
) -> None:
    security = local_clusters.security
    clusters = local_clusters.clusters()
    if security.mode == "plaintext":
        # nothing can be refused here: what answers is let in, and what does not answer is not a refusal
        for cluster in clusters:
            config = ClusterConfig(bootstrap_servers=cluster.bootstrap_servers)
            assert refusal(config, cluster.alias) is None
        assert refusal(ClusterConfig(bootstrap_servers=f"127.0.0.1:{free_port()}"), "nowhere") is None
        return
    wrong = "wrong-" + security.client_password[:6]
    secrets = [s for s in (security.client_password, security.broker_password, security.keystore_password, wrong) if s]
    with contextlib.ExitStack() as providers:
        cases = _refusal_cases(security, tmp_path, wrong, providers)
        assert cases
        for name, (changes, attempt) in cases.items():
            code, output = _mirror_with(local_clusters, tmp_path, name.replace(" ", "-"), changes)
            lines = output.strip().splitlines()
            assert code == 1, (name, output)
            assert lines[0] == "mirrorwatch: error: 2 clusters refused mirrorwatch's client settings:", (name, output)
            for alias, line in zip(("source", "target"), lines[1:3], strict=True):
                assert line.startswith(f"{alias} (") and attempt in line and " failed: " in line, (name, line)
            assert len(lines) == 3 and "Traceback" not in output, (name, output)
            assert not any(secret in output for secret in secrets), (name, output)


@pytest.mark.secured("oidc", only=True)  # the oidc pair only: its tokens expire every TEST_TOKEN_SECONDS (20 s)
def test_a_link_mirrors_across_token_refreshes_losing_nothing(
    local_clusters: LocalClusters,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    """The link's clients ask the provider for a token again before theirs expires and re-authenticate their
    connections (the brokers end a session when its token does: KIP-368) while a producer writes, and after."""
    security = local_clusters.security
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", 3)
    log = security.state_dir / "oidc" / "provider.log"
    link = {"name": unique("refresh"), "source": "source", "target": "target", "topics": {"include": [topic]}}
    mirror = start_mirror("--config", str(write_config([link])))
    began, sent = time.monotonic(), 0
    while time.monotonic() - began < 2 * security.token_seconds:  # writing across the link's first refresh
        produce(source, "source", topic, [Record(value=f"r{sent + i}".encode(), partition=i % 3) for i in range(50)])
        sent += 50
        time.sleep(1)
    assert len(read_all(target, "target", topic, expected=sent, timeout_s=60)) == sent
    # a lifetime with no client of the test's own: only the link's clients can have asked for tokens in it
    issued_before = log.read_text().count("issued a token to 'mirrorwatch'")

    def issued() -> int:
        return log.read_text().count("issued a token to 'mirrorwatch'") - issued_before

    wait_until(  # within one lifetime (each client asks again at 80 % of its token's), not a fixed sleep
        lambda: issued() >= 2,
        timeout_s=security.token_seconds + 2,
        interval_s=0.5,
        description="the link's consumer and producer to ask for tokens again (no client of the test's own runs)",
    )
    produce(source, "source", topic, [Record(value=f"r{sent + i}".encode(), partition=i % 3) for i in range(50)])
    got = read_all(target, "target", topic, expected=sent + 50, timeout_s=60)
    assert sorted(r.value or b"" for r in got) == sorted(f"r{i}".encode() for i in range(sent + 50))  # once each
    assert mirror.stop() == 0
    assert "uthentication" not in mirror.log(), mirror.log()[-3000:]  # never refused on the way
    assert security.client_password not in mirror.log()  # the client secret never in a log line
