"""`mirrorwatch link pause|resume|budget|status`: an operator's hold on a link (or some of its topics) and its
bandwidth budget, obeyed by its running workers within a second, without a restart, and kept across restarts.

Part of the composition root (the CLI); the document is `kernel.link_control`'s, the workers' side `mirror.hold`. The
control document is written to the config's state_dir, which every worker of the link on this host reads, and
published on the progress topic of the link's target, which its workers on every host read (`kernel.control_store`);
the workers' statuses are read both ways too, so that --wait and `status` see the link's workers wherever they run.
Exit 0 when done (and, with --wait, obeyed), 1 when a running
worker did not obey within --wait, 2 for a bad config, an unknown link or topic, or a spark link.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.link_control import LinkControl
from kernel.worker_status import WorkerStatus

__all__ = ["checked_link", "link"]

CONFIG = click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
LINK = click.option("--link", "link_name", required=True, help="The link, by its name in the config.")
TOPICS = click.option(
    "--topic",
    "topics",
    multiple=True,
    help="A source topic of the link (repeat for more); without it, the whole link.",
)
WAIT = click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the link's running workers, on every host, to obey (0: do not wait).",
)


@click.group("link", context_settings={"max_content_width": 120})
def link() -> None:
    """Pause, resume, budget and read the state of a link. A paused partition consumes nothing and keeps its group
    and its position: what was read before the pause is still written and committed, and it resumes where it
    stopped. The monitor says "paused" for it (its lag grows, and the alert rules do not page for it;
    MirrorwatchMirrorPaused says a pause that lasts). A bandwidth budget (`budget`) bounds the bytes a link gives its
    target per second. The state is kept in the config's state_dir and survives restarts of the mirror.
    """


@link.command("pause")
@CONFIG
@LINK
@TOPICS
@click.option("--reason", default="", help="Why, in your words (in the status, the monitor's view and the log).")
@WAIT
def pause(config_path: Path, link_name: str, topics: tuple[str, ...], reason: str, wait_s: float) -> None:
    """Pause the link (or the given topics of it)."""
    from kernel.control_store import load_control

    config, spec = _link_of(config_path, link_name, topics)
    current = load_control(config, spec)
    control = _changed(current, lambda: current.pause(topics, _now_ms(), reason, who()))
    sys.exit(_write_and_await(config, spec, control, topics, done="paused", wait_s=wait_s))


@link.command("resume")
@CONFIG
@LINK
@TOPICS
@WAIT
def resume(config_path: Path, link_name: str, topics: tuple[str, ...], wait_s: float) -> None:
    """Resume the link (every pause lifted), or the given topics of it."""
    from kernel.control_store import load_control

    config, spec = _link_of(config_path, link_name, topics)
    current = load_control(config, spec)
    control = _changed(current, lambda: current.resume(topics, _now_ms(), who()))
    sys.exit(_write_and_await(config, spec, control, topics, done="resumed", wait_s=wait_s))


@link.command("budget")
@CONFIG
@LINK
@click.option(
    "--max-bytes-per-second",
    "rate",
    required=True,
    metavar="RATE|none|config",
    help="The link's budget from now on: bytes/s of keys and values (1048576, 1MB, 800KiB/s), each worker taking "
    "its share of the link's partitions; 'none' for no budget; 'config' for the config's max_bytes_per_second again.",
)
@WAIT
def budget(config_path: Path, link_name: str, rate: str, wait_s: float) -> None:
    """Change the link's bandwidth budget at run time (what the config's max_bytes_per_second says until then). The
    running workers obey at their next turn: the metric mirrorwatch_mirror_budget_bytes_per_second and
    /mirror/links/{link} say the budget in force, mirrorwatch_mirror_budget_throttled_seconds_total how long it held
    the link back."""
    from kernel.byte_rate import format_byte_rate
    from kernel.control_store import load_control

    config, spec = _link_of(config_path, link_name, ())
    asked = budget_asked(rate)
    current = load_control(config, spec)
    control = _changed(current, lambda: current.budget(asked, _now_ms(), who()))
    _save(config, spec, control)
    in_force = control.budget_of(spec.max_bytes_per_second)
    source = "the config's" if asked is None else "set"
    click.echo(f"link {spec.name}: bandwidth budget {format_byte_rate(in_force)} ({source})")
    sys.exit(_await_budget(config, spec, in_force or 0, wait_s))


def _await_budget(config: MirrorwatchConfig, spec: LinkConfig, in_force: int, wait_s: float) -> int:
    """Wait until every running worker of the link obeys the link's budget `in_force` (0: none), as its
    status says: 0 when they do (or none runs), 1 when one did not in time."""
    deadline = time.monotonic() + wait_s
    with _workers_of(config, spec) as live:
        while True:
            workers = live()
            late = [s for s in workers if s.stats.get("budget_link_bytes_per_second", 0) != in_force]
            if not workers or not late or wait_s == 0:
                click.echo(f"obeyed by {len(workers)} running worker(s) of link {spec.name}")
                return 0
            if time.monotonic() >= deadline:
                late_ones = f"{len(late)} of {len(workers)} running worker(s)"
                click.echo(f"{late_ones} did not obey within {wait_s:g} s", err=True)
                return 1
            time.sleep(0.2)


def budget_asked(rate: str) -> int | None:
    """The control's value for --max-bytes-per-second: 0 for none, None for the config's; ConfigError (exit 2)."""
    from kernel.byte_rate import parse_byte_rate
    from kernel.errors import ConfigError, ConfigProblem

    if rate.strip().lower() in ("none", "unlimited"):
        return 0
    if rate.strip().lower() == "config":
        return None
    try:
        return parse_byte_rate(rate)
    except ValueError as exc:
        raise ConfigError([ConfigProblem("--max-bytes-per-second", str(exc))]) from exc


@link.command("status")
@CONFIG
@click.option("--link", "link_name", default=None, help="One link (default: every link of the config).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: per link, its control and its workers.")
def status(config_path: Path, link_name: str | None, as_json: bool) -> None:
    """Each link's state as asked (active, paused, partly paused: which topics, since when, by whom, why) and as its
    running workers report it, on every host (partitions owned, paused, failed with the reason), and the bandwidth
    budget in force."""
    from kernel.byte_rate import format_byte_rate
    from kernel.control_store import load_control

    config = _config(config_path)
    specs = [_link_of(config_path, link_name, ())[1]] if link_name else list(config.links)
    out: list[dict[str, Any]] = []
    for spec in specs:
        control = load_control(config, spec)
        with _workers_of(config, spec) as live:
            found = live()
        workers = [
            {
                "worker": s.worker,
                "host": s.host,
                "pid": s.pid,
                "state": s.state,
                "partitions": len(s.partitions),
                "paused": [f"{p.topic}[{p.partition}]" for p in s.partitions if p.paused],
                "failed": {f"{p.topic}[{p.partition}]": p.failed for p in s.partitions if p.failed},
            }
            for s in found
        ]
        in_force = format_byte_rate(control.budget_of(spec.max_bytes_per_second))
        out.append({**control.as_json(), "engine": spec.engine, "budget": in_force, "workers": workers})
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    for entry in out:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(entry["since_ms"] / 1000)) if entry["since_ms"] else ""
        said = (f" (topics {', '.join(entry['paused_topics'])})" if entry["paused_topics"] else "") + (
            f" since {since} UTC by {entry['by']}" if entry["state"] != "active" and since else ""
        )
        why = f": {entry['reason']}" if entry["reason"] else ""
        click.echo(f"link {entry['link']}: {entry['state']}{said}{why}; bandwidth budget {entry['budget']}")
        if not entry["workers"]:
            click.echo("  no worker of it runs")
        for w in entry["workers"]:
            failed = "".join(f"\n    failed {where}: {why}" for where, why in sorted(w["failed"].items()))
            click.echo(
                f"  worker {w['worker']} (pid {w['pid']} on {w['host']}): {w['state']}, {w['partitions']} "
                f"partition(s), {len(w['paused'])} paused{failed}"
            )


def _changed(current: LinkControl, change: Callable[[], LinkControl]) -> LinkControl:
    """The control changed as asked, or a ConfigError (exit 2, nothing written) saying why it cannot be: a topic
    resumed alone while the whole link is paused, or anything of a promoted link."""
    from kernel.errors import ConfigError, ConfigProblem

    try:
        return change()
    except ValueError as exc:
        raise ConfigError([ConfigProblem("--link" if current.promoted else "--topic", str(exc))]) from exc


def _config(config_path: Path) -> MirrorwatchConfig:
    from kernel.config import load_config

    return load_config(config_path)


def _link_of(config_path: Path, name: str, topics: tuple[str, ...]) -> tuple[MirrorwatchConfig, LinkConfig]:
    config = _config(config_path)
    return config, checked_link(config, name, topics)


def checked_link(config: MirrorwatchConfig, name: str, topics: tuple[str, ...]) -> LinkConfig:
    """The config's link `name`, whose state (or these topics') an operator may change; ConfigError (exit 2) for an
    unknown link (path `--link`), a spark link, or a topic the link does not mirror (path `--topic`)."""
    from kernel.errors import ConfigError, ConfigProblem
    from mirror.topics import select_topics

    found = [(i, spec) for i, spec in enumerate(config.links) if spec.name == name]
    if not found:
        names = ", ".join(spec.name for spec in config.links) or "none"
        raise ConfigError([ConfigProblem("--link", f"no link named {name!r} (links: {names})")])
    index, spec = found[0]
    if spec.engine == "spark":
        raise ConfigError(
            [
                ConfigProblem(
                    f"links[{index}].engine",
                    "spark: a running Structured Streaming query cannot pause its partitions; stop the query (SIGTERM "
                    "to `mirrorwatch mirror`) and start it again: it resumes from its checkpoint",
                )
            ]
        )
    always = (config.canary.topic,)
    unknown = [t for t in topics if not select_topics([t], spec.topics, exclude_internal=False, always=always)]
    if unknown:
        raise ConfigError(
            [ConfigProblem("--topic", f"{t!r} is not a topic link {name} mirrors (see its topics:)") for t in unknown]
        )
    return spec


@contextlib.contextmanager
def _workers_of(config: MirrorwatchConfig, spec: LinkConfig) -> Iterator[Callable[[], list[WorkerStatus]]]:
    """The link's live workers, wherever they run: this host's status files and the target's progress topic (read
    to its end first, at most 5 s), for the block."""
    from kernel.progress_format import merge_statuses
    from kernel.progress_topic import ProgressReader
    from kernel.status_board import STATUS_MAX_AGE_MS, StatusBoard, stopped_cleanly

    board = StatusBoard(config.state_path / "status")
    reader = None
    if config.progress.enabled:
        names = frozenset({spec.name})
        reader = ProgressReader(config.clusters[spec.target], spec.target, config.progress.topic, names, who="link")
        reader.start()
        reader.wait_caught_up(5.0)

    def live() -> list[WorkerStatus]:
        now = _now_ms()
        published = reader.read("links", now, STATUS_MAX_AGE_MS) if reader is not None else {}
        documents = merge_statuses(board.read("links", now), published).get(spec.name, [])
        withdrawn = board.withdrawn("links")  # stopped cleanly here, their tombstones perhaps not read yet
        found = [
            s for d in documents if not stopped_cleanly(d, withdrawn) and (s := WorkerStatus.from_json(d)) is not None
        ]
        # another config's link of the same name on the same target is not this one (its group says so)
        mine = [s for s in found if s.consumer_group in ("", spec.consumer_group)]
        return [s for s in mine if not s.is_stale(now) and s.state != "failed"]

    try:
        yield live
    finally:
        if reader is not None:
            reader.stop()


def _write_and_await(
    config: MirrorwatchConfig,
    spec: LinkConfig,
    control: LinkControl,
    topics: tuple[str, ...],
    *,
    done: str,
    wait_s: float,
) -> int:
    """Write the link's new control document, say what changed, and wait for its running workers to obey."""
    _save(config, spec, control)
    what = f"topics {', '.join(topics)} of link {spec.name}" if topics else f"link {spec.name}"
    click.echo(f"{what}: {done} (link state: {control.state})")
    return _await_workers(config, spec, control.holds, wait_s)


