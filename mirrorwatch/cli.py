"""The `mirrorwatch` command (see ARCHITECTURE.md, "CLI contract"). Exit codes: 0 ok, 1 runtime failure, 2 bad usage
or config. Errors mirrorwatch raises on purpose are printed as one clear message, never as a traceback."""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

import click

from kernel.errors import ConfigError, MirrorwatchError
from localkafka.local_security import MODES
from mirrorwatch.about import print_version

__all__ = ["main"]

log = logging.getLogger("mirrorwatch")

STATE_DIR_HELP = "Where the clusters' data, logs, state and generated mirrorwatch.yaml live."


def _fail(exc: MirrorwatchError) -> NoReturn:
    if isinstance(exc, ConfigError):
        if exc.source:
            click.echo(f"mirrorwatch: invalid config {exc.source}:", err=True)
        for problem in exc.problems:
            click.echo(str(problem), err=True)
    else:
        click.echo(f"mirrorwatch: error: {exc}", err=True)
    sys.exit(exc.exit_code)


class _Group(click.Group):
    """Turns mirrorwatch's own errors into a message and the contract's exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MirrorwatchError as exc:
            _fail(exc)


def _stop_event() -> threading.Event:
    """An event set by SIGINT or SIGTERM: long-running commands stop, flush and clean up instead of dying."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        if stop.is_set():  # a second Ctrl-C while stopping: the user means it
            raise KeyboardInterrupt
        click.echo(f"\nmirrorwatch: {signal.Signals(signum).name} received, stopping cleanly ...", err=True)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=print_version,
              help="Show the version, the librdkafka in use, the Kafka and Spark tested with; exit.")  # fmt: skip
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def cli(log_level: str) -> None:
    """Mirror Apache Kafka topics between clusters and tell, with numbers you can trust, whether the mirror is healthy.

    \b
    Start here:
      mirrorwatch demo                      two local clusters, traffic, mirror, monitor, canary, API, console
      mirrorwatch local up                  just the two local clusters (source, target)
      mirrorwatch config check FILE         validate a config file
      mirrorwatch check --config FILE       which ACL each component's principal is missing (kafka-acls.sh lines)
      mirrorwatch drift --config FILE       what differs between source topics and their copies, and what syncs
      mirrorwatch acls --config F --link L  one ACL sync round now (after a promotion: the WRITE rules too)
      mirrorwatch failover plan ...         where consumer groups must start on a link's target (exact)
      mirrorwatch migrate from mm2 ...      take over from MirrorMaker 1/2 or Replicator, re-copying nothing
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if log_level.upper() != "DEBUG":
        logging.getLogger("apscheduler").setLevel(logging.WARNING)  # a line per job run says nothing new


# -- local ------------------------------------------------------------------------------------------------------------


@cli.group(cls=_Group)
def local() -> None:
    """Two real local Apache Kafka 4.1 clusters (KRaft), `source` and `target`, for development and tests.

    Jars come from Maven Central (fetched once with mvn into ~/.cache/mirrorwatch/jars, or $MIRRORWATCH_JAR_CACHE).
    Each cluster has its own cluster id, data directory and free ports; `up` writes STATE_DIR/mirrorwatch.yaml.
    """


def _state_dir_option(f: Any) -> Any:
    from localkafka.local import default_state_dir

    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=default_state_dir,
        show_default=True,
        help=STATE_DIR_HELP,
    )(f)


@local.command("up")
@_state_dir_option
@click.option(
    "--security",
    type=click.Choice(MODES),
    help="How new clusters are secured (SCRAM-SHA-512/PLAIN users, a throwaway CA, StandardAuthorizer; oauthbearer: "
    "Kafka's unsecured tokens; oidc: signed tokens from a local OpenID Connect provider it starts) "
    "[default: plaintext, or what the state dir's clusters were made with].",
)
def local_up(state_dir: Path, security: str | None) -> None:
    """Start both clusters (creating them the first time) and wait until each answers."""
    from localkafka.local import LocalClusters

    clusters = LocalClusters(state_dir, security=security)
    clusters.up()
    click.echo(f"config: {clusters.config_path}")
    if clusters.security.environment():
        click.echo(f"its password comes from the environment: set -a; . {clusters.security.env_file}; set +a")
    click.echo(f"stop them with: mirrorwatch local down --state-dir {clusters.state_dir}")


@local.command("down")
@_state_dir_option
@click.option(
    "--purge",
    is_flag=True,
    help="After stopping, delete the clusters' data, logs, state and generated config (the next `up` starts fresh "
    "clusters with new ids and ports).",
)
def local_down(state_dir: Path, purge: bool) -> None:
    """Stop both clusters (SIGTERM, then SIGKILL after 30 s). Their data stays for the next `up` unless --purge."""
    from localkafka.local import LocalClusters

    clusters = LocalClusters(state_dir)
    for line in clusters.down():
        click.echo(line)
    if purge:
        for line in clusters.purge():
            click.echo(line)


@local.command("status")
@_state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def local_status(state_dir: Path, as_json: bool) -> None:
    """Say what runs where. Exits 0 when both clusters run, 1 otherwise."""
    from localkafka.local import LocalClusters, describe

    clusters = LocalClusters(state_dir)
    statuses = clusters.status()
    if as_json:
        click.echo(json.dumps(describe(clusters), indent=2))
    elif not statuses:
        click.echo(f"no local clusters in {clusters.state_dir} (start them with: mirrorwatch local up)")
    for s in [] if as_json else statuses:
        state = f"running (pid {s.pid})" if s.is_running else "stopped"
        click.echo(
            f"{s.cluster.alias:<7} {state:<20} {s.cluster.bootstrap_servers:<16} "
            f"cluster id {s.cluster.cluster_id}  log {s.cluster.log_path}"
        )
    if not statuses or not all(s.is_running for s in statuses):
        sys.exit(1)


@local.command("fetch")
def local_fetch() -> None:
    """Fetch the jars from Maven Central into the cache now: Kafka for the local clusters, Spark's Kafka connector
    for the spark engine (setup does this; `up` and the spark engine do it when needed); then make the class-data
    archives the local brokers and the spark engine's drivers start from (a minute, once: a broker starts in about a
    third of the time with it, a Spark driver in about half)."""
    from localkafka.class_archive import make_class_archive
    from localkafka.jars import KAFKA, SPARK_KAFKA, require_java, resolve_jars
    from mirror.spark_archive import make_driver_archive

    require_java()
    for jar_set in (KAFKA, SPARK_KAFKA):
        click.echo(resolve_jars(jar_set))
    click.echo(make_class_archive(progress=lambda line: click.echo(line, err=True)))
    if (driver := make_driver_archive(progress=lambda line: click.echo(line, err=True))) is not None:
        click.echo(driver)


# -- config -----------------------------------------------------------------------------------------------------------


@cli.group(cls=_Group)
def config() -> None:
    """Validate and show a mirrorwatch config file."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def config_check(file: Path) -> None:
    """Exit 0 when FILE is valid (its client properties included: librdkafka is asked, no cluster is contacted);
    otherwise print each problem as `path: message` and exit 2."""
    from mirror.settings import client_problems
    from mirrorwatch.preflight import serving_config

    cfg = serving_config(file, writes_state=False)  # a config may be checked away from the host it is for
    problems = [problem for link in cfg.links if link.engine == "python" for problem in client_problems(cfg, link)]
    if problems:
        raise ConfigError(problems, str(file))
    click.echo(f"{file}: ok ({len(cfg.clusters)} cluster(s), {len(cfg.links)} link(s))")


