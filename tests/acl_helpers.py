"""ACLs on the local secured clusters for tests: each component as its own principal (`clients.<role>`), granted
exactly what `kernel.acl` lists, as the operator (a super user of the local clusters)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from kernel.acl import Permission, required
from kernel.config import MirrorwatchConfig, load_config
from kernel.kafka import new_admin
from localkafka.local import LocalClusters
from localkafka.local_security import ROLE_PRINCIPALS

__all__ = ["binding", "grant", "grant_required", "revoke", "run_check", "with_component_principals"]

# what says who a client is, per mode: a user and password, a certificate, an unsecured token's principal (its scope
# with it), an OAuth client and its secret
_IDENTITY = (
    "sasl.username",
    "sasl.password",
    "ssl.certificate.location",
    "ssl.key.location",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
)
_RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional-id": ResourceType.TRANSACTIONAL_ID,
}


def with_component_principals(path: Path, local_clusters: LocalClusters) -> MirrorwatchConfig:
    """The config file's clusters with `clients.<role>`: each component as its own local principal."""
    security = local_clusters.security
    document = yaml.safe_load(path.read_text())
    for cluster in document["clusters"].values():
        cluster["clients"] = {
            role: {k: v for k, v in security.client_properties(principal=role).items() if k in _IDENTITY}
            for role in ROLE_PRINCIPALS
        }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_config(path)


def binding(resource: str, name: str, pattern: str, principal: str, operation: str) -> AclBinding:
    pattern_type = ResourcePatternType.PREFIXED if pattern == "prefixed" else ResourcePatternType.LITERAL
    op = getattr(AclOperation, re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper())
    return AclBinding(_RESOURCES[resource], name, pattern_type, principal, "*", op, AclPermissionType.ALLOW)


def grant(config: MirrorwatchConfig, alias: str, bindings: list[AclBinding]) -> None:
    """As the operator's principal (the clusters' common settings: a super user of the local clusters)."""
    admin = new_admin(config.clusters[alias], alias)
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def revoke(config: MirrorwatchConfig, alias: str, binding: AclBinding) -> None:
    admin = new_admin(config.clusters[alias], alias)
    found = AclBindingFilter(
        binding.restype, binding.name, binding.resource_pattern_type, binding.principal, "*", binding.operation,
        AclPermissionType.ALLOW,
    )  # fmt: skip
    assert admin.delete_acls([found])[found].result(timeout=30), binding


def grant_required(
    config: MirrorwatchConfig, operator: MirrorwatchConfig, local_clusters: LocalClusters, *, leave_out: str = ""
) -> dict[str, str]:
    """Grant what kernel.acl lists for the link, each to its component's principal, and nothing else (nor the
    operation `leave_out`); the principals by role."""
    security = local_clusters.security
    link = config.links[0]
    source_topics = set(new_admin(operator.clusters["source"], "source").list_topics(timeout=30).topics)
    wanted: list[Permission] = required(config, link, source_topics | {config.canary.topic})
    principals = {role: security.principal(role) for role in ROLE_PRINCIPALS}
    if security.mode != "plaintext":
        for alias in ("source", "target"):
            bindings = [
                binding(p.resource, p.name, p.pattern, principals[p.role], p.operation)
                for p in wanted
                if p.cluster == alias and p.operation != leave_out
            ]
            grant(operator, alias, bindings)
    return principals


def run_check(path: Path) -> tuple[int, str]:
    """`mirrorwatch check --config path` as a user runs it: its exit code and what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "mirrorwatch.cli", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr
