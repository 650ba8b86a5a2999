"""`mirrorwatch drift --config F [--link L] [--json]`: what differs between each link's source topics and their copies,
and what the link itself will make the same at its next topic refresh.

Part of the composition root (the CLI); the work is in `mirror.drift` (pure) over `mirror.admin`'s reads. Read-only:
it lists and describes topics on both clusters as the mirror's principal (`clusters.X.clients.mirror`), and changes
nothing. Exit 0 when nothing differs, 1 when something does, 2 for a bad config or an unknown link.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from collections.abc import Mapping

    from confluent_kafka.admin import AdminClient

    from kernel.config import LinkConfig, MirrorwatchConfig
    from mirror.drift import AclState, Difference

__all__ = ["drift"]


@click.command("drift", context_settings={"max_content_width": 120})
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--link", "link_name", help="One link (default: every link in the config).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: {link: [difference, ...]}.")
def drift(config_path: Path, link_name: str | None, as_json: bool) -> None:
    """Say, per link and target topic, what differs from the source: a missing copy, partition counts, copied configs
    (retention, cleanup policy, ...), and copies of topics the source no longer has; and for each whether the link
    makes it the same at its next topic refresh (`sync.topic_configs`, partition growth, creation) or leaves it, and
    why (a config excluded or never copied, a target with more partitions, sync off).

    Reads both clusters as the mirror's principal and changes nothing. Exit 0 when nothing differs, 1 when something
    does, 2 for a bad config or an unknown link.
    """
    from kernel.access import require_access
    from kernel.config import load_config
    from kernel.errors import ConfigError, ConfigProblem
    from kernel.kafka import new_admin
    from mirror.admin import list_topic_partitions

    config = load_config(config_path).as_client("mirror")
    links = [link for link in config.links if link_name in (None, link.name)]
    if link_name is not None and not links:
        names = ", ".join(link.name for link in config.links) or "none"
        raise ConfigError([ConfigProblem("--link", f"no link named {link_name!r} (links: {names})")])
    require_access(config, [alias for link in links for alias in (link.source, link.target)], ("mirror",))
    admins = {alias: new_admin(config.clusters[alias], alias) for link in links for alias in (link.source, link.target)}
    listed = {alias: list_topic_partitions(admin) for alias, admin in admins.items()}
    report = {link.name: _link_drift(config, link, admins, listed) for link in links}
    if as_json:
        click.echo(json.dumps({name: [asdict(d) for d in found] for name, found in report.items()}, indent=2))
    else:
        for link in links:
            found = report[link.name]
            click.echo(
                f"link {link.name} ({link.source} -> {link.target}): "
                + (f"{len(found)} difference(s)" if found else "in step")
            )
            for topic in dict.fromkeys(d.target_topic for d in found):
                click.echo(f"  {topic}")
                for d in found:
                    if d.target_topic == topic:
                        click.echo(f"    {d.line()}")
    sys.exit(1 if any(report.values()) else 0)


def _link_drift(
    config: MirrorwatchConfig,
    link: LinkConfig,
    admins: Mapping[str, AdminClient],
    listed: Mapping[str, dict[str, int]],
) -> tuple[Difference, ...]:
    """One link's differences, from both clusters' listings (read once for every link)."""
    from kernel.rename import rename_policy
    from mirror.admin import describe_topics
    from mirror.deletion_keeper import created_topics
    from mirror.drift import extra_targets, link_drift
    from mirror.topics import plan_topics, select_topics

    source, target = listed[link.source], listed[link.target]
    rename = rename_policy(link.rename, link.source)
    always = (config.canary.topic,)
    selected = select_topics(source, link.topics, exclude_internal=link.exclude_internal_topics, always=always)
    copies = [rename.target_topic(t) for t in selected]
    plan = plan_topics(
        describe_topics(admins[link.source], selected, source),
        describe_topics(admins[link.target], copies, target),
        selected,
        rename,
        partitioning=link.partitioning,
        replication_factor=link.replication_factor,
        # As a running link that saw each pair in step: a target behind its source is grown, not a problem.
        known_source_partitions={t: target[c] for t, c in zip(selected, copies, strict=True) if c in target},
        sync=link.sync,
    )
    ignore = [t for t in (link.dead_letter_topic, rename.target_topic(config.canary.topic)) if t]
    extras = extra_targets(
        target, source, link.topics, rename, exclude_internal=link.exclude_internal_topics, ignore=ignore
    )
    created = created_topics(config.state_path, link.name)
    acls = _acl_state(config, link, admins, plan.mapping)
    return link_drift(plan, source, target, link, extras=extras, created=created, acls=acls)


def _acl_state(
    config: MirrorwatchConfig, link: LinkConfig, admins: Mapping[str, AdminClient], mapping: Mapping[str, str]
) -> AclState | None:
    """The copies' ACLs; None where a cluster has no authorizer (no ACLs to compare)."""
    from confluent_kafka import KafkaException

    from kernel.errors import KafkaClientError
    from kernel.kafka import kafka_error, no_authorizer
    from mirror.acl_keeper import acl_state

    try:
        return acl_state(admins[link.source], admins[link.target], mapping, link, config.state_path)
    except KafkaException as exc:
        if no_authorizer(exc):
            return None
        raise kafka_error(exc, "reading topic ACLs") from None
    except TimeoutError:
        raise KafkaClientError("reading topic ACLs: no answer in 30 s") from None
