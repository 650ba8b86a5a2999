"""`mirrorwatch --version`: what a bug report needs — this package's version, the librdkafka it runs on (the one
imported, not a pin) and the Kafka and Spark versions its tests run against (`localkafka.jars`)."""

from __future__ import annotations

import click

from mirrorwatch import __version__

__all__ = ["print_version"]


def print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """The eager `--version` option's callback: print and exit."""
    if not value or ctx.resilient_parsing:
        return
    import confluent_kafka

    from localkafka.jars import KAFKA, SPARK_KAFKA_VERSION

    click.echo(f"mirrorwatch {__version__}")
    click.echo(f"librdkafka {confluent_kafka.libversion()[0]} (confluent-kafka {confluent_kafka.__version__})")
    click.echo(f"tested with Apache Kafka {KAFKA.name.removeprefix('kafka-')}, Spark {SPARK_KAFKA_VERSION}")
    ctx.exit()
