"""References generated from the code, so that they cannot drift from it (issue #64): the config file's JSON Schema
(`mirrorwatch config schema`, for editors' YAML language servers), every CLI command and option (from the click
commands), every alert (from `alerts.rules`), every metric (from the exporters' collectors) and every route of
the HTTP API (from the routes served), written into docs/reference/ by

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
    "metric_families",
    "metrics_reference",
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


def metric_families() -> list[tuple[str, str, str, tuple[str, ...], str]]:
    """Every family /metrics can serve, as (name, type, help, labels, who serves it): what the monitor's, the
    canary's and the standbys' collectors yield for a state with nothing in it (each yields its families whether or
    not it has samples for them)."""
    from prometheus_client.parser import text_string_to_metric_families

    from canary.exporter import CanaryCollector
    from failover.exporter import StandbyCollector
    from kernel.config import ClusterConfig, MonitorConfig
    from monitor.cardinality import series_exposition
    from monitor.exporter import MonitorCollector
    from monitor.link_families import link_lags
    from monitor.service import MonitorService
    from monitor.state import MonitorState

    service = MonitorService(MonitorConfig(), {"source": ClusterConfig(bootstrap_servers="localhost:9092")})
    try:  # never started: nothing is asked of the cluster
        service.state = MonitorState(0, {}, {}, {})
        ours = [*MonitorCollector(service).collect(), *link_lags({})]
    finally:
        service.stop()
    found = [(f.name, f.kind, f.documentation, f.labels, "monitor") for f in ours]
    for family in text_string_to_metric_families(series_exposition({"mirrorwatch": 0}, 1).decode()):
        labels = tuple(sorted({k for sample in family.samples for k in sample.labels}))
        found.append((family.name, family.type, family.documentation, labels, "monitor"))
    served_by = (
        ("canary", CanaryCollector(tuple).collect()),
        ("monitor (standby groups)", StandbyCollector(list, int).collect()),
    )
    for who, metrics in served_by:
        for metric in metrics:
            name = metric.name + ("_total" if metric.type == "counter" else "")
            found.append((name, metric.type, metric.documentation, tuple(getattr(metric, "_labelnames", ())), who))
    return sorted(found)


def metrics_reference() -> str:
    """Every family /metrics serves (`metric_families`), grouped by whose names it keeps, as Markdown."""
    from monitor.exporter import STYLES

    style_of = {name: style for style, names in STYLES.items() for name in names}
    titles = {
        "mirrorwatch": "mirrorwatch's own",
        "kafka_exporter": "kafka_exporter's names (and its Grafana fork's)",
        "kafka_lag_exporter": "kafka-lag-exporter's names",
        "burrow": "burrow_exporter's names",
    }
    lines = [
        "# Metrics reference",
        "",
        "Generated from the exporters' collectors by `mirrorwatch reference docs/reference`; do not edit. The borrowed",
        "families keep the names, labels and meaning of the exporters existing dashboards query",
        "(`monitor.compatible_metrics` chooses which are served); `served by` says which process's `/metrics` has",
        "it: `mirrorwatch monitor` (with the standby groups of links that keep them), `mirrorwatch canary`, or",
        "`mirrorwatch run`, which serves all of them.",
    ]
    families = metric_families()
    for style, title in titles.items():
        lines += [
            "",
            f"## {title}",
            "",
            "| name | type | labels | served by | help |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, kind, help_, labels, who in families:
            if style_of.get(name, "mirrorwatch") == style:
                label_cell = ", ".join(f"`{label}`" for label in labels)
                lines.append(f"| `{name}` | {kind} | {label_cell} | {who} | {' '.join(help_.split())} |")
    return "\n".join(lines) + "\n"


def references(cli: click.Command) -> dict[str, str]:
    """docs/reference/'s files by name, as the code makes them now."""
    return {
        "cli.md": cli_reference(cli),
        "alerts.md": alerts_reference(),
        "http.md": http_reference(),
        "metrics.md": metrics_reference(),
        "config.schema.json": json.dumps(config_schema(), indent=2) + "\n",
    }


@click.command("reference", hidden=True)
@click.argument("out", type=click.Path(file_okay=False, path_type=Path), default=Path("docs/reference"))
def reference_command(out: Path) -> None:
    """Write docs/reference/ (the CLI, the alerts, the metrics, the HTTP API, the config's JSON Schema) as the code
    makes them now."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in references(click.get_current_context().find_root().command).items():
        (out / name).write_text(text, encoding="utf-8")
        click.echo(f"wrote {out / name}", err=True)
