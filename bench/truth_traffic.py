"""The truth's traffic for B5's harness (bench.truth_harness): a producer into the source that notes when the source
acknowledged each record, and a reader of the target that notes when each arrived; in this process, or on the
clusters' own hosts when they are apart (`agent`, bench.truth_agent in the cluster's network namespace), so that the
truth is never cut off with the mirror."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from bench.truth_judge import Truth
from kernel.processes import stop_process

__all__ = ["Traffic", "agent", "follow_truth", "in_process", "produce_truth"]

QUIET = {"log_level": 0}  # the harness's own clients: their complaints while a broker is down are expected


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


LINGER_MS = 50
TICK_S = 0.01


@dataclass
class Traffic:
    """Where the truth harness produces and reads: the topic on both clusters and its partitions."""

    source: str  # bootstrap servers
    target: str
    topic: str
    partitions: int


def produce_truth(traffic: Traffic, rate: int, on_acked: Callable[[int, int], None], stop: threading.Event) -> None:
    """`rate` records/s round the partitions until `stop`, each value `<partition>:<sequence>`; `on_acked(partition,
    ms)` with the moment the source acknowledged each (in order within a partition)."""
    # Batches of 50 ms (5 ms, librdkafka's and Kafka 4's default, made a produce request of one or two records every
    # 5 ms: the source broker spent a quarter of a core on 500 records/s, half of it gone at 50 ms; on the suite's busy
    # machine that CPU is what the rest waits for). The truth is the moment the source acknowledged a record, whatever
    # the linger.
    producer = Producer(
        {"bootstrap.servers": traffic.source, "acks": "all", "enable.idempotence": True, "linger.ms": LINGER_MS}
    )
    sent = [0] * traffic.partitions

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            raise RuntimeError(f"the source refused a record: {error}")
        partition = message.partition()
        assert partition is not None
        on_acked(partition, _now_ms())

    started, n = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while n < due:
            p = n % traffic.partitions
            producer.produce(traffic.topic, value=f"{p}:{sent[p]}".encode(), partition=p, on_delivery=delivered)
            sent[p] += 1
            n += 1
        producer.poll(TICK_S)  # the records due in a tick go out together (a batch waits LINGER_MS anyway)
    producer.flush(60)


def follow_truth(traffic: Traffic, on_arrived: Callable[[int, int, int], None], stop: threading.Event) -> None:
    """Read the target topic until `stop`; `on_arrived(partition, sequence, ms)` with the moment each record came."""
    consumer = Consumer(
        {
            "bootstrap.servers": traffic.target,
            "group.id": "mirrorwatch-truth",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(traffic.topic, p, 0) for p in range(traffic.partitions)])
    try:
        while not stop.is_set():
            for message in consumer.consume(num_messages=5000, timeout=0.05):
                if message.error() is not None:
                    continue
                p, _, seq = (message.value() or b"").decode().partition(":")
                on_arrived(int(p), int(seq), _now_ms())
    finally:
        consumer.close()


def in_process(role: str, traffic: Traffic, truth: Truth, stop: threading.Event, *, rate: int = 0) -> None:
    """`produce_truth` (role "produce") or `follow_truth` ("follow") in this process, into `truth`."""

    def acked(partition: int, at_ms: int) -> None:
        with truth.lock:
            truth.acked_ms[partition].append(at_ms)

    def arrived(partition: int, seq: int, at_ms: int) -> None:
        with truth.lock:
            truth.arrive(partition, seq, at_ms)

    if role == "produce":
        produce_truth(traffic, rate, acked, stop)
    else:
        follow_truth(traffic, arrived, stop)


def agent(netns: str, role: str, traffic: Traffic, truth: Truth, stop: threading.Event, *, rate: int = 0) -> None:
    """`in_process`, run on the cluster's own host (bench.truth_agent in its network namespace): the truth
    is what the source's producers and a reader beside the target see, never cut off with the mirror."""
    command = [
        *("ip", "netns", "exec", netns, sys.executable, "-m", "bench.truth_agent", role),
        *("--source", traffic.source, "--target", traffic.target, "--topic", traffic.topic),
        *("--partitions", str(traffic.partitions), "--rate", str(rate)),
    ]
    root = Path(__file__).resolve().parent.parent
    agent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root)
    assert agent.stdin is not None and agent.stdout is not None
    closer = threading.Thread(target=lambda: (stop.wait(), agent.stdin.close() if agent.stdin else None), daemon=True)
    closer.start()
    try:
        for line in agent.stdout:
            fields = [int(f) for f in line.split()]
            with truth.lock:
                if role == "produce":
                    truth.acked_ms[fields[0]].append(fields[1])
                else:
                    truth.arrive(*fields)
    finally:
        stop_process(agent, timeout_s=60)
        if agent.returncode not in (0, None):
            raise RuntimeError(f"the truth's {role} agent in {netns} ended with {agent.returncode}")
