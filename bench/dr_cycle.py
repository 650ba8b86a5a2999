"""B12: the whole disaster-recovery cycle, mirrorwatch against MirrorMaker 2, on the same data (issue #42).

    .venv/bin/python -m bench.dr_cycle [--records 12000] [--tools mirrorwatch,mm2] [--quiet-seconds 6]
                                       [--clusters DIR] [--json F]

Per tool, on a topic of its own (3 partitions) of the local pair, A (source) and B (target):

1. producers write to A while the tool mirrors it to B; an application reads on A, committing as it goes, and
   stops; the tool keeps its group's position on B (mirrorwatch: a standby, `sync_group_offsets` every second;
   MirrorMaker 2: checkpoints and `sync.group.offsets` every second);
2. the mirror is SIGKILLed (its whole process group) while A takes records, and A takes more after it — A's tail —
   then A's producers stop and A is "lost";
3. failover: mirrorwatch `failover promote --source-lost` against an A it cannot reach; MirrorMaker 2's documented
   procedure: the consumers start on B from the synced offsets of the remote topic (`primary.<topic>`, with the local
   topic subscribed too, where producers now write). The application reads on B what it had not read, then writes
   there;
4. A is back. mirrorwatch: `failover diverged` (the tail listed), `failover failback --diverged read`, the reverse
   link run; MirrorMaker 2: restarted with both flows (A -> B resumes from its stored source offsets, B -> A copies
   the local topic to `target.<topic>` on A, its checkpoints sync the group there); the application reads on B until
   quiet, then stops;
5. home: mirrorwatch `failover apply --link back`; MirrorMaker 2: the application subscribes to A's topic and the
   remote `target.<topic>` with whatever offsets its group has on A; A takes new records, the application reads them.

The truth is taken outside both tools: the values produced, A and B read directly. Reported per tool: at failover
and at home, records the application missed and read twice (against what it had not read yet); the tail (records A
took that never reached B before the failover), how many of them the tool listed, and how many of them the
application read once, twice, or never (lost unseen when never and not listed)."""

from __future__ import annotations

import abc
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.common import clusters_for, exit_on_sigterm, markdown_table, stop_peer
from bench.failover import _committed as failover_committed
from bench.failover import _document, _produce, _start, values_on
from bench.failover import _ends as failover_ends
from bench.mm2 import checkpointing, mm2_command, mm2_properties
from kernel.config import MirrorwatchConfig
from kernel.kafka import create_topics, new_admin, new_consumer, new_producer
from kernel.wait import wait_until

__all__ = ["main"]

PARTITIONS = 3
# MirrorMaker 2's name for A: its copies on B are `primary.<topic>`, B's on A `target.<topic>`. Not `bench`: a topic
# named `bench.x` would read to its DefaultReplicationPolicy as a copy from `bench`, never sent back there
ALIAS = "primary"


@dataclass
class Outcome:
    tool: str
    tail: int = 0
    listed: int | None = None  # the tail records the tool listed (None: it has no way to)
    failover: tuple[int, int] = (0, 0)  # missed, read twice
    home: tuple[int, int] = (0, 0)
    tail_read: Counter[int] = field(default_factory=Counter)  # times read -> tail records
    commands: list[str] = field(default_factory=list)


