"""`mirrorwatch acls --config F --link L [--dry-run]`: one ACL round of a link now, as its topic refresh makes it with
`sync.acls` — for a link that does not run, above all after a promotion, when `sync.acl_write: true` gives the
applications back their WRITE rules on the former mirror.

Part of the composition root (the CLI); the work is `mirror.acl_keeper`'s (the same round a running link makes:
what it creates it owns, and removes only what it made). Runs as the mirror's principal (`clusters.X.clients.mirror`).
Exit 0 when done or nothing was to do, 1 when a cluster refused a change, 2 for a bad config or an unknown link.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

__all__ = ["acls"]


@click.command("acls", context_settings={"max_content_width": 120})
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--link", "link_name", required=True, help="The link whose ACL rules (its sync: section) apply.")
@click.option("--dry-run", is_flag=True, help="Say what the round would create and remove; change nothing.")
def acls(config_path: Path, link_name: str, dry_run: bool) -> None:
    """Make the target's ACLs on the link's copies (and on the groups of `sync.acl_groups`) what the source's call
    for, once, now: what a running link with `sync.acls` does at each topic refresh. After a promotion, set
    `sync.acl_write: true` on the link and run this: the source's ALLOW WRITE (and ALL) rules are copied too, so the
    applications can produce to the new primary. ACLs made on the target by hand are never touched; the link removes
    only those it made (`<state_dir>/acls/<link>.json`).

    Exit 0 when done or nothing was to do, 1 when a cluster refused a change, 2 for a bad config or an unknown link.
    """
    from kernel.access import require_access
    from kernel.config import load_config
    from kernel.errors import ConfigError, ConfigProblem
    from kernel.kafka import new_admin
    from kernel.rename import rename_policy
    from mirror.acl_keeper import AclKeeper, acl_state
    from mirror.acl_sync import plan_acls
    from mirror.admin import list_topic_partitions
    from mirror.topics import select_topics

    config = load_config(config_path).as_client("mirror")
    found = [(i, link) for i, link in enumerate(config.links) if link.name == link_name]
    if not found:
        names = ", ".join(link.name for link in config.links) or "none"
        raise ConfigError([ConfigProblem("--link", f"no link named {link_name!r} (links: {names})")])
    index, link = found[0]
    if not link.sync.acls:
        raise ConfigError([ConfigProblem(f"links[{index}].sync.acls", "is off: this link syncs no ACLs")])
    require_access(config, (link.source, link.target), ("mirror",))
    source = new_admin(config.clusters[link.source], link.source)
    target = new_admin(config.clusters[link.target], link.target)
    rename = rename_policy(link.rename, link.source)
    selected = select_topics(list_topic_partitions(source), link.topics, exclude_internal=link.exclude_internal_topics)
    mapping = {topic: rename.target_topic(topic) for topic in selected}
    state = acl_state(source, target, mapping, link, config.state_path)
    plan = plan_acls(state.wanted, state.on_target, state.owned)
    for acl in plan.create:
        click.echo(f"{'would create' if dry_run else 'create'}: {acl.describe()}")
    for acl in plan.delete:
        click.echo(
            f"{'would remove' if dry_run else 'remove'}: {acl.describe()} (made by the link, gone from the source)"
        )
    if not (plan.create or plan.delete):
        click.echo(f"link {link.name}: the target's ACLs are what the source's call for: nothing to do")
    if dry_run or not (plan.create or plan.delete):
        sys.exit(0)
    keeper = AclKeeper(link, name=link.name, state_dir=config.state_path, source_admin=source, target_admin=target)
    keeper.sync(mapping)
    if keeper.refusal:
        click.echo(f"link {link.name}: refused: {keeper.refusal}", err=True)
        sys.exit(1)
    click.echo(f"link {link.name}: {len(plan.create)} created, {len(plan.delete)} removed")
