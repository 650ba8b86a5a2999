"""librdkafka properties as the Java client's, for Spark's Kafka connector: no broker, no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.config import ClusterConfig
from kernel.errors import ConfigError
from mirror.java_client import java_kafka_options, java_properties


def test_names_both_clients_share_pass_through_unchanged() -> None:
    properties = {"security.protocol": "SSL", "client.id": "x", "ssl.endpoint.identification.algorithm": "https"}
    assert java_properties(properties) == properties


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
@pytest.mark.parametrize("name", ["sasl.mechanism", "sasl.mechanisms"])
def test_a_sasl_user_becomes_the_jaas_config_of_its_mechanism(mechanism: str, module: str, name: str) -> None:
    java = java_properties(
        {"security.protocol": "SASL_SSL", name: mechanism, "sasl.username": "mirror", "sasl.password": "s3cret"}
    )
    assert java == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": f'{module} required username="mirror" password="s3cret";',
    }


def test_quotes_and_backslashes_in_a_password_are_escaped_for_jaas() -> None:
    java = java_properties({"sasl.mechanism": "PLAIN", "sasl.username": 'a"b', "sasl.password": 'p\\"; x="y'})
    assert java["sasl.jaas.config"].endswith(' required username="a\\"b" password="p\\\\\\"; x=\\"y";')


@pytest.mark.parametrize("mechanism", [None, "GSSAPI", "OAUTHBEARER"])
def test_a_user_for_a_mechanism_without_a_login_module_here_is_a_problem_naming_the_property(
    mechanism: str | None,
) -> None:
    properties = {"sasl.username": "mirror", "sasl.password": "s3cret"}
    if mechanism:
        properties["sasl.mechanism"] = mechanism
    with pytest.raises(ConfigError) as caught:
        java_properties(properties)
    assert caught.value.problems[0].path == "properties.sasl.username"
    assert "s3cret" not in str(caught.value)


def test_tls_files_become_pem_truststore_and_keystore(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nBB==\n-----END PRIVATE KEY-----\n")
    java = java_properties(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": "/etc/ca.pem",
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert java == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": cert.read_text(),
        "ssl.keystore.key": key.read_text(),
        "ssl.endpoint.identification.algorithm": "",
    }


def test_pem_text_settings_are_used_as_they_are() -> None:
    java = java_properties({"ssl.ca.pem": "CA", "ssl.certificate.pem": "CERT", "ssl.key.pem": "KEY"})
    assert java == {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": "CA",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": "CERT",
        "ssl.keystore.key": "KEY",
    }


def test_an_unreadable_key_file_is_a_problem_naming_the_property(tmp_path: Path) -> None:
    cert = tmp_path / "c.crt"
    cert.write_text("CERT")
    with pytest.raises(ConfigError) as caught:
        java_properties({"ssl.certificate.location": str(cert), "ssl.key.location": str(tmp_path / "missing.key")})
    problem = caught.value.problems[0]
    assert problem.path == "properties.ssl.key.location" and "missing.key" in problem.message


def test_spark_options_carry_the_prefix_and_the_revealed_secret() -> None:
    cluster = ClusterConfig(
        bootstrap_servers="b:9093",
        properties={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"}
        | {"sasl.password": "pw"},
    )
    options = java_kafka_options("kafka.", cluster)
    assert options["kafka.bootstrap.servers"] == "b:9093"
    assert options["kafka.sasl.jaas.config"].endswith('username="u" password="pw";')
    assert "kafka.sasl.password" not in options and "kafka.sasl.username" not in options


def test_librdkafkas_unsecured_oauthbearer_token_becomes_the_java_login_modules_same_token() -> None:
    java = java_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": "principal=mirror scope=kafka,other lifeSeconds=60 extension_traceId=123",
        }
    )
    assert java == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
        ' unsecuredLoginStringClaim_sub="mirror" unsecuredLoginListClaim_scope="|kafka|other"'
        ' unsecuredLoginLifetimeSeconds="60" unsecuredLoginExtension_traceId="123";',
    }
    with pytest.raises(ConfigError) as caught:
        java_properties({"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": "subject=x"})
    assert caught.value.problems[0].path == "properties.sasl.oauthbearer.config"


def test_librdkafkas_oidc_client_becomes_the_java_clients_login_handler_with_the_same_client() -> None:
    java = java_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "mirror",
            "sasl.oauthbearer.client.secret": 'se"cret',
            "sasl.oauthbearer.scope": "kafka",
            "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2",
            "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        }
    )
    assert java == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.login.callback.handler.class": "org.apache.kafka.common.security.oauthbearer."
        "OAuthBearerLoginCallbackHandler",
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
        ' clientId="mirror" clientSecret="se\\"cret" scope="kafka" extension_logicalCluster="lkc-1"'
        ' extension_identityPoolId="pool-2";',
    }
