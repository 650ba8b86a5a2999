"""Two real, independent single-node Apache Kafka 4.1 clusters (KRaft) for development, tests and the demo.

Each cluster (`source`, `target`) gets its own cluster id, data directory and free ports under the state dir:

    DIR/state.json              ids, ports and pids (what `status` and `down` read)
    DIR/mirrorwatch.yaml        a config describing both clusters, ready for every mirrorwatch command
    DIR/<alias>/server.properties, log4j2.properties, data/, broker.log
    DIR/security.json, client.env, tls/  only for secured clusters (`up --security MODE`, see local_security)

A cluster may be placed on another (simulated) host: `placement` names a network namespace and the address the broker
listens on there (tests/netns.py makes them, with a veth pair to this one), so that tests can cut, slow and flap the
network between a cluster and its clients. Plaintext only: the local TLS certificate names 127.0.0.1.

Brokers run detached (`mirrorwatch local up` returns and they keep running) unless `tie_to_parent` is set, which is
what the test fixtures and the demo use: the kernel then sends the broker SIGTERM if the owning process dies, so a
killed test run cannot leave a JVM behind.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from kernel.config import ClusterConfig
from kernel.errors import LocalClusterError
from kernel.processes import die_with_parent, free_port
from kernel.wait import WaitTimeout, wait_until
from localkafka.jars import KAFKA, class_archive_options, require_java, resolve_jars
from localkafka.lean import LEAN_JVM, LEAN_PROPERTIES
from localkafka.local_security import LocalSecurity, load_security, prepare_security, security_paths, write_private
from localkafka.oidc import start_provider, stop_provider

__all__ = [
    "ALIASES",
    "BrokerStatus",
    "LocalCluster",
    "LocalClusters",
    "Placement",
    "default_state_dir",
]

ALIASES = ("source", "target")
HEAP = ("-Xms128m", "-Xmx512m")
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

_SERVER_PROPERTIES = """\
# Written by mirrorwatch: a single-node KRaft cluster (broker and controller in one JVM) for development and tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
{listeners}log.dirs={data_dir}
# Topics are created on purpose (the mirror's topic planner does it), never by a typo in a producer.
auto.create.topics.enable=false
num.partitions=1
# One node: internal topics cannot have more than one replica. Fewer partitions make start-up faster.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests and demos form groups often; waiting 3 s for more members only slows them down.
group.initial.rebalance.delay.ms=0
"""

_LOG4J2_PROPERTIES = """\
# Written by mirrorwatch: warnings and errors, plus the line that says the server started.
rootLogger.level=WARN
rootLogger.appenderRef.out.ref=OUT
appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.started.name=kafka.server.KafkaRaftServer
logger.started.level=INFO
"""


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mirrorwatch" / "local"


def _listen_port(avoid: Iterable[int] = ()) -> int:
    """A free port for a broker or controller, below the kernel's ephemeral range: a port from bind(0) lies in that
    range, where any outgoing connection on this machine may take it as its local port while its broker is down for a
    restart (seen in CI: a killed test broker could not bind its controller port again)."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    choose, avoid = random.SystemRandom(), set(avoid)
    for _ in range(200):
        port = choose.randrange(20000, max(ephemeral_low, 20001))
        if port not in avoid and not _port_in_use(port):
            return port
    return free_port()


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def _new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (as `kafka-storage random-uuid`)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka's own generator avoids these: they read as command-line flags
            return text


@dataclass(frozen=True)
class Placement:
    """Where a broker runs when not on this host's loopback: a network namespace, and its address there;
    `advertised`: the address clients are told to use instead (a relay's, in front of the broker: bench.netns)."""

    netns: str
    host: str
    advertised: str | None = None


@dataclass(frozen=True)
class LocalCluster:
    alias: str
    cluster_id: str
    broker_port: int
    controller_port: int
    directory: Path
    host: str = "127.0.0.1"
    netns: str | None = None  # the network namespace the broker runs in (None: this host's)
    advertised: str | None = None  # the address clients are told (None: `host`, where the broker listens)

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.advertised or self.host}:{self.broker_port}"

    @property
    def listener(self) -> str:
        """Where the broker itself answers (the relay's address, when advertised, may not be up yet)."""
        return f"{self.host}:{self.broker_port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def server_properties(self) -> Path:
        return self.directory / "server.properties"

    @property
    def tmp_directory(self) -> Path:
        """The broker JVM's java.io.tmpdir (the native libraries it unpacks): not left in /tmp by a SIGKILL."""
        return self.directory / "tmp"

    def cluster_config(self) -> ClusterConfig:
        return ClusterConfig(bootstrap_servers=self.bootstrap_servers)


