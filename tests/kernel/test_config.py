"""The config model: a table of valid and invalid documents, secrets, env expansion. No broker needed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from kernel.config import (
    FormatRename,
    IdentityRename,
    MapRename,
    PrefixRename,
    is_secret_property,
    load_config,
    parse_config,
    render_config,
    reveal,
)
from kernel.errors import ConfigError

TWO_CLUSTERS: dict[str, Any] = {
    "source": {"bootstrap_servers": "localhost:19092"},
    "target": {"bootstrap_servers": "localhost:29092"},
}


def doc(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"clusters": TWO_CLUSTERS, "links": [{"name": "l", "source": "source", "target": "target"}]}
    base.update(overrides)
    return base


def link(**fields: Any) -> dict[str, Any]:
    return {"name": "l", "source": "source", "target": "target", **fields}


def problems_of(document: object, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(document, env=env or {})
    return [str(p) for p in info.value.problems]


# --------------------------------------------------------------------------------------------------------------------
# Valid documents and the defaults they get


def test_the_architecture_example_is_valid_and_gets_its_defaults() -> None:
    text = r"""
clusters:
  source:
    bootstrap_servers: localhost:19092
    properties: {}
  target:
    bootstrap_servers: localhost:29092
links:
  - name: source-to-target
    source: source
    target: target
    topics: {include: ["orders\\..*"], exclude: []}
    rename: {policy: identity}
    engine: python
    delivery: at-least-once
