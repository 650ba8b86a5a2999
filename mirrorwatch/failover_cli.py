"""`mirrorwatch failover plan|apply|verify`: move consumer groups from a link's source to its target, exactly.

Part of the composition root (the CLI); the work is in the `failover` domain. Exit codes: 0 done, 1 a group was refused
or a check found a difference, 2 bad usage (unknown link or group, a group without commits, nothing mirrored).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

__all__ = ["failover"]


@dataclass(frozen=True)
class _Selection:
    """The options every failover command shares: which config, link and groups."""

    config_path: Path
    link_name: str
    groups: tuple[str, ...]
    pattern: str | None
    mappings: tuple[str, ...]
    mm2_checkpoints: str | None


def _selection(f: Callable[..., Any]) -> Callable[..., Any]:
    """The shared options, handed to the command as one `_Selection` (its first argument)."""

    @functools.wraps(f)
    def command(  # noqa: PLR0917 - one parameter per option
        config_path: Path,
        link_name: str,
        groups: tuple[str, ...],
        pattern: str | None,
        mappings: tuple[str, ...],
        mm2_checkpoints: str | None,
        **rest: Any,
    ) -> Any:
        return f(_Selection(config_path, link_name, groups, pattern, mappings, mm2_checkpoints), **rest)

    options = [
        click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path)),
        click.option("--link", "link_name", required=True, help="The link whose target the groups move to."),
        click.option(
            "--group",
            "groups",
            multiple=True,
            help="A consumer group on the link's source (repeat for more). Default: every group but the mirror's.",
        ),
        click.option("--groups", "pattern", help="A regex the group ids must match (whole id), instead of --group."),
        click.option(
            "--map",
            "mappings",
            multiple=True,
            metavar="SOURCE=TARGET",
            help="Commit SOURCE group's offsets to the TARGET group on the target (default: the same group id).",
        ),
        click.option(
            "--mm2-checkpoints",
            "mm2_checkpoints",
            metavar="TOPIC",
            help="For topics MirrorMaker 2 mirrored: use its checkpoints from TOPIC on the target "
            "(<source alias>.checkpoints.internal) where there is one, instead of timestamps.",
        ),
    ]
    wrapped: Callable[..., Any] = command
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def _plan(selection: _Selection) -> Any:
    from failover.plan import make_plan

    config, group_map = _config(selection)
    plan = make_plan(
        config,
        selection.link_name,
        groups=selection.groups,
        pattern=selection.pattern,
        group_map=group_map,
        mm2_checkpoints=selection.mm2_checkpoints,
        progress=_progress,
    )
    return config, plan


def _config(selection: _Selection) -> tuple[Any, dict[str, str]]:
    """The config as the failover's clients (both of the link's clusters asked first) and the --map group ids."""
    from kernel.access import require_access
    from kernel.config import load_config

    if selection.groups and selection.pattern:
        raise click.UsageError("give --group or --groups, not both")
    group_map: dict[str, str] = {}
    for m in selection.mappings:
        source, sep, target = m.partition("=")
        if not sep or not source or not target:
            raise click.UsageError(f"--map {m!r}: expected SOURCE=TARGET")
        group_map[source] = target
    config = load_config(selection.config_path).as_client("failover")
    link = next((known for known in config.links if known.name == selection.link_name), None)
    if link is not None:  # an unknown link is the failover's to say
        require_access(config, (link.source, link.target))
    return config, group_map


def _progress(line: str) -> None:
    click.echo(f"mirrorwatch: {line}", err=True)


@click.group()
def failover() -> None:
    """Move consumer groups from a link's source to its target at exactly the right offsets.

    \b
    mirrorwatch failover plan   --config F --link L [--group G ... | --groups REGEX] [--json]
    mirrorwatch failover apply  --config F --link L [--group G ...] [--map SRC=DST] [--force] [--wait-seconds S]
    mirrorwatch failover verify --config F --link L [--group G ...] [--map SRC=DST]
    mirrorwatch failover promote --config F --link L [--groups REGEX] [--settle-seconds S] [--source-lost] [--dry-run]
    mirrorwatch failover diverged --config F --link L [--to-file F | --to-topic ALIAS:TOPIC] [--json]
    mirrorwatch failover failback --config F --link L [--reverse R] [--diverged skip|read] [--dry-run]

    Translation is exact for topics mirrorwatch mirrored: every record carries its source partition and offset
    (provenance), so the target offset is the first one at which a consumer reads every record it has not read on
    the source and, of those it has, only the ones a mirror crash wrote twice (counted in the plan). Stop the
    group's consumers on the source first (or lose the source), then apply, then start them on the target.
    """


@failover.command("plan")
@_selection
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan_command(selection: _Selection, as_json: bool) -> None:
    """Per group and partition: the source commit, the target offset and how it was found, records not mirrored yet,
    records a consumer would read twice, and the target group's state. Read-only."""
    from failover.report import plan_lines

    _, plan = _plan(selection)
    if as_json:
        click.echo(json.dumps(plan.to_json(), indent=2))
    else:
        for line in plan_lines(plan):
            click.echo(line)


