"""What `/readyz` answers. Ready means complete (issue #67): a round holding every cluster's answer (an up snapshot,
not an error) has been published and, in the monitor's loop, rendered for `/metrics`, so no scrape after the first
200 misses a group a later one holds. A cluster that answers in the background joins the next round, whose rendering
takes seconds at 10,000 groups: until it is done a scrape gets the last complete rendering, without that cluster's
groups. A cluster that has not answered for `READY_WAIT_S` no longer holds readiness back (it reads down, with its
reason)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from monitor.collector import ClusterSnapshot
from monitor.state import MonitorState

__all__ = ["READY_WAIT_S", "why_not_ready"]

# A fleet's first collection, reading the history of __consumer_offsets, can take longer than the first round's wait:
# until then a scrape would hold almost no group (issue #45); after this long readiness waits no more.
READY_WAIT_S = 300.0


def why_not_ready(
    state: MonitorState | None,
    clusters: Iterable[str],
    answered: Collection[str] | None,
    latest: Mapping[str, ClusterSnapshot],
    running: Collection[str],
    *,
    rendered: bool,
    waited_out: bool,
) -> str | None:
    """Why not ready yet (None: ready). `answered`: the clusters some published round held up (None: no loop, the
    current state's say); `latest`/`running`: each cluster's last snapshot and the collections under way; `rendered`:
    a round of the loop has been rendered; `waited_out`: READY_WAIT_S has passed since the start."""
    if state is None:
        return "no collection yet"
    if not rendered:
        return "rendering /metrics for the first time"
    if waited_out:
        return None
    up = answered if answered is not None else {alias for alias, s in state.clusters.items() if s.up}
    missing = [alias for alias in clusters if alias not in up]
    if not missing:
        return None
    alias, snapshot = missing[0], latest.get(missing[0])
    if alias in running or snapshot is None:
        return f"the first collection of cluster {alias!r} is under way"
    if snapshot.up:
        return f"cluster {alias!r} answered: the round that holds its answer is not published yet"
    return f"cluster {alias!r} has not answered a collection yet: {snapshot.error}"
