"""What each component needs (`kernel.acl`), per-component principals in the config, and a missing ACL said
once: pure, no brokers (`tests/mirrorwatch/test_check.py` runs them against real ones)."""

from __future__ import annotations

import logging
import shlex

import pytest

from kernel.acl import DenialLog, Permission, grant_line, required
from kernel.config import MirrorwatchConfig, parse_config
from kernel.errors import ConfigError


def _config(link: dict[str, object] | None = None, **sections: object) -> MirrorwatchConfig:
    base = {"name": "orders", "source": "dc1", "target": "hub", "topics": {"include": [r"orders\..*"]}}
    return parse_config(
        {
            "clusters": {
                "dc1": {
                    "bootstrap_servers": "dc1:9092",
                    "properties": {"security.protocol": "SASL_SSL", "sasl.username": "ops", "sasl.password": "o"},
                    "clients": {"mirror": {"sasl.username": "mirror", "sasl.password": "m"}},
                },
                "hub": {"bootstrap_servers": "hub:9092"},
            },
            "links": [{**base, **(link or {})}],
            **sections,
        },
        env={},
    )


def _names(permissions: list[Permission], role: str, cluster: str) -> set[tuple[str, str, str]]:
    return {(p.operation, p.resource, p.name) for p in permissions if p.role == role and p.cluster == cluster}


def test_the_mirror_reads_only_the_selected_topics_and_writes_only_their_copies() -> None:
    config = _config({"rename": {"policy": "prefix"}}, canary={"enabled": False})
    needed = required(config, config.links[0], ["orders.eu", "orders.us", "payments", "__consumer_offsets"])
    assert _names(needed, "mirror", "dc1") == {
        ("Read", "topic", "orders.eu"),
        ("DescribeConfigs", "topic", "orders.eu"),
        ("Read", "topic", "orders.us"),
        ("DescribeConfigs", "topic", "orders.us"),
        ("Read", "group", "mirrorwatch-orders"),
    } | {(op, "topic", "mirrorwatch.progress") for op in ("Write", "Create", "Describe")}  # progress.on_source
    assert _names(needed, "mirror", "hub") == {
        (op, "topic", f"dc1.orders.{region}")
        for op in ("Write", "Create", "DescribeConfigs", "Alter")
        for region in ("eu", "us")
    } | {(op, "topic", "mirrorwatch.progress") for op in ("Write", "Create", "Describe", "Read")}
    assert not any(p.name == "payments" for p in needed)
    assert _names(needed, "canary", "dc1") == set()


def test_the_canary_topic_is_mirrored_and_probed_whatever_the_selection_says() -> None:
    config = _config(canary={"topic": "probes"})
    needed = required(config, config.links[0], ["orders.eu"])  # the canary makes its topic: not there yet
    assert ("Read", "topic", "probes") in _names(needed, "mirror", "dc1")
    assert ("Write", "topic", "probes") in _names(needed, "mirror", "hub")
    assert _names(needed, "canary", "dc1") == {("Write", "topic", "probes"), ("Create", "topic", "probes"),
                                               ("Describe", "topic", "probes")}  # fmt: skip
    assert _names(needed, "canary", "hub") == {("Read", "topic", "probes")}


def test_exactly_once_and_a_dead_letter_topic_add_what_they_write() -> None:
    config = _config({"delivery": "exactly-once", "dead_letter_topic": "orders.dlq"}, canary={"enabled": False})
    needed = required(config, config.links[0], ["orders.eu"])
    hub = {p for p in needed if p.role == "mirror" and p.cluster == "hub"}
    transactional = [p for p in hub if p.resource == "transactional-id"]
    assert [(p.operation, p.name, p.pattern) for p in transactional] == [
        ("Write", "mirrorwatch-mirrorwatch-orders-", "prefixed")
    ]
    assert {(p.operation, p.name) for p in hub if p.name.startswith("mirrorwatch-offsets.")} == {
        (op, "mirrorwatch-offsets.mirrorwatch-orders") for op in ("Read", "Write", "Create")
    }
    assert {(p.operation, p.name) for p in hub if p.name == "orders.dlq"} == {
        ("Write", "orders.dlq"),
        ("Create", "orders.dlq"),
    }


