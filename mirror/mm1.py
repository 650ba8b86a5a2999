"""MirrorMaker 1 compatibility: its command line and Java properties files, turned into one mirrorwatch link.

    mirrorwatch mirror --consumer.config consumer.properties --producer.config producer.properties --whitelist 'RE'

The consumer file describes the source cluster (bootstrap.servers and group.id required), the producer file the
target (bootstrap.servers required). Security settings (security.*, sasl.*, ssl.*) become the cluster's properties,
so every client of that cluster uses them; other keys become the link's consumer or producer properties. Java class
names are translated where librdkafka has an equivalent; Java-only keys are reported as ignored, never dropped
silently; anything else goes to librdkafka, which rejects what it does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import javaproperties

from kernel.config import MirrorwatchConfig, parse_config
from kernel.errors import ConfigError, ConfigProblem
from mirror.handler import JAVA_HANDLERS

__all__ = ["MM1Options", "config_from_mm1"]

LINK_NAME = "mirrormaker"

# Java clients' settings with no librdkafka meaning (serialization happens in Java code; mirrorwatch copies bytes).
JAVA_ONLY = frozenset(
    {
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
        "interceptor.classes",
        "max.block.ms",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "auto.commit.enable",
        "exclude.internal.topics",
        "metric.reporters",
        "metrics.num.samples",
        "metrics.sample.window.ms",
        "default.api.timeout.ms",
        "partitioner.class",
        "retry.backoff.max.ms",
        "security.providers",
        "sasl.login.callback.handler.class",  # OAuthBearerLoginCallbackHandler: sasl.oauthbearer.method=oidc here
    }
)
# Settings mirrorwatch owns because its guarantees rest on them.
OWNED = {
    "enable.auto.commit": "mirrorwatch commits only what the target acknowledged",
    "auto.commit.interval.ms": "use --offset.commit.interval.ms",
    "acks": "mirrorwatch always produces with acks=all",
    "enable.idempotence": "mirrorwatch always uses the idempotent producer",
    "delivery.timeout.ms": "mirrorwatch never times a record out: it pauses the source instead",
    "transactional.id": "set by mirrorwatch",
}
ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.StickyAssignor": "cooperative-sticky",
}
SHARED_PREFIXES = ("security.", "sasl.", "ssl.")
OIDC_CLIENT = {
    "sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
}


@dataclass(frozen=True)
class MM1Options:
    consumer_config: Path
    producer_config: Path
    whitelist: str
    num_streams: int = 1
    offset_commit_interval_ms: int | None = None
    abort_on_send_failure: bool = True
    message_handler: str | None = None
    message_handler_args: str | None = None
    dead_letter_topic: str | None = None


def _read_properties(path: Path, label: str) -> dict[str, str]:
    """A Java properties file: UTF-8, or ISO-8859-1 where it is not (what Java's Properties.load reads, so a file
    MirrorMaker took is taken); a bad `\\u` escape is a config problem, not a crash."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError([ConfigProblem(label, f"cannot read {path}: {exc.strerror}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("iso-8859-1")
    try:
        return dict(javaproperties.loads(text))
    except ValueError as exc:
        raise ConfigError([ConfigProblem(label, str(exc))]) from None


