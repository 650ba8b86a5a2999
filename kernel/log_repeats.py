"""A log filter that keeps repeated lines readable (pure: it reads each record's own time, never the clock).

librdkafka says a failing connection once per broker and attempt: at a target broker's kill, the mirror's log held
150 "Connect to ... failed: Connection refused" lines in 0.03 s, burying the lines that explain the incident. The
filter lets the first `burst` lines alike pass in each `window_s` (alike: the same logger and message once digits are
set aside, so ports, broker ids and "after 0ms" do not make lines different), the last of them saying that more like
it are counted, not logged; the next line of the kind that passes (a window later) says how many were left out.
Nothing is hidden silently: an operator sees the first lines, that others follow, and the count.

`Demoted` moves two librdkafka warnings that are not the user's to act on to a lower level (issue #67): the
`CONFWARN` that `enable.gapless.guarantee` is experimental (mirrorwatch sets it on purpose: one delivery report then
proves a run of records, mirror/engine.py and the mirror guide's "Delivery reports" say why) to DEBUG, and an idempotent
producer's `GETPID ... retrying` (it asks for its producer id before a fresh cluster's coordinator can give one, and
asks again) to INFO: one that never gets it fails its records, which the link says.
"""

from __future__ import annotations

import logging
import re
import threading

__all__ = ["Demoted", "RepeatFilter"]

_DIGITS = re.compile(r"\d+")
_KEEP_KINDS = 1000  # kinds remembered; past this, those whose window is over are forgotten
_DEMOTED = (
    (re.compile(r"^CONFWARN .*enable\.gapless\.guarantee is experimental"), logging.DEBUG),
    (re.compile(r"^GETPID .*retrying", re.IGNORECASE), logging.INFO),
)


class Demoted(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.INFO:
            return True
        message = record.getMessage()
        for pattern, level in _DEMOTED:
            if pattern.search(message):
                record.levelno, record.levelname = level, logging.getLevelName(level)
                return logging.getLogger(record.name).isEnabledFor(level)
        return True


class RepeatFilter(logging.Filter):
    def __init__(self, burst: int = 3, window_s: float = 60.0) -> None:
        super().__init__()
        self.burst, self.window_s = burst, window_s
        self._kinds: dict[tuple[str, str], list[float | int]] = {}  # kind -> [window start, passed, left out]
        self._lock = threading.Lock()  # librdkafka's lines arrive on every thread that polls a client

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        kind = (record.name, _DIGITS.sub("#", message))
        now = record.created
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is None:
                if len(self._kinds) >= _KEEP_KINDS:
                    self._forget_before(now - self.window_s)
                seen = self._kinds[kind] = [now, 0, 0]
            if now - seen[0] >= self.window_s:
                seen[0], seen[1] = now, 0
            if seen[1] >= self.burst:
                seen[2] += 1
                return False
            seen[1] += 1
            last, left_out, seen[2] = seen[1] == self.burst, int(seen[2]), 0
        notes = [f"{left_out} more like it left out"] if left_out else []
        if last:
            notes.append(f"more like it in the next {self.window_s:g} s are counted, not logged")
        if notes:
            record.msg, record.args = f"{message} ({'; '.join(notes)})", ()
        return True

    def _forget_before(self, moment: float) -> None:
        for kind in [k for k, (start, _passed, left_out) in self._kinds.items() if start < moment and not left_out]:
            del self._kinds[kind]