class Application:
    """A consumer group reading as an application does: subscribed, committing what it read when it stops."""

    def __init__(self, config: MirrorwatchConfig, group: str, quiet_s: float) -> None:
        self.config, self.group, self.quiet_s = config, group, quiet_s
        self.read: list[bytes] = []

    def read_until_quiet(self, alias: str, topics: list[str], *, pace_s: float = 0.0, stop: Any = None) -> list[bytes]:
        consumer = new_consumer(
            self.config.clusters[alias],
            alias,
            self.group,
            {"auto.offset.reset": "earliest", "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000},
        )
        consumer.subscribe(topics)
        got: list[bytes] = []
        last = time.monotonic()
        try:
            while time.monotonic() - last < self.quiet_s and not (stop is not None and stop.is_set()):
                batch = consumer.consume(num_messages=100 if pace_s else 5000, timeout=0.5)
                got += [m.value() or b"" for m in batch if m.error() is None]
                if batch:
                    last = time.monotonic()
                    consumer.commit(asynchronous=False)
                    time.sleep(pace_s)
        finally:
            consumer.close()
        self.read += got
        return got


def _judge(read: list[bytes], expected: set[bytes]) -> tuple[int, int]:
    """Missed, and read twice or not expected."""
    return len(expected - set(read)), len(read) - len(expected & set(read))


def _lost_config(work: Path, document: dict[str, Any]) -> Path:
    """The config with A at an address nothing listens on: a lost cluster, as the command sees it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lost = json.loads(json.dumps(document))
    lost["clusters"]["source"] = {"bootstrap_servers": f"127.0.0.1:{port}"}
    path = work / "lost.yaml"
    path.write_text(yaml.safe_dump(lost))
    return path


class Tool(abc.ABC):
    """One mirror through the cycle: how it starts, fails over, comes back and goes home."""

    name = ""
    copies = ""  # the topic on B holding A's records

    def __init__(self, config: MirrorwatchConfig, work: Path, topic: str, group: str) -> None:
        self.config, self.work, self.topic, self.group = config, work, topic, group
        self.outcome = Outcome(self.name)
        self.processes: list[subprocess.Popen[bytes]] = []

    @abc.abstractmethod
    def start(self) -> subprocess.Popen[bytes]:
        """The mirror A -> B started."""

    @abc.abstractmethod
    def fail_over(self) -> None:
        """A is lost: what the tool's procedure does before the applications start on B."""

    @abc.abstractmethod
    def on_b(self) -> list[str]:
        """What the applications subscribe to on B."""

    @abc.abstractmethod
    def come_back(self) -> None:
        """A is back: what the tool's procedure does to go home."""

    @abc.abstractmethod
    def go_home(self) -> None:
        """The applications have stopped on B: what moves them home."""

    @abc.abstractmethod
    def on_a(self) -> list[str]:
        """What the applications subscribe to on A, home again."""

    def listed(self) -> int | None:
        return None

    def stop(self) -> None:
        for process in self.processes:
            stop_peer(process)


class Mirrorwatch(Tool):
    name = "mirrorwatch"

    def __init__(self, config: MirrorwatchConfig, work: Path, topic: str, group: str) -> None:
        super().__init__(config, work, topic, group)
        self.copies = topic
        create_topics(new_admin(config.clusters["target"], "target"), {topic: PARTITIONS})
        forward = {
            "name": "fwd",
            "source": "source",
            "target": "target",
            "topics": {"include": [topic.replace(".", r"\.")]},
            "offset_commit_interval_ms": 1000,
            "checkpoint": {"groups": {"include": [group]}, "interval_seconds": 1, "sync_group_offsets": True},
        }
        back = {"name": "back", "source": "target", "target": "source", "topics": forward["topics"]}
        self.document = _document(config, work, [forward, back])
        self.path = work / "cycle.yaml"
        self.path.write_text(yaml.safe_dump(self.document))
        self.forward_only = work / "forward.yaml"  # `run` runs every link of its config: the reverse one waits
        self.forward_only.write_text(yaml.safe_dump({**self.document, "links": [forward]}))
        self._listed: int | None = None

    def _cli(self, *args: str, config: Path | None = None) -> str:
        command = [sys.executable, "-m", "mirrorwatch.cli", *args[:2], "--config", str(config or self.path), *args[2:]]
        self.outcome.commands.append(" ".join(["mirrorwatch", *args]))
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"mirrorwatch {' '.join(args)}: exit {done.returncode}: {done.stdout}{done.stderr}")
        return done.stdout

    def start(self) -> subprocess.Popen[bytes]:
        process = _start(
            [
                sys.executable,
                "-m",
                "mirrorwatch.cli",
                "--log-level",
                "warning",
                "run",
                "--config",
                str(self.forward_only),
            ],
            self.work / "mirrorwatch-run.log",
        )
        self.processes.append(process)
        return process

    def fail_over(self) -> None:
        self._cli("failover", "promote", "--link", "fwd", "--groups", self.group, "--source-lost",
                  config=_lost_config(self.work, self.document))  # fmt: skip

    def on_b(self) -> list[str]:
        return [self.topic]

    def come_back(self) -> None:
        said = self._cli("failover", "diverged", "--link", "fwd")
        self._listed = int(said.split("its old source took ", 1)[1].split(" ", 1)[0])
        self._cli("failover", "failback", "--link", "fwd", "--diverged", "read")
        self.processes.append(
            _start(
                [
                    sys.executable,
                    "-m",
                    "mirrorwatch.cli",
                    "--log-level",
                    "warning",
                    "mirror",
                    "--config",
                    str(self.path),
                    "--link",
                    "back",
                ],
                self.work / "mirrorwatch-back.log",
            )
        )
        self.outcome.commands.append("mirrorwatch mirror --link back")

    def go_home(self) -> None:
        b_end = sum(_ends(self.config, "target", self.topic))
        # the reverse link has copied what B holds (B's own and the tail's copies) once its group is at B's end
        wait_until(
            lambda: sum(_committed(self.config, "target", "mirrorwatch-back", self.topic)) >= b_end,
            timeout_s=120,
            description="the reverse link to copy B",
        )
        self._cli("failover", "apply", "--link", "back", "--group", self.group)

    def on_a(self) -> list[str]:
        return [self.topic]

    def listed(self) -> int | None:
        return self._listed