def test_the_monitor_describes_and_reads_and_following_commits_is_optional() -> None:
    config = _config(canary={"enabled": False})
    needed = required(config, config.links[0], ["orders.eu"])
    monitor = {p for p in needed if p.role == "monitor"}
    assert {(p.cluster, p.operation, p.resource, p.name) for p in monitor if not p.optional} == {
        ("dc1", "Describe", "topic", "orders.eu"),
        ("dc1", "Read", "topic", "orders.eu"),
        ("hub", "Describe", "topic", "orders.eu"),
        ("dc1", "Describe", "group", "mirrorwatch-orders"),
    }
    assert {(p.cluster, p.name) for p in monitor if p.optional} == {
        ("dc1", "__consumer_offsets"),
        ("hub", "__consumer_offsets"),
        ("dc1", "mirrorwatch-monitor-dc1-offsets-reader"),
        ("hub", "mirrorwatch-monitor-hub-offsets-reader"),
        ("hub", "mirrorwatch.progress"),
        ("dc1", "mirrorwatch.progress"),  # progress.on_source
    }
    admin_api = _config(canary={"enabled": False}, progress={"enabled": False}, monitor={"commits_from": "admin_api"})
    assert not any(p.optional for p in required(admin_api, admin_api.links[0], ["orders.eu"]))


def test_the_progress_topic_is_written_by_the_mirror_and_read_by_the_monitor_on_the_target_alone() -> None:
    """Optional: without them a monitor sees its own host's workers only (their status files), and a worker obeys its
    own host's control document only (the mirror reads the link's control there)."""
    config = _config(canary={"enabled": False}, progress={"topic": "mw.progress"})
    progress = [p for p in required(config, config.links[0], ["orders.eu"]) if p.name == "mw.progress"]
    assert {(p.cluster, p.role, p.operation) for p in progress} == {
        ("hub", "mirror", "Write"),
        ("hub", "mirror", "Create"),
        ("hub", "mirror", "Describe"),
        ("hub", "mirror", "Read"),
        ("hub", "monitor", "Read"),
        ("hub", "monitor", "Describe"),
        # progress.on_source: the same statuses on the source, read while the target does not answer
        ("dc1", "mirror", "Write"),
        ("dc1", "mirror", "Create"),
        ("dc1", "mirror", "Describe"),
        ("dc1", "monitor", "Read"),
        ("dc1", "monitor", "Describe"),
    }
    assert all(p.optional for p in progress)
    target_only = _config(canary={"enabled": False}, progress={"topic": "mw.progress", "on_source": False})
    assert not [
        p
        for p in required(target_only, target_only.links[0], ["orders.eu"])
        if p.cluster == "dc1" and p.name == "mw.progress"
    ]
    off = _config(canary={"enabled": False}, progress={"enabled": False})
    assert not any("progress" in p.name for p in required(off, off.links[0], ["orders.eu"]))


def test_the_grant_line_is_one_kafka_acls_command_a_shell_reads_back_as_written() -> None:
    permission = Permission("dc1", "mirror", "Write", "transactional-id", "mirrorwatch-g'x-", "prefixed")
    line = grant_line(permission, "dc1:9092", "User:CN=mirror,O=Ops Team")
    words = shlex.split(line)
    assert words[:2] == ["kafka-acls.sh", "--bootstrap-server"]
    assert words[words.index("--allow-principal") + 1] == "User:CN=mirror,O=Ops Team"
    assert words[words.index("--operation") + 1] == "Write"
    assert words[words.index("--transactional-id") + 1] == "mirrorwatch-g'x-"
    assert words[-2:] == ["--resource-pattern-type", "prefixed"]
    assert str(permission) == 'Write on transactional-id "mirrorwatch-g\'x-" (prefixed)'


