"""MirrorMaker 1 command lines and properties files turned into a link (no broker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.config import reveal
from kernel.errors import ConfigError
from mirror.mm1 import MM1Options, config_from_mm1

DATA = Path(__file__).parent / "data"


def options(**overrides: object) -> MM1Options:
    fields: dict[str, object] = {
        "consumer_config": DATA / "consumer.properties",
        "producer_config": DATA / "producer.properties",
        "whitelist": "topic-mirror",
    }
    fields.update(overrides)
    return MM1Options(**fields)  # type: ignore[arg-type]


def test_the_classic_example_files() -> None:
    config, warnings = config_from_mm1(options())
    assert config.clusters["source"].bootstrap_servers == "cluster1:9092"
    assert config.clusters["target"].bootstrap_servers == "cluster2:9092"
    (link,) = config.links
    assert link.consumer_group == "groupIdMirror"
    assert link.topics.matches("topic-mirror") and not link.topics.matches("topic-mirror2")
    assert dict(link.consumer_properties) == {
        "client.id": "sourceMirror",
        "partition.assignment.strategy": "roundrobin",
    }
    assert dict(link.producer_properties) == {"client.id": "sinkMirror"}
    assert link.num_streams == 1
    assert warnings == [
        f"consumer.config {DATA / 'consumer.properties'}: org.apache.kafka.clients.consumer.RoundRobinAssignor is an "
        "eager assignor: every rebalance stops all partitions (cooperative-sticky, mirrorwatch's default, does not)"
    ]


def test_num_streams_whitelist_and_handler() -> None:
    config, _ = config_from_mm1(
        options(
            whitelist="test_.*",
            num_streams=3,
            offset_commit_interval_ms=60000,
            message_handler="com.opencore.RenameTopicHandler",
            message_handler_args="test_source,test_target",
        )
    )
    (link,) = config.links
    assert (link.num_streams, link.offset_commit_interval_ms) == (3, 60000)
    assert (link.handler, link.handler_args) == ("mirror.handler:rename_topics", "test_source,test_target")


def test_commas_and_bars_separate_topics() -> None:
    config, _ = config_from_mm1(options(whitelist="a,b|c"))
    selection = config.links[0].topics
    assert [t for t in ("a", "b", "c", "d") if selection.matches(t)] == ["a", "b", "c"]


def test_java_only_and_owned_keys_are_reported_not_dropped(tmp_path: Path) -> None:
    consumer = tmp_path / "c.properties"
    consumer.write_text(
        "bootstrap.servers=h:1\ngroup.id=g\nkey.deserializer=org.X\nenable.auto.commit=true\n"
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="mirror" password="s3cret";\n'
    )
    config, warnings = config_from_mm1(options(consumer_config=consumer))
    assert warnings == [
        f"consumer.config {consumer}: key.deserializer is a Java client setting with no librdkafka equivalent: ignored",
        f"consumer.config {consumer}: enable.auto.commit=true ignored: mirrorwatch commits only what the target "
        "acknowledged",
    ]
    props = config.clusters["source"].client_properties()
    assert props["sasl.username"] == "mirror" and props["sasl.password"] == "s3cret"
    assert props["security.protocol"] == "SASL_SSL"
    assert "s3cret" not in repr(config)


@pytest.mark.parametrize(
    ("consumer_text", "extra", "expected"),
    [
        ("group.id=g\n", {}, ["consumer.config {c}: bootstrap.servers: required property is missing"]),
        ("bootstrap.servers=h:1\n", {}, ["consumer.config {c}: group.id: required property is missing"]),
        (
            "bootstrap.servers=h:1\ngroup.id=g\n",
            {"abort_on_send_failure": False},
            [
                "--abort.on.send.failure: false would drop records the target refuses; mirrorwatch never drops a record: "
                "keep true (the link stops on such a record) or add --dead.letter.topic TOPIC to keep them there"
            ],
        ),
        (
            "bootstrap.servers=h:1\ngroup.id=g\n",
            {"whitelist": "("},
            ["--whitelist: invalid regex '(': missing ), unterminated subpattern"],
        ),
        (
            "bootstrap.servers=h:1\ngroup.id=g\nssl.truststore.location=/x.jks\n",
            {},
            [
                "consumer.config {c}: ssl.truststore.location: a JKS truststore cannot be read by librdkafka; export "
                "its CA certificates as PEM (keytool -exportcert -rfc) and set ssl.truststore.type=PEM, or "
                "ssl.ca.location"
            ],
        ),
        (
            "bootstrap.servers=h:1\ngroup.id=g\nssl.keystore.type=JKS\nssl.keystore.location=/k.jks\n",
            {},
            [
                "consumer.config {c}: ssl.keystore.location: a JKS keystore cannot be read by librdkafka; convert it "
                "to PKCS12 (keytool -importkeystore -deststoretype PKCS12) and set ssl.keystore.type=PKCS12, or use "
                "PEM files"
            ],
        ),
    ],
)
def test_bad_mm1_input(tmp_path: Path, consumer_text: str, extra: dict[str, object], expected: list[str]) -> None:
    consumer = tmp_path / "c.properties"
    consumer.write_text(consumer_text)
    with pytest.raises(ConfigError) as info:
        config_from_mm1(options(consumer_config=consumer, **extra))
    assert [str(p) for p in info.value.problems] == [e.format(c=consumer) for e in expected]


@pytest.mark.parametrize(
    ("producer_bytes", "expected"),
    [
        (b"bootstrap.servers=h:2\nclient.id=\\uZZZZ\n", "producer.config {p}: Invalid \\u escape sequence: \\uZZZZ"),
        (
            b"bootstrap.servers=h:2\nbuffer.memory=lots\n",
            "producer.config {p}: buffer.memory: must be a number of bytes, got 'lots'",
        ),
    ],
)
def test_a_properties_file_mirrormaker_would_not_take_is_one_problem_not_a_traceback(
    tmp_path: Path, producer_bytes: bytes, expected: str
) -> None:
    """Issue #22, case 7."""
    producer = tmp_path / "p.properties"
    producer.write_bytes(producer_bytes)
    with pytest.raises(ConfigError) as info:
        config_from_mm1(options(producer_config=producer))
    assert [str(p) for p in info.value.problems] == [expected.format(p=producer)]


