"""Simulated hosts for the tests that cross a network (issue #44): a network namespace per host, reached from this one
through a router of its own (a second namespace that forwards), and the faults a WAN link has, made in the router.

    this host 10.a.b.1 --veth-- 10.a.b.2 router 10.a.b.5 --veth-- 10.a.b.6 the host (namespace mwt<pid>-<n>)

    host = NetHost.make()
    host.cut()   / host.heal()       # every packet dropped both ways: connections hang, never refused
    host.slow(100)                   # both ways rate-limited to 100 kbit/s (tbf), queueing up to 400 ms
    with host.flapping(2, 2): ...    # down 2 s, up 2 s, until the block ends
    host.close()                     # the namespace and both veth ends gone
    host = NetHost.make(relayed=True); host.delay(port, 25)   # a relay in the router: 25 ms each way (no netem here)
    with clusters_apart(dir) as apart: ...   # the local clusters, each on a host of its own

A process may run on a host of its own too, reaching the cluster hosts by doors of its own (`ClientHost`: a namespace,
and per cluster host a router namespace into it), so that its paths are cut apart from this host's:

    client = ClientHost.make(); door = client.door_to(host)   # then `ip netns exec client.name ...`
    door.cut() / door.heal()                                  # only the client's path to that host

The faults are queueing disciplines on the router's two interfaces, never on an end's own: a packet dropped by the
sender's own qdisc is a local congestion signal to its TCP, which then retries within a second, not the silence of a
real partition (measured: a 30 s cut made that way recovered in 1 s; through the router, TCP backs off as over a
WAN). The cut is tbf too (this kernel has neither netem nor tc filters): a token bucket smaller than any packet passes
none. Traffic goes only to addresses inside namespaces made here. Names carry the making process' pid: `sweep()`
removes what a killed run left behind.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernel.processes import die_with_parent
from localkafka.local import LocalClusters, Placement

__all__ = ["Apart", "ClientHost", "Door", "NetHost", "clusters_apart", "sweep"]

PREFIX = "mwt"
_counter = itertools.count(1)
_lock = threading.Lock()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _tc(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, "tc", *args], capture_output=True, text=True, check=check, timeout=30)


_given: set[tuple[int, int]] = set()  # subnets this process gave out (a door's addresses are all in namespaces)


def _taken_subnets() -> set[tuple[int, int]]:
    out = _ip("-o", "-4", "addr", "show").stdout
    return {(int(a), int(b)) for a, b in re.findall(r"inet 10\.(\d+)\.(\d+)\.", out)} | _given


def _subnet() -> tuple[int, int]:
    """A 10.a.b.0/24 no interface of this host and nothing made here uses (under _lock)."""
    taken = _taken_subnets()
    chosen = random.choice([(a, b) for a in range(200, 250) for b in range(256) if (a, b) not in taken])
    _given.add(chosen)
    return chosen


def _shape(router: str, devices: tuple[str, ...], spec: tuple[str, ...]) -> None:
    """The same root qdisc on each of a router's interfaces (each shapes what it forwards), or none."""
    for dev in devices:
        _tc("qdisc", "del", "dev", dev, "root", netns=router, check=False)
        if spec:
            _tc("qdisc", "add", "dev", dev, "root", *spec, netns=router)


CUT = ("tbf", "rate", "1kbit", "burst", "10", "limit", "10")  # a bucket smaller than any packet: none passes


