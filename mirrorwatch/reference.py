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
    "config_keys_reference",
    "config_schema",
    "http_reference",
    "metric_families",
    "metrics_reference",
    "reference_command",
    "references",
    "schema_command",
]

SCHEMA_ID = "https://github.com/mirrorwatch/mirrorwatch/blob/main/docs/reference/config.schema.json"


# What a key means, for the keys kernel/config.py does not say it of in a comment beside or above the field, or says
# it in a note for its reader rather than a user (the model's comments describe the rest: `field_comments`).
DESCRIPTIONS = {
    "MirrorwatchConfig.clusters": "The Kafka clusters by alias, each as a link, the monitor and the canary reach it.",
    "MirrorwatchConfig.links": "The mirror links: each copies topics of one cluster to another.",
    "MirrorwatchConfig.monitor": "How the monitor collects offsets and judges consumer groups (Burrow's rules).",
    "MirrorwatchConfig.canary": "The probes sent through every link and read back at its target.",
    "MirrorwatchConfig.progress": "Where workers publish their positions for monitors on any host.",
    "MirrorwatchConfig.http": "The HTTP API: Burrow's v3 routes, /mirror/..., /metrics, /healthz, /readyz.",
    "ClusterConfig.bootstrap_servers": "host:port[,host:port...] of the cluster's brokers.",
    "ClusterConfig.properties": "librdkafka client properties for every component (security.protocol, "
    "sasl.*, ssl.*); values may be ${ENV_VAR}; secret-named ones are masked in output.",
    "ClusterConfig.clients": "Per component (mirror, monitor, canary, failover), properties over `properties`: "
    "its own principal, for least privilege.",
    "TopicSelection.include": "Full-match regexes: a name must match one of them.",
    "TopicSelection.exclude": "Full-match regexes: a name matching one of them is left out.",
    "GroupSelection.include": "Full-match regexes on the group id: a group must match one of them.",
    "GroupSelection.exclude": "Full-match regexes on the group id: a group matching one of them is left out.",
    "CheckpointConfig.groups": "The source consumer groups kept ready on the target.",
    "CheckpointConfig.interval_seconds": "How often the groups are translated to the target (1 to 3600).",
    "CheckpointConfig.sync_group_offsets": "Commit the translations to the target groups that have no active "
    "members, only forward (MirrorMaker 2's sync.group.offsets).",
    "IdentityRename.policy": "identity: the target topic has the source topic's name (MirrorMaker 1).",
    "PrefixRename.policy": "prefix: <source alias><separator><topic> (MirrorMaker 2's default).",
    "PrefixRename.separator": "Between the source alias and the topic name.",
    "FormatRename.policy": "format: the target topic's name from a template (Confluent Replicator's style).",
    "FormatRename.format": "The template: ${topic}, and optionally ${source} (the source cluster's alias).",
    "MapRename.policy": "map: explicit source topic to target topic pairs.",
    "MapRename.map": "{source topic: target topic}, one to one; topics not named are not mirrored.",
    "LinkConfig.name": "The link's name: its workers, metrics, routes and commands name it.",
    "LinkConfig.source": "The alias (in `clusters`) of the cluster the link reads.",
    "LinkConfig.target": "The alias (in `clusters`) of the cluster the link writes.",
    "LinkConfig.topics": "Which source topics the link mirrors (MirrorMaker's whitelist and blacklist).",
    "LinkConfig.rename": "How a target topic is named from its source topic (identity, prefix, format, map).",
    "LinkConfig.engine": "python: the built-in engine; spark: a Spark Structured Streaming query (`spark`).",
    "LinkConfig.delivery": "at-least-once, or exactly-once (transactions: each record once on the target for "
    "read_committed consumers).",
    "LinkConfig.offset_commit_interval_ms": "How often the link commits what the target acknowledged (100 to "
    "3,600,000 ms).",
    "LinkConfig.refresh_topics_interval_seconds": "How often the link looks for new, grown or deleted topics, and "
    "keeps what `sync` names in step.",
    "LinkConfig.handler": "module:callable applied to each record before it is written (MirrorMaker 1's "
    "message handler); python engine only.",
    "LinkConfig.handler_args": "A string given to the handler's factory (MirrorMaker 1's --message.handler.args).",
    "LinkConfig.num_streams": "Worker processes of the link on this host (MirrorMaker's num.streams), sharing its "
    "partitions in its consumer group.",
    "LinkConfig.exclude_internal_topics": "Never mirror internal topics (__consumer_offsets, mirrorwatch.*, "
    "MirrorMaker 2's).",
    "LinkConfig.replication_factor": "Replication factor of the target topics the link creates (default: the "
    "broker default).",
    "LinkConfig.start_from": "Where a partition with no commit of the link's group starts: earliest or latest.",
    "LinkConfig.consumer_properties": "librdkafka properties for the link's source consumer, over the cluster's.",
    "LinkConfig.producer_properties": "librdkafka properties for the link's target producer, over the cluster's.",
    "LinkConfig.spark": "How a link with engine: spark runs.",
    "LinkConfig.sync": "What the link keeps in step on the target besides the records.",
    "MonitorShard.clusters": "The clusters this shard collects (empty: all).",
    "MonitorShard.groups": "The groups this shard watches on them (the groups of the links it measures always).",
    "MonitorConfig.interval_seconds": "How often offsets are collected and judged.",
    "MonitorConfig.window": "Commit samples kept per partition (Burrow's window), at least 2.",
    "CanaryConfig.interval_seconds": "How often a probe is sent into each link's source.",
    "CanaryConfig.topic": "The probe topic on each link's source (its copy is read at the target).",
    "ProgressConfig.enabled": "Workers publish their positions on the progress topic, and monitors read them.",
    "ProgressConfig.topic": "The compacted progress topic (never mirrored: mirrorwatch.* is internal).",
    "HttpConfig.port": "The HTTP API's port (0: any free one).",
    "LinkConfig.worker_max_bytes_per_second": "A bandwidth budget per worker besides the link's (the lower wins); "
    "unset: none.",
    "MonitorConfig.allowed_lag_seconds": "Lag whose oldest unread record is at most this old is OK (Burrow's rule "
    "1, in seconds); unset: only allowed_lag_records.",
    "MonitorConfig.events": "How many of the newest events (/mirror/events) the monitor keeps in memory.",
    "SparkOptions.master": "Spark's master: local[*] (in the mirror's process), spark://host:7077, yarn, k8s://...",
    "SparkOptions.trigger_interval_seconds": "Seconds between micro-batches (0: the next as soon as one ends).",
    "SparkOptions.checkpoint_dir": "The query's checkpoint (default <state_dir>/checkpoints/<link>).",
    "HttpConfig.host": "The address the HTTP API listens on: loopback unless said otherwise (0.0.0.0: every "
    "interface, for a Prometheus on another host).",
    "HttpConfig.web_config_file": "TLS and basic auth for the HTTP API, in the format of Prometheus exporters' "
    "--web.config.file.",
    "SyncOptions.topic_deletion_grace_seconds": "How long a source topic must have been gone before its copy is "
    "deleted (topic_deletions: on).",
}