def test_a_properties_file_that_is_not_utf8_is_read_as_java_reads_it(tmp_path: Path) -> None:
    """Java's Properties.load reads ISO-8859-1: a file MirrorMaker took (here with a Latin-1 é) is taken."""
    consumer = tmp_path / "c.properties"
    consumer.write_bytes(b"bootstrap.servers=h:1\ngroup.id=caf\xe9\n")
    config, _ = config_from_mm1(options(consumer_config=consumer))
    assert config.links[0].group_id == "café"


def test_abort_false_with_a_dead_letter_topic_is_fine() -> None:
    config, _ = config_from_mm1(options(abort_on_send_failure=False, dead_letter_topic="mm.dlq"))
    assert config.links[0].dead_letter_topic == "mm.dlq"


@pytest.mark.parametrize(
    ("java", "librdkafka"),
    [
        (
            "ssl.truststore.type=PEM\nssl.truststore.location=/ca.pem\nssl.truststore.password=unused\n",
            {"ssl.ca.location": "/ca.pem"},
        ),
        ("ssl.truststore.type=PEM\nssl.truststore.certificates=CA TEXT\n", {"ssl.ca.pem": "CA TEXT"}),
        (
            "ssl.keystore.type=PEM\nssl.keystore.location=/me.pem\nssl.key.password=kp\n",
            {"ssl.certificate.location": "/me.pem", "ssl.key.location": "/me.pem", "ssl.key.password": "kp"},
        ),
        (
            "ssl.keystore.type=PEM\nssl.keystore.certificate.chain=CERT\nssl.keystore.key=KEY\n",
            {"ssl.certificate.pem": "CERT", "ssl.key.pem": "KEY"},
        ),
        (
            "ssl.keystore.type=PKCS12\nssl.keystore.location=/me.p12\nssl.keystore.password=sp\n",
            {"ssl.keystore.location": "/me.p12", "ssl.keystore.password": "sp"},
        ),
    ],
)
def test_java_pem_and_pkcs12_stores_become_librdkafkas_settings(
    tmp_path: Path, java: str, librdkafka: dict[str, str]
) -> None:
    consumer = tmp_path / "c.properties"
    consumer.write_text(
        "bootstrap.servers=h:1\ngroup.id=g\nsecurity.protocol=SSL\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";\n'
        + java
    )
    config, warnings = config_from_mm1(options(consumer_config=consumer))
    properties = reveal(config.clusters["source"].properties)
    assert properties == {"security.protocol": "SSL", "sasl.username": "u", "sasl.password": "p", **librdkafka}
    assert not [w for w in warnings if "ssl." in w]


@pytest.mark.parametrize(
    ("jaas", "librdkafka"),
    [
        (
            'clientId="mirror" clientSecret="s3cret" scope="kafka";',
            {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "mirror",
             "sasl.oauthbearer.client.secret": "s3cret", "sasl.oauthbearer.scope": "kafka"},
        ),
        (
            ";\nsasl.oauthbearer.client.credentials.client.id=mirror\n"  # Kafka 4.1's names
            "sasl.oauthbearer.client.credentials.client.secret=s3cret\nsasl.oauthbearer.scope=kafka",
            {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "mirror",
             "sasl.oauthbearer.client.secret": "s3cret", "sasl.oauthbearer.scope": "kafka"},
        ),
        (
            'unsecuredLoginStringClaim_sub="mirror" unsecuredLoginListClaim_scope=",kafka,other";',
            {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": "principal=mirror scope=kafka,other"},
        ),
    ],
)  # fmt: skip
def test_an_oauthbearer_login_becomes_librdkafkas_oidc_client_or_unsecured_token(
    tmp_path: Path, jaas: str, librdkafka: dict[str, str]
) -> None:
    consumer = tmp_path / "c.properties"
    consumer.write_text(
        "bootstrap.servers=h:1\ngroup.id=g\nsecurity.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        "sasl.oauthbearer.token.endpoint.url=https://idp/token\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required " + jaas + "\n"
    )
    config, warnings = config_from_mm1(options(consumer_config=consumer))
    expected = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", **librdkafka}
    expected["sasl.oauthbearer.token.endpoint.url"] = "https://idp/token"
    assert reveal(config.clusters["source"].properties) == expected
    assert [w for w in warnings if "sasl.login.callback.handler.class" in w]  # said, not passed to librdkafka
    assert "s3cret" not in repr(config)
