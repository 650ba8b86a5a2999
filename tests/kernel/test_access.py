"""What a refusal says, without a broker (the refusals themselves: tests/localkafka/test_local_secured.py)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from kernel.access import ClusterRefusedError, Refusal, _attempt, _reason
from kernel.config import ClusterConfig


def _cluster(**properties: str) -> ClusterConfig:
    return ClusterConfig(bootstrap_servers="b:9093", properties=properties)


def test_a_sasl_refusal_names_the_mechanism_and_user_never_the_password() -> None:
    cluster = _cluster(**{"sasl.mechanism": "PLAIN", "sasl.username": "mirror", "sasl.password": "s3cret"})
    assert _attempt(cluster, KafkaError._AUTHENTICATION) == "SASL authentication (PLAIN as 'mirror')"
    assert _attempt(_cluster(), KafkaError._AUTHENTICATION) == "SASL authentication (GSSAPI)"


def test_an_oauthbearer_refusal_names_the_tokens_principal_never_the_client_secret() -> None:
    unsecured = {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": "scope=k principal=mirror"}
    cluster = _cluster(**{"sasl.mechanism": "OAUTHBEARER", **unsecured})
    assert _attempt(cluster, KafkaError._AUTHENTICATION) == "SASL authentication (OAUTHBEARER as 'mirror')"
    oidc = {
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "m",
        "sasl.oauthbearer.client.secret": "s3",
    }
    cluster = _cluster(**{"sasl.mechanism": "OAUTHBEARER", **oidc})
    assert _attempt(cluster, KafkaError._AUTHENTICATION) == "SASL authentication (OAUTHBEARER as 'm')"


def test_a_tls_refusal_names_what_was_trusted_and_whether_a_certificate_was_shown() -> None:
    assert _attempt(_cluster(), KafkaError._SSL) == "the TLS handshake (trusting the system's CAs)"
    cluster = _cluster(**{"ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/c.pem", "ssl.key.location": "k"})
    assert _attempt(cluster, KafkaError._SSL) == "the TLS handshake (trusting /ca.pem, with a client certificate)"


def test_one_line_per_cluster() -> None:
    error = ClusterRefusedError(
        [
            Refusal("source", "a:1", "SASL authentication (PLAIN as 'u')", "Authentication failed"),
            Refusal("t", "b:2", "x", "y"),
        ]
    )
    assert str(error).splitlines() == [
        "2 clusters refused mirrorwatch's client settings:",
        "source (a:1): SASL authentication (PLAIN as 'u') failed: Authentication failed",
        "t (b:2): x failed: y",
    ]
    assert error.exit_code == 1
    assert str(ClusterRefusedError([Refusal("t", "b:2", "x", "y")])).startswith("1 cluster refused")


def test_the_reason_is_librdkafkas_without_the_broker_address_and_state_it_repeats() -> None:
    text = (
        "sasl_ssl://127.0.0.1:51531/bootstrap: SASL authentication error: Authentication failed during authentication"
        " due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 308ms in state AUTH_REQ)"
    )
    assert _reason(text) == (
        "SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL"
        " mechanism SCRAM-SHA-512"
    )
    assert _reason("ssl://h:1/2: SSL handshake failed: x") == "SSL handshake failed: x"
    assert _reason("anything else") == "anything else"
