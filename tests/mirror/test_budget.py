"""A link's bandwidth budget on real brokers (issue #44): `max_bytes_per_second` in the config holds what the link
gives its target to the rate, `mirrorwatch link budget` changes it on the running link (lower, then none) without a
restart, the monitor's metrics say the budget in force and the time it held the link back, and nothing is lost or
copied twice. The truth is the test's own: the bytes it produced, a stopwatch started before the link could read
them, and the target's high-watermarks.

A budget holds the bytes given to the target over any span T to rate x T and one bucket (`mirror.flow.Budget`), so
copying B bytes takes at least (B - bucket - one record) / rate: a bound a busy machine can only exceed, asserted
here as the fact that the budget is enforced. How close to its budget a link runs (1 MB/s +- 10 % over a minute) is
measured by `python -m bench.budget`, not here."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.budget import metric
from kernel.config import MirrorwatchConfig
from kernel.processes import free_port
from kernel.wait import wait_until
from mirror.flow import Budget
from tests.kafka_helpers import Record, produce, read_all
from tests.mirror.test_pause import link_command
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

PARTITIONS = 3
VALUE = b"v" * 1_000


def batch(prefix: str, count: int) -> list[Record]:
    return [Record(key=f"{prefix}-{i:05d}".encode(), value=VALUE, partition=i % PARTITIONS) for i in range(count)]


def size(records: list[Record]) -> int:
    """What a budget counts: keys and values."""
    return sum(len(r.key or b"") + len(r.value or b"") for r in records)


def least_seconds(records: list[Record], rate: int) -> float:
    """The shortest time a link under `rate` can give these records to its target (the module docstring)."""
    return (size(records) - Budget(rate).capacity() - len(VALUE) - 20) / rate


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_budget_holds_the_link_to_its_rate_changes_at_run_time_and_the_monitor_says_so(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
    delivery: str,
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, name, port = make_topic("source", PARTITIONS), unique("link"), free_port()
    link = {
        "name": name,
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "delivery": delivery,
        "max_bytes_per_second": "300KB",
        "offset_commit_interval_ms": 500,
    }
    config = write_config(
        [link],
        monitor={"interval_seconds": 1},
        canary={"enabled": False},
        http={"host": "127.0.0.1", "port": port},
        state_dir=str(tmp_path / "state"),
    )

    def copied(expected: int) -> float:
        """Read the target until it holds `expected` records of the topic (committed ones: an exactly-once link's
        transaction markers take offsets too); when it did, or later (the stopwatch's reading: later only lengthens
        what the bound below is compared with)."""
        read_all(target, "target", topic, expected, timeout_s=120, partitions=PARTITIONS)
        return time.monotonic()

    first = batch("a", 1_500)  # 1.5 MB: at least 4.9 s at 300 KB/s
    produce(source, "source", topic, first)
    started = time.monotonic()
    mirror = start_mirror("--config", str(config), "--link", name)
    monitor = start_mirror("--config", str(config), command="monitor")
    took = copied(len(first)) - started
    assert took >= least_seconds(first, 300_000), took
    # the monitor says the budget in force and that it held the link back
    wait_until(
        lambda: (
            metric(port, "mirrorwatch_mirror_budget_bytes_per_second", name) == 300_000
            and (metric(port, "mirrorwatch_mirror_budget_throttled_seconds_total", name) or 0) > 0
        ),
        timeout_s=60,
        ignore=(OSError,),
        description="the monitor to say the budget and the time it held the link back",
    )

    # lowered at run time: obeyed by the running worker, and the next records cross at the new rate
    lowered = link_command(config, "budget", "--link", name, "--max-bytes-per-second", "150KB")
    assert lowered.returncode == 0, lowered.stdout + lowered.stderr
    assert f"obeyed by 1 running worker(s) of link {name}" in lowered.stdout, lowered.stdout
    second = batch("b", 750)  # 0.75 MB: at least 4.9 s at 150 KB/s
    started = time.monotonic()
    produce(source, "source", topic, second)
    took = copied(len(first) + len(second)) - started
    assert took >= least_seconds(second, 150_000), took

    # lifted: no budget, the gauge gone
    lifted = link_command(config, "budget", "--link", name, "--max-bytes-per-second", "none")
    assert lifted.returncode == 0 and "obeyed by 1 running worker(s)" in lifted.stdout, lifted.stdout
    third = batch("c", 300)
    produce(source, "source", topic, third)
    expected = len(first) + len(second) + len(third)
    found = read_all(target, "target", topic, expected, partitions=PARTITIONS)
    keys = Counter(r.key for r in found)
    assert sum(keys.values()) == expected and max(keys.values()) == 1  # each record once: none lost, none twice
    assert set(keys) == {r.key for r in first + second + third}
    wait_until(
        lambda: metric(port, "mirrorwatch_mirror_budget_bytes_per_second", name) is None,
        timeout_s=60,
        description="the budget gauge gone once the link has none",
    )
    assert mirror.running() and "bandwidth budget unlimited" in mirror.log()
    assert mirror.stop() == 0 and monitor.stop() == 0
