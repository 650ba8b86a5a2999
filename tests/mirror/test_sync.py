"""Keeping the clusters in step on real brokers: a running link makes its copies' configs and partition counts the
source's (`sync.topic_configs`) and leaves what it excludes, and `mirrorwatch drift` lists exactly the differences of
a deliberately drifted pair. The truth is read with a plain admin client of the test's, not mirrorwatch's reads."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.cimpl import NewPartitions

from kernel.config import ClusterConfig, MirrorwatchConfig, load_config
from kernel.kafka import new_admin, new_producer
from kernel.processes import free_port
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from tests.acl_helpers import binding, grant, grant_required, revoke, run_check, with_component_principals
from tests.kafka_helpers import Record, produce, read_all
from tests.processes import MirrorProcess, get_json, running_worker, session_config

pytestmark = [pytest.mark.integration, pytest.mark.secured]  # on every secured pair too

EXCLUDED = r"segment\.ms"


def _configs(admin: AdminClient, topic: str) -> dict[str, str]:
    """The topic's explicitly set configs."""
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    entries = future.result(timeout=30)
    return {
        name: entry.value
        for name, entry in entries.items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and entry.value is not None
    }


def _partitions(admin: AdminClient, topic: str) -> int:
    found = admin.list_topics(topic, timeout=30).topics.get(topic)
    return len(found.partitions) if found is not None and found.error is None else 0