monitor: {interval_seconds: 10, window: 10}
canary: {interval_seconds: 60, topic: mirrorwatch.canary}
http: {port: 8000}
"""
    config = parse_config(yaml.safe_load(text), env={})
    (only,) = config.links
    assert only.topics.matches("orders.eu")
    assert not only.topics.matches("orders")  # full match: "orders\..*" needs the dot
    assert not only.topics.matches("xorders.eu")
    assert config.monitor.window == 10
    assert config.canary.topic == "mirrorwatch.canary"


def test_minimal_document_defaults() -> None:
    config = parse_config({"clusters": {"a": {"bootstrap_servers": "h:1"}}}, env={})
    assert config.links == ()
    assert config.monitor.interval_seconds == 10
    assert config.monitor.window == 10
    assert config.canary.interval_seconds == 60
    assert config.http.port == 8000


@pytest.mark.parametrize(
    ("rename", "expected"),
    [
        ({"policy": "identity"}, IdentityRename()),
        ({"policy": "prefix"}, PrefixRename(policy="prefix", separator=".")),
        ({"policy": "prefix", "separator": "_"}, PrefixRename(policy="prefix", separator="_")),
        ({"policy": "format", "format": "${topic}.replica"}, FormatRename(policy="format", format="${topic}.replica")),
        (
            {"policy": "format", "format": "${source}-${topic}"},
            FormatRename(policy="format", format="${source}-${topic}"),
        ),
        ({"policy": "map", "map": {"a": "b", "c": "d"}}, MapRename(policy="map", map={"a": "b", "c": "d"})),
    ],
)
def test_rename_policies_parse(rename: dict[str, Any], expected: object) -> None:
    config = parse_config(doc(links=[link(rename=rename)]), env={})
    assert config.links[0].rename == expected


def test_default_topic_selection_is_everything() -> None:
    selection = parse_config(doc(), env={}).links[0].topics
    assert selection.matches("anything") and selection.matches("orders.eu")


def test_excludes_win_over_includes() -> None:
    config = parse_config(doc(links=[link(topics={"include": ["orders.*"], "exclude": [r"orders\.test"]})]), env={})
    assert config.links[0].topics.matches("orders.eu")
    assert not config.links[0].topics.matches("orders.test")


def test_config_is_frozen() -> None:
    config = parse_config(doc(), env={})
    with pytest.raises(ValueError, match="frozen"):
        config.links[0].name = "other"  # type: ignore[misc]


def test_regexes_are_compiled_at_load() -> None:
    config = parse_config(doc(links=[link(topics={"include": ["a.*", "b"]})]), env={})
    assert all(isinstance(p, re.Pattern) for p in config.links[0].topics.include)


# --------------------------------------------------------------------------------------------------------------------
# Invalid documents: each case is (document, the exact problem lines). The first three are the example.

INVALID: list[tuple[str, object, list[str]]] = [
    (
        "unknown key at top level",
        {**doc(), "clusterz": {}},
        ["clusterz: unknown key 'clusterz' (did you mean 'clusters'?)"],
    ),
    (
        "invalid regex names its index",
        doc(links=[link(topics={"include": ["ok", "("]})]),
        ["links[0].topics.include[1]: invalid regex '(': missing ), unterminated subpattern"],
    ),
    (
        "a regex that can hang a backtracking match (issue #22) names what and the way out",
        doc(links=[link(topics={"include": ["ok"], "exclude": ["(a+)+$"]})]),
        [
            "links[0].topics.exclude[0]: regex '(a+)+$' is refused: matching it can take longer than anyone waits: "
            "a quantifier inside a quantified group (nested quantifiers, as in `(a+)+`); make the inner quantifier "
            "possessive (`a++`, `\\w*+`) or the group atomic (`(?>...)`)"
        ],
    ),
    (
        "link naming an unknown cluster",
        doc(links=[link(target="nyc")]),
        ["links[0].target: unknown cluster 'nyc' (clusters: source, target)"],
    ),
    (
        "a monitor shard naming an unknown cluster, and a shard group regex that can hang",
        doc(monitor={"shard": {"clusters": ["source", "dc9"], "groups": {"include": ["(a+)+"]}}}),
        [
            "monitor.shard.clusters[1]: unknown cluster 'dc9' (clusters: source, target)",
            "monitor.shard.groups.include[0]: regex '(a+)+' is refused: matching it can take longer than anyone "
            "waits: a quantifier inside a quantified group (nested quantifiers, as in `(a+)+`); make the inner "
            "quantifier possessive (`a++`, `\\w*+`) or the group atomic (`(?>...)`)",
        ],
    ),
    (
        "misspelled cluster key suggests the right one",
        {"clusters": {"a": {"bootstrap_server": "h:1"}}},
        [
            "clusters.a.bootstrap_server: unknown key 'bootstrap_server' (did you mean 'bootstrap_servers'?)",
            "clusters.a.bootstrap_servers: required key is missing",
        ],
    ),
    ("no clusters at all", {"links": []}, ["clusters: required key is missing"]),
    ("empty clusters", {"clusters": {}}, ["clusters: Dictionary should have at least 1 item after validation, not 0"]),
    ("not a mapping", ["a", "b"], ["the config must be a mapping with a 'clusters' key, got list"]),
    (
        "unknown rename policy",
        doc(links=[link(rename={"policy": "mirror"})]),
        ["links[0].rename: unknown policy 'mirror' (expected one of 'identity', 'prefix', 'format', 'map')"],
    ),
    (
        "format without ${topic}",
        doc(links=[link(rename={"policy": "format", "format": "replica"})]),
        ["links[0].rename.format: must contain ${topic}, got replica"],
    ),
    (
        "format with an unknown placeholder",
        doc(links=[link(rename={"policy": "format", "format": "${topic}.${dc}"})]),
        ["links[0].rename.format: only ${topic} and ${source} may be used, got ${topic}.${dc}"],
    ),
    (
        "map that is not one-to-one",
        doc(links=[link(rename={"policy": "map", "map": {"a": "x", "b": "x"}})]),
        ["links[0].rename.map: topics 'a' and 'b' both map to 'x': the map must be one-to-one so it can be inverted"],
    ),
    (
        "map key named like the policy is still reported under map",
        doc(links=[link(rename={"policy": "map", "map": {"a": "b"}, "mapp": 1})]),
        ["links[0].rename.mapp: unknown key 'mapp' (did you mean 'map'?)"],
    ),
    (
        "prefix separator with a slash",
        doc(links=[link(rename={"policy": "prefix", "separator": "/"})]),
        ["links[0].rename.separator: String should match pattern '^[A-Za-z0-9._-]+$' (got '/')"],
    ),
    (
        "unknown engine",
        doc(links=[link(engine="flink")]),
        ["links[0].engine: Input should be 'python' or 'spark' (got 'flink')"],
    ),
    (
        "unknown delivery",
        doc(links=[link(delivery="at-most-once")]),
        ["links[0].delivery: Input should be 'at-least-once' or 'exactly-once' (got 'at-most-once')"],
    ),
    ("duplicate link names", doc(links=[link(), link()]), ["links[1].name: duplicate link name 'l' (also links[0])"]),
    (
        "negative interval",
        doc(monitor={"interval_seconds": -1}),
        ["monitor.interval_seconds: Input should be greater than 0 (got -1)"],
    ),
    (
        "window of one sample",
        doc(monitor={"window": 1}),
        ["monitor.window: Input should be greater than or equal to 2 (got 1)"],
    ),
    (
        "port out of range",
        doc(http={"port": 70000}),
        ["http.port: Input should be less than or equal to 65535 (got 70000)"],
    ),
    (
        "invalid canary topic",
        doc(canary={"topic": "has space"}),
        ["canary.topic: String should match pattern '^[A-Za-z0-9._-]+$' (got 'has space')"],
    ),
    (
        "bootstrap.servers inside properties",
        {"clusters": {"a": {"bootstrap_servers": "h:1", "properties": {"bootstrap.servers": "h:2"}}}},
        ["clusters.a.properties: bootstrap.servers: set bootstrap_servers instead"],
    ),
    (
        "links indexed past ten are sorted by number",
        doc(links=[link(name=f"l{i}", target="nyc" if i in (2, 10) else "target") for i in range(11)]),
        [
            "links[2].target: unknown cluster 'nyc' (clusters: source, target)",
            "links[10].target: unknown cluster 'nyc' (clusters: source, target)",
        ],
    ),
]


@pytest.mark.parametrize(("case", "document", "expected"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_documents(case: str, document: object, expected: list[str]) -> None:
    assert problems_of(document) == expected, case


def test_every_problem_is_reported_at_once() -> None:
    document = {
        **doc(links=[link(target="nowhere", topics={"include": ["orders\\..*", "("]})]),
        "clusters": {**TWO_CLUSTERS, "target": {"bootstrap_servers": "h:2", "colour": "red"}},
    }
    assert problems_of(document) == [
        "clusters.target.colour: unknown key 'colour'",
        "links[0].target: unknown cluster 'nowhere' (clusters: source, target)",
        "links[0].topics.include[1]: invalid regex '(': missing ), unterminated subpattern",
    ]


# --------------------------------------------------------------------------------------------------------------------
# Environment variables and secrets


def test_env_vars_are_expanded_in_cluster_sections_only() -> None:
    document = doc(links=[link(rename={"policy": "format", "format": "${topic}.replica"})])
    document["clusters"] = {
        "source": {"bootstrap_servers": "${BROKERS}", "properties": {"sasl.username": "${USER:-mirror}"}},
        "target": {"bootstrap_servers": "host:$${literal}"},
    }
    config = parse_config(document, env={"BROKERS": "kafka-1:9092,kafka-2:9092"})
    assert config.clusters["source"].bootstrap_servers == "kafka-1:9092,kafka-2:9092"
    assert config.clusters["source"].properties["sasl.username"] == "mirror"
    assert config.clusters["target"].bootstrap_servers == "host:${literal}"
    assert config.links[0].rename == FormatRename(policy="format", format="${topic}.replica")  # not an env var


def test_unset_env_var_names_the_path() -> None:
    document = {"clusters": {"a": {"bootstrap_servers": "h:1", "properties": {"sasl.password": "${KAFKA_PW}"}}}}
    assert problems_of(document) == ["clusters.a.properties.sasl.password: environment variable 'KAFKA_PW' is not set"]


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("sasl.password", True),
        ("ssl.key.password", True),
        ("ssl.keystore.password", True),
        ("ssl.key.pem", True),
        ("sasl.jaas.config", True),
        ("sasl.oauthbearer.client.secret", True),
        ("sasl.kerberos.keytab", True),
        ("sasl.oauthbearer.config", True),
        ("api.token", True),
        ("ssl.keystore.location", True),
        ("sasl.username", False),
        ("security.protocol", False),
        ("linger.ms", False),
        ("compression.type", False),
        ("ssl.endpoint.identification.algorithm", False),
        ("partition.assignment.strategy", False),
        ("client.id", False),
    ],
)
def test_secret_property_names(name: str, secret: bool) -> None:
    assert is_secret_property(name) is secret


def test_secrets_are_masked_in_show_and_repr_but_reach_the_client() -> None:
    document = {
        "clusters": {
            "a": {
                "bootstrap_servers": "h:1",
                "properties": {
                    "sasl.password": "${PW}",
                    "sasl.username": "u",
                    "linger.ms": 5,
                    "enable.idempotence": True,
                },
            }
        }
    }
    config = parse_config(document, env={"PW": "hunter2"})
    cluster = config.clusters["a"]
    assert isinstance(cluster.properties["sasl.password"], SecretStr)
    assert "hunter2" not in render_config(config)
    assert "hunter2" not in repr(config) and "hunter2" not in str(config)
    assert cluster.client_properties() == {
        "bootstrap.servers": "h:1",
        "sasl.password": "hunter2",
        "sasl.username": "u",
        "linger.ms": "5",
        "enable.idempotence": "true",
    }


def test_the_canary_signing_key_comes_from_the_environment_and_is_masked() -> None:
    config = parse_config({**doc(), "canary": {"signing_key": "${KEY}"}}, env={"KEY": "k" * 20})
    assert config.canary.signing_key is not None and config.canary.signing_key.get_secret_value() == "k" * 20
    assert "kkkk" not in render_config(config) + repr(config)
    assert problems_of({**doc(), "canary": {"signing_key": "short"}}) == [
        "canary.signing_key: Value should have at least 16 items after validation, not 5"
    ]


def test_spark_conf_secrets_are_masked_in_show_but_reach_spark() -> None:
    conf = {
        "spark.authenticate.secret": "hunter4",
        "spark.ssl.keyStorePassword": "hunter5",
        "spark.hadoop.fs.s3a.secret.key": "hunter6",
        "spark.executor.instances": 2,
    }
    config = parse_config(doc(links=[link(engine="spark", spark={"conf": conf})]), env={})
    assert "hunter" not in render_config(config) + repr(config)
    assert "spark.executor.instances: '2'" in render_config(config)
    assert reveal(config.links[0].spark.conf) == {**conf, "spark.executor.instances": "2"}


@pytest.mark.parametrize(
    ("where", "document"),
    [
        (
            "clusters.source.properties",
            {
                "clusters": {
                    **TWO_CLUSTERS,
                    "source": {"bootstrap_servers": "h:1", "properties": "sasl.password=hunter2"},
                }
            },
        ),
        ("links[0].consumer_properties", doc(links=[link(consumer_properties="sasl.password=hunter2")])),
        ("links[0].spark.conf", doc(links=[link(engine="spark", spark={"conf": "spark.authenticate.secret=hunter2"})])),
        ("links[0].name", doc(links=[link(name="ssl.key.password: hunter2")])),
    ],
)
def test_an_error_never_echoes_raw_input_that_names_a_secret(where: str, document: dict[str, Any]) -> None:
    """Issue #22, case 6: `properties:` written as a string was echoed in the error, password and all."""
    (problem,) = problems_of(document)
    assert problem.startswith(where + ": ") and "hunter2" not in problem


