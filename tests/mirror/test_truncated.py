"""A source log truncated below what the link had copied (issue #43), on a real broker: what an unclean leader
election or a restore from a backup does. Made here by hand, documented so that it can be repeated: the source broker
is killed (no clean shutdown), the partition's segment file is cut at a record batch boundary (offset 60 of 100) and
its index, time index and producer snapshots removed, and the broker started again: it recovers the segment and the
partition ends at 60. 20 new records then take offsets 60..79, after the link is started again.

Started again on the cut log, the link's commit (100) is past the log's end (60): the link stops that partition,
failed, with a gap of exactly the 40 records the target holds that the source no longer has (offsets 60..99), and
writes none of the new records under offsets failover would confuse with the old ones. The other partition goes on.
The truth is what the test produced and cut, and a consumer reading the target.

What this cannot show: had new records passed the old position before the link read again, the high-watermark would
hide part of the cut. The link commits with the leader epoch of what it read, and librdkafka checks a position
against it (KIP-320) when the partition's leader epoch changes, as a real unclean leader election makes it, giving
where that epoch's log ends (`mirror.gaps.truncated_at`); a single broker restarted keeps its epoch, so that path is
checked by its message only (tests/mirror/test_gaps.py)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.config import MirrorwatchConfig
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from tests.kafka_helpers import Record, by_partition, end_offsets, produce, read_all, wait_for_commits
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

BATCH, BATCHES, CUT = 10, 10, 60


def cut_log(partition_dir: Path, at_offset: int) -> None:
    """Cut the partition's (only) segment at the record batch that starts at `at_offset`; remove what the broker
    rebuilds on recovery (indexes, producer snapshots). The broker must be down."""
    segment = partition_dir / "00000000000000000000.log"
    data = segment.read_bytes()
    position = 0
    while position < len(data):
        base_offset, length = struct.unpack(">qi", data[position : position + 12])  # a record batch's header
        if base_offset >= at_offset:
            assert base_offset == at_offset, f"no record batch starts at {at_offset}"
            break
        position += 12 + length
    with segment.open("r+b") as out:
        out.truncate(position)
    for rebuilt in [
        *partition_dir.glob("*.index"),
        *partition_dir.glob("*.timeindex"),
        *partition_dir.glob("*.snapshot"),
    ]:
        rebuilt.unlink()


def test_a_source_log_cut_below_the_links_commit_stops_the_partition_with_the_exact_records(
    clusters_config: MirrorwatchConfig,
    local_clusters: LocalClusters,
    owns_clusters: bool,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group, name = make_topic("source", 2), unique("cut"), unique("link")
    for _ in range(BATCHES):  # batch by batch: the cut falls on a batch boundary
        for p in (0, 1):
            produce(source, "source", topic, [Record(value=b"old", partition=p) for _ in range(BATCH)])
    link: dict[str, Any] = {"name": name, "source": "source", "target": "target", "group_id": group}
    link.update(topics={"include": [topic]}, offset_commit_interval_ms=500)
    config = write_config([link], state_dir=str(tmp_path / "state"))
    mirror = start_mirror("--config", str(config), "--link", name)
    done = BATCH * BATCHES
    wait_for_commits(source, "source", group, topic, 2, upto=[done, done], timeout_s=120, while_running=mirror.running)
    assert mirror.stop() == 0

    local_clusters.kill("source")
    cut_log(local_clusters.cluster("source").directory / "data" / f"{topic}-0", CUT)
    local_clusters.up(["source"], tie_to_parent=owns_clusters)
    assert end_offsets(source, "source", topic, 2) == [CUT, done]
    mirror = start_mirror("--config", str(config), "--link", name)
    wait_until(
        lambda: "lost, offsets 60 to 99" in mirror.log(), timeout_s=60, description="the mirror to say the truncation"
    )
    produce(source, "source", topic, [Record(value=b"new", partition=0) for _ in range(20)])  # offsets 60..79
    produce(source, "source", topic, [Record(value=b"after", partition=1) for _ in range(10)])

    wait_for_commits(
        source, "source", group, topic, 2, upto=[done, done + 10], timeout_s=120, while_running=mirror.running
    )
    assert f"40 records of {topic}[0] lost, offsets 60 to 99: the source's log ends below" in mirror.log()
    # the link's ledger of lost records (what its status, the monitor, the metrics and failover read)
    lines = [line for path in (tmp_path / "state" / "lost").glob("*.jsonl") for line in path.read_text().splitlines()]
    assert len(lines) == 1 and '"first_offset":60,"end_offset":100,"reason":"truncated","action":"stopped"' in lines[0]
    # the target: the old 100 and 100 + 10 after; none of the new records of partition 0
    assert end_offsets(target, "target", topic, 2) == [done, done + 10]
    got = by_partition(read_all(target, "target", topic, 2 * done + 10, timeout_s=60))
    assert [r.value for r in got[0]] == [b"old"] * done
    assert [r.value for r in got[1]] == [b"old"] * done + [b"after"] * 10
    assert mirror.running()
    assert mirror.stop() == 0
