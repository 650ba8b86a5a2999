"""Where a link's control document (`kernel.link_control`) is kept: this host's file, which its workers read every
status interval, and the progress topic on the link's target cluster, which the link's workers on every host tail
(`kernel.progress_topic`). `mirrorwatch link pause|resume|budget`, the HTTP API's control routes, `failover promote`
and `failover failback` change it through here: the file first (this host obeys even when the target does not
answer), then the topic, and they say so when the topic did not take it (the other hosts' workers do not know yet).
Reading takes the newer of the two (`link_control.newest`).

The same topic keeps the link's ledger of lost records and the notes of its source topics as its workers on every host
published them (`kernel.gap_ledger`, `kernel.topic_notes`): `published_facts` reads them for `failover plan`,
wherever it runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.link_control import LinkControl, newest, read_control, write_control
from kernel.progress_topic import ProgressReader, publish_control
from kernel.topic_notes import PartitionNote
from kernel.worker_status import Gap

__all__ = ["Published", "load_control", "published_facts", "save_control"]

log = logging.getLogger("mirrorwatch")


def load_control(config: MirrorwatchConfig, link: LinkConfig, timeout_s: float = 5.0) -> LinkControl:
    """The link's control as its workers obey it: the newer of this host's document and the progress topic's. Raises
    ControlUnreadable for a file that is not a control document; a target that does not answer within `timeout_s`
    leaves this host's, with a log line."""
    local = read_control(config.state_path, link.name)
    if not config.progress.enabled:
        return local
    with _read_to_end(config, link, "link", timeout_s, "this host's control document only") as reader:
        return newest(local, reader.control(link.name)) if reader is not None else local


def save_control(
    config: MirrorwatchConfig, link: LinkConfig, control: LinkControl, timeout_s: float = 5.0
) -> str | None:
    """Write the link's control document here, then publish it for the link's workers on other hosts: None when both
    took it, else why the topic did not (raises OSError when the file cannot be written)."""
    write_control(config.state_path, control)
    if not config.progress.enabled:
        return None
    return publish_control(config.clusters[link.target], link.target, config.progress, control, timeout_s)


@dataclass(frozen=True)
class Published:
    """What the link's workers on every host published of the link's ledgers (empty: none, or not read)."""

    gaps: tuple[Gap, ...] = ()
    notes: tuple[PartitionNote, ...] = ()


def published_facts(config: MirrorwatchConfig, link: LinkConfig, timeout_s: float = 10.0) -> Published:
    """The link's gaps and notes on the progress topic of its target, as its workers on every host published them;
    none when progress is disabled or the target did not answer within `timeout_s` (said in a log line)."""
    if not config.progress.enabled:
        return Published()
    with _read_to_end(config, link, "failover", timeout_s, "this host's ledgers only") as reader:
        return Published(reader.lost(link.name), reader.notes(link.name)) if reader is not None else Published()


@contextmanager
def _read_to_end(
    config: MirrorwatchConfig, link: LinkConfig, who: str, timeout_s: float, instead: str
) -> Iterator[ProgressReader | None]:
    """The progress topic of the link's target read to its end (None: not within `timeout_s`, said in a log line
    saying what is used `instead`)."""
    topic = config.progress.topic
    reader = ProgressReader(config.clusters[link.target], link.target, topic, frozenset({link.name}), who=who)
    reader.start()
    try:
        if reader.wait_caught_up(timeout_s):
            yield reader
            return
        log.warning(
            "link %s: progress topic %r on cluster %r not read within %g s: %s",
            link.name,
            topic,
            link.target,
            timeout_s,
            instead,
        )
        yield None
    finally:
        reader.stop()
