"""The session's clusters are secured as `--security` says (CI runs the `secured` tests on a sasl_ssl and an mtls
pair): a client without the generated settings, or with a wrong password, gets nothing; the generated config
works and holds no secret."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kernel.access import refusal
from kernel.config import ClusterConfig
from kernel.processes import free_port
from localkafka.local import LocalClusters
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
        if security.sasl:
            wrong = _metadata_error(generated | {"sasl.password": "not-" + security.client_password})
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
    cases: dict[str, tuple[dict[str, str], str]] = {}
    if security.sasl:
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
    assert cases
    secrets = [s for s in (security.client_password, security.broker_password, security.keystore_password, wrong) if s]
    for name, (changes, attempt) in cases.items():
        code, output = _mirror_with(local_clusters, tmp_path, name.replace(" ", "-"), changes)
        lines = output.strip().splitlines()
        assert code == 1, (name, output)
        assert lines[0] == "mirrorwatch: error: 2 clusters refused mirrorwatch's client settings:", (name, output)
        for alias, line in zip(("source", "target"), lines[1:3], strict=True):
            assert line.startswith(f"{alias} (") and attempt in line and " failed: " in line, (name, line)
        assert len(lines) == 3 and "Traceback" not in output, (name, output)
        assert not any(secret in output for secret in secrets), (name, output)