@failover.command("apply")
@_selection
@click.option("--force", is_flag=True, help="Commit even where it moves a target group backwards.")
@click.option(
    "--wait-seconds",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="How long to wait for the link to copy records a group has read on the source but the target does not "
    "have yet (the link's own group must commit past the group's commits), then plan again. 0: do not wait.",
)
@click.option(
    "--allow-rereads",
    is_flag=True,
    help="Commit a group even while the mirror has not copied records it has read (it reads them again).",
)
def apply_command(selection: _Selection, force: bool, wait_seconds: float, allow_rereads: bool) -> None:
    """Commit the plan to the groups on the target. A group with active members there, one the plan would move
    backwards (without --force), or one that has read records the mirror has not copied yet (after --wait-seconds,
    without --allow-rereads) is refused and nothing of it committed; applying twice changes nothing."""
    from failover.apply import apply_plan, mirror_behind, wait_for_mirror
    from failover.report import outcome_lines

    config, plan = _plan(selection)
    if not allow_rereads and wait_seconds > 0 and mirror_behind(plan):
        wait_for_mirror(config, plan, wait_seconds, lambda line: click.echo(f"mirrorwatch: {line}", err=True))
        config, plan = _plan(selection)
    outcomes = apply_plan(config, plan, force=force, allow_rereads=allow_rereads)
    for line in outcome_lines(outcomes):
        click.echo(line)
    sys.exit(1 if any(o.outcome == "refused" for o in outcomes) else 0)


@failover.command("verify")
@_selection
def verify_command(selection: _Selection) -> None:
    """Judge the target groups' committed offsets against the source commits on a fresh read of the target: "exact",
    or every partition where a consumer would miss records or read more twice than needed (exit 1)."""
    from failover.apply import verify_plan
    from failover.report import check_lines

    config, plan = _plan(selection)
    checks = verify_plan(config, plan)
    for line in check_lines(checks):
        click.echo(line)
    sys.exit(0 if checks and all(c.exact for c in checks) else 1)


@failover.command("promote")
@_selection
@click.option(
    "--settle-seconds",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="How long the link's topics must take no record: the source's producers are stopped.",
)
@click.option(
    "--wait-seconds",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="How long to wait for the link to copy what is left (its group commits what the target acknowledged).",
)
@click.option(
    "--source-lost",
    is_flag=True,
    help="The source cannot be read: steps 1-3 are not judged, where the link stood is read off its copies on the "
    "target, and the groups keep their positions there (a standby with checkpoint.sync_group_offsets keeps them).",
)
@click.option("--dry-run", is_flag=True, help="Run every check; say what would be committed and recorded. No change.")
def promote_command(
    selection: _Selection, settle_seconds: float, wait_seconds: float, source_lost: bool, dry_run: bool
) -> None:
    """The whole cutover of a link, step by step, each saying what it checked: (1) the source's producers are quiet
    (no record on the link's topics for --settle-seconds), (2) the link copied everything (its group committed every
    high-watermark), (3) the canary's probes come back, (4) every group (default: every group committed on the link's
    topics) translated exactly and committed on the target (apply's rules), (5) the link promoted: stopped for good,
    where it stood recorded on the target (mirrorwatch.promotions) and in its control document. A step that fails
    stops with its reason (exit 1); run it again to continue. A paused or promoted link is refused (exit 1). With
    --source-lost, what the source took after the last copy is its tail: failover diverged lists it once it is back."""
    from failover.promote import Options, promote
    from mirrorwatch.link_cli import who
    from mirrorwatch.services import published_canary

    config, group_map = _config(selection)
    options = Options(
        selection.groups,
        selection.pattern,
        group_map,
        settle_s=settle_seconds,
        wait_s=wait_seconds,
        dry_run=dry_run,
        by=who(),
        mm2_checkpoints=selection.mm2_checkpoints,
        source_lost=source_lost,
    )
    steps = promote(config, selection.link_name, options, canary=lambda: published_canary(config), progress=_progress)
    for number, step in enumerate(steps, 1):
        click.echo(f"step {number}/5 {step.name}: {'ok' if step.ok else 'REFUSED'}: {step.said}")
        for line in step.lines:
            click.echo(f"  {line}")
    done = len(steps) == 5 and all(step.ok for step in steps)
    if done and dry_run:
        click.echo("dry run: nothing was changed")
    sys.exit(0 if done else 1)