@config.command("show")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def config_show(file: Path) -> None:
    """Print the effective config of FILE (defaults filled in) with every secret masked."""
    from kernel.config import load_config, render_config

    click.echo(render_config(load_config(file)), nl=False)


# -- alerts -----------------------------------------------------------------------------------------------------------


@cli.group(cls=_Group)
def alerts() -> None:
    """Prometheus recording and alerting rules for mirrorwatch's metrics."""


@alerts.command("build")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write here [default: stdout].")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a threshold, e.g. --set replication_lag_seconds=300 --set replication_lag_for=10m.",
)
@click.option("--list", "list_thresholds", is_flag=True, help="List the thresholds with defaults and meaning.")
def alerts_build(out: Path | None, overrides: tuple[str, ...], list_thresholds: bool) -> None:
    """The rules file (the one committed as alerts/mirrorwatch.rules.yml uses the defaults).

    Load it in Prometheus with `rule_files: [mirrorwatch.rules.yml]`; check it with `promtool check rules`.
    """
    from alerts.rules import THRESHOLDS, build_rules, parse_overrides, render

    if list_thresholds:
        for name, (default, meaning) in THRESHOLDS.items():
            click.echo(f"{name:<26} {default:>5}  {meaning}")
        return
    try:
        chosen = parse_overrides(list(overrides))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None
    text = render(build_rules(chosen))
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)
        click.echo(f"wrote {out}", err=True)


