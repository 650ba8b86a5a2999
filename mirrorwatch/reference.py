"""References generated from the code, so that they cannot drift from it (issue #64): the config file's JSON Schema
(`mirrorwatch config schema`, for editors' YAML language servers), every CLI command and option (from the click
commands), every alert (from `alerts.rules`) and every route of the HTTP API (from the routes served), written
into docs/reference/ by

    .venv/bin/mirrorwatch reference docs/reference      # a maintainer's command, hidden from --help

and compared with what the code generates now by tests/mirrorwatch/test_reference.py (a new option, command, config
key or alert without its reference fails the suite until this is run again).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import click

__all__ = [
    "alerts_reference",
    "cli_reference",
    "config_schema",
    "http_reference",
    "reference_command",
    "references",
    "schema_command",
]

SCHEMA_ID = "https://github.com/mirrorwatch/mirrorwatch/blob/main/docs/reference/config.schema.json"


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a mirrorwatch config file, from the pydantic model `load_config` checks
    with: unknown keys are refused (`additionalProperties: false`) as the loader refuses them."""
    from kernel.config import MirrorwatchConfig

    schema = MirrorwatchConfig.model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "mirrorwatch config",
        "description": "The one YAML file every mirrorwatch command reads (docs/reference/configuration.md). ${VAR} in "
        "`clusters` is read from the environment.",
        **{k: v for k, v in schema.items() if k != "title"},
    }


@click.command("schema")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write here [default: stdout].")
def schema_command(out: Path | None) -> None:
    """Print the JSON Schema of the config file, for an editor: with the YAML language server (VS Code, Neovim),
    put `# yaml-language-server: $schema=<file or URL>` on the config's first line."""
    text = json.dumps(config_schema(), indent=2) + "\n"
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        click.echo(f"wrote {out}", err=True)


def _commands(group: click.Command, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, group)]
    if isinstance(group, click.Group):
        for name in sorted(group.commands):
            command = group.commands[name]
            if not command.hidden:
                found += _commands(command, (*path, name))
    return found


def cli_reference(cli: click.Command) -> str:
    """Every command under `cli` (the `mirrorwatch` group) with its help and its options (names, type, default,
    help), as Markdown."""
    lines = [
        "# CLI reference",
        "",
        "Generated from the click commands by `mirrorwatch reference docs/reference`; do not edit.",
        "",
    ]
    for path, command in _commands(cli, ("mirrorwatch",)):
        # the root's settings (its -h) on every command's context, as when `mirrorwatch ... --help` runs
        context = click.Context(command, info_name=path[-1], **cli.context_settings)
        lines += [f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`", ""]
        if command.help:  # as `--help` prints it (its line breaks are the author's)
            lines += ["```text", inspect.cleandoc(command.help).replace("\b\n", ""), "```", ""]
        rows = []
        for param in command.get_params(context):
            record = param.get_help_record(context)
            if record is None or getattr(param, "hidden", False):
                continue
            names, help_ = record
            name_cell, help_cell = names.replace("|", "\\|"), help_.replace("|", "\\|").replace("\n", " ")
            rows.append(f"| `{name_cell}` | {help_cell} |")
        arguments = [p.human_readable_name for p in command.params if isinstance(p, click.Argument)]
        if arguments:
            lines += [f"Arguments: {', '.join(f'`{a}`' for a in arguments)}", ""]
        if rows:
            lines += ["| option | meaning |", "| --- | --- |", *rows, ""]
    return "\n".join(lines).rstrip() + "\n"


def alerts_reference() -> str:
    """Every alert of the shipped rules: severity, for, expression, summary and runbook, as Markdown."""
    from alerts.rules import build_rules

    lines = [
        "# Alerts reference",
        "",
        "Generated from `alerts/rules.py` (default thresholds) by `mirrorwatch reference docs/reference`;",
        "do not edit. Each alert's runbook is in [docs/runbooks](../runbooks/README.md).",
        "",
    ]
    for group in build_rules()["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            name = rule["alert"]
            lines += [
                f"## {name}",
                "",
                f"Severity **{rule['labels']['severity']}**, for **{rule.get('for', '0m')}**. "
                f"Runbook: [{name}](../runbooks/{name}.md).",
                "",
                f"> {rule['annotations']['summary']}",
                "",
                "```promql",
                rule["expr"],
                "```",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


def http_reference() -> str:
    """Every route of the HTTP API as `mirrorwatch run` serves them (the monitor's, the standbys', the canary's, the
    link controls, /metrics and the probes): path, methods and what it answers (its handler's docstring)."""
    from types import SimpleNamespace

    from starlette.routing import Route

    from kernel.config import parse_config
    from mirrorwatch.services import extra_routes
    from monitor.http import create_app

    config = parse_config({"clusters": {"source": {"bootstrap_servers": "localhost:9092"}}}, source="reference")
    stand_in: Any = SimpleNamespace(on_publish=[])  # the routes are built, never asked
    app = create_app(stand_in, extra_routes=extra_routes(config, True, None, (), None))
    lines = [
        "# HTTP API reference",
        "",
        "Generated from the routes `mirrorwatch run` serves by `mirrorwatch reference docs/reference`; do not edit.",
        "Where the monitor does not run (a `canary` or `mirror` process), `/metrics`, `/healthz`, `/readyz` (ready at",
        "once) and `/canary` are served. JSON everywhere but `/metrics`; behind `http.web_config_file`, TLS and basic",
        "auth for every route.",
        "",
        "| route | methods | answers |",
        "| --- | --- | --- |",
    ]
    routes = [route for route in app.routes if isinstance(route, Route)]
    for route in sorted(routes, key=lambda r: r.path):
        methods = ", ".join(sorted(set(route.methods or {"GET"}) - {"HEAD"}))
        doc = inspect.cleandoc(route.endpoint.__doc__ or "").split("\n\n")[0]
        answers = " ".join(doc.split()).replace("|", "\\|")
        lines.append(f"| `{route.path}` | {methods} | {answers} |")
    return "\n".join(lines) + "\n"


def references(cli: click.Command) -> dict[str, str]:
    """docs/reference/'s files by name, as the code makes them now."""
    return {
        "cli.md": cli_reference(cli),
        "alerts.md": alerts_reference(),
        "http.md": http_reference(),
        "config.schema.json": json.dumps(config_schema(), indent=2) + "\n",
    }


@click.command("reference", hidden=True)
@click.argument("out", type=click.Path(file_okay=False, path_type=Path), default=Path("docs/reference"))
def reference_command(out: Path) -> None:
    """Write docs/reference/ (the CLI, the alerts, the HTTP API, the config's JSON Schema) as the code makes them
    now."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in references(click.get_current_context().find_root().command).items():
        (out / name).write_text(text, encoding="utf-8")
        click.echo(f"wrote {out / name}", err=True)
