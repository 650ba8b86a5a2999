"""The HTTP server's guard against clients that connect and never finish (issue #22, case 4): a cap on open
connections that closes the one waiting longest without a request, and a deadline for the first request head. One
uvicorn protocol class (`GuardedH11`, handed to uvicorn by `monitor.http.HttpServer`) and its book of connections."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import cast

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["FIRST_REQUEST_TIMEOUT_S", "MAX_CONNECTIONS", "ConnectionBook", "GuardedH11"]

log = logging.getLogger("mirrorwatch.http")

MAX_CONNECTIONS = 256  # open at once; more are closed as they come (far below the process's file descriptors)
FIRST_REQUEST_TIMEOUT_S = 10.0  # a connection that has not sent a whole request head by then is closed
REFUSALS_LOGGED_EVERY_S = 60.0


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with what it lacks against clients that connect and never finish: a connection over
    MAX_CONNECTIONS is closed at once (said in the log once a minute, not per connection), and one that has not sent
    a whole request head within FIRST_REQUEST_TIMEOUT_S is closed (a request head is at most h11's 16 KiB; idle
    keep-alive connections are closed by uvicorn after 5 s). Whatever the API's clients do, the process keeps its
    file descriptors for Kafka and its status files, and /healthz answers.

    The cap costs the same for every connection however many are open: the connections that have sent no request
    yet are kept in the order they came (`ConnectionBook`), and the oldest of them is closed, found at the front.
    (Looking for it among every open connection made a flood quadratic: 3,000 idle connections cost 4.5 M
    comparisons, and /healthz answered 4.5 s after them; issue #40.)"""

    closed = 0
    last_said = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._first_request = self.loop.call_later(FIRST_REQUEST_TIMEOUT_S, self._no_request_in_time)
        book = self._book()
        book.waiting[self] = None
        if len(self.connections) - len(book.closing) > MAX_CONNECTIONS:
            # Room for the newcomer at the expense of the longest-waiting connection that has sent no request yet
            # (a client that connects to ask gets its answer while idle ones churn); the newcomer itself only when
            # every other connection is busy with a request.
            self._close(book.oldest_waiting(self))
            GuardedH11.closed += 1
            now = time.monotonic()
            if now - GuardedH11.last_said >= REFUSALS_LOGGED_EVERY_S:
                log.warning(
                    "HTTP: %d connections open, the cap: closing those that sent no request, oldest first "
                    "(%d so far; said once a minute)",
                    MAX_CONNECTIONS,
                    GuardedH11.closed,
                )
                GuardedH11.last_said = now

    def _book(self) -> ConnectionBook:
        """The server's book of its connections (one per server: uvicorn's state object carries it)."""
        book = getattr(self.server_state, "mirrorwatch_book", None)
        if book is None:
            book = ConnectionBook()
            self.server_state.mirrorwatch_book = book  # type: ignore[attr-defined]
        return cast(ConnectionBook, book)

    def _close(self, connection: GuardedH11) -> None:
        book = self._book()
        book.waiting.pop(connection, None)
        book.closing.add(connection)
        connection.transport.close()

    def _no_request_in_time(self) -> None:
        if self.cycle is None and not self.transport.is_closing():
            self._close(self)

    def connection_lost(self, exc: Exception | None) -> None:
        timer = getattr(self, "_first_request", None)
        if timer is not None:
            timer.cancel()
        book = self._book()
        book.waiting.pop(self, None)
        book.closing.discard(self)
        super().connection_lost(exc)


class ConnectionBook:
    """A server's connections that have sent no request yet, in the order they came (`waiting`), and those it is
    closing (still in uvicorn's set of connections until their transport is gone)."""

    def __init__(self) -> None:
        self.waiting: OrderedDict[GuardedH11, None] = OrderedDict()
        self.closing: set[GuardedH11] = set()

    def oldest_waiting(self, newcomer: GuardedH11) -> GuardedH11:
        """The connection waiting longest without a request, other than the newcomer (the newcomer when there is
        none). Connections met at the front that have sent a request since leave the book for good: each leaves
        once, so finding the oldest costs the same however many are open."""
        while self.waiting:
            oldest = next(iter(self.waiting))
            if oldest is newcomer:  # the newcomer came last: nothing older waits
                return newcomer
            if oldest.cycle is None:
                return oldest
            del self.waiting[oldest]
        return newcomer
