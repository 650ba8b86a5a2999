"""Status files: how a process tells the others what it is doing, without a network port of its own.

A mirror worker (one per `num_streams`, possibly in another process than the monitor) and the canary publish their
status as JSON under `<state_dir>/status/<kind>/<name>.<worker>.json` about once a second; the monitor reads them.
Each write is atomic (a temporary file renamed over the old one), so a reader never sees half a document. A clean
stop withdraws the file; a killed process leaves one behind. The reader decides how old is too old: the canary's
status expires, a mirror worker's is kept as the last word of a dead worker (`mirrorwatch.worker_status`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["HOST", "STATUS_MAX_AGE_MS", "StatusBoard"]

log = logging.getLogger("mirrorwatch")

# A status not rewritten for this long belongs to a process that died without withdrawing it.
STATUS_MAX_AGE_MS = 15_000
# Who writes a status: a reader on the same host can tell a dead writer from a slow one by its pid.
HOST = socket.gethostname()

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class StatusBoard:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, kind: str, name: str, worker: int) -> Path:
        return self.directory / kind / f"{_UNSAFE.sub('_', name)}.{worker}.json"

    def publish(self, kind: str, name: str, worker: int, document: Mapping[str, Any], now_ms: int) -> None:
        """Replace this worker's status; `updated_ms`, `host` and `pid` are added. Failures are logged, never
        raised: a full disk must not stop a mirror."""
        path = self._path(kind, name, worker)
        body = {**document, "name": name, "worker": worker, "updated_ms": now_ms, "host": HOST, "pid": os.getpid()}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(body, separators=(",", ":"), default=str))
            tmp.replace(path)
        except OSError as exc:
            log.warning("cannot write status file %s: %s", path, exc)

    def withdraw(self, kind: str, name: str, worker: int) -> None:
        try:
            self._path(kind, name, worker).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove status file: %s", exc)

    def read(self, kind: str, now_ms: int, max_age_ms: int = STATUS_MAX_AGE_MS) -> dict[str, list[dict[str, Any]]]:
        """The fresh statuses of every `name` of this kind, oldest update first (so a later one wins a conflict)."""
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