def field_comments() -> dict[str, str]:
    """What kernel/config.py's comments say of each model field ("Model.field"): the comment at the end of its line,
    else the comment lines right above it."""
    import ast
    import io
    import tokenize

    import kernel.config

    source = Path(inspect.getfile(kernel.config)).read_text(encoding="utf-8")
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, alone on its line)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            alone = not token.line[: token.start[1]].strip()
            comments[token.start[0]] = (token.string.lstrip("#").strip(), alone)
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            end = item.end_lineno or item.lineno
            trailing = [comments[line][0] for line in range(item.lineno, end + 1) if line in comments]
            above: list[str] = []
            line = item.lineno - 1
            while line in comments and comments[line][1]:
                above.insert(0, comments[line][0])
                line -= 1
            text = " ".join(above) or " ".join(trailing)
            if text:
                found[f"{node.name}.{item.target.id}"] = text
    return found


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a mirrorwatch config file, from the pydantic model `load_config` checks
    with: unknown keys are refused (`additionalProperties: false`) as the loader refuses them; each key described by
    its comment in the model (`field_comments`) or `DESCRIPTIONS`."""
    from kernel.config import MirrorwatchConfig

    schema = MirrorwatchConfig.model_json_schema(mode="validation")
    described = {**field_comments(), **DESCRIPTIONS}
    models = {"MirrorwatchConfig": schema, **schema.get("$defs", {})}
    for model, definition in models.items():
        for key, prop in definition.get("properties", {}).items():
            if f"{model}.{key}" in described:
                prop["description"] = described[f"{model}.{key}"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "mirrorwatch config",
        "description": "The one YAML file every mirrorwatch command reads (docs/reference/configuration.md). ${VAR} in "
        "`clusters` is read from the environment.",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def _type_of(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return "mapping"
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    for union in ("anyOf", "oneOf"):
        if union in prop:
            kinds = [_type_of(p) for p in prop[union] if p.get("type") != "null"]
            return " or ".join(dict.fromkeys(kinds))
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(prop.get('items', {}))}"
    return "mapping" if kind == "object" else str(kind)


def _default_cell(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "$ref" in prop:  # a section: its keys have the defaults
        return "its keys'"
    if prop.get("default") is None:
        return "none"
    return "`" + json.dumps(prop["default"]).replace("|", "\\|") + "`"


def _keys(path: str, definition: dict[str, Any], defs: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(key path, type, default, description) of every key under `definition`, its sections' keys after it."""
    rows = []
    for key, prop in definition.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        default = _default_cell(prop, key in definition.get("required", ()))
        rows.append((here, _type_of(prop), default, prop.get("description", "")))
        refs = [prop] if "$ref" in prop else [p for p in prop.get("anyOf", prop.get("oneOf", [])) if "$ref" in p]
        items = prop.get("items", {})
        if "$ref" in items:
            refs, here = [items], f"{here}[]"
        named = [prop.get("additionalProperties"), *prop.get("patternProperties", {}).values()]
        named = [n for n in named if isinstance(n, dict) and "$ref" in n]
        if named:  # a mapping of names to sections (`clusters.<alias>`)
            refs, here = named[:1], f"{here}.<name>"
        for ref in refs:
            rows += _keys(here, defs[ref["$ref"].rsplit("/", 1)[1]], defs)
    return rows