@dataclass(frozen=True)
class BrokerStatus:
    cluster: LocalCluster
    pid: int | None

    @property
    def is_running(self) -> bool:
        return self.pid is not None


class LocalClusters:
    """The local clusters living in one state dir. Safe to use from a process other than the one that started them."""

    def __init__(
        self,
        state_dir: Path | str,
        *,
        progress: Callable[[str], None] = print,
        security: str | None = None,
        placement: Mapping[str, Placement] | None = None,
        jvm_options: Iterable[str] = (),
        lean: bool = False,
    ) -> None:
        """`security`: the mode new clusters are made with (`local_security.MODES`); None keeps the state dir's.
        `placement`: clusters made in a network namespace of their own (see the module docstring).
        `jvm_options`: more options for the brokers' JVMs (class_archive makes the class archive with one).
        `lean`: brokers cheaper to start and to keep (`localkafka.lean`), for a test suite that runs
        ten of them beside its work on two cores; not for figures (the benchmarks' brokers are the default ones)."""
        self.state_dir = Path(state_dir).resolve()
        self._progress = progress
        self._security_mode = security
        self._placement = dict(placement or {})
        self._jvm_options = (*LEAN_JVM, *jvm_options) if lean else tuple(jvm_options)
        self._lean = lean
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def security(self) -> LocalSecurity:
        return load_security(self.state_dir)

    @property
    def config_path(self) -> Path:
        return self.state_dir / "mirrorwatch.yaml"

    @property
    def _state_path(self) -> Path:
        return self.state_dir / "state.json"

    # -- state ------------------------------------------------------------------------------------------------------

    def _load_state(self) -> dict[str, dict[str, object]]:
        try:
            data = json.loads(self._state_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise LocalClusterError(f"cannot read {self._state_path}: {exc}") from None
        clusters = data.get("clusters", {})
        return clusters if isinstance(clusters, dict) else {}

    def _save_state(self, state: dict[str, dict[str, object]]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"clusters": state}, indent=2) + "\n")
        tmp.replace(self._state_path)

    def clusters(self) -> list[LocalCluster]:
        """The clusters this state dir describes (running or not)."""
        out = []
        for alias, entry in sorted(self._load_state().items(), key=lambda kv: ALIASES.index(kv[0])):
            out.append(
                LocalCluster(
                    alias=alias,
                    cluster_id=str(entry["cluster_id"]),
                    broker_port=int(str(entry["broker_port"])),
                    controller_port=int(str(entry["controller_port"])),
                    directory=self.state_dir / alias,
                    host=str(entry.get("host", "127.0.0.1")),
                    netns=str(entry["netns"]) if entry.get("netns") else None,
                    advertised=str(entry["advertised"]) if entry.get("advertised") else None,
                )
            )
        return out

    def cluster(self, alias: str) -> LocalCluster:
        for cluster in self.clusters():
            if cluster.alias == alias:
                return cluster
        raise LocalClusterError(f"no local cluster {alias!r} in {self.state_dir} (run 'mirrorwatch local up')")

    def _pid_of(self, cluster: LocalCluster) -> int | None:
        """The broker's pid if it runs; checked against /proc so that a reused pid is not mistaken for ours."""
        pid = self._load_state().get(cluster.alias, {}).get("pid")
        if not isinstance(pid, int):
            return None
        child = self._children.get(cluster.alias)
        if child is not None and child.pid == pid and child.poll() is not None:
            return None  # our child and it exited (poll() also reaps it)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if b"kafka.Kafka" in cmdline and str(cluster.server_properties).encode() in cmdline:
            return pid
        return None

    def _has_exited(self, cluster: LocalCluster) -> bool:
        return self._pid_of(cluster) is None

    def status(self) -> list[BrokerStatus]:
        return [BrokerStatus(cluster, self._pid_of(cluster)) for cluster in self.clusters()]

    # -- up ---------------------------------------------------------------------------------------------------------

    def up(self, aliases: Iterable[str] = ALIASES, *, tie_to_parent: bool = False) -> list[LocalCluster]:
        """Start the clusters (creating them the first time) and wait until each answers a metadata request."""
        java = require_java()
        jars = resolve_jars(KAFKA, progress=self._progress)
        security = prepare_security(self.state_dir, self._security_mode)
        if security.mode == "oidc":  # its identity provider first: the brokers fetch its keys as they start
            start_provider(self.state_dir, security.oidc_port, tie_to_parent=tie_to_parent)
        state = self._load_state()
        started: list[tuple[LocalCluster, subprocess.Popen[bytes] | None]] = []
        for alias in aliases:
            if alias not in ALIASES:
                raise LocalClusterError(f"unknown local cluster {alias!r}; the local clusters are {', '.join(ALIASES)}")
            if alias not in state:
                taken = [int(str(v[k])) for v in state.values() for k in ("broker_port", "controller_port") if k in v]
                broker_port = _listen_port(taken)
                state[alias] = {
                    "cluster_id": _new_cluster_id(),
                    "broker_port": broker_port,
                    "controller_port": _listen_port([*taken, broker_port]),
                }
                if alias in self._placement:
                    state[alias].update(asdict(self._placement[alias]))
                self._save_state(state)
            cluster = self.cluster(alias)
            if self._pid_of(cluster) is not None:
                self._progress(f"{alias}: already running at {cluster.bootstrap_servers}")
                started.append((cluster, None))
                continue
            self._prepare(cluster, java, jars, security)
            child = self._start(cluster, java, jars, tie_to_parent=tie_to_parent)
            state[alias]["pid"] = child.pid
            self._save_state(state)
            started.append((cluster, child))
        self._write_config()
        for cluster, process in started:
            self._wait_ready(cluster, process, security)
        return [cluster for cluster, _ in started]

    def _prepare(self, cluster: LocalCluster, java: str, jars: Path, security: LocalSecurity) -> None:
        for port in (cluster.broker_port, cluster.controller_port) if cluster.netns is None else ():
            if _port_in_use(port):
                raise LocalClusterError(
                    f"{cluster.alias}: port {port} on 127.0.0.1 is taken by another process; "
                    f"stop it, or remove {self.state_dir} to start fresh clusters on new ports"
                )
        data_dir = cluster.directory / "data"
        cluster.directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(cluster.tmp_directory, ignore_errors=True)  # what a broker killed before left there
        cluster.tmp_directory.mkdir()
        if cluster.netns is not None and security.mode != "plaintext":
            raise LocalClusterError(f"{cluster.alias}: a cluster in a network namespace is plaintext only")
        listeners = security.server_properties(
            cluster.broker_port, cluster.controller_port, cluster.host, cluster.advertised
        )
        write_private(
            cluster.server_properties,
            _SERVER_PROPERTIES.format(controller_port=cluster.controller_port, listeners=listeners, data_dir=data_dir)
            + (LEAN_PROPERTIES if self._lean else ""),
        )
        (cluster.directory / "log4j2.properties").write_text(_LOG4J2_PROPERTIES)
        if (data_dir / "meta.properties").is_file():
            return  # formatted before: restart with the same data and cluster id
        self._progress(f"{cluster.alias}: formatting storage (cluster id {cluster.cluster_id})")
        cmd = [
            *self._java_cmd(cluster, java, jars),
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster.cluster_id,
            "-c",
            str(cluster.server_properties),
            *security.format_args(),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
            raise LocalClusterError(f"{cluster.alias}: formatting storage failed:\n{tail}")

    def _java_cmd(self, cluster: LocalCluster, java: str, jars: Path) -> list[str]:
        return [
            java,
            *HEAP,
            *class_archive_options(jars),  # the broker's classes mapped, not loaded and verified anew (class_archive)
            *self._jvm_options,
            *self.security.jvm_options(),
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Djava.io.tmpdir={cluster.tmp_directory}",
            f"-Dlog4j2.configurationFile={cluster.directory / 'log4j2.properties'}",
            "-cp",
            f"{jars}/*",
        ]

    def _start(self, cluster: LocalCluster, java: str, jars: Path, *, tie_to_parent: bool) -> subprocess.Popen[bytes]:
        self._progress(f"{cluster.alias}: starting Kafka on {cluster.bootstrap_servers} (log: {cluster.log_path})")
        cmd = [*self._java_cmd(cluster, java, jars), "kafka.Kafka", str(cluster.server_properties)]
        if cluster.netns is not None:  # `ip netns exec` execs the JVM: the pid stays the broker's
            cmd = ["ip", "netns", "exec", cluster.netns, *cmd]
        with cluster.log_path.open("ab") as log:
            process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal that ran `local up` must not reach the broker
                preexec_fn=die_with_parent if tie_to_parent else None,  # noqa: PLW1509 - only calls prctl
            )
        self._children[cluster.alias] = process
        return process

    def _wait_ready(
        self, cluster: LocalCluster, process: subprocess.Popen[bytes] | None, security: LocalSecurity
    ) -> None:
        from kernel.kafka import new_admin

        client = ClusterConfig(bootstrap_servers=cluster.listener, properties=security.client_properties(reveal=True))
        # log_level 0: the probe is expected to be refused while the broker starts; those lines are noise.
        admin = new_admin(client, cluster.alias, {"log_level": 0})

        def answered() -> bool:
            if process is not None and process.poll() is not None:
                raise LocalClusterError(
                    f"{cluster.alias}: the broker exited with code {process.returncode} while starting; "
                    f"last lines of {cluster.log_path}:\n{self.log_tail(cluster)}"
                )
            metadata = admin.list_topics(timeout=2)
            if metadata.cluster_id != cluster.cluster_id:
                raise LocalClusterError(
                    f"{cluster.alias}: {cluster.bootstrap_servers} answered with cluster id {metadata.cluster_id}, "
                    f"expected {cluster.cluster_id}: another Kafka is on that port"
                )
            return bool(metadata.brokers)

        from confluent_kafka import KafkaException

        try:
            wait_until(
                answered,
                timeout_s=START_TIMEOUT_S,
                interval_s=0.2,
                ignore=(KafkaException,),
                description=f"{cluster.alias} at {cluster.bootstrap_servers} to answer a metadata request",
            )
        except WaitTimeout:
            raise LocalClusterError(
                f"{cluster.alias}: no answer from {cluster.bootstrap_servers} within {START_TIMEOUT_S:g}s; "
                f"last lines of {cluster.log_path}:\n{self.log_tail(cluster)}"
            ) from None
        secured = "" if security.mode == "plaintext" else f", {security.mode}"
        self._progress(
            f"{cluster.alias}: ready at {cluster.bootstrap_servers} (cluster id {cluster.cluster_id}{secured})"
        )

    def log_tail(self, cluster: LocalCluster, lines: int = 15) -> str:
        try:
            return "\n".join(cluster.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _write_config(self) -> None:
        security = self.security
        lines = [
            "# Written by `mirrorwatch local up`: the two local clusters. Add links to mirror between them, e.g.",
            "#   links:",
            "#     - {name: source-to-target, source: source, target: target, topics: {include: ['orders\\..*']}}",
        ]
        if security.environment():
            lines.append(f"# The password comes from the environment: set -a; . {security.env_file}; set +a")
        lines.append("clusters:")
        for cluster in self.clusters():
            lines += [
                f"  {cluster.alias}:  # cluster id {cluster.cluster_id}",
                f"    bootstrap_servers: {cluster.bootstrap_servers}",
            ]
            properties = security.client_properties()
            if properties:
                lines.append("    properties:")
                lines += [f"      {name}: {json.dumps(value)}" for name, value in properties.items()]
        lines.append("links: []")
        lines.append(
            f"state_dir: {json.dumps(str(self.state_dir / 'run'))}  # status files of running links and the canary"
        )
        self.config_path.write_text("\n".join(lines) + "\n")

    # -- down -------------------------------------------------------------------------------------------------------

    def down(self, aliases: Iterable[str] = ALIASES, *, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
        """Stop the brokers: SIGTERM (a clean shutdown), then SIGKILL after `timeout_s`. Returns what it did."""
        done: list[str] = []
        wanted = set(aliases)
        stopping: list[tuple[LocalCluster, int]] = []
        for cluster in self.clusters():
            if cluster.alias not in wanted:
                continue
            pid = self._pid_of(cluster)
            if pid is None:
                done.append(f"{cluster.alias}: not running")
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            stopping.append((cluster, pid))
        deadline = time.monotonic() + timeout_s
        for cluster, pid in stopping:
            try:
                wait_until(
                    functools.partial(self._has_exited, cluster),
                    timeout_s=max(0.1, deadline - time.monotonic()),
                    interval_s=0.1,
                    description=f"{cluster.alias} (pid {pid}) to exit",
                )
                done.append(f"{cluster.alias}: stopped (pid {pid})")
            except WaitTimeout:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                wait_until(
                    functools.partial(self._has_exited, cluster),
                    timeout_s=10,
                    interval_s=0.1,
                    description=f"{cluster.alias} (pid {pid}) to die after SIGKILL",
                )
                done.append(f"{cluster.alias}: killed after {timeout_s:g}s without a clean shutdown (pid {pid})")
            child = self._children.pop(cluster.alias, None)
            if child is not None:
                child.wait(timeout=10)
        state = self._load_state()
        for cluster, _ in stopping:
            state.get(cluster.alias, {}).pop("pid", None)
        if state:
            self._save_state(state)
        if all(self._pid_of(cluster) is None for cluster in self.clusters()):
            done += filter(None, [stop_provider(self.state_dir)])  # the oidc mode's, once no broker needs it
        return done

    def purge(self) -> list[str]:
        """Delete what `up` created in the state dir (state, config, each cluster's data and logs, the `run` dir) and
        the dir itself when nothing else is left in it; nothing else is touched. Refused while a broker runs."""
        running = [c.alias for c in self.clusters() if self._pid_of(c) is not None]
        if running:
            raise LocalClusterError(f"{', '.join(running)} still running in {self.state_dir}: stop them first")
        if not self._state_path.exists():
            raise LocalClusterError(f"{self.state_dir} holds no local clusters (no state.json): nothing to purge")
        removed: list[str] = []
        made = [
            *(self.state_dir / alias for alias in ALIASES),
            self.state_dir / "run",
            self.config_path,
            self._state_path,
            *security_paths(self.state_dir),
        ]
        for path in made:
            if path.is_dir():
                shutil.rmtree(path)
                removed.append(f"removed {path}")
            elif path.exists():
                path.unlink()
                removed.append(f"removed {path}")
        with contextlib.suppress(OSError):  # not empty: someone else's files stay
            self.state_dir.rmdir()
        return removed

    def kill(self, alias: str) -> None:
        """SIGKILL one broker (for failure tests): no clean shutdown, like a crashed machine."""
        cluster = self.cluster(alias)
        pid = self._pid_of(cluster)
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        wait_until(functools.partial(self._has_exited, cluster), timeout_s=10, description=f"{alias} to die")
        child = self._children.pop(alias, None)
        if child is not None:
            child.wait(timeout=10)

    def freeze(self, alias: str) -> None:
        """SIGSTOP one broker (for failure tests): it holds its connections and answers nothing, like a machine
        that hangs. `thaw` undoes it."""
        self._signal(alias, signal.SIGSTOP)

    def thaw(self, alias: str) -> None:
        self._signal(alias, signal.SIGCONT)

    def _signal(self, alias: str, signum: int) -> None:
        pid = self._pid_of(self.cluster(alias))
        if pid is None:
            raise LocalClusterError(f"{alias} is not running")
        os.kill(pid, signum)


def describe(clusters: LocalClusters) -> dict[str, object]:
    """A JSON-able view of the state, for `mirrorwatch local status --json`."""
    return {
        "state_dir": str(clusters.state_dir),
        "config": str(clusters.config_path),
        "clusters": [
            {
                **{k: str(v) for k, v in asdict(s.cluster).items() if v is not None},
                "bootstrap_servers": s.cluster.bootstrap_servers,
                "running": s.is_running,
                "pid": s.pid,
                "log": str(s.cluster.log_path),
            }
            for s in clusters.status()
        ],
    }
