"""Apache Kafka's MirrorMaker 2 (4.1.1, dedicated mode, jars org.apache.kafka:connect-mirror from Maven Central) as
a peer: its properties for the local pair and the command that runs it. Used by the throughput and failover
benchmarks and by the tests that check mirrorwatch against what MirrorMaker 2 wrote."""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.common import stop_peer
from kernel.config import MirrorwatchConfig
from localkafka.jars import CONNECT_MIRROR, resolve_jars

__all__ = ["MM2_LOG4J", "checkpointing", "mm2_command", "mm2_properties", "running_mm2"]

MM2_LOG4J = """status = error
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = %d %p %c: %m%n
"""

# No checkpoints, heartbeats or group offset sync: a pure data mirror (the throughput peers).
DATA_ONLY = (
    "emit.checkpoints.enabled = false",
    "emit.heartbeats.enabled = false",
    "sync.group.offsets.enabled = false",
)


def checkpointing(group: str) -> list[str]:
    """Checkpoints and the group offset sync every second for one consumer group (the failover peers)."""
    return [
        "emit.heartbeats.enabled = false",
        "emit.checkpoints.enabled = true",
        "emit.checkpoints.interval.seconds = 1",
        "sync.group.offsets.enabled = true",
        "sync.group.offsets.interval.seconds = 1",
        "refresh.groups.interval.seconds = 1",
        f"groups = {group}",
    ]


def mm2_properties(
    clusters: MirrorwatchConfig, alias: str, topics: Sequence[str], extra: Sequence[str] = ()
) -> list[str]:
    """A flow `<alias> -> target` for the local pair, the source cluster under `alias` (its DefaultReplicationPolicy
    names the target topic `<alias>.<topic>`), mirroring exactly `topics`; `extra` lines win."""
    return [
        f"clusters = {alias}, target",
        f"{alias}.bootstrap.servers = {clusters.clusters['source'].bootstrap_servers}",
        f"target.bootstrap.servers = {clusters.clusters['target'].bootstrap_servers}",
        f"{alias}->target.enabled = true",
        f"{alias}->target.topics = {'|'.join(re.escape(t) for t in topics)}",
        f"target->{alias}.enabled = false",
        "refresh.topics.interval.seconds = 5",
        # single-broker clusters
        *(
            f"{name}.replication.factor = 1"
            for name in ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic", "offset.storage")
        ),
        "status.storage.replication.factor = 1",
        "config.storage.replication.factor = 1",
        "replication.factor = 1",
        *extra,
    ]


def mm2_command(work: Path, name: str, lines: Sequence[str], progress: bool = True) -> list[str]:
    """The java command line running MirrorMaker 2 with `lines` as its properties file (written under `work`)."""
    jars = resolve_jars(
        CONNECT_MIRROR, progress=(lambda line: print(line, flush=True)) if progress else (lambda _: None)
    )
    properties = work / f"mm2-{name}.properties"
    properties.write_text("\n".join(lines) + "\n")
    log4j = work / "mm2-log4j2.properties"
    log4j.write_text(MM2_LOG4J)
    return [
        "java",
        "-Xmx1g",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{jars}/*",
        "org.apache.kafka.connect.mirror.MirrorMaker",
        str(properties),
    ]


@contextlib.contextmanager
def running_mm2(work: Path, name: str, lines: Sequence[str]) -> Iterator[subprocess.Popen[bytes]]:
    """MirrorMaker 2 running with these properties (its log in `work`); stopped, with its JVM, at the end."""
    command = mm2_command(work, name, lines, progress=False)
    with (work / f"mm2-{name}.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        stop_peer(process)