@failover.command("diverged")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--link", "link_name", required=True, help="A promoted link (mirrorwatch failover promote).")
@click.option(
    "--to-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Export every such record as a JSON line (topic, partition, offset, timestamp, key, value, headers; bytes "
    "in base64). The file must not exist.",
)
@click.option("--to-topic", metavar="ALIAS:TOPIC", help="Copy every such record into a new or empty topic.")
@click.option("--json", "as_json", is_flag=True, help="Print the promotion and the partitions as JSON.")
def diverged_command(
    config_path: Path, link_name: str, to_file: Path | None, to_topic: str | None, as_json: bool
) -> None:
    """What the old source of a promoted link took that the link never copied: per partition the records at or after
    where the promotion recorded the link had copied up to (the disaster's tail, or what was written to it after the
    cutover), counted with their offsets, and exported with --to-file or --to-topic so that nothing taken is lost
    unseen. Read-only on the source. A link never promoted: exit 2."""
    from failover.diverged import TopicExport, diverged, file_export, topic_export
    from kernel.config import load_config

    if to_file is not None and to_topic is not None:
        raise click.UsageError("give --to-file or --to-topic, not both")
    config = load_config(config_path).as_client("failover")
    made: list[TopicExport] = []
    with contextlib.ExitStack() as stack:

        def to_file_export(partitions: int) -> Any:  # opened once the promotion is found: a refusal leaves no file
            assert to_file is not None
            try:
                return file_export(stack.enter_context(to_file.open("x", encoding="utf-8")))(partitions)
            except FileExistsError:
                raise click.UsageError(f"--to-file {to_file} exists: give a new file") from None

        export: Callable[[int], Any] | None = to_file_export if to_file is not None else None
        if to_topic is not None:
            export = topic_export(config, to_topic, made)
        promotion, tails = diverged(config, link_name, export=export, progress=_progress)
    failed = next((why for e in made if (why := e.close()) is not None), None)
    total = sum(t.records for t in tails)
    if as_json:
        document = {"promotion": promotion.as_json(), "records": total, "partitions": [t.as_json() for t in tails]}
        click.echo(json.dumps(document, indent=2))
    else:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(promotion.at_ms / 1000))
        by = promotion.by or "?"
        click.echo(f"link {link_name} promoted at {at} UTC by {by}: its old source took {total} record(s) after it")
        for t in tails:
            where = f"offsets {t.first}..{t.last}" if t.records else "none"
            since = "a partition added since" if t.promoted_at is None else f"promoted at {t.promoted_at}"
            gone = f"; {t.gone} removed by retention" if t.gone else ""
            click.echo(f"  {t.topic}[{t.partition}]: {t.records} record(s), {where} ({since}, end {t.end}{gone})")
    if to_file is not None:
        click.echo(f"exported {total} record(s) to {to_file}", err=True)
    for e in made:
        click.echo(f"exported {e.written} record(s) to {e.alias}:{e.topic}", err=True)
    if failed is not None:
        click.echo(f"mirrorwatch: the export to a topic failed: {failed}", err=True)
        sys.exit(1)


@failover.command("failback")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--link", "link_name", required=True, help="The promoted link (A -> B).")
@click.option("--reverse", help="The link from B back to A (default: the config's only such link).")
@click.option(
    "--diverged",
    "diverged_rule",
    type=click.Choice(["skip", "read"]),
    default="skip",
    show_default=True,
    help="What becomes of the records A took after the last copy (failover diverged): skip leaves them on A below "
    "what the reverse link appends, unread by the groups moved home; read first copies each to the end of its "
    "partition on B (header mirrorwatch.diverged naming its origin), where the applications read it once and the "
    "reverse link takes it home. A run cut short resumes: nothing is copied twice.",
)
@click.option("--dry-run", is_flag=True, help="Say where the reverse link would start; commit nothing.")
def failback_command(config_path: Path, link_name: str, reverse: str | None, diverged_rule: str, dry_run: bool) -> None:
    """Set the reverse link (B -> A) to start where B began to take records of its own when the link was promoted:
    its group on B committed there (only forward), so that, run, it copies every record written on B since and none
    of A's own. A's diverged tail stays below what it appends (--diverged skip, see failover diverged) or is first
    delivered through B (--diverged read). Then run the reverse link, and once B's producers have stopped, `failover
    promote --link REVERSE` moves the groups back to A."""
    from failover.failback import failback
    from kernel.config import load_config

    config = load_config(config_path).as_client("failover")
    done = failback(config, link_name, reverse=reverse, dry_run=dry_run, diverged=diverged_rule)
    if (d := done.delivery) is not None:
        copied = "would be copied" if dry_run else "copied"
        click.echo(
            f"the diverged tail: {d.tail} record(s) on {config.link(link_name).source}; {d.copied} {copied} to the "
            f"end of their partitions on the promoted cluster now, {d.already} copied by an earlier run"
        )
    elif not dry_run:
        click.echo("the diverged tail stays below what the reverse link appends, unread (failover diverged lists it)")
    verb = "would commit" if dry_run else "committed"
    click.echo(
        f"reverse link {done.reverse}: its group {done.group} {verb} at the promotion point on {len(done.changes)} "
        f"partition(s), {done.unchanged} already there or past it"
    )
    for topic, partition, before, after in done.changes:
        click.echo(f"  {topic}[{partition}]: {'none' if before is None else before} -> {after}")
    if done.armed:
        click.echo(f"link {done.reverse} was promoted in an earlier cycle: it copies again")
    if done.refused is not None:
        click.echo(f"mirrorwatch: refused, nothing committed: {done.refused}", err=True)
        sys.exit(1)
    if not dry_run:
        click.echo(
            f"next: run it (mirrorwatch mirror --config {config_path} --link {done.reverse}); once the producers on "
            f"the promoted cluster have stopped, mirrorwatch failover promote --config {config_path} --link "
            f"{done.reverse} moves the groups back"
        )