def test_each_component_connects_with_its_clients_settings_over_the_common_ones() -> None:
    config = _config()
    mirror = config.as_client("mirror").clusters["dc1"].client_properties()
    assert (mirror["sasl.username"], mirror["sasl.password"], mirror["security.protocol"]) == (
        "mirror",
        "m",
        "SASL_SSL",
    )
    assert config.as_client("monitor").clusters["dc1"].client_properties()["sasl.username"] == "ops"
    assert config.as_client("mirror").as_client("monitor") == config.as_client("mirror")  # applied once
    assert "clients" not in config.as_client("canary").clusters["dc1"].model_dump(exclude_defaults=True)
    plain = _config(canary={"enabled": False})
    no_clients = plain.model_copy(update={"clusters": {a: c.as_client("mirror") for a, c in plain.clusters.items()}})
    assert no_clients.as_client("monitor") is no_clients


@pytest.mark.parametrize(
    ("clients", "said"),
    [
        ({"mirrer": {"sasl.username": "x"}}, "clusters.dc1.clients.mirrer"),
        ({"mirror": {"bootstrap.servers": "x:1"}}, "set bootstrap_servers instead"),
        ({"mirror": "sasl.password=x"}, "not a string (its value not shown)"),
    ],
)
def test_a_bad_clients_section_is_named_at_its_path(clients: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"clusters": {"dc1": {"bootstrap_servers": "dc1:9092", "clients": clients}}}, env={})
    assert said in str(raised.value)
    assert "sasl.password=x" not in str(raised.value)


def test_a_refused_permission_is_said_once_and_again_only_after_it_was_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = DenialLog(logging.getLogger("test.denials"), "link orders")
    with caplog.at_level(logging.WARNING, "test.denials"):
        assert log.denied("Read", "topic", "orders.eu", "TOPIC_AUTHORIZATION_FAILED")
        for _ in range(50):
            assert not log.denied("Read", "topic", "orders.eu", "TOPIC_AUTHORIZATION_FAILED")
        assert log.denied("Read", "group", "mirrorwatch-orders", "GROUP_AUTHORIZATION_FAILED")
        log.allowed("Read", "topic", ["orders.us"])  # never refused: nothing to say
        log.allowed("Read", "topic", ["orders.eu"])
        assert log.denied("Read", "topic", "orders.eu", "TOPIC_AUTHORIZATION_FAILED")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines
    assert lines[0].startswith("link orders: Read on topic 'orders.eu' is not allowed (TOPIC_AUTHORIZATION_FAILED)")
    assert lines[2] == "link orders: Read on topic 'orders.eu' is allowed again"
    assert set(log.refused()) == {("Read", "topic", "orders.eu"), ("Read", "group", "mirrorwatch-orders")}


def test_config_sync_adds_alter_configs_on_each_copy_and_nothing_on_the_source() -> None:
    plain = _config(canary={"enabled": False})
    synced = _config({"sync": {"topic_configs": True}}, canary={"enabled": False})
    before, after = (set(required(c, c.links[0], ["orders.eu"])) for c in (plain, synced))
    assert {(p.cluster, p.operation, p.resource, p.name) for p in after - before} == {
        ("hub", "AlterConfigs", "topic", "orders.eu")
    }
    assert before <= after


def test_acl_sync_adds_describe_on_the_source_cluster_and_describe_and_alter_on_the_target_cluster() -> None:
    synced = _config({"sync": {"acls": True}}, canary={"enabled": False})
    clusters = {(p.cluster, p.operation) for p in required(synced, synced.links[0], ["orders.eu"])
                if p.resource == "cluster"}  # fmt: skip
    assert clusters == {("dc1", "Describe"), ("hub", "Describe"), ("hub", "Alter")}
    alter = next(p for p in required(synced, synced.links[0], ["orders.eu"]) if p.operation == "Alter"
                 and p.resource == "cluster")  # fmt: skip
    line = grant_line(alter, "hub:9092", "User:mirror")
    assert line.endswith("--allow-principal User:mirror --operation Alter --cluster"), line


def test_deletion_sync_adds_delete_on_each_copy_only_when_on() -> None:
    def deletes(mode: str) -> set[tuple[str, str]]:
        config = _config({"sync": {"topic_deletions": mode}}, canary={"enabled": False})
        return {
            (p.cluster, p.name) for p in required(config, config.links[0], ["orders.eu"]) if p.operation == "Delete"
        }

    assert deletes("off") == deletes("dry-run") == set()
    assert deletes("on") == {("hub", "orders.eu")}