@dataclass
class NetHost:
    name: str  # the namespace
    host: str  # its address, as this host reaches it
    peer: str  # this host's address on the pair to the router
    outside: str  # the veth end on this host
    router: str  # the router's namespace: its interfaces `ra` (towards this host) and `rb` (towards the host)
    relay_address: str = ""  # a relay's address in the router (`relayed`), routed from this host: `delay`
    relay: subprocess.Popen[bytes] | None = None

    @classmethod
    def make(cls, *, relayed: bool = False) -> NetHost:
        """A new namespace with its loopback up, reached through a router namespace of its own (root only);
        `relayed`: with an address in the router for a delaying relay in front of the host (`delay`)."""
        with _lock:
            n = next(_counter)
            a, b = _subnet()
            pid = os.getpid()
            made = cls(
                name=f"{PREFIX}{pid}-{n}",
                host=f"10.{a}.{b}.6",
                peer=f"10.{a}.{b}.1",
                outside=f"mwh{pid}x{n}",
                router=f"{PREFIX}{pid}-{n}r",
            )
            net, router = f"10.{a}.{b}", made.router
            try:
                _ip("netns", "add", made.name)
                _ip("netns", "add", router)
                _ip("link", "add", made.outside, "type", "veth", "peer", "name", "ra", "netns", router)
                _ip("-n", router, "link", "add", "rb", "type", "veth", "peer", "name", "eth0", "netns", made.name)
                _ip("addr", "add", f"{made.peer}/30", "dev", made.outside)
                _ip("link", "set", made.outside, "up")
                _ip("-n", router, "addr", "add", f"{net}.2/30", "dev", "ra")
                _ip("-n", router, "addr", "add", f"{net}.5/30", "dev", "rb")
                for dev in ("ra", "rb", "lo"):
                    _ip("-n", router, "link", "set", dev, "up")
                _ip("-n", made.name, "addr", "add", f"{made.host}/30", "dev", "eth0")
                _ip("-n", made.name, "link", "set", "eth0", "up")
                _ip("-n", made.name, "link", "set", "lo", "up")
                _ip("-n", made.name, "route", "add", "default", "via", f"{net}.5")
                _ip("route", "add", f"{net}.4/30", "via", f"{net}.2")  # gone with the veth end
                _ip("netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1")  # the router's own
                if relayed:
                    made.relay_address = f"{net}.9"
                    _ip("-n", router, "addr", "add", f"{net}.9/32", "dev", "lo")
                    _ip("route", "add", f"{net}.8/30", "via", f"{net}.2")
            except subprocess.CalledProcessError as exc:
                made.close()
                raise RuntimeError(f"cannot make network namespace {made.name}: {exc.stderr.strip()}") from None
            return made

    def _qdisc(self, *spec: str) -> None:
        _shape(self.router, ("ra", "rb"), spec)

    def cut(self) -> None:
        """Drop every packet both ways (a partition: connections hang, nothing is refused)."""
        self._qdisc(*CUT)

    def slow(self, kbit: int) -> None:
        """Rate-limit both ways to `kbit` kbit/s (queueing up to 400 ms, then dropping, as a congested link)."""
        burst = max(4096, kbit * 1000 // 8 // 50)  # at least a few packets; 20 ms of the rate at high rates
        self._qdisc("tbf", "rate", f"{kbit}kbit", "burst", str(burst), "latency", "400ms")

    def heal(self) -> None:
        self._qdisc()

    @contextlib.contextmanager
    def flapping(self, down_s: float, up_s: float) -> Iterator[None]:
        """Down `down_s`, up `up_s`, over and over until the block ends (healed then)."""
        stop = threading.Event()

        def flap() -> None:
            while not stop.is_set():
                self.cut()
                if stop.wait(down_s):
                    break
                self.heal()
                stop.wait(up_s)

        thread = threading.Thread(target=flap, name=f"flap-{self.name}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=30)
            self.heal()

    def delay(self, port: int, delay_ms: float) -> None:
        """Start the relay (bench.relay) in the router: `relay_address:port` forwarded to `host:port`, every byte
        `delay_ms` later each way. The broker must advertise the relay's address (`Placement.advertised`)."""
        if not self.relay_address:
            raise RuntimeError(f"{self.name} was made without a relay address (NetHost.make(relayed=True))")
        command = [
            *("ip", "netns", "exec", self.router, sys.executable, "-m", "bench.relay"),
            *("--listen", f"{self.relay_address}:{port}", "--to", f"{self.host}:{port}", "--delay-ms", str(delay_ms)),
        ]
        self.relay = subprocess.Popen(
            command,
            cwd=Path(__file__).resolve().parents[1],  # where `-m bench.relay` is found
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only calls prctl
        )
        said = self.relay.stdout.readline().decode() if self.relay.stdout is not None else ""
        if not said.startswith("relay:"):
            self.relay.kill()
            raise RuntimeError(f"the relay in {self.router} did not start: {said.strip()}")

    def close(self) -> None:
        """The namespaces go, and with them the veth pairs and the route (a process left in one is the caller's)."""
        if self.relay is not None:
            self.relay.terminate()
            try:
                self.relay.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.relay.kill()
                self.relay.wait(timeout=10)
        _ip("netns", "del", self.name, check=False)
        _ip("netns", "del", self.router, check=False)
        _ip("link", "del", self.outside, check=False)


@dataclass
class Door:
    """A client host's own path into a cluster host: a router namespace between the two (`da` towards the client,
    `db` towards the host); cut or healed apart from every other path into that host."""

    router: str
    host: NetHost

    def cut(self) -> None:
        _shape(self.router, ("da", "db"), CUT)

    def heal(self) -> None:
        _shape(self.router, ("da", "db"), ())


@dataclass
class ClientHost:
    """A namespace for a process (a mirror, a monitor) that reaches the cluster hosts by doors of its own, so that its
    network can fail apart from this host's. Run the process with `ip netns exec <name> ...`."""

    name: str
    doors: dict[str, Door]
    homes: list[str] = field(default_factory=list)  # this host's ends of the paths home()

    @classmethod
    def make(cls) -> ClientHost:
        with _lock:
            made = cls(f"{PREFIX}{os.getpid()}-{next(_counter)}c", {})
        try:
            _ip("netns", "add", made.name)
            _ip("-n", made.name, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as exc:
            made.close()
            raise RuntimeError(f"cannot make network namespace {made.name}: {exc.stderr.strip()}") from None
        return made

    def door_to(self, host: NetHost) -> Door:
        """A path of this client's own into `host` (its broker's address reached through it, and answered through
        it: a route in the host for this client's address alone)."""
        with _lock:
            n = next(_counter)
            a, b = _subnet()
        net, door = f"10.{a}.{b}", Door(f"{PREFIX}{os.getpid()}-{n}d", host)
        near, far = f"c{n}", f"d{n}"  # the client's end, the host's end
        try:
            _ip("netns", "add", door.router)
            _ip("-n", door.router, "link", "add", "da", "type", "veth", "peer", "name", near, "netns", self.name)
            _ip("-n", door.router, "link", "add", "db", "type", "veth", "peer", "name", far, "netns", host.name)
            _ip("-n", door.router, "addr", "add", f"{net}.2/30", "dev", "da")
            _ip("-n", door.router, "addr", "add", f"{net}.5/30", "dev", "db")
            for dev in ("da", "db", "lo"):
                _ip("-n", door.router, "link", "set", dev, "up")
            _ip("-n", self.name, "addr", "add", f"{net}.1/30", "dev", near)
            _ip("-n", self.name, "link", "set", near, "up")
            _ip("-n", host.name, "addr", "add", f"{net}.6/30", "dev", far)
            _ip("-n", host.name, "link", "set", far, "up")
            _ip("-n", self.name, "route", "add", f"{host.host}/32", "via", f"{net}.2")
            _ip("-n", door.router, "route", "add", f"{host.host}/32", "via", f"{net}.6")
            _ip("-n", host.name, "route", "add", f"{net}.1/32", "via", f"{net}.5")  # answers go back this way
            _ip("netns", "exec", door.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        except subprocess.CalledProcessError as exc:
            _ip("netns", "del", door.router, check=False)
            raise RuntimeError(f"cannot make a door into {host.name}: {exc.stderr.strip()}") from None
        self.doors[host.name] = door
        return door

    def home(self) -> str:
        """A path from this host straight into the client's namespace (a veth pair, never cut), by which this host
        reaches what the client serves (a monitor's HTTP API): the client's address on it, which it may bind."""
        with _lock:
            n = next(_counter)
            a, b = _subnet()
            outside = f"mwh{os.getpid()}x{n}"  # named as NetHost's ends: sweep() finds a killed run's
        try:
            _ip("link", "add", outside, "type", "veth", "peer", "name", f"home{n}", "netns", self.name)
            self.homes.append(outside)
            _ip("addr", "add", f"10.{a}.{b}.1/30", "dev", outside)
            _ip("link", "set", outside, "up")
            _ip("-n", self.name, "addr", "add", f"10.{a}.{b}.2/30", "dev", f"home{n}")
            _ip("-n", self.name, "link", "set", f"home{n}", "up")
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"cannot make a path home from {self.name}: {exc.stderr.strip()}") from None
        return f"10.{a}.{b}.2"

    def close(self) -> None:
        """The doors' routers (and with them their veth pairs, the host ends included), the paths home and the
        namespace go."""
        for door in self.doors.values():
            _ip("netns", "del", door.router, check=False)
        _ip("netns", "del", self.name, check=False)
        for outside in self.homes:
            _ip("link", "del", outside, check=False)


def sweep() -> list[str]:
    """Remove the namespaces (and their veth pairs) of test runs whose process is gone."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        match = re.match(rf"({PREFIX}(\d+)-\d+[rdc]?)", line)
        if match is None or os.path.exists(f"/proc/{match.group(2)}"):
            continue
        _ip("netns", "del", match.group(1), check=False)
        removed.append(match.group(1))
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        match = re.search(r"\d+: (mwh(\d+)x\d+)[@:]", line)
        if match is not None and not os.path.exists(f"/proc/{match.group(2)}"):
            _ip("link", "del", match.group(1), check=False)
    return removed


@contextlib.contextmanager
def clusters_apart(
    state_dir: Path,
    aliases: tuple[str, ...] = ("source", "target"),
    *,
    client: bool = False,
    delay_ms: Mapping[str, float] | None = None,
    lean: bool = False,
) -> Iterator[Apart]:
    """The local clusters, each on a host of its own (`NetHost`), started, and at the end stopped and their hosts
    removed. `client`: a client host besides, with a door into each (`Apart.client`); `delay_ms`: per alias, a
    relay in front of that cluster's broker delaying every byte so much each way (the broker advertises the relay;
    this host's clients only: doors do not route to it). `lean`: the test suite's cheaper brokers (localkafka.lean),
    never for figures."""
    hosts: dict[str, NetHost] = {}
    made: ClientHost | None = None
    delays = dict(delay_ms or {})
    try:
        for alias in aliases:
            hosts[alias] = NetHost.make(relayed=alias in delays)
        if client:
            made = ClientHost.make()
            for host in hosts.values():
                made.door_to(host)
        clusters = LocalClusters(
            state_dir,
            progress=lambda _line: None,
            placement={a: Placement(h.name, h.host, h.relay_address or None) for a, h in hosts.items()},
            lean=lean,
        )
        try:
            clusters.up(aliases, tie_to_parent=True)
            for alias, delay in delays.items():
                hosts[alias].delay(clusters.cluster(alias).broker_port, delay)
            yield Apart(clusters, hosts, made)
        finally:
            clusters.down(aliases)
    finally:
        if made is not None:
            made.close()
        for host in hosts.values():
            host.heal()
            host.close()


@dataclass(frozen=True)
class Apart:
    clusters: LocalClusters
    hosts: Mapping[str, NetHost]
    client: ClientHost | None = None  # a host of its own with a door into each cluster's (clusters_apart(client=))

    @contextlib.contextmanager
    def client_hosts(self, count: int) -> Iterator[list[ClientHost]]:
        """`count` more client hosts, each with a door into every cluster's host (a fleet: issue #45), removed at
        the end of the block."""
        made: list[ClientHost] = []
        try:
            for _ in range(count):
                made.append(ClientHost.make())
                for host in self.hosts.values():
                    made[-1].door_to(host)
            yield made
        finally:
            for client in made:
                client.close()