class MirrorMaker2(Tool):
    name = "MirrorMaker 2"

    def __init__(self, config: MirrorwatchConfig, work: Path, topic: str, group: str) -> None:
        super().__init__(config, work, topic, group)
        self.copies = f"{ALIAS}.{topic}"
        create_topics(new_admin(config.clusters["target"], "target"), {topic: PARTITIONS})  # B's local topic
        self.common = checkpointing(group)

    def _run(self, name: str, both: bool) -> subprocess.Popen[bytes]:
        # B -> A: the local topic, and the copies too, so that its checkpoints may translate a group's position
        # there back to A's topic if MirrorMaker 2 can (it renames `primary.<topic>` to `<topic>` going home)
        topics = f"{self.topic.replace('.', '[.]')},{self.copies.replace('.', '[.]')}"
        back = [f"target->{ALIAS}.enabled = true", f"target->{ALIAS}.topics = {topics}"]
        lines = mm2_properties(self.config, ALIAS, [self.topic], [*self.common, *(back if both else [])])
        process = _start(mm2_command(self.work, name, lines, progress=False), self.work / f"mm2-{name}.log")
        self.processes.append(process)
        return process

    def start(self) -> subprocess.Popen[bytes]:
        self.outcome.commands.append(f"connect-mirror-maker.sh ({ALIAS}->target)")
        return self._run("forward", both=False)

    def fail_over(self) -> None:
        self.outcome.commands.append("consumers started on B from the synced offsets")

    def on_b(self) -> list[str]:
        return [self.copies, self.topic]

    def come_back(self) -> None:
        self.outcome.commands.append(f"connect-mirror-maker.sh ({ALIAS}->target, target->{ALIAS})")
        self._run("both", both=True)
        wait_until(  # B's own records reach A
            lambda: (
                sum(_ends(self.config, "source", f"target.{self.topic}"))
                >= sum(_ends(self.config, "target", self.topic))
            ),
            timeout_s=180,
            description="MirrorMaker 2 to copy B's records to A",
            ignore=(Exception,),
        )

    def go_home(self) -> None:
        # checkpoints and the group sync, every second, of an application no longer on B
        _synced(self.config, self.group, f"target.{self.topic}", alias="source")
        self.outcome.commands.append("consumers started on A from its offsets there")

    def on_a(self) -> list[str]:
        return [self.topic, f"target.{self.topic}"]

    def stop(self) -> None:
        super().stop()
        for alias, copies in (("source", f"target.{self.topic}"), ("target", self.copies)):
            admin = new_admin(self.config.clusters[alias], alias)
            for future in admin.delete_topics([copies]).values():
                future.exception(timeout=60)