# -- console ----------------------------------------------------------------------------------------------------------


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), help="mirrorwatch config.")
@click.option("--api", help="HTTP API URL; URLs of a sharded fleet, comma-separated, read as one [default: --config].")
@click.option("--port", type=click.IntRange(0, 65535), default=8501, show_default=True, help="Console port.")
@click.option("--address", default="127.0.0.1", show_default=True, help="Console listen address (0.0.0.0: all).")
@click.option(
    "--prometheus",
    metavar="URL",
    help="A Prometheus that scrapes the monitor: the Overview charts ranges from it (15 min to 7 d) and the Alerts "
    "page shows its firing alerts instead of the monitor's own judgement.",
)
@click.option("--api-user", metavar="USER", help="Basic-auth user of the API; its password: MIRRORWATCH_API_PASSWORD.")
@click.option(
    "--api-ca-file",
    type=click.Path(dir_okay=False, exists=True),
    help="CA certificate (PEM) that signed an https API's certificate.",
)
def console(  # noqa: PLR0917 - click passes one parameter per option
    config_path: Path | None,
    api: str | None,
    port: int,
    address: str,
    prometheus: str | None,
    api_user: str | None,
    api_ca_file: str | None,
) -> None:
    """The Streamlit ops console: links, consumer groups, events, alerts, canary, topics and failover readiness,
    refreshed every 5 s.

    It reads the HTTP API of `mirrorwatch run` or `mirrorwatch monitor` (and, with --prometheus, that Prometheus),
    never Kafka; when one does not answer it says so. MIRRORWATCH_CONSOLE_REFRESH sets the refresh interval in
    seconds. An API behind `http.web_config_file`: --api-user with the password in MIRRORWATCH_API_PASSWORD, and
    --api-ca-file for TLS with a private CA.
    """
    from dashboards.launch import api_url_for, console_command

    if api is None:
        if config_path is None:
            raise click.UsageError("give --config F (to find the HTTP API) or --api URL")
        from kernel.config import load_config
        from kernel.web_config import load_web_config

        http = load_config(config_path).http
        tls = http.web_config_file is not None and load_web_config(http.web_config_file).tls
        api = api_url_for(http.host, http.port, tls=tls)
    click.echo(
        f"console on http://{address}:{port} reading {api}" + (f" and {prometheus}" if prometheus else ""), err=True
    )
    command = console_command(
        api, port=port, address=address, prometheus=prometheus, api_user=api_user, api_ca_file=api_ca_file
    )
    os.execv(command[0], command)  # Streamlit takes over this process: Ctrl-C and SIGTERM stop it


# -- mirror -----------------------------------------------------------------------------------------------------------


