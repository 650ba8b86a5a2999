"""The session's clusters are secured as `--security` says (CI runs the `secured` tests on a sasl_ssl and an mtls
pair): a client without the generated settings, or with a wrong password, gets nothing; the generated config
works and holds no secret."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from mirrorwatch.local import LocalClusters

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
