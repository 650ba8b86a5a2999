"""`mirrorwatch migrate from mm1|mm2|replicator` and `migrate to mm2`: switch mirrors without copying everything
again or skipping records.

Part of the composition root (the CLI); the work is in `failover.migrate`. Exit codes: 0 done (or a dry run without
refusals), 1 refused (the link or the previous mirror is running, a position out of range), 2 bad usage (no such
positions, a missing source topic, a rename policy that writes other target names).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

__all__ = ["migrate"]


@click.group()
def migrate() -> None:
    """Take over from MirrorMaker 1, MirrorMaker 2 or Confluent Replicator, or hand back to MirrorMaker 2.

    \b
    mirrorwatch migrate from mm1        --config F --link L --group G            [--apply]
    mirrorwatch migrate from mm2        --config F --link L [--source-alias A]   [--apply]
    mirrorwatch migrate from replicator --config F --link L --connector NAME     [--apply]
    mirrorwatch migrate to mm2          --config F --link L [--source-alias A]   [--apply]

    Without --apply it is a dry run: per partition the previous mirror's position, the source's log start and
    high-watermark, the target's end, and the records the link would copy twice or skip, checked against the
    target's last record. With --apply the positions are committed to the link's source group (stop the previous
    mirror first; the link's own group must have no members), and the link continues after the last record the
    previous mirror wrote.
    """


def _options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path)),
            click.option("--link", "link_name", required=True, help="The link that takes over."),
            click.option(
                "--source-alias",
                "alias",
                help="MirrorMaker 2's alias of the source cluster (default: the link's source alias).",
            ),
            click.option(
                "--offsets-topic",
                "topic",
                help="The Connect offsets topic (default: mm2-offsets.<alias>.internal; Replicator: connect-offsets).",
            ),
            click.option("--apply", is_flag=True, help="Commit (or write) the positions; without it, a dry run."),
            click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON."),
        ]
    ):
        f = option(f)
    return f


@migrate.command("from")
@click.argument("kind", type=click.Choice(["mm1", "mm2", "replicator"]))
@_options
@click.option("--group", help="mm1: MirrorMaker 1's group.id (from its consumer.config).")
@click.option("--connector", help="replicator: the Replicator connector's name (the first element of its keys).")
@click.option(
    "--offsets-cluster",
    "cluster",
    help="The cluster alias holding the offsets topic (default: the link's target).",
)
@click.option(
    "--rename-format",
    help="replicator: its topic.rename.format (default ${topic}).",
)
@click.option("--settle-seconds", default=5.0, show_default=True, help="How long the target must stand still.")
def from_command(  # noqa: PLR0917 - one parameter per option
    kind: str,
    config_path: Path,
    link_name: str,
    alias: str | None,
    topic: str | None,
    apply: bool,
    as_json: bool,
    group: str | None,
    connector: str | None,
    cluster: str | None,
    rename_format: str | None,
    settle_seconds: float,
) -> None:
    """Read where the previous mirror got to and, with --apply, continue the link exactly after it."""
    from failover.migrate import apply_migration, migration_json, migration_lines, plan_migration, previous_for
    from kernel.access import require_access
    from kernel.config import load_config

    config = load_config(config_path).as_client("failover")
    link = config.link(link_name)
    require_access(config, (link.source, link.target))
    previous = previous_for(
        link,
        kind,
        group=group,
        topic=topic,
        cluster=cluster,
        connector=connector,
        alias=alias,
        rename_format=rename_format,
    )
    migration = plan_migration(
        config,
        link_name,
        previous,
        settle_s=settle_seconds,
        progress=lambda line: click.echo(f"mirrorwatch: {line}", err=True),
    )
    click.echo(migration_json(migration) if as_json else "\n".join(migration_lines(migration)))
    if migration.refusals:
        sys.exit(1)
    if apply:
        committed = apply_migration(config, migration)
        click.echo(f"committed {len(committed)} position(s) to group {migration.group} on {link.source}")


@migrate.command("to")
@click.argument("kind", type=click.Choice(["mm2"]))
@_options
def to_command(  # noqa: PLR0917 - one parameter per option
    kind: str, config_path: Path, link_name: str, alias: str | None, topic: str | None, apply: bool, as_json: bool
) -> None:
    """Write the link's positions as MirrorMaker 2 offsets (stop the link first), so MirrorMaker 2 continues after
    the last record the link wrote."""
    from failover.migrate import export_to_mm2, migration_json, migration_lines
    from kernel.access import require_access
    from kernel.config import load_config

    del kind
    config = load_config(config_path).as_client("failover")
    link = config.link(link_name)
    require_access(config, (link.source, link.target))
    migration = export_to_mm2(config, link_name, alias=alias, topic=topic, apply=apply)
    click.echo(migration_json(migration) if as_json else "\n".join(migration_lines(migration)))
    if migration.refusals:
        sys.exit(1)
    if apply:
        click.echo(f"wrote {len(migration.rows)} MirrorMaker 2 offset(s)")
