"""`mirrorwatch check --config F`: does each component's principal hold the ACLs it needs?

For every link, every cluster and every component (the mirror, the monitor, the canary) it connects as that
component (`clusters.X.clients.<role>` over the common properties) and asks the cluster which operations the
principal may do on each resource the component uses (`kernel.acl.required`), with DescribeTopics and
DescribeGroups' authorized operations (KIP-430) and a validate-only CreateTopics: nothing is written, nothing is
joined, nothing is fenced. A missing permission is printed with the `kafka-acls.sh` line that grants it:

    link orders, cluster source (127.0.0.1:9092) as mirror (User:mirror): 1 of 5 permissions missing
      missing: Read on topic 'orders' (consume it)
        kafka-acls.sh --bootstrap-server 127.0.0.1:9092 --command-config admin.properties --add ...

Exit 0 when nothing required is missing, 1 when something is (or a cluster refused the credentials), 2 for a bad
config. Transactional ids cannot be asked about without fencing a running producer: they are listed as not checked.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, ConfigResource, NewTopic

from kernel.access import sasl_principal
from kernel.acl import Permission, grant_line, required
from kernel.config import ClusterConfig, MirrorwatchConfig, reveal
from kernel.kafka import COORDINATOR_NOT_READY, error_of, error_text, new_admin

__all__ = ["Finding", "check", "check_config", "principal_of"]

TIMEOUT_S = 15.0
_OPERATIONS = {
    "Read": AclOperation.READ,
    "Write": AclOperation.WRITE,
    "Create": AclOperation.CREATE,
    "Describe": AclOperation.DESCRIBE,
    "DescribeConfigs": AclOperation.DESCRIBE_CONFIGS,
    "Alter": AclOperation.ALTER,
    "AlterConfigs": AclOperation.ALTER_CONFIGS,
    "Delete": AclOperation.DELETE,
}


@dataclass(frozen=True)
class Finding:
    """What the cluster said about one permission: held, missing, or not checked (and why)."""

    link: str
    permission: Permission
    state: str  # "ok", "missing", "unchecked"
    note: str = ""


def principal_of(cluster: ClusterConfig) -> str:
    """The principal the component's settings authenticate as, as kafka-acls.sh wants it: `User:<sasl.username>`
    (OAUTHBEARER: the token's subject, `kernel.access.sasl_principal`), or `User:<the certificate's subject>` (the
    broker's ssl.principal.mapping.rules may shorten it, e.g. to the CN)."""
    properties = reveal(cluster.properties)
    user = sasl_principal(properties)
    if properties.get("security.protocol", "PLAINTEXT").upper().startswith("SASL") and user:
        return f"User:{user}"
    certificate = properties.get("ssl.certificate.location")
    if certificate:
        try:
            out = subprocess.run(
                ["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", certificate],
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout
            return "User:" + out.strip().removeprefix("subject=").strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return "User:ANONYMOUS" if not user and not certificate else "User:<principal>"


def _topic_operations(admin: AdminClient, names: Sequence[str]) -> dict[str, set[int] | KafkaError]:
    """Each topic's authorized operations for the admin's principal, or the error describing it gave."""
    if not names:
        return {}
    futures = admin.describe_topics(
        TopicCollection(list(names)), include_authorized_operations=True, request_timeout=TIMEOUT_S
    )
    out: dict[str, set[int] | KafkaError] = {}
    for name, future in futures.items():
        try:
            out[name] = {int(op.value) for op in future.result(timeout=TIMEOUT_S).authorized_operations or ()}
        except KafkaException as exc:
            error = error_of(exc)
            out[name] = error if error is not None else KafkaError(KafkaError._FAIL, str(exc))
    return out


def _cluster_operations(admin: AdminClient) -> set[int] | KafkaError:
    """The principal's authorized operations on the cluster (DescribeCluster, KIP-430)."""
    try:
        found = admin.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT_S)
        return {int(op.value) for op in found.result(timeout=TIMEOUT_S).authorized_operations or ()}
    except KafkaException as exc:
        error = error_of(exc)
        return error if error is not None else KafkaError(KafkaError._FAIL, str(exc))


def _group_operations(admin: AdminClient, group: str) -> set[int] | KafkaError:
    for _ in range(10):  # a group coordinator may still be loading right after start
        future = admin.describe_consumer_groups([group], include_authorized_operations=True, request_timeout=TIMEOUT_S)[
            group
        ]
        try:
            return {int(op.value) for op in future.result(timeout=TIMEOUT_S).authorized_operations or ()}
        except KafkaException as exc:
            error = error_of(exc)
            if error is None or error.code() not in COORDINATOR_NOT_READY:
                return error if error is not None else KafkaError(KafkaError._FAIL, str(exc))
        time.sleep(1.0)
    return KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


def _may_create(admin: AdminClient, topic: str) -> KafkaError | None:
    future = admin.create_topics([NewTopic(topic, 1)], validate_only=True, request_timeout=TIMEOUT_S)[topic]
    try:
        future.result(timeout=TIMEOUT_S)
        return None
    except KafkaException as exc:
        error = error_of(exc)
        if error is not None and error.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        ):
            return error
        return None  # exists already, or a policy: not a question of ACLs


def _may_describe_configs(admin: AdminClient, topic: str) -> KafkaError | None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    future = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource]
    try:
        future.result(timeout=TIMEOUT_S)
        return None
    except KafkaException as exc:
        error = error_of(exc)
        return error if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED else None


def _judge(
    permissions: Sequence[Permission], admin: AdminClient, existing: set[str]
) -> dict[Permission, tuple[str, str]]:
    """Ask the cluster about each permission as the admin's principal: (state, note) per permission."""
    topics = sorted({p.name for p in permissions if p.resource == "topic" and p.name in existing})
    topic_ops = _topic_operations(admin, topics)
    group_ops = {p.name: _group_operations(admin, p.name) for p in permissions if p.resource == "group"}
    cluster_ops = _cluster_operations(admin) if any(p.resource == "cluster" for p in permissions) else None
    out: dict[Permission, tuple[str, str]] = {}
    for p in permissions:
        if p.resource == "transactional-id":
            out[p] = ("unchecked", "asking would fence a running producer")
            continue
        if p.resource == "cluster":
            if isinstance(cluster_ops, KafkaError):
                out[p] = ("unchecked", error_text(cluster_ops))
            else:
                held = cluster_ops is not None and int(_OPERATIONS[p.operation].value) in cluster_ops
                out[p] = ("ok", "") if held else ("missing", "not among the principal's authorized operations")
            continue
        if p.resource == "topic" and p.name not in existing:
            if p.operation == "Create":
                error = _may_create(admin, p.name)
                out[p] = ("missing", error_text(error)) if error is not None else ("ok", "")
            else:
                out[p] = ("unchecked", "the topic does not exist yet")
            continue
        found = topic_ops.get(p.name) if p.resource == "topic" else group_ops.get(p.name)
        if isinstance(found, KafkaError) and p.resource == "topic" and p.operation in ("Create", "DescribeConfigs"):
            # Not implied by Describe, so a topic the principal may not describe says nothing about them: ask.
            error = (_may_create if p.operation == "Create" else _may_describe_configs)(admin, p.name)
            out[p] = ("missing", error_text(error)) if error is not None else ("ok", "")
        elif isinstance(found, KafkaError):
            denied = found.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)
            out[p] = ("missing", error_text(found)) if denied else ("unchecked", error_text(found))
        elif found is not None and int(_OPERATIONS[p.operation].value) in found:
            out[p] = ("ok", "")
        else:
            out[p] = ("missing", "not among the principal's authorized operations")
    return out


def check_config(config: MirrorwatchConfig, out: Callable[[str], None]) -> int:
    """Check every link's permissions, print the report; the exit code (0 all held, 1 some missing)."""
    topics_by_cluster: dict[str, set[str]] = {}
    admins: dict[tuple[str, str], AdminClient] = {}

    def existing(alias: str) -> set[str]:
        if alias not in topics_by_cluster:
            metadata = new_admin(config.clusters[alias], alias).list_topics(timeout=TIMEOUT_S)
            topics_by_cluster[alias] = {name for name, t in metadata.topics.items() if t.error is None}
        return topics_by_cluster[alias]

    missing = 0
    seen: set[Permission] = set()
    for link in config.links:
        wanted = [p for p in required(config, link, existing(link.source)) if p not in seen]
        seen.update(wanted)
        for alias in dict.fromkeys((link.source, link.target)):
            for role in dict.fromkeys(p.role for p in wanted):
                group = [p for p in wanted if p.cluster == alias and p.role == role]
                if not group:
                    continue
                cluster = config.clusters[alias].as_client(role)
                admin = admins.get((alias, role)) or admins.setdefault(
                    (alias, role), new_admin(cluster, alias, {"client.id": f"mirrorwatch-check-{role}"})
                )
                judged = _judge(group, admin, existing(alias))
                missing += _report(link.name, alias, cluster, role, judged, out=out)
    if not config.links:
        out("no links in the config: nothing to check")
    out("every required permission is held" if missing == 0 else f"{missing} required permission(s) missing")
    return 1 if missing else 0


def _report(
    link: str,
    alias: str,
    cluster: ClusterConfig,
    role: str,
    judged: dict[Permission, tuple[str, str]],
    *,
    out: Callable[[str], None],
) -> int:
    principal = principal_of(cluster)
    lacking = [p for p, (state, _) in judged.items() if state == "missing" and not p.optional]
    held = sum(1 for state, _ in judged.values() if state == "ok")
    where = f"link {link}, cluster {alias} ({cluster.bootstrap_servers}) as {role} ({principal})"
    out(f"{where}: {held} of {len(judged)} permissions held" + (f", {len(lacking)} missing" if lacking else ""))
    for p, (state, note) in judged.items():
        if state == "ok":
            continue
        label = {"missing": "optional, missing" if p.optional else "missing", "unchecked": "not checked"}[state]
        out(f"  {label}: {p} ({p.why}){f' - {note}' if state == 'unchecked' else ''}")
        if state == "missing":
            out(f"    {grant_line(p, cluster.bootstrap_servers, principal)}")
    return len(lacking)


@click.command("check", context_settings={"max_content_width": 120})
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
def check(config_path: Path) -> None:
    """Say, per link, cluster and component, which ACL its principal is missing, with the kafka-acls.sh line that
    grants it.

    Each component connects as its own principal when the cluster's `clients.<role>` (mirror, monitor, canary)
    sets one. Nothing is written: the cluster is asked for the principal's authorized operations. Exit 0 when every
    required permission is held, 1 when one is missing or a cluster refuses the credentials, 2 for a bad config.
    """
    from kernel.access import require_access
    from kernel.config import load_config

    config = load_config(config_path)
    require_access(config, config.clusters, ("mirror", "monitor", "canary"))
    sys.exit(check_config(config, click.echo))
