"""The child process that asks for committed offsets (librdkafka's admin OffsetFetch can segfault the asker,
confluentinc/librdkafka#5040): a crash there is an answer that says so, the next ask gets a new child, and no child
outlives its parent. No broker is needed: an address nobody listens on keeps a request in flight as long as asked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kernel import group_offsets
from kernel.config import ClusterConfig
from kernel.group_offsets import FetchError, GroupOffsetsUnknown
from kernel.processes import free_port
from kernel.wait import wait_until


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended too
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_crashed_child_is_an_answer_that_says_so_and_the_next_ask_gets_a_new_one() -> None:
    nowhere = ClusterConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", properties={"log_level": "0"})
    asking = group_offsets.fetcher(nowhere, "nowhere")
    outcome: list[object] = []

    def ask() -> None:
        try:
            outcome.append(group_offsets.committed_offsets(nowhere, "nowhere", ["g1", "g2"], timeout_s=60))
        except GroupOffsetsUnknown as exc:
            outcome.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    wait_until(
        lambda: asking._process is not None and asking._process.pid is not None, timeout_s=30, description="the child"
    )
    child = asking._process.pid
    time.sleep(2)  # the request is in the child's hands (the cluster never answers)
    os.kill(child, signal.SIGSEGV)
    thread.join(timeout=30)
    [crash] = outcome
    assert isinstance(crash, GroupOffsetsUnknown), crash
    assert "SIGSEGV" in str(crash) and "nowhere" in str(crash) and crash.retriable
    assert asking.crashes == 1 and not _alive(child)
    # the next ask: a new child, an answer per group (here: why each is unknown)
    answer = group_offsets.committed_offsets(nowhere, "nowhere", ["g1", "g2"], timeout_s=2)
    assert set(answer) == {"g1", "g2"} and all(isinstance(a, FetchError) for a in answer.values()), answer
    assert asking._process.pid != child
    # an ask interrupted while the child works on it (a signal's exception; CI saw a test's time-out do it): that
    # child goes, or its late answer (for g3) would be taken as the next ask's (for g4)
    interrupted = asking._process.pid

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(KeyboardInterrupt):
            group_offsets.committed_offsets(nowhere, "nowhere", ["g3"], timeout_s=3)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not _alive(interrupted)
    answer = group_offsets.committed_offsets(nowhere, "nowhere", ["g4"], timeout_s=4)
    assert set(answer) == {"g4"}, answer
    asking.close()


@pytest.mark.parametrize("ending", ["SIGKILL", "exit"])
def test_no_child_outlives_its_parent(ending: str) -> None:
    parent = f"""
import os, signal, sys
from kernel import group_offsets
from kernel.config import ClusterConfig
nowhere = ClusterConfig(bootstrap_servers="127.0.0.1:{free_port()}", properties={{"log_level": "0"}})
group_offsets.committed_offsets(nowhere, "nowhere", ["g"], timeout_s=1)
print(group_offsets.fetcher(nowhere, "nowhere")._process.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL) if {ending == "SIGKILL"} else sys.exit(0)
"""
    result = subprocess.run([sys.executable, "-c", parent], check=False, capture_output=True, text=True, timeout=120)
    child = int(result.stdout.split()[0])
    wait_until(lambda: not _alive(child), timeout_s=30, description="the child to end with its parent")


def test_descriptions_and_commits_are_asked_in_the_child_and_one_that_ended_between_asks_costs_no_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """DescribeConsumerGroups and AlterConsumerGroupOffsets are coordinator requests too (librdkafka#4605 aborts the
    asker): asked in the child, descriptions alone or with the offsets. A child that aborted while idle (the abort comes when a lingering coordinator lookup
    ends, often between two asks) is replaced before the next ask, which gets its answer; the log says so."""
    nowhere = ClusterConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", properties={"log_level": "0"})
    asking = group_offsets.fetcher(nowhere, "nowhere-described")
    described, offsets = group_offsets.described_groups(nowhere, "nowhere-described", ["g1", "g2"], timeout_s=2)
    assert set(described) == {"g1", "g2"} and offsets == {}
    assert all(isinstance(d, FetchError) and d.retriable for d in described.values()), described
    child = asking._process.pid
    os.kill(child, signal.SIGABRT)
    # ended for good: its last thread gone (the leader reads Z in /proc while librdkafka's threads still exit)
    wait_until(lambda: not asking._process.is_alive(), timeout_s=30, description="the child to end")
    described, offsets = group_offsets.described_groups(
        nowhere, "nowhere-described", ["g1"], timeout_s=2, offsets_timeout_s=2
    )
    assert set(described) == {"g1"} and set(offsets) == {"g1"}, (described, offsets)
    assert isinstance(offsets["g1"], FetchError)
    assert asking.crashes == 1 and asking._process.pid != child
    assert "SIGABRT" in caplog.text and "between two asks" in caplog.text
    # commits (AlterConsumerGroupOffsets) go to the child too: per group, why there is no answer
    committed = group_offsets.commit_offsets(nowhere, "nowhere-described", {"g1": [("t", 0, 5)], "g2": []}, 2)
    assert set(committed) == {"g1"} and isinstance(committed["g1"], FetchError), committed
    assert asking.crashes == 1
    asking.close()


def test_a_stopping_process_ends_its_children_and_an_ask_waiting_on_one_returns_unknown_at_once() -> None:
    """`end_children` (a stopping `mirrorwatch monitor` or `run`): the ask in flight (60 s allowed, to a cluster that
    never answers) ends with "stopping", not a crash said in the log, and no later ask starts a child. In a process
    of its own: the stop is for good."""
    parent = f"""
import logging, sys, threading, time
from kernel import group_offsets
from kernel.config import ClusterConfig
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="LOG %(message)s")
nowhere = ClusterConfig(bootstrap_servers="127.0.0.1:{free_port()}", properties={{"log_level": "0"}})
asking = group_offsets.fetcher(nowhere, "nowhere")
outcome = []
def ask():
    try:
        outcome.append(group_offsets.committed_offsets(nowhere, "nowhere", ["g"], timeout_s=60))
    except group_offsets.GroupOffsetsUnknown as exc:
        outcome.append(exc)
thread = threading.Thread(target=ask)
thread.start()
while asking._process is None or asking._process.pid is None:
    time.sleep(0.1)
child = asking._process
time.sleep(2)  # the request is in the child's hands
group_offsets.end_children()
thread.join(30)
print("ALIVE", thread.is_alive(), child.is_alive())
print("OUTCOME", outcome)
try:
    group_offsets.committed_offsets(nowhere, "nowhere", ["g"], timeout_s=1)
except group_offsets.GroupOffsetsUnknown as exc:
    print("LATER", exc, asking._process, exc.code, exc.retriable)
from failover.plan import _describe_groups  # its retries (up to 2 min) must not wait on a process that stops
began = time.monotonic()
try:
    _describe_groups(nowhere, "nowhere", ["g"])
except Exception as exc:
    print("DESCRIBE", type(exc).__name__, exc.code, round(time.monotonic() - began) < 10)
"""
    result = subprocess.run([sys.executable, "-c", parent], check=False, capture_output=True, text=True, timeout=120)
    said = result.stdout + result.stderr
    assert "ALIVE False False" in said, said
    assert "OUTCOME [GroupOffsetsUnknown(\"cluster 'nowhere': this process is stopping\")]" in said, said
    assert "LATER cluster 'nowhere': this process is stopping None _STOPPING False" in said, said
    assert "DESCRIBE KafkaClientError _STOPPING True" in said, said  # said at once, not asked again
    assert "LOG" not in said, said  # nothing said as a crash