def _ends(config: MirrorwatchConfig, alias: str, topic: str) -> list[int]:
    return failover_ends(config, alias, topic, PARTITIONS)


def _committed(config: MirrorwatchConfig, alias: str, group: str, topic: str) -> list[int]:
    return [max(0, o) for o in failover_committed(config, alias, group, topic, PARTITIONS)]


def _write(config: MirrorwatchConfig, alias: str, topic: str, prefix: bytes, *, n: int) -> set[bytes]:
    producer = new_producer(config.clusters[alias], alias, {"linger.ms": 5, "enable.idempotence": True})
    values = {prefix + b"%d" % i for i in range(n)}
    for i in range(n):
        producer.produce(topic, value=prefix + b"%d" % i, key=b"k%d" % (i % 97), partition=i % PARTITIONS)
        producer.poll(0)
    assert producer.flush(60) == 0
    return values


def _synced(config: MirrorwatchConfig, group: str, copies: str, alias: str = "target", steady_s: float = 3.0) -> None:
    """Until the group's position on `copies` (a tool's sync of it) is there and has stood still for `steady_s` (60 s
    at most: a tool that never syncs it is waited for that long)."""
    deadline, last, since = time.monotonic() + 60, None, time.monotonic()
    while time.monotonic() < deadline:
        now = _committed(config, alias, group, copies)
        if now != last:
            last, since = now, time.monotonic()
        elif sum(now) and time.monotonic() - since >= steady_s:
            return
        time.sleep(0.5)


def _since_back(read: list[bytes], back: int, tail: set[bytes], written_on_a: set[bytes]) -> tuple[int, int]:
    """From A's return on: the records A took at home the application missed, and what it read that it had read
    before, or twice since, or that was not to be read (the tail's records are counted apart)."""
    before, since = set(read[:back]), read[back:]
    seen: set[bytes] = set()
    twice = 0
    for value in since:
        if value not in tail:
            twice += value in before or value in seen or value not in written_on_a
        seen.add(value)
    return len(written_on_a - seen), twice


