"""docs/reference/ is what the code generates now (issue #64): the CLI reference from the click commands, the alerts
from alerts.rules, the config file's JSON Schema from the pydantic model. A new option, command, config key or alert
fails here until `mirrorwatch reference docs/reference` is run again; the schema takes the manual's example
config and refuses what the loader refuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from canary.exporter import CANARY_METRIC_NAMES
from failover.exporter import FAILOVER_METRIC_NAMES
from mirrorwatch.cli import cli
from mirrorwatch.reference import cli_reference, config_schema, http_reference, metric_families, references
from monitor.exporter import METRIC_NAMES

CHECKOUT = Path(__file__).resolve().parents[2]
REFERENCE = CHECKOUT / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(references(cli)))
def test_the_committed_reference_is_what_the_code_generates(name: str) -> None:
    assert (REFERENCE / name).read_text() == references(cli)[name], (
        "run: .venv/bin/mirrorwatch reference docs/reference"
    )


def test_an_option_added_to_a_command_is_missing_from_the_committed_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: an option the code gains changes the generated reference."""
    demo = cli.commands["demo"]
    monkeypatch.setattr(demo, "params", [*demo.params, click.Option(["--frobnicate"], help="Frobnicate.")])
    generated = cli_reference(cli)
    assert "| `--frobnicate TEXT` | Frobnicate. |" in generated
    assert generated != (REFERENCE / "cli.md").read_text()


def test_every_command_has_its_section() -> None:
    text = (REFERENCE / "cli.md").read_text()
    for name in ("mirror", "monitor", "canary", "run", "failover plan", "link budget", "config schema"):
        assert f"`mirrorwatch {name}`" in text


def test_the_schema_takes_the_manuals_example_and_refuses_an_unknown_key() -> None:
    page = (REFERENCE / "configuration.md").read_text()
    found = re.search(r"```yaml\n(clusters:.*?)```", page, flags=re.DOTALL)
    assert found, "the manual's configuration page has no example config"
    example = yaml.safe_load(found.group(1))
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(example, schema)
    example["clusters"]["target"]["colour"] = "red"
    with pytest.raises(jsonschema.ValidationError, match="colour"):
        jsonschema.validate(example, schema)


def test_config_schema_prints_it() -> None:
    result = CliRunner().invoke(cli, ["config", "schema"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == config_schema()


def test_every_route_of_the_http_api_says_what_it_answers() -> None:
    """A route added without a docstring on its handler has an empty row: a route nobody can look up."""
    rows = [line for line in http_reference().splitlines() if line.startswith("| `/")]
    assert {
        "`/metrics`",
        "`/readyz`",
        "`/v3/kafka/{cluster}/consumer/{group}/lag`",
        "`/mirror/links/{link}/pause`",
    } <= {row.split(" | ")[0].removeprefix("| ") for row in rows}
    assert [row for row in rows if row.rstrip(" |").endswith(("GET", "POST"))] == []


def test_every_metric_the_exporters_name_is_in_the_reference_with_its_help_and_type() -> None:
    """The families the collectors yield for an empty state are every name the exporters declare (the dashboards and
    alert rules are checked against those names): a family added to a collector is in the reference, with help."""
    families = metric_families()
    declared = {*METRIC_NAMES, *CANARY_METRIC_NAMES, *FAILOVER_METRIC_NAMES}
    assert {name for name, *_ in families} == declared
    assert [name for name, kind, help_, _labels, _who in families if not help_ or kind == "untyped"] == []
    assert ("kafka_consumergroup_lag", "gauge") in {(name, kind) for name, kind, *_ in families}


def test_every_config_key_says_what_it_means() -> None:
    """Each key's description is its comment in kernel/config.py or reference.DESCRIPTIONS: a key added without
    either has none here (and no meaning in the config keys page, or in an editor's hover)."""
    schema = config_schema()
    models = {"MirrorwatchConfig": schema, **schema["$defs"]}
    keys = [(m, k, p) for m, d in models.items() for k, p in d.get("properties", {}).items()]
    assert len(keys) > 90 and [f"{m}.{k}" for m, k, p in keys if not p.get("description")] == []
    page = (REFERENCE / "config-keys.md").read_text()
    assert "| `links[].on_gap` | `stop` \\| `skip` |" in page and "| `clusters.<name>.bootstrap_servers` |" in page


def test_the_schema_takes_what_the_loader_takes_numbers_as_properties_and_a_byte_rate_as_text() -> None:
    """An editor must not mark red what `load_config` accepts (the schema once said integer for "1MB" and text only
    for `linger.ms: 5`), and must mark what it refuses."""
    from kernel.config import parse_config

    properties: dict[str, object] = {"linger.ms": 5, "enable.idempotence": True}
    document = {
        "clusters": {"a": {"bootstrap_servers": "x:1", "properties": properties}},
        "links": [{"name": "l", "source": "a", "target": "a", "rename": {"policy": "prefix"},
                   "max_bytes_per_second": "1MB", "worker_max_bytes_per_second": 1000}],
    }  # fmt: skip
    parse_config(document, env={})
    jsonschema.validate(document, config_schema())
    properties["linger.ms"] = [5]  # the loader refuses a list
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, config_schema())
