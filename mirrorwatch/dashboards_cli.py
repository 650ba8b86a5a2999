"""`mirrorwatch dashboards build`: the Grafana dashboards as JSON (part of the composition root, the CLI)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["dashboards"]


@click.group()
def dashboards() -> None:
    """Grafana dashboards for mirrorwatch's metrics (built with grafana-foundation-sdk)."""


@dashboards.command("build")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dashboards/grafana"),
    show_default=True,
    help="Directory for the dashboard JSON files.",
)
def dashboards_build(out: Path) -> None:
    """Write the dashboards (Mirror overview, Consumer lag, Canary, Clients) as JSON for Grafana's import.

    Each has a Prometheus data source variable and link, cluster or group variables.
    """
    from dashboards.grafana import write_all

    for path in write_all(out):
        click.echo(f"wrote {path}")