def _translate(
    props: dict[str, str], label: str, role: str, warnings: list[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(cluster properties, role properties) in librdkafka's terms."""
    shared: dict[str, str] = {}
    own: dict[str, str] = {}
    stores: dict[str, str] = {}
    for name, value in props.items():
        if name in ("bootstrap.servers", "group.id"):
            continue
        if name in JAVA_ONLY:
            warnings.append(f"{label}: {name} is a Java client setting with no librdkafka equivalent: ignored")
            continue
        if name in OWNED:
            warnings.append(f"{label}: {name}={value} ignored: {OWNED[name]}")
            continue
        if name == "partition.assignment.strategy":
            names = [ASSIGNORS.get(cls.strip(), cls.strip()) for cls in value.split(",") if cls.strip()]
            if "roundrobin" in names or "range" in names:
                warnings.append(
                    f"{label}: {value} is an eager assignor: every rebalance stops all partitions "
                    "(cooperative-sticky, mirrorwatch's default, does not)"
                )
            own[name] = ",".join(names)
            continue
        if name in OIDC_CLIENT:  # Kafka 4.1's names of the OIDC client: librdkafka's older ones
            shared |= {OIDC_CLIENT[name]: value, "sasl.oauthbearer.method": "oidc"}
            continue
        if name == "sasl.jaas.config":
            shared.update(_from_jaas(value, label))
            continue
        if name.startswith(("ssl.truststore.", "ssl.keystore.")):
            stores[name] = value
            continue
        if name == "buffer.memory" and role == "producer":
            if not value.strip().isdigit():
                raise ConfigError([ConfigProblem(f"{label}: {name}", f"must be a number of bytes, got {value!r}")])
            own["queue.buffering.max.kbytes"] = str(max(1, int(value) // 1024))
            continue
        (shared if name.startswith(SHARED_PREFIXES) else own)[name] = value
    shared.update(_tls_from_java(stores, label))
    return shared, own


def _tls_from_java(stores: dict[str, str], label: str) -> dict[str, str]:
    """The Java client's truststore and keystore settings in librdkafka's terms: PEM stores (files or inline text)
    and PKCS12 keystores are taken; a JKS store (Java's default type) or a PKCS12 truststore is refused with the
    conversion to make."""
    out: dict[str, str] = {}

    def refused(name: str, message: str) -> ConfigError:
        return ConfigError([ConfigProblem(f"{label}: {name}", message)])

    trust_type = stores.get("ssl.truststore.type", "JKS").upper()
    if "ssl.truststore.certificates" in stores:
        out["ssl.ca.pem"] = stores["ssl.truststore.certificates"]
    elif "ssl.truststore.location" in stores:
        if trust_type != "PEM":
            raise refused(
                "ssl.truststore.location",
                f"a {trust_type} truststore cannot be read by librdkafka; export its CA certificates as PEM "
                "(keytool -exportcert -rfc) and set ssl.truststore.type=PEM, or ssl.ca.location",
            )
        out["ssl.ca.location"] = stores["ssl.truststore.location"]
    key_type = stores.get("ssl.keystore.type", "JKS").upper()
    if "ssl.keystore.certificate.chain" in stores or "ssl.keystore.key" in stores:
        out["ssl.certificate.pem"] = stores.get("ssl.keystore.certificate.chain", "")
        out["ssl.key.pem"] = stores.get("ssl.keystore.key", "")
    elif "ssl.keystore.location" in stores:
        location = stores["ssl.keystore.location"]
        if key_type == "PEM":  # one file with the private key and the certificate chain
            out |= {"ssl.certificate.location": location, "ssl.key.location": location}
        elif key_type == "PKCS12":
            out["ssl.keystore.location"] = location
            if "ssl.keystore.password" in stores:
                out["ssl.keystore.password"] = stores["ssl.keystore.password"]
        else:
            raise refused(
                "ssl.keystore.location",
                f"a {key_type} keystore cannot be read by librdkafka; convert it to PKCS12 (keytool -importkeystore "
                "-deststoretype PKCS12) and set ssl.keystore.type=PKCS12, or use PEM files",
            )
    return out


def _from_jaas(value: str, label: str) -> dict[str, str]:
    """A JAAS login as librdkafka's settings: PLAIN/SCRAM's username and password; OAuthBearerLoginModule's OIDC
    client (clientId, clientSecret, scope: its token endpoint URL has the same name in both clients, and the login
    callback handler class that goes with it is the Java client's only) or its unsecured token (KIP-255)."""
    found = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', value))
    if "OAuthBearerLoginModule" in value and "clientId" in found:
        oidc = {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"}
        for option, name in (("clientId", "client.id"), ("clientSecret", "client.secret"), ("scope", "scope")):
            if option in found:
                oidc[f"sasl.oauthbearer.{name}"] = found[option]
        return oidc
    if "OAuthBearerLoginModule" in value and "unsecuredLoginStringClaim_sub" in found:
        config = f"principal={found['unsecuredLoginStringClaim_sub']}"
        scope = found.get("unsecuredLoginListClaim_scope", "")
        if scope:
            config += " scope=" + ",".join(filter(None, scope[1:].split(scope[0])))
        return {"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": config}  # fmt: skip
    if "OAuthBearerLoginModule" in value:  # Kafka 4.1's way: the client in sasl.oauthbearer.client.credentials.*
        return {"sasl.mechanism": "OAUTHBEARER"}
    if "username" not in found or "password" not in found:
        raise ConfigError(
            [
                ConfigProblem(
                    f"{label}: sasl.jaas.config",
                    "only PLAIN/SCRAM login modules with username and password, and OAuthBearerLoginModule with "
                    "clientId or unsecuredLoginStringClaim_sub, can be mapped to librdkafka; set sasl.username and "
                    "sasl.password (or librdkafka's sasl.oauthbearer.* settings) instead",
                )
            ]
        )
    return {"sasl.username": found["username"], "sasl.password": found["password"]}


def config_from_mm1(options: MM1Options) -> tuple[MirrorwatchConfig, list[str]]:
    """The one-link config a MirrorMaker 1 command line describes, and warnings about what was not taken over."""
    warnings: list[str] = []
    c_label, p_label = f"consumer.config {options.consumer_config}", f"producer.config {options.producer_config}"
    consumer = _read_properties(options.consumer_config, c_label)
    producer = _read_properties(options.producer_config, p_label)
    problems = [
        ConfigProblem(f"{label}: {key}", "required property is missing")
        for label, props, keys in (
            (c_label, consumer, ("bootstrap.servers", "group.id")),
            (p_label, producer, ("bootstrap.servers",)),
        )
        for key in keys
        if not props.get(key)
    ]
    if not options.abort_on_send_failure and not options.dead_letter_topic:
        problems.append(
            ConfigProblem(
                "--abort.on.send.failure",
                "false would drop records the target refuses; mirrorwatch never drops a record: keep true (the link "
                "stops on such a record) or add --dead.letter.topic TOPIC to keep them there",
            )
        )
    if problems:
        raise ConfigError(problems)
    source_shared, consumer_own = _translate(consumer, c_label, "consumer", warnings)
    target_shared, producer_own = _translate(producer, p_label, "producer", warnings)
    # MirrorMaker 1 accepted ',' between topic names; '|' is the regex way of saying the same.
    whitelist = options.whitelist.replace(",", "|")
    link: dict[str, Any] = {
        "name": LINK_NAME,
        "source": "source",
        "target": "target",
        "group_id": consumer["group.id"],
        "topics": {"include": [whitelist]},
        "num_streams": options.num_streams,
        "consumer_properties": consumer_own,
        "producer_properties": producer_own,
    }
    if options.offset_commit_interval_ms is not None:
        link["offset_commit_interval_ms"] = options.offset_commit_interval_ms
    if options.dead_letter_topic:
        link["dead_letter_topic"] = options.dead_letter_topic
    if options.message_handler:
        link["handler"] = JAVA_HANDLERS.get(options.message_handler, options.message_handler)
        link["handler_args"] = options.message_handler_args
    document = {
        "clusters": {
            "source": {"bootstrap_servers": consumer["bootstrap.servers"], "properties": source_shared},
            "target": {"bootstrap_servers": producer["bootstrap.servers"], "properties": target_shared},
        },
        "links": [link],
    }
    try:
        return parse_config(document, source="the MirrorMaker command line", env={}), warnings
    except ConfigError as exc:
        raise ConfigError([_mm1_path(p) for p in exc.problems], exc.source) from None


def _mm1_path(problem: ConfigProblem) -> ConfigProblem:
    """Say config problems in the words of the command line the user typed."""
    names = {
        "links[0].topics.include[0]": "--whitelist",
        "links[0].handler": "--message.handler",
        "links[0].num_streams": "--num.streams",
        "links[0].offset_commit_interval_ms": "--offset.commit.interval.ms",
        "links[0].dead_letter_topic": "--dead.letter.topic",
    }
    return ConfigProblem(names.get(problem.path, problem.path), problem.message)