def _set(admin: AdminClient, topic: str, configs: dict[str, str]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


@pytest.mark.secured("oidc")  # a client like any other: with signed tokens (tests/conftest.py)
def test_a_running_link_makes_its_copies_configs_and_partitions_the_sources_and_leaves_what_it_excludes(
    clusters_config: MirrorwatchConfig, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:
    topic = make_topic("source", 2, config={"retention.ms": "3600000"})
    sync: dict[str, Any] = {"topic_configs": True, "topic_configs_exclude": [EXCLUDED]}
    link: dict[str, Any] = {"name": "synced", "source": "source", "target": "target", "topics": {"include": [topic]}}
    link |= {"group_id": unique("g"), "refresh_topics_interval_seconds": 1, "sync": sync}
    config = session_config(clusters_config, [link], canary={"topic": unique("canary")})
    source = new_admin(clusters_config.clusters["source"], "source")
    target = new_admin(clusters_config.clusters["target"], "target")
    with running_worker(config) as worker:
        wait_until(
            lambda: _configs(target, topic) == {"retention.ms": "3600000"},
            timeout_s=60,
            description="the copy created with the source's configs",
            ignore=(KafkaException,),  # not created yet
        )
        # By hand on the copy: a config the source does not set (the sync removes it) and an excluded one (kept).
        _set(target, topic, {"max.compaction.lag.ms": "86400000", "segment.ms": "3600000"})
        # On the source: one changed, one set, one excluded, and two partitions more.
        _set(source, topic, {"retention.ms": "7200000", "cleanup.policy": "compact", "segment.ms": "600000"})
        for future in source.create_partitions([NewPartitions(topic, 4)]).values():
            future.result(timeout=30)
        want = {"retention.ms": "7200000", "cleanup.policy": "compact", "segment.ms": "3600000"}
        wait_until(
            lambda: _configs(target, topic) == want and _partitions(target, topic) == 4,
            timeout_s=60,
            description=f"the copy's configs {want} and 4 partitions",
        )
        # What is left is the excluded config, said with its reason (the round that synced the others may still be
        # on its way to the loop).
        left = {"source_topic": topic, "target_topic": topic, "config": "segment.ms", "source_value": "600000",
                "target_value": "3600000", "reason": f"excluded by sync.topic_configs_exclude '{EXCLUDED}'"}  # fmt: skip
        wait_until(
            lambda: worker.status()["config_drift"] == [left],
            timeout_s=30,
            description=f"the status's drift to be {[left]}",
        )
        # The round's whole drift report (what the API serves) says the same: one difference, left.
        report = {"target_topic": topic, "source_topic": topic, "what": "config segment.ms", "source": "600000",
                  "target": "3600000", "synced": False, "note": left["reason"]}  # fmt: skip
        wait_until(
            lambda: worker.status()["drift_report"].get("differences") == [report],
            timeout_s=30,
            description=f"the status's drift report to be {[report]}",
        )
        synced = {(d["config"], d["was"], d["now"]) for d in worker.status()["config_synced"]}
        assert synced == {
            ("retention.ms", "3600000", "7200000"),
            ("cleanup.policy", None, "compact"),
            ("max.compaction.lag.ms", "86400000", None),
        }
        # A record in a new source partition reaches the same partition of the copy.
        produce(clusters_config.clusters["source"], "source", topic, [Record(b"new", key=b"k", partition=3)])
        [copy] = read_all(clusters_config.clusters["target"], "target", topic, 1, partitions=4)
        assert (copy.partition, copy.value) == (3, b"new")


def _drift(path: Path, *args: str) -> tuple[int, str]:
    return _command("drift", path, *args)


def _acls_cli(path: Path, *args: str) -> tuple[int, str]:
    return _command("acls", path, *args)


def _command(command: str, path: Path, *args: str) -> tuple[int, str]:
    """`mirrorwatch COMMAND --config PATH ARGS...` in a process: its exit code and what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", command, "--config", str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout


@pytest.mark.secured("oidc")  # a client like any other: with signed tokens (tests/conftest.py)
def test_the_drift_report_lists_exactly_the_differences_made_and_nothing_of_a_pair_in_step(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
) -> None:
    prefix = unique("drift")
    orders = make_topic("source", 2, name=f"{prefix}.orders", config={"segment.ms": "600000"})
    make_topic("target", 3, name=orders, config={"retention.ms": "7200000"})  # more partitions, another retention
    refunds = make_topic("source", 1, name=f"{prefix}.refunds")  # no copy
    gone = make_topic("target", 1, name=f"{prefix}.gone")  # a copy of nothing the source has
    make_topic("source", 1, name=f"{prefix}-other")  # not selected by the drifted link
    steady = make_topic("source", 2, name=f"{prefix}.steady.a", config={"cleanup.policy": "compact"})
    make_topic("target", 2, name=steady, config={"cleanup.policy": "compact"})
    sync = {"topic_configs": True, "topic_configs_exclude": [EXCLUDED]}
    links: list[dict[str, Any]] = [
        {"name": "drifted", "source": "source", "target": "target", "sync": sync},
        {"name": "steady", "source": "source", "target": "target"},
    ]
    links[0]["topics"] = {"include": [rf"{prefix}\..*"], "exclude": [rf"{prefix}\.steady\..*"]}
    links[1]["topics"] = {"include": [rf"{prefix}\.steady\..*"]}
    canary = unique("canary")
    path = write_config(links, canary={"topic": canary})

    code, said = _drift(path, "--json")
    assert code == 1, said
    report = json.loads(said)
    when = "at the link's next topic refresh (every 30 s)"

    def diff(topic: str, source: str | None, what: str, values: tuple[str | None, str | None], synced: bool,
             note: str) -> dict[str, Any]:  # fmt: skip
        return {"target_topic": topic, "source_topic": source, "what": what, "source": values[0],
                "target": values[1], "synced": synced, "note": note}  # fmt: skip

    assert report == {
        "drifted": [
            diff(
                gone,
                None,
                "extra",
                (None, "1"),
                False,
                f"a copy of {gone!r}, which the source no longer has: left as it is (sync.topic_deletions is off)",
            ),
            diff(orders, orders, "partitions", ("2", "3"), False, "the target has more partitions: never shrunk"),
            diff(orders, orders, "config retention.ms", ("-1", "7200000"), True, f"synced {when}"),
            diff(
                orders,
                orders,
                "config segment.ms",
                ("600000", None),
                False,
                f"excluded by sync.topic_configs_exclude '{EXCLUDED}'",
            ),
            diff(refunds, refunds, "missing", (None, None), True, f"created {when}"),
        ],
        "steady": [],
    }
    code, said = _drift(path, "--link", "steady")
    assert (code, said) == (0, "link steady (source -> target): in step\n")
    code, said = _drift(path, "--link", "drifted")
    assert code == 1
    assert said.splitlines()[:3] == [
        "link drifted (source -> target): 5 difference(s)",
        f"  {gone}",
        f"    extra: a copy of {gone!r}, which the source no longer has: left as it is (sync.topic_deletions is off)",
    ]
    code, said = _drift(path, "--link", "nosuch")
    assert code == 2 and said == ""

    # Running, each topic refresh finds the same and the API and /metrics serve it: what a round makes the same (the
    # retention, the missing copy) is gone after the first one; what the link leaves stays, with the same reason.
    port = free_port()
    for link in links:
        link["refresh_topics_interval_seconds"] = 1
    http = {"host": "127.0.0.1", "port": port}
    run = start_mirror("--config", str(write_config(links, canary={"topic": canary}, http=http)), command="run")
    left = [d for d in report["drifted"] if not d["synced"]]
    served: dict[str, Any] = {}

    def serves_what_is_left() -> bool:
        served.update({name: get_json(f"http://127.0.0.1:{port}/mirror/links/{name}/drift") for name in report})
        return run.running() and served["drifted"]["differences"] == left and served["steady"]["count"] == 0

    wait_until(
        serves_what_is_left,
        timeout_s=120,
        description=f"/mirror/links/*/drift to serve {left} and nothing for the steady link",
        ignore=(OSError,),  # not listening yet, or no collection yet (503)
    )
    assert served["drifted"]["count"] == len(left)
    # /metrics counts them by kind (what the link leaves: synced="false").
    want = {f'mirrorwatch_link_drift_differences{{link="drifted",kind="{kind}",synced="false"}} 1'
            for kind in ("extra", "partitions", "config")}  # fmt: skip

    def counted() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            lines = response.read().decode().splitlines()
        return {x for x in lines if x.startswith("mirrorwatch_link_drift")} == want

    wait_until(counted, timeout_s=60, description=f"/metrics to count {want} and nothing more")


def test_a_mirror_principal_without_alter_configs_is_told_by_check_and_mirrors_on_with_the_refusal_as_drift(
    local_clusters: LocalClusters,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
) -> None:
    """Each component as its own principal with the ACLs `check` lists, but AlterConfigs left out: `check` names
    it; the running mirror copies every record, says the refusal as drift, and syncs once it is granted. On the
    plaintext pair (no authorizer) nothing is refused and the first round syncs."""
    secured = local_clusters.security.mode != "plaintext"
    topic = make_topic("source", 2, config={"retention.ms": "3600000"})
    make_topic("target", 2, name=topic, config={"retention.ms": "7200000"})
    link: dict[str, Any] = {"name": unique("l"), "source": "source", "target": "target", "topics": {"include": [topic]}}
    link |= {"refresh_topics_interval_seconds": 1, "sync": {"topic_configs": True}}
    path = write_config([link], canary={"topic": unique("canary")})
    config = with_component_principals(path, local_clusters)
    operator = load_config(local_clusters.config_path)
    principals = grant_required(config, operator, local_clusters, leave_out="AlterConfigs")
    code, said = run_check(path)
    missing = [line.strip() for line in said.splitlines() if line.strip().startswith("missing:")]
    if secured:
        assert code == 1, said
        assert missing == [f"missing: AlterConfigs on topic {topic!r} (sync its settings from the source)"], said
    else:
        assert (code, missing) == (0, []), said

    target = new_admin(operator.clusters["target"], "target")
    running = start_mirror("--config", str(path))
    produce(operator.clusters["source"], "source", topic, [Record(b"%d" % i, partition=i % 2) for i in range(100)])
    copies = read_all(operator.clusters["target"], "target", topic, 100, partitions=2)
    assert sorted(int(r.value or b"") for r in copies) == list(range(100))
    if secured:
        running.wait_for_log("retention.ms is '3600000' on the source, '7200000' on the target (the target refused")
        assert _configs(target, topic)["retention.ms"] == "7200000"
        grant(operator, "target", [binding("topic", topic, "literal", principals["mirror"], "AlterConfigs")])
    wait_until(
        lambda: _configs(target, topic).get("retention.ms") == "3600000",
        timeout_s=60,
        description="the copy's retention.ms synced",
    )
    running.wait_for_log(f"synced topic config of {topic!r}: retention.ms '7200000' -> '3600000'")
    assert "Traceback" not in running.log(), running.log()


def _acls(admin: AdminClient, topic: str) -> set[tuple[str, str, str]]:
    """The broker's literal ACLs on the topic: (principal, operation, permission)."""
    anyone = cast(str, None)  # any principal and host
    every = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, anyone, anyone, AclOperation.ANY, AclPermissionType.ANY
    )
    found = admin.describe_acls(every).result(timeout=30)
    return {(b.principal, _name(b.operation), _name(b.permission_type)) for b in found}


def _name(value: Enum | str | int) -> str:
    return value.name if isinstance(value, Enum) else str(value)


def _may(cluster: ClusterConfig, topic: str) -> set[str]:
    """What the broker says this client's principal may do on the topic (KIP-430)."""
    admin = new_admin(cluster, "target")
    [future] = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True).values()
    return {op.name for op in future.result(timeout=30).authorized_operations or ()}