def config_keys_reference(schema: dict[str, Any]) -> str:
    """Every key of the config file with its type, default and description (`schema`: `config_schema`), as
    Markdown."""
    lines = [
        "# Config keys",
        "",
        "Generated from the pydantic model by `mirrorwatch reference docs/reference`; do not edit. The same keys as",
        "a [JSON Schema](config.schema.json) for an editor; how they fit together in",
        "[the configuration page](configuration.md).",
        "",
        "| key | type | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    rows: dict[str, tuple[str, str, str]] = {}
    for key, kind, default, meaning in _keys("", schema, schema["$defs"]):
        was = rows.get(key)
        if was is None:
            rows[key] = (kind, default, meaning)
        else:  # a key of each form of a union (a rename policy's `policy`): its forms' values together
            kinds = was[0] if kind == was[0] else f"{was[0]} \\| {kind}"
            rows[key] = (kinds, was[1], was[2] if meaning == was[2] else f"{was[2]} {meaning}")
    for key, (kind, default, meaning) in rows.items():
        said = " ".join(meaning.replace("|", "\\|").split())
        lines.append(f"| `{key}` | {kind} | {default} | {said} |")
    return "\n".join(lines) + "\n"


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
        "(`monitor.compatible_metrics` chooses which are served); 'served by' says which process's `/metrics` has",
        "it: `mirrorwatch monitor` (with the standby groups of links that keep them), `mirrorwatch canary`, or",
        "`mirrorwatch run`, which serves all of them.",
    ]
    families = metric_families()
    for style, title in titles.items():
        lines += ["", f"## {title}"]
        for name, kind, help_, labels, who in families:
            if style_of.get(name, "mirrorwatch") == style:
                said = ", ".join(f"`{label}`" for label in labels) or "none"
                lines += [
                    "",
                    f"### `{name}`",
                    "",
                    f"{kind}; labels {said}; served by {who}",
                    "",
                    " ".join(help_.split()),
                ]
    return "\n".join(lines) + "\n"


def references(cli: click.Command) -> dict[str, str]:
    """docs/reference/'s files by name, as the code makes them now."""
    schema = config_schema()  # the config's two pages from one schema (it reads kernel/config.py's comments)
    return {
        "cli.md": cli_reference(cli),
        "alerts.md": alerts_reference(),
        "http.md": http_reference(),
        "metrics.md": metrics_reference(),
        "config-keys.md": config_keys_reference(schema),
        "config.schema.json": json.dumps(schema, indent=2) + "\n",
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
