"""Status files: how a process tells the others what it is doing, without a network port of its own.

A mirror worker (one per `num_streams`, possibly in another process than the monitor) and the canary publish their
status as JSON under `<state_dir>/status/<kind>/<name>.<worker>.<pid>.json` about once a second; the monitor reads
them. The pid is in the name so that a worker restarted after a crash does not overwrite what its predecessor last
said: every record that one had acknowledged is on the target, and the new one starts again from the committed
offset, below it. Files not rewritten for `KEEP_STALE_MS` are removed by the next writer of the same name.
Each write is atomic (a temporary file renamed over the old one), so a reader never sees half a document. A clean
stop withdraws the file and leaves a mark of when (`withdrawn`: its last status may still be on a progress topic
whose tombstone a reader has not read yet, and is not that of a worker that died); a killed process leaves its file
behind. The reader decides how old is too old: the canary's
status expires, a mirror worker's is kept as the last word of a dead worker (`kernel.worker_status`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["HOST", "PIDS", "STATUS_MAX_AGE_MS", "StatusBoard", "pids_readable_here", "stopped_cleanly"]

log = logging.getLogger("mirrorwatch")

# A status not rewritten for this long belongs to a process that died without withdrawing it.
STATUS_MAX_AGE_MS = 15_000
# Who writes a status: a reader on the same host can tell a dead writer from a slow one by its pid.
HOST = socket.gethostname()


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""


# ... when its pids are the reader's: containers on one host's network share its hostname, not its process ids (two
# containers' workers are both pid 2 under tini, and neither is a process the other can look up).
PIDS = f"{HOST} {_pid_namespace()}"


def pids_readable_here(host: object, pids: object) -> bool:
    """Whether a writer's pid names a process this reader can look up: the same host and, when the writer says in
    which PID namespace it ran (a writer of an older version does not), the same one."""
    return host == HOST and (not pids or pids == PIDS)


# Status files left by dead writers are removed after this long (by a writer of the same name, at its start).
KEEP_STALE_MS = 3_600_000

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class StatusBoard:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._tidied: set[tuple[str, str, int]] = set()

    def _path(self, kind: str, name: str, worker: int) -> Path:
        return self.directory / kind / f"{_UNSAFE.sub('_', name)}.{worker}.{os.getpid()}.json"

    def _tidy(self, kind: str, name: str, worker: int, now_ms: int) -> None:
        """Remove the files of dead writers of this name and worker that nobody rewrote for KEEP_STALE_MS."""
        self._tidied.add((kind, name, worker))
        prefix = f"{_UNSAFE.sub('_', name)}.{worker}."
        for path in [
            *(self.directory / kind).glob(f"{prefix}*.json"),
            *(self.directory / kind).glob(f"{prefix}*.withdrawn"),
        ]:
            try:
                if now_ms - int(path.stat().st_mtime * 1000) > KEEP_STALE_MS:
                    path.unlink()
            except OSError:
                continue  # gone already, or not ours to remove

    @property
    def pid(self) -> int:
        return os.getpid()

    def publish(self, kind: str, name: str, worker: int, document: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
        """Replace this worker's status; `updated_ms`, `host` and `pid` are added (the document written is
        returned). Failures are logged, never raised: a full disk must not stop a mirror."""
        path = self._path(kind, name, worker)
        body = {
            **document,
            "name": name,
            "worker": worker,
            "updated_ms": now_ms,
            "host": HOST,
            "pid": os.getpid(),
            "pids": PIDS,
        }
        tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(body, separators=(",", ":"), default=str))
            tmp.replace(path)
            if (kind, name, worker) not in self._tidied:
                self._tidy(kind, name, worker, now_ms)
        except OSError as exc:
            log.warning("cannot write status file %s: %s", path, exc)
        return body

    def withdraw(self, kind: str, name: str, worker: int) -> None:
        """A clean stop: the status file is removed, and a marker says when (`withdrawn`): the same status may still
        be on a progress topic whose tombstone a monitor has not read yet, and a reader on this host must not take
        it for a worker that died."""
        path = self._path(kind, name, worker)
        try:
            path.with_suffix(".withdrawn").write_text(json.dumps({"updated_ms": int(time.time() * 1000)}))
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove status file: %s", exc)

    def withdrawn(self, kind: str) -> dict[tuple[str, int, int], int]:
        """When each writer of this kind on this host withdrew its status: (file name, worker, pid) -> the moment
        (see `stopped_cleanly`)."""
        found: dict[tuple[str, int, int], int] = {}
        folder = self.directory / kind
        if not folder.is_dir():
            return found
        for path in folder.glob("*.withdrawn"):
            rest, _, pid = path.stem.rpartition(".")  # <name>.<worker>.<pid>
            name, _, worker = rest.rpartition(".")
            try:
                found[(name, int(worker), int(pid))] = int(json.loads(path.read_text())["updated_ms"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being written, or not ours
        return found

    def read(self, kind: str, now_ms: int, max_age_ms: int = STATUS_MAX_AGE_MS) -> dict[str, list[dict[str, Any]]]:
        """The statuses of every `name` of this kind updated within `max_age_ms`, oldest update first (so a later
        one wins a conflict)."""
        found: dict[str, list[dict[str, Any]]] = {}
        folder = self.directory / kind
        if not folder.is_dir():
            return found
        for path in sorted(folder.glob("*.json")):
            try:
                document = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # removed or replaced while listing
            if not isinstance(document, dict) or not isinstance(document.get("updated_ms"), int):
                continue
            if now_ms - document["updated_ms"] > max_age_ms:
                continue
            found.setdefault(str(document.get("name")), []).append(document)
        for documents in found.values():
            documents.sort(key=lambda d: d["updated_ms"])
        return found


def stopped_cleanly(document: Mapping[str, Any], withdrawn: Mapping[tuple[str, int, int], int]) -> bool:
    """Whether a status (from a progress topic, say) is of a writer on this host that has withdrawn it since: a
    worker that stopped cleanly, whose tombstone the topic's reader has not read yet — not one that died."""
    if not pids_readable_here(document.get("host"), document.get("pids")):
        return False
    try:
        key = (_UNSAFE.sub("_", str(document.get("name"))), int(document["worker"]), int(document["pid"]))
        return int(document["updated_ms"]) <= withdrawn[key]
    except (KeyError, TypeError, ValueError):
        return False
