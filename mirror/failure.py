"""How a link worker's parts report that the link must stop: as a value, not an exception thrown through librdkafka's
callbacks. The first reason wins; the worker's loop sees it and stops, and `run()` raises MirrorFailure with it."""

from __future__ import annotations

import logging

from kernel.errors import MirrorwatchError

__all__ = ["LinkFailure", "MirrorFailure"]

log = logging.getLogger("mirrorwatch.mirror")


class MirrorFailure(MirrorwatchError):
    """The link stopped because continuing could lose or corrupt data; the message says why and what to do."""


class LinkFailure:
    """The reason a link worker must stop, once known (shared by the worker and its delivery side)."""

    __slots__ = ("message", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.message: str | None = None

    def __call__(self, message: str) -> None:
        """Fail the link with this reason (logged once; a later reason is a consequence and is not kept)."""
        if self.message is None:
            self.message = f"link {self.name}: {message}"
            log.error("%s", self.message)
