"""Secured local clusters: what `mirrorwatch local up --security MODE` adds to the two local clusters.

    plaintext        no TLS, no authentication (the default, as before)
    sasl_plaintext   SASL (SCRAM-SHA-512 and PLAIN) without TLS
    sasl_ssl         SASL (SCRAM-SHA-512 and PLAIN) over TLS
    ssl              TLS, no client authentication
    mtls             TLS with client certificates (the principal is the certificate's subject, `User:CN=<name>`)
    oauthbearer      SASL/OAUTHBEARER without TLS, Kafka's unsecured JWS tokens (KIP-255: the client names its own
                     principal, the token's `sub`; the broker requires the scope `kafka`): how Kafka and librdkafka
                     test OAUTHBEARER, never for real use
    oidc             SASL/OAUTHBEARER over TLS with signed tokens (KIP-768): a local OpenID Connect provider
                     (localkafka.oidc, started by `local up`) issues RS256 JWTs by the client-credentials grant, the
                     brokers check them against its keys (OAuthBearerValidatorCallbackHandler); each principal is an
                     OAuth client whose secret is its password, the token's `sub` its client id

Everything lives under the state dir, made once and kept across restarts:

    DIR/security.json    the mode and the generated passwords (0600)
    DIR/client.env       MIRRORWATCH_LOCAL_PASSWORD=... for `set -a; . DIR/client.env` (0600)
    DIR/tls/             a throwaway CA, the brokers' certificate (PKCS12, SAN 127.0.0.1 and localhost) and the
                         clients' certificate and key (PEM), made by the openssl command, never by hand-rolled crypto

SCRAM users are created when the storage is formatted (KIP-900), PLAIN users are in the listener's JAAS config.
Secured brokers run KRaft's StandardAuthorizer with `allow.everyone.if.no.acl.found=false`. The super users are
the brokers' own principal, ANONYMOUS (the controller listener is PLAINTEXT on 127.0.0.1, the only place that
principal can come from) and the `mirrorwatch` client principal every generated client setting uses (an operator's
principal: it grants ACLs). The principals `mirror`, `monitor` and `canary` (users, or certificates with that CN)
exist too and hold no ACL until one is granted: `mirrorwatch check` says which ones each needs (`kernel.acl`).
The generated config refers to a password as `${MIRRORWATCH_LOCAL_PASSWORD}` (`..._MIRROR_PASSWORD` and so on for
the component principals), never by value.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kernel.errors import LocalClusterError
from kernel.processes import free_port

__all__ = [
    "CLIENT_PRINCIPAL",
    "MODES",
    "PASSWORD_ENV",
    "ROLE_PRINCIPALS",
    "LocalSecurity",
    "load_security",
    "password_env",
    "prepare_security",
    "security_paths",
    "write_private",
]

MODES = ("plaintext", "sasl_plaintext", "sasl_ssl", "ssl", "mtls", "oauthbearer", "oidc")
PROTOCOLS = {
    "plaintext": "PLAINTEXT",
    "sasl_plaintext": "SASL_PLAINTEXT",
    "sasl_ssl": "SASL_SSL",
    "ssl": "SSL",
    "mtls": "SSL",
    "oauthbearer": "SASL_PLAINTEXT",
    "oidc": "SASL_SSL",
}
OAUTH_MODES = ("oauthbearer", "oidc")
OAUTH_SCOPE = "kafka"  # the scope the brokers require of a token, and every local client asks for
OAUTH_AUDIENCE = "kafka"  # the audience the oidc mode's brokers expect, and its provider puts in every token
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_HANDLERS = "org.apache.kafka.common.security.oauthbearer.OAuthBearer{}CallbackHandler"  # Login, Validator
TOKEN_SECONDS_ENV = "MIRRORWATCH_LOCAL_TOKEN_SECONDS"  # an oidc mode's token lifetime when it is made (default 3600)
CLIENT_PRINCIPAL = "mirrorwatch"
# Principals of their own for the components (`clusters.X.clients.<role>`), without ACLs until granted.
ROLE_PRINCIPALS = ("mirror", "monitor", "canary")
BROKER_PRINCIPAL = "broker"
MECHANISM = "SCRAM-SHA-512"
PASSWORD_ENV = "MIRRORWATCH_LOCAL_PASSWORD"
CERT_DAYS = "3650"
_FILE = "security.json"


@dataclass(frozen=True)
class LocalSecurity:
    """The security of the local clusters of one state dir."""

    mode: str
    state_dir: Path
    broker_password: str = ""
    client_password: str = ""
    keystore_password: str = ""
    role_passwords: tuple[tuple[str, str], ...] = ()
    oidc_port: int = 0  # the oidc mode's provider (localkafka.oidc) on 127.0.0.1
    token_seconds: int = 3600  # ... and its tokens' lifetime

    @property
    def protocol(self) -> str:
        return PROTOCOLS[self.mode]

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def scram(self) -> bool:
        """Users with passwords (SCRAM, PLAIN): the sasl_* modes."""
        return self.sasl and self.mode not in OAUTH_MODES

    @property
    def oidc_issuer(self) -> str:
        return f"http://127.0.0.1:{self.oidc_port}"

    def oidc_clients(self) -> dict[str, str]:
        """The provider's OAuth clients: every principal, its password as its secret."""
        return {BROKER_PRINCIPAL: self.broker_password, **self.users()}

    def jvm_options(self) -> list[str]:
        """Options the brokers' JVMs need: Kafka 4 fetches tokens and keys only from URLs the JVM allows."""
        if self.mode != "oidc":
            return []
        urls = f"{self.oidc_issuer}/token,{self.oidc_issuer}/jwks"
        return [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={urls}"]

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @property
    def tls_dir(self) -> Path:
        return self.state_dir / "tls"

    @property
    def ca_file(self) -> Path:
        return self.tls_dir / "ca.crt"

    @property
    def client_cert(self) -> Path:
        return self.tls_dir / f"{CLIENT_PRINCIPAL}.crt"

    @property
    def client_key(self) -> Path:
        return self.tls_dir / f"{CLIENT_PRINCIPAL}.key"

    def principal(self, name: str) -> str:
        """The Kafka principal of a local client or broker: `User:<name>` for SASL users, `User:CN=<name>` for a
        certificate (Kafka's default principal of a TLS client is the certificate's subject)."""
        return f"User:CN={name}" if self.mode == "mtls" and name != "ANONYMOUS" else f"User:{name}"

    def users(self) -> dict[str, str]:
        """Every client principal with its password: `mirrorwatch` and the component principals."""
        return {CLIENT_PRINCIPAL: self.client_password, **dict(self.role_passwords)}

    @property
    def env_file(self) -> Path:
        return self.state_dir / "client.env"

    # -- the broker's side -------------------------------------------------------------------------------------

    def server_properties(
        self, broker_port: int, controller_port: int, host: str = "127.0.0.1", advertised: str | None = None
    ) -> str:
        """The listener and security lines of server.properties; `host`: the broker listener's address (the
        controller's stays on the loopback of the broker's own network namespace); `advertised`: the address the
        broker tells its clients, when not `host` (plaintext only)."""
        if self.mode == "plaintext":
            return (
                f"listeners=PLAINTEXT://{host}:{broker_port},CONTROLLER://127.0.0.1:{controller_port}\n"
                f"advertised.listeners=PLAINTEXT://{advertised or host}:{broker_port}\n"
                "inter.broker.listener.name=PLAINTEXT\n"
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            )
        lines = [
            f"# Secured by `mirrorwatch local up --security {self.mode}`.",
            f"listeners=SECURE://{host}:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=SECURE://{host}:{broker_port}",
            "inter.broker.listener.name=SECURE",
            f"listener.security.protocol.map=SECURE:{self.protocol},CONTROLLER:PLAINTEXT",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=false",
            "super.users=" + ";".join(map(self.principal, (BROKER_PRINCIPAL, "ANONYMOUS", CLIENT_PRINCIPAL))),
        ]
        if self.mode == "oauthbearer":
            # the unsecured validator (the listener's default for OAUTHBEARER): an unsigned token whose `sub` is the
            # principal, refused without the scope; the brokers log in to each other with such a token too
            lines += [
                "sasl.enabled.mechanisms=OAUTHBEARER",
                "sasl.mechanism.inter.broker.protocol=OAUTHBEARER",
                f"listener.name.secure.oauthbearer.sasl.jaas.config={OAUTH_MODULE} required"
                f' unsecuredLoginStringClaim_sub="{BROKER_PRINCIPAL}" unsecuredLoginListClaim_scope="|{OAUTH_SCOPE}"'
                f' unsecuredValidatorRequiredScope="{OAUTH_SCOPE}";',
            ]
        elif self.mode == "oidc":
            # signed tokens checked against the provider's keys, its issuer and audience; the brokers log in to each
            # other as its client `broker`; a session lasts no longer than its token (connections.max.reauth.ms:
            # KIP-368 re-authentication). The validator named: Kafka 4.1.1's default (DefaultJwtValidator, made
            # without a key resolver) checks a token's claims but not its signature, issuer or audience, and took a
            # token signed by any key (tried); BrokerJwtValidator fetches the provider's keys and checks all three
            prefix = "listener.name.secure.oauthbearer."
            lines += [
                "sasl.enabled.mechanisms=OAUTHBEARER",
                "sasl.mechanism.inter.broker.protocol=OAUTHBEARER",
                f"{prefix}sasl.jaas.config={OAUTH_MODULE} required ;",
                f"{prefix}sasl.server.callback.handler.class={OAUTH_HANDLERS.format('Validator')}",
                f"{prefix}sasl.login.callback.handler.class={OAUTH_HANDLERS.format('Login')}",
                f"{prefix}sasl.oauthbearer.token.endpoint.url={self.oidc_issuer}/token",
                f"{prefix}sasl.oauthbearer.client.credentials.client.id={BROKER_PRINCIPAL}",
                f"{prefix}sasl.oauthbearer.client.credentials.client.secret={self.broker_password}",
                f"{prefix}sasl.oauthbearer.scope={OAUTH_SCOPE}",
                # read by its plain name only (ConfigurationUtils.getConfiguredInstance), not under the prefix
                "sasl.oauthbearer.jwt.validator.class=org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator",
                f"{prefix}sasl.oauthbearer.jwks.endpoint.url={self.oidc_issuer}/jwks",
                f"{prefix}sasl.oauthbearer.expected.audience={OAUTH_AUDIENCE}",
                f"{prefix}sasl.oauthbearer.expected.issuer={self.oidc_issuer}",
                "connections.max.reauth.ms=3600000",
            ]
        elif self.sasl:
            scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
            plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
            broker = f'username="{BROKER_PRINCIPAL}" password="{self.broker_password}"'
            every = {BROKER_PRINCIPAL: self.broker_password, **self.users()}
            users = " ".join(f'user_{u}="{p}"' for u, p in every.items())
            lines += [
                f"sasl.enabled.mechanisms={MECHANISM},PLAIN",
                f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
                f"listener.name.secure.{MECHANISM.lower()}.sasl.jaas.config={scram} required {broker};",
                f"listener.name.secure.plain.sasl.jaas.config={plain} required {broker} {users};",
            ]
        if self.tls:
            lines += [
                "ssl.keystore.type=PKCS12",
                f"ssl.keystore.location={self.tls_dir / 'broker.p12'}",
                f"ssl.keystore.password={self.keystore_password}",
                f"ssl.key.password={self.keystore_password}",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={self.ca_file}",
            ]
            if self.mode == "mtls":
                lines.append("ssl.client.auth=required")
        return "\n".join(lines) + "\n"

    def format_args(self) -> list[str]:
        """kafka-storage format arguments that create the SCRAM users (KIP-900)."""
        if not self.scram:
            return []
        users = {BROKER_PRINCIPAL: self.broker_password, **self.users()}
        return [arg for u, p in users.items() for arg in ("--add-scram", f"{MECHANISM}=[name={u},password={p}]")]

    # -- the clients' side ---------------------------------------------------------------------------------------

    def client_properties(self, *, reveal: bool = False, principal: str = CLIENT_PRINCIPAL) -> dict[str, str]:
        """librdkafka properties for a principal (`mirrorwatch`, or one of ROLE_PRINCIPALS); the password as
        `${MIRRORWATCH_LOCAL_PASSWORD}` (`password_env`) unless `reveal` (for mirrorwatch's own probe of a starting
        broker, never written anywhere)."""
        if self.mode == "plaintext":
            return {}
        properties = {"security.protocol": self.protocol}
        if self.mode == "oauthbearer":  # librdkafka makes and refreshes the unsigned token itself
            properties |= {
                "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": f"principal={principal} scope={OAUTH_SCOPE}",
            }
        elif self.mode == "oidc":  # librdkafka asks the provider for a token, and again before it expires
            secret = self.users()[principal] if reveal else "${" + password_env(principal) + "}"
            properties |= {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": principal,
                "sasl.oauthbearer.client.secret": secret,
                "sasl.oauthbearer.token.endpoint.url": f"{self.oidc_issuer}/token",
                "sasl.oauthbearer.scope": OAUTH_SCOPE,
            }
        elif self.sasl:
            password = self.users()[principal] if reveal else "${" + password_env(principal) + "}"
            properties |= {"sasl.mechanism": MECHANISM, "sasl.username": principal, "sasl.password": password}
        if self.tls:
            properties["ssl.ca.location"] = str(self.ca_file)
        if self.mode == "mtls":
            properties |= {
                "ssl.certificate.location": str(self.tls_dir / f"{principal}.crt"),
                "ssl.key.location": str(self.tls_dir / f"{principal}.key"),
            }
        return properties

    def environment(self) -> dict[str, str]:
        """What a process using the generated config (or a component principal's settings) needs in its
        environment."""
        secrets_in_env = self.scram or self.mode == "oidc"
        return {password_env(u): p for u, p in self.users().items() if p} if secrets_in_env else {}


def password_env(principal: str) -> str:
    """The environment variable that holds a local principal's password in generated settings."""
    return PASSWORD_ENV if principal == CLIENT_PRINCIPAL else f"MIRRORWATCH_LOCAL_{principal.upper()}_PASSWORD"


def security_paths(state_dir: Path) -> list[Path]:
    """Everything `prepare_security` may have made in a state dir (what `local down --purge` removes)."""
    return [state_dir / _FILE, state_dir / "client.env", state_dir / "tls", state_dir / "oidc", state_dir / "oidc.pid"]


def load_security(state_dir: Path) -> LocalSecurity:
    """The security of the clusters in `state_dir` (plaintext when they were made before `--security` existed)."""
    path = state_dir / _FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return LocalSecurity("plaintext", state_dir)
    except (OSError, ValueError) as exc:
        raise LocalClusterError(f"cannot read {path}: {exc}") from None
    mode = data.get("mode")
    if mode not in MODES:
        raise LocalClusterError(f"{path}: unknown security mode {mode!r}")
    return LocalSecurity(
        mode,
        state_dir,
        broker_password=str(data.get("broker_password", "")),
        client_password=str(data.get("client_password", "")),
        keystore_password=str(data.get("keystore_password", "")),
        role_passwords=tuple((str(u), str(p)) for u, p in dict(data.get("role_passwords", {})).items()),
        oidc_port=int(data.get("oidc_port", 0)),
        token_seconds=int(data.get("token_seconds", 3600)),
    )


def prepare_security(state_dir: Path, mode: str | None) -> LocalSecurity:
    """The state dir's security, made the first time: passwords, certificates and client.env. `mode` None keeps what
    the state dir has; another mode than the clusters were made with is refused (their users and listeners are in
    their formatted storage)."""
    current = load_security(state_dir)
    made = (state_dir / _FILE).exists() or (state_dir / "state.json").exists()
    if mode is None or (made and mode == current.mode):
        return current
    if mode not in MODES:
        raise LocalClusterError(f"unknown security mode {mode!r}; one of {', '.join(MODES)}")
    if made:
        raise LocalClusterError(
            f"the clusters in {state_dir} were made with --security {current.mode}; "
            f"run 'mirrorwatch local down --purge --state-dir {state_dir}' first to make them again with "
            f"--security {mode}"
        )
    security = LocalSecurity(
        mode,
        state_dir,
        broker_password=secrets.token_urlsafe(18),
        client_password=secrets.token_urlsafe(18),
        keystore_password=secrets.token_urlsafe(18),
        role_passwords=tuple((role, secrets.token_urlsafe(18)) for role in ROLE_PRINCIPALS),
        oidc_port=free_port() if mode == "oidc" else 0,
        token_seconds=_token_seconds(),
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    if security.tls:
        _make_certificates(security)
    write_private(
        state_dir / _FILE,
        json.dumps(
            {
                "mode": mode,
                "broker_password": security.broker_password,
                "client_password": security.client_password,
                "keystore_password": security.keystore_password,
                "role_passwords": dict(security.role_passwords),
                "oidc_port": security.oidc_port,
                "token_seconds": security.token_seconds,
            },
            indent=2,
        )
        + "\n",
    )
    if security.environment():
        write_private(security.env_file, "".join(f"{name}={value}\n" for name, value in security.environment().items()))
    return security


def _token_seconds() -> int:
    raw = os.environ.get(TOKEN_SECONDS_ENV) or "3600"
    if not raw.isdigit() or int(raw) < 10:
        raise LocalClusterError(f"{TOKEN_SECONDS_ENV}={raw!r}: a token's lifetime in whole seconds, 10 or more")
    return int(raw)


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (it may hold a password)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _openssl(security: LocalSecurity, *args: str) -> None:
    env = {**os.environ, "MIRRORWATCH_KEYSTORE_PASSWORD": security.keystore_password}  # never on a command line
    try:
        result = subprocess.run(
            ["openssl", *args], cwd=security.tls_dir, env=env, capture_output=True, text=True, check=False, timeout=60
        )
    except FileNotFoundError:
        raise LocalClusterError("the openssl command is needed for TLS clusters (apt-get install openssl)") from None
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise LocalClusterError(f"openssl {args[0]} failed making the local clusters' certificates:\n{tail}")


def _make_certificates(security: LocalSecurity) -> None:
    """A CA, the brokers' certificate (PKCS12, which every supported JDK reads) and the client's (PEM, which
    librdkafka reads), EC P-256 keys, valid for ten years: these are throwaway local clusters."""
    security.tls_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(security.tls_dir, 0o700)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(security, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", CERT_DAYS,
             "-subj", "/CN=mirrorwatch local CA")  # fmt: skip
    for name, extensions in (
        (BROKER_PRINCIPAL, "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"),
        *((client, "extendedKeyUsage=clientAuth\n") for client in (CLIENT_PRINCIPAL, *ROLE_PRINCIPALS)),
    ):
        (security.tls_dir / f"{name}.ext").write_text(extensions)
        _openssl(security, "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        _openssl(security, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", CERT_DAYS, "-extfile", f"{name}.ext")  # fmt: skip
    _openssl(security, "pkcs12", "-export", "-in", f"{BROKER_PRINCIPAL}.crt", "-inkey", f"{BROKER_PRINCIPAL}.key",
             "-name", BROKER_PRINCIPAL, "-out", "broker.p12",
             "-passout", "env:MIRRORWATCH_KEYSTORE_PASSWORD")  # fmt: skip