def _write_error(cluster: ClusterConfig, topic: str) -> KafkaError | None:
    """What the broker answers a record this client's principal writes to the topic."""
    errors: list[KafkaError | None] = []
    producer = new_producer(cluster, "target", {"message.timeout.ms": 10000})
    producer.produce(topic, b"not into a mirror", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)


def test_acl_sync_lets_an_application_read_not_write_the_copy_follows_a_removal_and_leaves_hand_made_acls(
    local_clusters: LocalClusters,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
) -> None:
    """The application is the local `canary` principal (it holds no ACL of its own here), `monitor` an admin of the
    topic (ALL at the source: READ on the copy), and an ACL made by hand on the target for `monitor` is left alone.
    The mirror runs as the operator. On the plaintext pair (no authorizer) there are no ACLs: it mirrors and makes none."""
    security = local_clusters.security
    operator = load_config(local_clusters.config_path)
    topic = make_topic("source", 1)
    produce(operator.clusters["source"], "source", topic, [Record(b"%d" % i) for i in range(10)])
    app, admin = security.principal("canary"), security.principal("monitor")
    link: dict[str, Any] = {"name": unique("l"), "source": "source", "target": "target", "topics": {"include": [topic]}}
    chosen = [re.escape(app), re.escape(admin)]
    link |= {"refresh_topics_interval_seconds": 1, "sync": {"acls": True, "acl_principals": {"include": chosen}}}
    path = write_config([link], canary={"topic": unique("canary")})
    if security.mode == "plaintext":  # no authorizer: no ACLs to read (the cluster answers none), none made
        running = start_mirror("--config", str(path))
        read_all(operator.clusters["target"], "target", topic, 10)
        running.wait_for_log("10 records mirrored")  # a progress line: rounds with ACL sync went by
        assert _acls(new_admin(operator.clusters["target"], "target"), topic) == set()
        assert "ACL" not in running.log() and "Traceback" not in running.log(), running.log()
        return

    grant(operator, "source", [binding("topic", topic, "literal", app, op) for op in ("Read", "Write")])
    grant(operator, "source", [binding("topic", topic, "literal", admin, "All")])
    make_topic("target", 1, name=topic)
    grant(operator, "target", [binding("topic", topic, "literal", admin, "Describe")])  # by hand
    target = new_admin(operator.clusters["target"], "target")
    running = start_mirror("--config", str(path))
    hand_made = (admin, "DESCRIBE", "ALLOW")
    synced = {(app, "READ", "ALLOW"), (admin, "READ", "ALLOW")}
    wait_until(lambda: _acls(target, topic) == synced | {hand_made}, timeout_s=60, description=f"{synced} on the copy")
    read_all(operator.clusters["target"], "target", topic, 10)
    application = with_component_principals(path, local_clusters).clusters["target"].as_client("canary")
    assert {"READ", "DESCRIBE"} <= _may(application, topic) and "WRITE" not in _may(application, topic)
    refused = _write_error(application, topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    # The application loses Read at the source: the copy follows; the hand-made ACL stays.
    revoke(operator, "source", binding("topic", topic, "literal", app, "Read"))
    wait_until(
        lambda: _acls(target, topic) == {(admin, "READ", "ALLOW"), hand_made},
        timeout_s=60,
        description="app's READ removed from the copy",
    )
    running.wait_for_log(f"removed ACL from the target: ALLOW READ for {app} on topic {topic!r} (gone from the source)")
    assert "Traceback" not in running.log() and "ACL sync:" not in running.log(), running.log()
    code, said = _drift(path, "--json")
    assert (code, json.loads(said)) == (0, {link["name"]: []}), said


@pytest.mark.secured("oidc")  # a client like any other: with signed tokens (tests/conftest.py)
def test_deletion_sync_deletes_only_the_copies_it_made_after_the_grace_and_a_dry_run_deletes_nothing(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two source topics deleted: the copy the link created goes (not before the grace, measured here), the one
    made by hand stays; a dry-run first says what it would delete and deletes nothing."""
    caplog.set_level(logging.INFO, logger="mirrorwatch.mirror")
    prefix = unique("del")
    ours = make_topic("source", 1, name=f"{prefix}.ours")
    by_hand = make_topic("source", 1, name=f"{prefix}.hand")
    make_topic("target", 1, name=by_hand)
    grace_s = 3
    link: dict[str, Any] = {"name": unique("l"), "source": "source", "target": "target"}
    link |= {"topics": {"include": [rf"{re.escape(prefix)}\..*"]}, "refresh_topics_interval_seconds": 1}
    source = new_admin(clusters_config.clusters["source"], "source")
    target = new_admin(clusters_config.clusters["target"], "target")

    def config(mode: str) -> MirrorwatchConfig:
        sync = {"topic_deletions": mode, "topic_deletion_grace_seconds": grace_s}
        return session_config(clusters_config, [link | {"sync": sync}], canary={"topic": unique("canary")})

    def on_target() -> set[str]:
        return {t for t in target.list_topics(timeout=30).topics if t.startswith(prefix)}

    with running_worker(config("dry-run")):
        wait_until(lambda: on_target() == {ours, by_hand}, timeout_s=60, description="the link's copy created")
        deleted_at = time.monotonic()  # before: the link cannot see them gone earlier
        for future in source.delete_topics([ours, by_hand]).values():
            future.result(timeout=30)
        wait_until(
            lambda: "would be deleted (dry-run" in caplog.text,
            timeout_s=60,
            description="the dry-run to say what it would delete",
        )
        assert on_target() == {ours, by_hand}
        assert time.monotonic() - deleted_at >= grace_s  # said once the grace had passed, not before
    assert f"{ours}: would be deleted" in caplog.text and f"{by_hand}: would be deleted" not in caplog.text
    assert caplog.text.count(f"{by_hand}: left on the target: the link did not create it") == 1, caplog.text

    with running_worker(config("on")):  # the grace is counted from the first sighting, kept across the restart
        wait_until(lambda: on_target() == {by_hand}, timeout_s=60, description=f"{ours} deleted, {by_hand} kept")
    assert f"deleted target topic {ours!r}" in caplog.text


def test_after_a_promotion_the_acls_command_gives_the_application_its_write_rules_and_its_group_once(
    local_clusters: LocalClusters,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    write_config: Callable[..., Path],
) -> None:
    """The link does not run (promoted). The application (`canary`) may read and write the topic and read its group at
    the source; with `sync.acl_write` and `sync.acl_groups` one `mirrorwatch acls` round makes it so on the target:
    a dry run first changes nothing, the round makes the three ACLs, the application then writes to the former copy,
    and a second round has nothing to do. On the plaintext pair (no authorizer) there are none to make."""
    security = local_clusters.security
    operator = load_config(local_clusters.config_path)
    topic, group = make_topic("source", 1), unique("app-group")
    make_topic("target", 1, name=topic)
    app = security.principal("canary")
    sync = {"acls": True, "acl_principals": {"include": [re.escape(app)]}, "acl_write": True}
    sync["acl_groups"] = {"include": [re.escape(group)]}
    link = {"name": unique("l"), "source": "source", "target": "target", "topics": {"include": [topic]}, "sync": sync}
    path = write_config([link], canary={"topic": unique("canary")})
    nothing = f"link {link['name']}: the target's ACLs are what the source's call for: nothing to do\n"
    if security.mode == "plaintext":
        assert _acls_cli(path, "--link", str(link["name"])) == (0, nothing)
        return
    grant(operator, "source", [binding("topic", topic, "literal", app, op) for op in ("Read", "Write")])
    grant(operator, "source", [binding("group", group, "literal", app, "Read")])
    target = new_admin(operator.clusters["target"], "target")
    code, said = _acls_cli(path, "--link", str(link["name"]), "--dry-run")
    assert code == 0 and sorted(said.splitlines()) == [
        f"would create: ALLOW READ for {app} on group {group!r}",
        f"would create: ALLOW READ for {app} on topic {topic!r}",
        f"would create: ALLOW WRITE for {app} on topic {topic!r}",
    ], said
    assert _acls(target, topic) == set()
    code, said = _acls_cli(path, "--link", str(link["name"]))
    assert code == 0 and said.splitlines()[-1] == f"link {link['name']}: 3 created, 0 removed", said
    assert _acls(target, topic) == {(app, "READ", "ALLOW"), (app, "WRITE", "ALLOW")}
    anyone = cast(str, None)
    groups = AclBindingFilter(
        ResourceType.GROUP, group, ResourcePatternType.LITERAL, anyone, anyone, AclOperation.ANY, AclPermissionType.ANY
    )
    assert [(b.principal, _name(b.operation)) for b in target.describe_acls(groups).result(timeout=30)] == [
        (app, "READ")
    ]
    application = with_component_principals(path, local_clusters).clusters["target"].as_client("canary")
    assert _write_error(application, topic) is None  # the application produces to the new primary
    assert _acls_cli(path, "--link", str(link["name"])) == (0, nothing)
    code, said = _drift(path, "--json")
    assert (code, json.loads(said)) == (0, {link["name"]: []}), said
