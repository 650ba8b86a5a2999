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

from mirrorwatch.cli import cli
from mirrorwatch.reference import cli_reference, config_schema, http_reference, references

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
