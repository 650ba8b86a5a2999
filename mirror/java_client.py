"""A cluster's librdkafka properties as the Java client's, for Spark's Kafka connector (`kafka.*` options).

Most names are the same in both clients and pass through unchanged. The security settings are not, and a secured
cluster must work with the spark engine as it does with the python one:

    librdkafka                                  Java client
    sasl.mechanisms / sasl.mechanism            sasl.mechanism
    sasl.username + sasl.password               sasl.jaas.config (PlainLoginModule or ScramLoginModule)
    enable.sasl.oauthbearer.unsecure.jwt=true   sasl.jaas.config (OAuthBearerLoginModule with unsecuredLogin*
      + sasl.oauthbearer.config                 options: the same principal, scope and lifetime)
    sasl.oauthbearer.method=oidc                sasl.login.callback.handler.class=OAuthBearerLoginCallbackHandler
      + sasl.oauthbearer.client.id, .secret,    + sasl.jaas.config (OAuthBearerLoginModule with clientId,
        .scope, .extensions                       clientSecret, scope and extension_<name>); the token endpoint
                                                  URL has the same name in both
    ssl.ca.location / ssl.ca.pem                ssl.truststore.type=PEM + ssl.truststore.location / .certificates
    ssl.certificate.location + ssl.key.location ssl.keystore.type=PEM + ssl.keystore.certificate.chain / .key
    (or ssl.certificate.pem + ssl.key.pem)      (the PEM text, read from the files)
    ssl.endpoint.identification.algorithm=none  ssl.endpoint.identification.algorithm= (empty: off)

Pure: reads the certificate and key files it is pointed at, imports no Kafka client.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernel.config import ClusterConfig
from kernel.errors import ConfigError, ConfigProblem

__all__ = ["java_kafka_options", "java_properties"]

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_TRANSLATED = {
    "sasl.mechanisms",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.certificate.pem",
    "ssl.key.location",
    "ssl.key.pem",
    "ssl.endpoint.identification.algorithm",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions",
}
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OIDC_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def _jaas_quoted(value: str) -> str:
    """A JAAS string literal: Kafka's parser (a StreamTokenizer) takes backslash escapes inside double quotes."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_properties(properties: dict[str, str], read_text: Callable[[Path], str] = Path.read_text) -> dict[str, str]:
    """librdkafka properties (secrets revealed) as Java client properties. Raises ConfigError, at the property's
    name, for a SASL username without a mechanism the Java client has a login module for, or an unreadable file."""
    out = {name: value for name, value in properties.items() if name not in _TRANSLATED}
    mechanism = properties.get("sasl.mechanism", properties.get("sasl.mechanisms"))
    if mechanism is not None:
        out["sasl.mechanism"] = mechanism
    if "sasl.username" in properties or "sasl.password" in properties:
        module = LOGIN_MODULES.get(mechanism or "GSSAPI")
        if module is None:
            raise ConfigError(
                [
                    ConfigProblem(
                        "properties.sasl.username",
                        f"the spark engine maps sasl.username/sasl.password to a Java login module only for "
                        f"{', '.join(LOGIN_MODULES)}; sasl.mechanism is {mechanism or 'not set (GSSAPI)'}",
                    )
                ]
            )
        user = _jaas_quoted(properties.get("sasl.username", ""))
        password = _jaas_quoted(properties.get("sasl.password", ""))
        out["sasl.jaas.config"] = f"{module} required username={user} password={password};"

    if properties.get("enable.sasl.oauthbearer.unsecure.jwt", "false").lower() == "true":
        out["sasl.jaas.config"] = _unsecured_jaas(properties.get("sasl.oauthbearer.config", ""))
    elif properties.get("sasl.oauthbearer.method", "default").lower() == "oidc":
        options = [
            f"{option}={_jaas_quoted(properties[name])}"
            for option, name in (
                ("clientId", "sasl.oauthbearer.client.id"),
                ("clientSecret", "sasl.oauthbearer.client.secret"),
                ("scope", "sasl.oauthbearer.scope"),
            )
            if name in properties
        ]
        for extension in filter(None, properties.get("sasl.oauthbearer.extensions", "").split(",")):
            extension_name, _, value = extension.partition("=")
            options.append(f"extension_{extension_name.strip()}={_jaas_quoted(value.strip())}")
        out["sasl.login.callback.handler.class"] = OIDC_LOGIN_HANDLER
        out["sasl.jaas.config"] = f"{OAUTH_MODULE} required {' '.join(options)};"

    def read(name: str) -> str:
        try:
            return read_text(Path(properties[name]))
        except OSError as exc:
            problem = f"cannot read {properties[name]} for the spark engine: {exc.strerror or exc}"
            raise ConfigError([ConfigProblem(f"properties.{name}", problem)]) from None

    if "ssl.ca.location" in properties:
        out |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": properties["ssl.ca.location"]}
    elif "ssl.ca.pem" in properties:
        out |= {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": properties["ssl.ca.pem"]}
    chain = read("ssl.certificate.location") if "ssl.certificate.location" in properties else None
    chain = properties.get("ssl.certificate.pem", chain)
    key = read("ssl.key.location") if "ssl.key.location" in properties else None
    key = properties.get("ssl.key.pem", key)
    if chain is not None and key is not None:
        out |= {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain, "ssl.keystore.key": key}
    algorithm = properties.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    return out


def _unsecured_jaas(config: str) -> str:
    """librdkafka's unsecured token settings (`principal=P scope=A,B lifeSeconds=N extension_K=V`) as the Java
    login module's options for the same token."""
    options: list[str] = []
    for part in config.split():
        name, _, value = part.partition("=")
        if name == "principal":
            options.append(f"unsecuredLoginStringClaim_sub={_jaas_quoted(value)}")
        elif name == "scope":
            options.append(f"unsecuredLoginListClaim_scope={_jaas_quoted('|' + value.replace(',', '|'))}")
        elif name == "lifeSeconds":
            options.append(f"unsecuredLoginLifetimeSeconds={_jaas_quoted(value)}")
        elif name.startswith("extension_"):
            options.append(f"unsecuredLoginExtension_{name.removeprefix('extension_')}={_jaas_quoted(value)}")
        else:
            problem = (
                "holds a setting other than principal=, scope=, lifeSeconds=, extension_<name>= (librdkafka's terms)"
            )
            raise ConfigError([ConfigProblem("properties.sasl.oauthbearer.config", problem)])
    return f"{OAUTH_MODULE} required {' '.join(options)};"


def java_kafka_options(prefix: str, cluster: ClusterConfig) -> dict[str, str]:
    """bootstrap.servers and the cluster's client properties as Spark `kafka.*` options."""
    properties = java_properties({k: v for k, v in cluster.client_properties().items() if k != "bootstrap.servers"})
    return {f"{prefix}bootstrap.servers": cluster.bootstrap_servers} | {
        f"{prefix}{name}": value for name, value in properties.items()
    }
