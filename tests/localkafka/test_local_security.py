"""What `local up --security MODE` writes, without a broker: listeners, users, client settings and private files
(certificates are made by the real openssl command)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from kernel.errors import LocalClusterError
from localkafka.local_security import MODES, PASSWORD_ENV, LocalSecurity, load_security, prepare_security


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_plaintext_is_what_the_local_clusters_always_were(tmp_path: Path) -> None:
    security = prepare_security(tmp_path, None)
    assert security.mode == "plaintext" and not list(tmp_path.iterdir())
    server = _properties(security.server_properties(9092, 9093))
    assert server["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert "authorizer.class.name" not in server
    assert security.format_args() == [] and security.client_properties() == {} and security.environment() == {}


@pytest.mark.parametrize("mode", [m for m in MODES if m != "plaintext"])
def test_a_secured_listener_with_the_authorizer_denying_what_no_acl_allows(tmp_path: Path, mode: str) -> None:
    security = LocalSecurity(mode, tmp_path, "brokerpw", "clientpw", "storepw")
    server = _properties(security.server_properties(9092, 9093))
    protocols = {"sasl_plaintext": "SASL_PLAINTEXT", "sasl_ssl": "SASL_SSL", "ssl": "SSL", "mtls": "SSL"}
    protocol = protocols | {"oauthbearer": "SASL_PLAINTEXT", "oidc": "SASL_SSL"}
    assert server["listeners"] == "SECURE://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert server["listener.security.protocol.map"] == f"SECURE:{protocol[mode]},CONTROLLER:PLAINTEXT"
    assert server["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert server["allow.everyone.if.no.acl.found"] == "false"
    assert ("ssl.client.auth" in server) == (mode == "mtls")
    assert ("ssl.keystore.location" in server) == mode.endswith(("ssl", "mtls", "oidc"))
    assert server.get("sasl.enabled.mechanisms") == {"oauthbearer": "OAUTHBEARER", "oidc": "OAUTHBEARER"}.get(
        mode, "SCRAM-SHA-512,PLAIN" if mode.startswith("sasl") else None
    )


def test_oauthbearer_tokens_name_their_principal_and_carry_the_scope_the_brokers_require(tmp_path: Path) -> None:
    security = LocalSecurity("oauthbearer", tmp_path, "brokerpw", "clientpw", "storepw", (("mirror", "m"),))
    server = _properties(security.server_properties(9092, 9093))
    jaas = server["listener.name.secure.oauthbearer.sasl.jaas.config"]
    assert 'unsecuredLoginStringClaim_sub="broker"' in jaas and 'unsecuredValidatorRequiredScope="kafka"' in jaas
    assert server["sasl.mechanism.inter.broker.protocol"] == "OAUTHBEARER"
    assert security.client_properties(principal="mirror") == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": "principal=mirror scope=kafka",
    }
    assert security.format_args() == [] and security.environment() == {}  # no users, no passwords


def test_oidc_clients_ask_the_local_provider_with_their_secret_from_the_environment(tmp_path: Path) -> None:
    roles = (("mirror", "m"),)
    security = LocalSecurity("oidc", tmp_path, "brokerpw", "clientpw", "storepw", roles, oidc_port=4444)
    server = _properties(security.server_properties(9092, 9093))
    prefix = "listener.name.secure.oauthbearer."
    assert server[prefix + "sasl.oauthbearer.jwks.endpoint.url"] == "http://127.0.0.1:4444/jwks"
    assert server[prefix + "sasl.oauthbearer.expected.issuer"] == "http://127.0.0.1:4444"
    assert server[prefix + "sasl.oauthbearer.client.credentials.client.secret"] == "brokerpw"
    # Kafka 4.1.1's default validator does not check signatures: the one that does, by its plain name
    assert server["sasl.oauthbearer.jwt.validator.class"].endswith(".BrokerJwtValidator")
    assert security.jvm_options() == [
        "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=http://127.0.0.1:4444/token,http://127.0.0.1:4444/jwks"
    ]
    assert security.client_properties(principal="mirror") == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "mirror",
        "sasl.oauthbearer.client.secret": "${MIRRORWATCH_LOCAL_MIRROR_PASSWORD}",
        "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:4444/token",
        "sasl.oauthbearer.scope": "kafka",
        "ssl.ca.location": str(tmp_path / "tls" / "ca.crt"),
    }
    assert security.environment() == {PASSWORD_ENV: "clientpw", "MIRRORWATCH_LOCAL_MIRROR_PASSWORD": "m"}
    assert security.oidc_clients() == {"broker": "brokerpw", "mirrorwatch": "clientpw", "mirror": "m"}


def test_sasl_users_are_made_at_format_and_the_client_password_is_an_environment_reference(tmp_path: Path) -> None:
    security = LocalSecurity("sasl_ssl", tmp_path, "brokerpw", "clientpw", "storepw")
    assert security.format_args() == [
        *("--add-scram", "SCRAM-SHA-512=[name=broker,password=brokerpw]"),
        *("--add-scram", "SCRAM-SHA-512=[name=mirrorwatch,password=clientpw]"),
    ]  # without component principals (clusters made before they existed): only these two
    client = security.client_properties()
    assert client == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "mirrorwatch",
        "sasl.password": "${" + PASSWORD_ENV + "}",
        "ssl.ca.location": str(tmp_path / "tls" / "ca.crt"),
    }
    assert security.client_properties(reveal=True)["sasl.password"] == "clientpw"
    assert security.environment() == {PASSWORD_ENV: "clientpw"}


def test_mtls_clients_carry_their_certificate_and_key(tmp_path: Path) -> None:
    client = LocalSecurity("mtls", tmp_path).client_properties()
    assert client["ssl.certificate.location"].endswith("mirrorwatch.crt")
    assert client["ssl.key.location"].endswith("mirrorwatch.key")
    assert "sasl.password" not in client


def _private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def test_prepare_makes_private_files_and_a_certificate_chain_openssl_verifies(tmp_path: Path) -> None:
    security = prepare_security(tmp_path, "mtls")
    assert load_security(tmp_path) == security
    assert _private(tmp_path / "security.json") and _private(tmp_path / "tls")
    assert not (tmp_path / "client.env").exists()  # no password in mtls
    for name in ("broker", "mirrorwatch", "mirror", "monitor", "canary"):
        verified = subprocess.run(
            ["openssl", "verify", "-CAfile", "ca.crt", f"{name}.crt"],
            cwd=tmp_path / "tls",
            capture_output=True,
            text=True,
            check=False,
        )
        assert verified.returncode == 0, verified.stderr
    san = subprocess.run(
        ["openssl", "x509", "-in", "broker.crt", "-noout", "-ext", "subjectAltName"],
        cwd=tmp_path / "tls",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:127.0.0.1" in san
    # the keystore opens with the generated password (given here through the environment, as mirrorwatch does)
    opened = subprocess.run(
        ["openssl", "pkcs12", "-in", "broker.p12", "-noout", "-passin", "env:P"],
        cwd=tmp_path / "tls",
        env={"P": security.keystore_password, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert opened.returncode == 0, opened.stderr


def test_sasl_passwords_go_to_a_private_env_file_once_and_stay(tmp_path: Path) -> None:
    first = prepare_security(tmp_path, "sasl_plaintext")
    roles = dict(first.role_passwords)
    assert (tmp_path / "client.env").read_text() == (
        f"{PASSWORD_ENV}={first.client_password}\n"
        f"MIRRORWATCH_LOCAL_MIRROR_PASSWORD={roles['mirror']}\n"
        f"MIRRORWATCH_LOCAL_MONITOR_PASSWORD={roles['monitor']}\n"
        f"MIRRORWATCH_LOCAL_CANARY_PASSWORD={roles['canary']}\n"
    )
    assert _private(tmp_path / "client.env") and _private(tmp_path / "security.json")
    assert prepare_security(tmp_path, "sasl_plaintext") == first
    assert prepare_security(tmp_path, None) == first
    assert len({first.broker_password, first.client_password, first.keystore_password, *roles.values()}) == 6


def test_the_component_principals_exist_without_being_super_users(tmp_path: Path) -> None:
    roles = (("mirror", "m"), ("monitor", "o"), ("canary", "c"))
    sasl = LocalSecurity("sasl_ssl", tmp_path, "brokerpw", "clientpw", "storepw", roles)
    assert sasl.format_args()[-6:] == [
        *("--add-scram", "SCRAM-SHA-512=[name=mirror,password=m]"),
        *("--add-scram", "SCRAM-SHA-512=[name=monitor,password=o]"),
        *("--add-scram", "SCRAM-SHA-512=[name=canary,password=c]"),
    ]
    server = _properties(sasl.server_properties(9092, 9093))
    assert server["super.users"] == "User:broker;User:ANONYMOUS;User:mirrorwatch"
    assert 'user_mirror="m" user_monitor="o" user_canary="c"' in server["listener.name.secure.plain.sasl.jaas.config"]
    mirror = sasl.client_properties(principal="mirror")
    assert mirror["sasl.username"] == "mirror"
    assert mirror["sasl.password"] == "${MIRRORWATCH_LOCAL_MIRROR_PASSWORD}"
    assert sasl.client_properties(principal="canary", reveal=True)["sasl.password"] == "c"
    # A certificate's principal is its subject (no mapping rule): what `mirrorwatch check` prints for it.
    mtls = LocalSecurity("mtls", tmp_path, "brokerpw", "clientpw", "storepw", roles)
    server = _properties(mtls.server_properties(9092, 9093))
    assert server["super.users"] == "User:CN=broker;User:ANONYMOUS;User:CN=mirrorwatch"
    assert "ssl.principal.mapping.rules" not in server
    assert mtls.principal("monitor") == "User:CN=monitor" and sasl.principal("monitor") == "User:monitor"
    assert mtls.client_properties(principal="monitor")["ssl.certificate.location"].endswith("monitor.crt")


def test_another_mode_for_clusters_already_made_is_refused_naming_purge(tmp_path: Path) -> None:
    prepare_security(tmp_path, "sasl_plaintext")
    with pytest.raises(
        LocalClusterError, match=r"made with --security sasl_plaintext; run 'mirrorwatch local down --purge"
    ):
        prepare_security(tmp_path, "mtls")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "state.json").write_text("{}")  # clusters made before --security existed: plaintext
    with pytest.raises(LocalClusterError, match="made with --security plaintext"):
        prepare_security(tmp_path / "plain", "sasl_ssl")


def test_a_damaged_security_file_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "security.json").write_text('{"mode": "kerberos"}')
    with pytest.raises(LocalClusterError, match="unknown security mode 'kerberos'"):
        load_security(tmp_path)
    (tmp_path / "security.json").write_text("{")
    with pytest.raises(LocalClusterError, match="cannot read"):
        load_security(tmp_path)