def run_cycle(tool: Tool, records: int, quiet_s: float) -> Outcome:
    """The cycle of the module docstring for one tool; the truth read directly. The application reads until nothing
    came for `quiet_s`."""
    config, topic, out = tool.config, tool.topic, tool.outcome
    app = Application(config, tool.group, quiet_s)
    mirror = tool.start()
    try:
        print(
            f"{tool.name}: producing {records:,} records to A while it mirrors; the application reads ...", flush=True
        )
        stop_app = threading.Event()
        reader = threading.Thread(target=app.read_until_quiet, args=("source", [topic]),
                                  kwargs={"pace_s": 0.05, "stop": stop_app})  # fmt: skip
        reader.start()
        chunk = max(1, records // 20)
        for start in range(0, records, chunk):
            _produce(config, topic, start, min(chunk, records - start), PARTITIONS)
            time.sleep(0.2)
        wait_until(lambda: sum(_ends(config, "target", tool.copies)) >= records, timeout_s=300,
                   description=f"{tool.name} to copy everything", ignore=(Exception,))  # fmt: skip
        stop_app.set()
        reader.join(timeout=60)
        read_on_a = list(app.read)
        _synced(config, tool.group, tool.copies)  # the tool's last sync of the application's position to B
        # the disaster: the mirror killed while A takes records (some may still be copied), and A takes more after
        # it (never copied: the tail is never empty); then A's producers stop
        writer = threading.Thread(target=_produce, args=(config, topic, records, records // 10, PARTITIONS))
        writer.start()
        os.killpg(mirror.pid, signal.SIGKILL)
        mirror.wait(timeout=30)
        writer.join()
        _produce(config, topic, records + records // 10, max(PARTITIONS, records // 100), PARTITIONS)
        a_truth = values_on(config, "source", [topic])
        on_b = values_on(config, "target", [tool.copies])
        tail = {v for v in a_truth if v not in on_b}
        out.tail = len(tail)
        print(f"{tool.name}: A holds {len(a_truth):,}, B {len(on_b):,}: a tail of {len(tail):,}; failing over ...",
              flush=True)  # fmt: skip

        tool.fail_over()
        got = app.read_until_quiet("target", tool.on_b())
        written_on_b = _write(config, "target", topic, b"b", n=max(30, records // 20))
        got += app.read_until_quiet("target", tool.on_b())
        out.failover = _judge(got, (set(on_b) - set(read_on_a)) | written_on_b)
        print(f"{tool.name}: A is back ...", flush=True)
        back = len(app.read)
        tool.come_back()
        out.listed = tool.listed()
        app.read_until_quiet("target", tool.on_b())  # whatever comes to B now (the tail, for some)
        tool.go_home()
        written_on_a = _write(config, "source", topic, b"n", n=300)
        app.read_until_quiet("source", tool.on_a())
        out.home = _since_back(app.read, back, tail, written_on_a)
        counts = Counter(app.read)
        out.tail_read = Counter(counts.get(v, 0) for v in tail)
    finally:
        tool.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=12_000)
    parser.add_argument("--tools", default="mirrorwatch,mm2", help="comma-separated: mirrorwatch, mm2")
    parser.add_argument("--quiet-seconds", type=float, default=6.0, help="the application reads until this quiet")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    kinds: dict[str, Callable[..., Tool]] = {"mirrorwatch": Mirrorwatch, "mm2": MirrorMaker2}
    chosen = [t.strip() for t in args.tools.split(",") if t.strip()]
    if not chosen or any(t not in kinds for t in chosen):
        parser.error(f"--tools {args.tools!r}: choose among {', '.join(kinds)}")
    outcomes: list[Outcome] = []
    with (
        tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp,
        clusters_for(args.clusters, Path(tmp)) as config,
    ):
        for kind in chosen:
            run = uuid.uuid4().hex[:6]
            work = Path(tmp) / kind
            work.mkdir()
            topic = f"bench.cycle.{run}"
            create_topics(
                new_admin(config.clusters["source"], "source"), {topic: PARTITIONS}, config={"retention.ms": "-1"}
            )
            outcomes.append(
                run_cycle(kinds[kind](config, work, topic, f"bench-app-{run}"), args.records, args.quiet_seconds)
            )
    rows = []
    for o in outcomes:
        never = o.tail_read.get(0, 0)
        rows.append(
            [
                o.tool,
                f"{o.failover[0]} / {o.failover[1]}",
                o.tail,
                "-" if o.listed is None else o.listed,
                f"{o.tail_read.get(1, 0)} / {sum(n for k, n in o.tail_read.items() if k > 1)} / {never}",
                never if o.listed is None else max(0, never - o.listed),
                f"{o.home[0]} / {o.home[1]}",
            ]
        )
    print(
        markdown_table(
            [
                "tool",
                "failover: missed / read twice",
                "A's tail",
                "tail listed",
                "tail read once / more / never",
                "tail lost unseen",
                "home: missed / read twice",
            ],
            rows,
        )
    )
    if args.json:
        document = [{**o.__dict__, "tail_read": dict(o.tail_read)} for o in outcomes]
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0 if all(o.tail for o in outcomes) else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
