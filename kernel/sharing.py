"""What a host's ledger wrote down against what the link's progress topic has (pure): a fact of the link (a gap of
its ledger of lost records, `kernel.gap_ledger`; a note of its source topics, `kernel.topic_notes`) is offered to the
topic until the cluster took it as it is, one handed over is not offered again before the cluster answered, and one
learnt from the topic is never offered back. The ledgers write on a worker's loop, the status thread shares, the
producer answers on whichever thread polls it: one lock."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

__all__ = ["PER_BEAT", "Shares", "Sharing"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T_contra = TypeVar("T_contra", contravariant=True)

# Facts offered per status beat: the progress topic's publisher queues 64 records, and a worker's statuses go through
# the same queue (a burst of notes at an assignment of thousands of partitions must not crowd them out).
PER_BEAT = 16


class Sharing(Generic[K, V]):
    def __init__(self) -> None:
        self._written: dict[K, V] = {}  # as the host's ledger has each
        self._shared: dict[K, V] = {}  # as the topic has each (taken, or learnt from it)
        self._sharing: dict[K, V] = {}  # handed over, the cluster's answer awaited
        self._lock = threading.Lock()

    def written(self, key: K, value: V) -> None:
        with self._lock:
            self._written[key] = value

    def learnt(self, key: K, value: V) -> None:
        """The topic has `value` (read from it): never offered back (the ledger says `written` if it takes it)."""
        with self._lock:
            self._shared[key] = value

    def unshared(self, limit: int | None = PER_BEAT) -> list[V]:
        """Up to `limit` facts (None: all) written down here that the topic does not have as they are, nor is being
        handed."""
        with self._lock:
            waiting = (v for k, v in self._written.items() if self._shared.get(k) != v and self._sharing.get(k) != v)
            return list(itertools.islice(waiting, limit))

    def sharing(self, key: K, value: V) -> None:
        """`value` was handed to the topic: not offered again until the cluster answered."""
        with self._lock:
            self._sharing[key] = value

    def shared(self, key: K, value: V, taken: bool) -> None:
        """The cluster's answer for `value` (not taken: offered again)."""
        with self._lock:
            if self._sharing.get(key) == value:
                del self._sharing[key]
            if taken:
                self._shared[key] = value


class Shares(Protocol[T_contra]):
    """A ledger kept in step with the progress topic (`GapLedger`, `TopicLedger`), as its sharer sees it."""

    def sharing(self, fact: T_contra, /) -> None: ...
    def shared(self, fact: T_contra, taken: bool, /) -> None: ...