def _await_workers(config: MirrorwatchConfig, spec: LinkConfig, holds: Callable[[str], bool], wait_s: float) -> int:
    """Wait until every running worker of the link, on any host, reports each partition it owns paused exactly when
    the control holds its topic: 0 when they do (or none runs: the link starts so), 1 when one did not in time."""
    deadline = time.monotonic() + wait_s
    with _workers_of(config, spec) as live:
        return _await(spec, live, holds, wait_s, deadline)


def _await(
    spec: LinkConfig,
    live: Callable[[], list[WorkerStatus]],
    holds: Callable[[str], bool],
    wait_s: float,
    deadline: float,
) -> int:
    while True:
        workers = live()
        late = [
            s for s in workers if any(bool(p.paused) != bool(holds(p.topic)) and not p.failed for p in s.partitions)
        ]
        if not workers:
            click.echo(f"no worker of link {spec.name} runs: it starts so")
            return 0
        if not late:
            click.echo(f"obeyed by {len(workers)} running worker(s) of link {spec.name}")
            return 0
        if wait_s == 0:
            return 0
        if time.monotonic() >= deadline:
            click.echo(
                f"{len(late)} of {len(workers)} running worker(s) did not obey within {wait_s:g} s "
                f"({', '.join(f'worker {s.worker} on {s.host}' for s in late)}): see their logs",
                err=True,
            )
            return 1
        time.sleep(0.2)


def _save(config: MirrorwatchConfig, spec: LinkConfig, control: LinkControl) -> None:
    """This host's document and the target's progress topic; a topic that did not take it is said (the workers on
    this host obey all the same, those on other hosts do not know yet)."""
    from kernel.control_store import save_control

    missed = save_control(config, spec, control)
    if missed is not None:
        click.echo(
            f"link {spec.name}: changed on this host only: {missed}; the link's workers on other hosts do not know "
            "yet: run the command again when the target answers",
            err=True,
        )


def _now_ms() -> int:
    return int(time.time() * 1000)


def who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"
