"""The link's ledger of records it will never copy (`<state_dir>/lost/<link>.jsonl`, one JSON line per gap): a gap a
worker found stays said after the worker is gone or restarted, by every worker of the link (each reads the ledger at
start and carries it in its status; the monitor counts each gap once).

The file is one host's. Every gap written down is also offered to the link's progress topic on its target cluster
(`unshared`, `shared`: the worker hands them over, `kernel.progress_topic`), and a worker starting on any host
learns the gaps the link's workers found elsewhere from there (`learn`): a gap is not forgotten when the link's
partitions move to another host, and `failover plan` sees it wherever it runs."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from kernel.sharing import PER_BEAT, Sharing
from kernel.worker_status import Gap

__all__ = ["MAX_GAPS", "GapLedger", "newer"]

log = logging.getLogger("mirrorwatch.mirror")
MAX_GAPS = 1_000  # the newest carried in a status (each is one partition's incident: more means a link in trouble)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class GapLedger:
    def __init__(self, directory: Path, link: str) -> None:
        self.path = directory / f"{_UNSAFE.sub('_', link)}.jsonl"
        self._gaps: dict[tuple[str, int, int, int], Gap] = {}
        self._written: dict[tuple[str, int, int, int], Gap] = {}  # as the file says each
        self._sharing: Sharing[tuple[str, int, int, int], Gap] = Sharing()  # and the progress topic
        self._lock = threading.RLock()  # a worker's loop records, its status thread learns
        self._read()

    def _read(self) -> None:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("cannot read the ledger of lost records %s: %s", self.path, exc)
            return
        for line in lines:
            try:
                gap = Gap(**json.loads(line))
            except (ValueError, TypeError):
                continue  # a line cut short by a crash: the gap is found again if it still matters
            self._gaps[gap.key] = self._written[gap.key] = gap  # a later line of the same gap says what happened last
            self._sharing.written(gap.key, gap)

    def record(self, gap: Gap, *, durable: bool = True) -> bool:
        """Write `gap` down; False when it was already known as it is (found again after a restart or a rebalance).
        A gap stopped at and now skipped (the operator changed `on_gap`) is written again, and a growing one (see
        Gap) as it grows: the newest line wins. `durable=False`: kept for the status only, not written to the file
        yet (a growing gap between its writes: a crash loses the growth since, found again by the next owner)."""
        with self._lock:
            return self._record(gap, durable=durable)

    def _record(self, gap: Gap, *, durable: bool) -> bool:
        known = self._gaps.get(gap.key)
        changed = known is None or known.action != gap.action or gap.end_offset > known.end_offset
        if changed:
            self._gaps[gap.key] = gap
        newest, written = self._gaps[gap.key], self._written.get(gap.key)
        if not durable or newest == written:
            return changed
        self._written[gap.key] = newest
        self._sharing.written(gap.key, newest)
        self._append(newest)
        return changed

    def learn(self, gaps: Iterable[Gap]) -> list[Gap]:
        """Gaps the link's workers found on other hosts (the progress topic): those this ledger did not know as they
        are are written down here, and returned. Never offered back: the topic has them."""
        learnt = []
        with self._lock:
            for gap in gaps:
                self._sharing.learnt(gap.key, gap)
                known = self._gaps.get(gap.key)
                if known is not None and (known == gap or newer(known, gap) is known):
                    continue
                self._gaps[gap.key] = self._written[gap.key] = gap
                self._sharing.written(gap.key, gap)
                self._append(gap)
                learnt.append(gap)
        return learnt

    def unshared(self, limit: int | None = PER_BEAT) -> list[Gap]:
        """Gaps written down here that the progress topic does not have as they are, nor is being handed."""
        return self._sharing.unshared(limit)

    def sharing(self, gap: Gap) -> None:
        self._sharing.sharing(gap.key, gap)

    def shared(self, gap: Gap, taken: bool) -> None:
        self._sharing.shared(gap.key, gap, taken)

    def _append(self, gap: Gap) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a+b") as out:  # one short line per write: appends do not interleave
                torn = False  # the last line was cut short by a crash: this one starts on a line of its own
                if out.tell() > 0:
                    out.seek(-1, 2)
                    torn = out.read(1) != b"\n"
                out.write((b"\n" if torn else b"") + json.dumps(asdict(gap), separators=(",", ":")).encode() + b"\n")
        except OSError as exc:
            log.warning("cannot write the ledger of lost records %s: %s (the status still says it)", self.path, exc)

    def gaps(self) -> tuple[Gap, ...]:
        """The gaps, oldest first (by when each was last written down)."""
        with self._lock:
            return tuple(sorted(self._gaps.values(), key=lambda g: g.at_ms)[-MAX_GAPS:])


def newer(known: Gap | None, other: Gap) -> Gap:
    """Of two sightings of the same gap, the one that says more: the one grown further, else the later written (a
    gap stopped at and then skipped is written again)."""
    if known is None:
        return other
    if other.end_offset != known.end_offset:
        return other if other.end_offset > known.end_offset else known
    return other if other.at_ms >= known.at_ms else known