@cli.command(context_settings={"max_content_width": 120})
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), help="mirrorwatch YAML config."
)
@click.option("--link", "link_name", help="Run only this link of the config (a spark link always runs alone).")
@click.option("--master", help="Spark master for a link with engine spark [default: the link's spark.master].")
@click.option(
    "--consumer.config",
    "consumer_config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="MirrorMaker 1: source consumer properties (bootstrap.servers and group.id required).",
)
@click.option(
    "--producer.config",
    "producer_config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="MirrorMaker 1: target producer properties (bootstrap.servers required).",
)
@click.option("--whitelist", help="MirrorMaker 1: topics to mirror, a regex; '|' (or ',') separates several topics.")
@click.option("--include", help="MirrorMaker 1: the newer name of --whitelist.")
@click.option(
    "--num.streams",
    "num_streams",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="MirrorMaker 1: worker processes in the consumer group.",
)
@click.option(
    "--offset.commit.interval.ms",
    "offset_commit_interval_ms",
    type=click.IntRange(100, 3_600_000),
    help="MirrorMaker 1: how often acknowledged offsets are committed [default: 5000].",
)
@click.option(
    "--abort.on.send.failure",
    "abort_on_send_failure",
    type=click.Choice(["true", "false"]),
    default="true",
    show_default=True,
    help="MirrorMaker 1: stop the link when the target refuses a record "
    "(false needs --dead.letter.topic: mirrorwatch never drops a record).",
)
@click.option(
    "--message.handler",
    "message_handler",
    help="MirrorMaker 1: 'package.module:factory' (or com.opencore.RenameTopicHandler).",
)
@click.option("--message.handler.args", "message_handler_args", help="MirrorMaker 1: the handler's argument string.")
@click.option("--dead.letter.topic", "dead_letter_topic", help="Topic on the target for records it refuses.")
@click.option("--consumer.rebalance.listener", "rebalance_listener", hidden=True)
@click.option("--rebalance.listener.args", "rebalance_listener_args", hidden=True)
def mirror(  # noqa: PLR0917 - one parameter per MirrorMaker 1 flag
    config_path: Path | None,
    link_name: str | None,
    master: str | None,
    consumer_config: Path | None,
    producer_config: Path | None,
    whitelist: str | None,
    include: str | None,
    num_streams: int,
    offset_commit_interval_ms: int | None,
    abort_on_send_failure: str,
    message_handler: str | None,
    message_handler_args: str | None,
    dead_letter_topic: str | None,
    rebalance_listener: str | None,
    rebalance_listener_args: str | None,
) -> None:
    """Mirror topics from a source cluster to a target cluster.

    \b
    With a config:      mirrorwatch mirror --config mirrorwatch.yaml [--link NAME]
    Spark engine:       mirrorwatch mirror --config mirrorwatch.yaml --link NAME [--master spark://host:7077]
    MirrorMaker 1 style: mirrorwatch mirror --consumer.config consumer.properties \\
                            --producer.config producer.properties --whitelist 'orders.*' [--num.streams 3]

    Records keep key, value, headers, timestamp and partition; offsets are committed to the source group only when
    the target acknowledged everything below them. SIGTERM or Ctrl-C stops cleanly: flush, commit, exit 0.
    """
    from kernel.config import load_config
    from mirror.runner import python_links, run_links
    from mirrorwatch.preflight import writable_state_dir

    mm1_given = any(
        v is not None
        for v in (
            consumer_config,
            producer_config,
            whitelist,
            include,
            message_handler,
            dead_letter_topic,
            offset_commit_interval_ms,
            rebalance_listener,
        )
    )
    if config_path is not None and mm1_given:
        raise click.UsageError("use either --config or the MirrorMaker 1 options, not both")
    if rebalance_listener is not None or rebalance_listener_args is not None:
        raise click.UsageError("--consumer.rebalance.listener: Java rebalance listeners cannot run in mirrorwatch")
    if config_path is not None:
        config = load_config(config_path)
    elif mm1_given:
        from mirror.mm1 import MM1Options, config_from_mm1

        if whitelist and include:
            raise click.UsageError("--whitelist and --include are the same option; give one")
        if consumer_config is None or producer_config is None or not (whitelist or include):
            raise click.UsageError("MirrorMaker 1 style needs --consumer.config, --producer.config and --whitelist")
        config, warnings = config_from_mm1(
            MM1Options(
                consumer_config=consumer_config,
                producer_config=producer_config,
                whitelist=whitelist or include or "",
                num_streams=num_streams,
                offset_commit_interval_ms=offset_commit_interval_ms,
                abort_on_send_failure=abort_on_send_failure == "true",
                message_handler=message_handler,
                message_handler_args=message_handler_args,
                dead_letter_topic=dead_letter_topic,
            )
        )
        for warning in warnings:
            log.warning("%s", warning)
    else:
        raise click.UsageError("give --config FILE, or the MirrorMaker 1 options (see --help)")
    writable_state_dir(config, str(config_path) if config_path is not None else None)
    if link_name is not None and config.link(link_name).engine == "spark":
        from mirror.spark_engine import run_spark_link

        sys.exit(run_spark_link(config, config.link(link_name), _stop_event(), master=master))
    if master is not None:
        raise click.UsageError("--master applies to a link with engine spark (give --link NAME)")
    links = python_links(config, link_name)
    sys.exit(run_links(config, links, _stop_event()))


# -- monitor and run --------------------------------------------------------------------------------------------------


@cli.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
def monitor(config_path: Path) -> None:
    """Evaluate every consumer group and mirror link (Burrow's rules) and serve the HTTP API and /metrics.

    Every monitor.interval_seconds it reads every cluster's high-watermarks and every group's committed offsets.
    The API (http.host:http.port) answers Burrow's /v3/kafka/... requests, /mirror/links, /metrics, /healthz, /readyz.
    """
    from mirrorwatch.preflight import serving_config
    from mirrorwatch.services import run_monitor

    sys.exit(run_monitor(serving_config(config_path, writes_state=False), _stop_event()))


