"""Whose notes a link's local state holds (issue #67): `<state_dir>/clusters/<link>.json` names the source and target
cluster ids the link's notes were taken on. The notes — the topic ledger (`topics/`), the topics it created
(`created/`), the ACLs it made (`acls/`), the records it lost (`lost/`), a spark link's checkpoint and scratch — are
evidence about those clusters only: a link name used before against another pair (a re-created local pair, a rebuilt
DR cluster) must not refuse to start because a topic id of the old pair is not found on the new one. Every engine
claims the notes once it knows both ids (`mirror.admin.link_cluster_ids`): notes of other clusters are moved, not
deleted, into `<state_dir>/set-aside/<link>.<time>/` with a `clusters.json` saying whose they were, and that is said
once in the log. Notes from before the record existed are taken to be of the clusters the link first meets.
An operator's pause (`control/`) is about the link, not the clusters: it stays."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["claim_notes", "link_stores"]

log = logging.getLogger("mirrorwatch.mirror")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def link_stores(state_dir: Path, link: str, checkpoint: Path | None = None) -> list[Path]:
    """Every place the link keeps notes of the clusters it mirrors (each store names its file by the link's name,
    some with unsafe characters replaced), a spark link's checkpoint among them."""
    safe = _UNSAFE.sub("_", link)
    places = [
        state_dir / "topics" / f"{safe}.jsonl",
        state_dir / "lost" / f"{safe}.jsonl",
        state_dir / "created" / f"{link}.json",
        state_dir / "acls" / f"{link}.json",
        state_dir / "checkpoints" / link,
        state_dir / "spark" / link,
    ]
    if checkpoint is not None and checkpoint not in places:
        places.append(checkpoint)
    return list(dict.fromkeys(places))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One claim at a time per link on this host (a link's workers start side by side)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def claim_notes(
    state_dir: Path, link: str, source_id: str, target_id: str, *, checkpoint: Path | None = None
) -> Path | None:
    """Make the link's notes the notes of these clusters: where they were taken on others, set them aside (returns
    where); record the ids. None: nothing was set aside."""
    record = state_dir / "clusters" / f"{_UNSAFE.sub('_', link)}.json"
    ids = {"source": source_id, "target": target_id}
    with _locked(record.with_suffix(".lock")):
        try:
            before = json.loads(record.read_text(encoding="utf-8"))
        except FileNotFoundError:
            before = None
        except (OSError, ValueError) as exc:  # unreadable: the notes cannot be told whose they are
            before = {"unreadable": f"{record}: {exc}"}
        aside = None
        if before is not None and before != ids:
            present = [p for p in link_stores(state_dir, link, checkpoint) if p.exists()]
            if present:
                aside = state_dir / "set-aside" / f"{_UNSAFE.sub('_', link)}.{time.strftime('%Y%m%dT%H%M%S')}"
                aside.mkdir(parents=True, exist_ok=True)
                for place in present:
                    shutil.move(str(place), str(aside / f"{place.parent.name}-{place.name}"))
                (aside / "clusters.json").write_text(json.dumps({"were": before, "now": ids}, indent=2) + "\n")
                log.warning(
                    "link %s: its notes in %s were taken on other clusters (%s; now source %s, target %s): they "
                    "say nothing about these, set aside in %s (%s)",
                    link,
                    state_dir,
                    ", ".join(f"{k} {v}" for k, v in before.items()),
                    source_id,
                    target_id,
                    aside,
                    ", ".join(str(p) for p in present),
                )
        if before != ids:
            record.write_text(json.dumps(ids) + "\n", encoding="utf-8")
        return aside