def test_a_property_value_that_is_not_a_scalar_names_the_property() -> None:
    document = {"clusters": {**TWO_CLUSTERS, "source": {"bootstrap_servers": "h:1", "properties": {"linger.ms": [1]}}}}
    assert problems_of(document) == [
        "clusters.source.properties: linger.ms: must be text, a number or true/false, got a list"
    ]


@given(secret=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1))
def test_rendered_output_does_not_depend_on_secret_values(secret: str) -> None:
    def rendered(value: str) -> str:
        document = {
            "clusters": {
                "a": {
                    "bootstrap_servers": "h:1",
                    "properties": {"ssl.key.password": "${S}", "sasl.jaas.config": "${S}"},
                }
            }
        }
        config = parse_config(document, env={"S": value})
        return render_config(config) + repr(config)

    assert rendered(secret) == rendered("reference-value")


def test_render_round_trips() -> None:
    config = parse_config(doc(links=[link(topics={"include": ["orders\\..*"]}, rename={"policy": "prefix"})]), env={})
    again = parse_config(yaml.safe_load(render_config(config)), env={})
    assert again == config


# --------------------------------------------------------------------------------------------------------------------
# Files


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert [str(p) for p in info.value.problems] == ["cannot read config file: No such file or directory"]


def test_load_invalid_yaml_says_where(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("clusters:\n  a: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert problem.message.startswith("not valid YAML: line 3, column 1:")


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"clusters:\n  a:\n    bootstrap_servers: h:1\xff\n", "not UTF-8 text: byte 0xff on line 3"),
        (b"a: " + b"[" * 5000 + b"]" * 5000, "not a config: nested deeper than 32 levels"),
        (b"a: " + b"[" * 40 + b"]" * 40, "not a config: nested deeper than 32 levels"),
        (
            ALIAS_BOMB.encode() + b"clusters: *i\n",
            "not a config: more than 100,000 values once its YAML aliases are expanded",
        ),
        (b"a: &a [*a]\nclusters: *a\n", "not a config: nested deeper than 32 levels"),
    ],
    ids=["not utf-8", "5000 deep", "40 deep", "alias bomb", "alias cycle"],
)
def test_a_file_that_is_not_a_config_is_one_problem_not_a_traceback_or_a_hang(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    """Issue #22, case 7: these were a UnicodeDecodeError, a RecursionError and a 9**9-value expansion."""
    path = tmp_path / "hostile.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [str(p) for p in info.value.problems] == [problem]


def test_yaml_aliases_of_a_real_size_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "aliases.yaml"
    path.write_text(
        "clusters:\n"
        "  a: {bootstrap_servers: 'h:1', properties: &common {security.protocol: SSL, ssl.key.password: x}}\n"
        "  b: {bootstrap_servers: 'h:2', properties: *common}\n"
    )
    config = load_config(path)
    assert config.clusters["b"].client_properties()["ssl.key.password"] == "x"


def test_link_lookup_names_known_links() -> None:
    config = parse_config(doc(), env={})
    assert config.link("l").name == "l"
    with pytest.raises(ConfigError, match=r"no link named 'x' \(links: l\)"):
        config.link("x")


def test_a_single_bad_regex_is_one_problem() -> None:
    assert problems_of(doc(links=[link(topics={"include": ["("]})])) == [
        "links[0].topics.include[0]: invalid regex '(': missing ), unterminated subpattern"
    ]


def test_an_empty_include_list_is_reported() -> None:
    assert problems_of(doc(links=[link(topics={"include": []})])) == [
        "links[0].topics.include: Tuple should have at least 1 item after validation, not 0"
    ]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"partitioning": "random"},
            ["links[0].partitioning: Input should be 'preserve', 'hash' or 'modulo' (got 'random')"],
        ),
        (
            {"handler": "not a reference"},
            [
                "links[0].handler: String should match pattern '^[A-Za-z_][\\w.]*:[A-Za-z_][\\w.]*$' (got 'not a reference')"
            ],
        ),
        (
            {"consumer_properties": {"group.id": "x"}},
            [
                "links[0].consumer_properties: group.id: set by mirrorwatch itself (see the link's group_id and delivery)"
            ],
        ),
        ({"num_streams": 0}, ["links[0].num_streams: Input should be greater than or equal to 1 (got 0)"]),
        (
            {"offset_commit_interval_ms": 10},
            ["links[0].offset_commit_interval_ms: Input should be greater than or equal to 100 (got 10)"],
        ),
    ],
)
def test_invalid_link_settings(fields: dict[str, Any], expected: list[str]) -> None:
    assert problems_of(doc(links=[link(**fields)])) == expected


def test_link_defaults() -> None:
    (only,) = parse_config(doc(), env={}).links
    assert only.consumer_group == "mirrorwatch-l"
    assert (only.partitioning, only.offset_commit_interval_ms, only.num_streams) == ("preserve", 5000, 1)
    assert (only.dead_letter_topic, only.handler, only.start_from) == (None, None, "earliest")


def test_alert_thresholds_are_checked_like_alerts_build_set() -> None:
    config = parse_config(
        doc(monitor={"alert_thresholds": {"replication_lag_for": "1m", "replication_lag_seconds": "30"}})
    )
    assert config.monitor.alert_thresholds == {"replication_lag_for": "1m", "replication_lag_seconds": "30"}
    [unknown] = problems_of(doc(monitor={"alert_thresholds": {"lag_for": "1m"}}))
    assert unknown.startswith("monitor.alert_thresholds: 'lag_for' is not a threshold; one of ")
    assert problems_of(doc(monitor={"alert_thresholds": {"replication_lag_for": "soon"}})) == [
        "monitor.alert_thresholds: replication_lag_for='soon': must be a Prometheus duration like 5m"
    ]