@cli.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
def canary(config_path: Path) -> None:
    """Probe every link end to end: a probe per partition every canary.interval_seconds, read back at the target.

    Probes go to canary.topic on each link's source (created with one partition per broker if missing) and are read
    back from the mirrored topic on the target, and from the source topic for the broker-only round trip. Reports
    end-to-end, produce and round-trip latency, lost, late, duplicated and reordered probes and absent links at
    /canary and /metrics (http.host:http.port). Run the mirror (any mirror tool) separately; `mirrorwatch run`
    includes the canary.
    """
    from mirrorwatch.preflight import serving_config
    from mirrorwatch.services import run_canary

    sys.exit(run_canary(serving_config(config_path), _stop_event()))


@cli.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
def run(config_path: Path) -> None:
    """The mirror links, the monitor, the canary and the HTTP API in one process, side by side.

    The monitor reads the engine's consumed, acknowledged and committed positions in memory, so /mirror/links and
    the mirrorwatch_mirror_* metrics show replication lag, not just committed lag.
    """
    from mirrorwatch.preflight import serving_config
    from mirrorwatch.services import run_everything

    sys.exit(run_everything(serving_config(config_path), _stop_event()))


# -- demo -------------------------------------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the demo's clusters live [default: the local state dir's sibling 'demo'].",
)
@click.option("--duration", type=click.FloatRange(min=1), default=None, help="Stop after this many seconds.")
@click.option("--rate", type=click.FloatRange(min=0.1, max=10_000), default=20, show_default=True,
              help="Sample records per second per cluster.")  # fmt: skip
@click.option(
    "--security",
    type=click.Choice(MODES),
    help="Secure the demo's clusters as `local up --security` does (e.g. oidc: tokens from a local OpenID Connect "
    "provider, refreshed as they expire) [default: plaintext, or what its clusters were made with].",
)
def demo(state_dir: Path | None, duration: float | None, rate: float, security: str | None) -> None:
    """Two local clusters, sample orders mirrored source -> target, the monitor, the canary and the HTTP API.

    Prints progress with the link's replication lag and the canary's end-to-end latency, and where the HTTP API
    answers (/mirror/links/demo, /metrics, Burrow's /v3/kafka, /canary). Ctrl-C stops everything. At the end it
    checks that every order produced to the source arrived on the target.
    """
    from localkafka.local import default_state_dir
    from mirrorwatch.demo import DemoOptions, run_demo

    stop = _stop_event()
    options = DemoOptions(state_dir or default_state_dir().parent / "demo", duration, rate, security=security)
    log = _log_to_file(options.state_dir / "demo.log")
    click.echo(f"logs: {log} (every component's lines; errors show here too); Ctrl-C stops everything")
    sys.exit(run_demo(options, stop, out=click.echo))


def _log_to_file(path: Path) -> Path:
    """The demo's components log to `path` (appended to, at the chosen level); the terminal keeps its progress lines
    and, from the log, only errors (issue #67: INFO lines every 5 s between the progress lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in root.handlers:
        handler.setLevel(max(handler.level, logging.ERROR))
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(to_file)
    return path


# Commands in modules of their own keep this one short.
from mirrorwatch.acls_cli import acls  # noqa: E402
from mirrorwatch.check import check  # noqa: E402
from mirrorwatch.dashboards_cli import dashboards  # noqa: E402
from mirrorwatch.drift_cli import drift  # noqa: E402
from mirrorwatch.failover_cli import failover  # noqa: E402
from mirrorwatch.link_cli import link  # noqa: E402
from mirrorwatch.migrate_cli import migrate  # noqa: E402
from mirrorwatch.reference import reference_command, schema_command  # noqa: E402

for _command in (acls, check, dashboards, drift, failover, link, migrate, reference_command):
    cli.add_command(_command)
config.add_command(schema_command)


def main() -> None:
    # Every Python thread's stack in the log on a crash inside the native Kafka client (a librdkafka bug, not ours to
    # catch, would otherwise end the process without a word), and on SIGUSR1 (where a process that hangs is).
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    cli()


if __name__ == "__main__":
    main()
