"""Simulated hosts for the tests that cross a network (issue #44): a network namespace per host, reached from this one
through a router of its own (a second namespace that forwards), and the faults a WAN link has, made in the router.

    this host 10.a.b.1 --veth-- 10.a.b.2 router 10.a.b.5 --veth-- 10.a.b.6 the host (namespace mwt<pid>-<n>)

    host = NetHost.make()
    host.cut()   / host.heal()       # every packet dropped both ways: connections hang, never refused
    host.slow(100)                   # both ways rate-limited to 100 kbit/s (tbf), queueing up to 400 ms
    with host.flapping(2, 2): ...    # down 2 s, up 2 s, until the block ends
    host.close()                     # the namespace and both veth ends gone
    with clusters_apart(dir) as apart: ...   # the local clusters, each on a host of its own

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
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from localkafka.local import LocalClusters, Placement

__all__ = ["Apart", "NetHost", "clusters_apart", "sweep"]

PREFIX = "mwt"
_counter = itertools.count(1)
_lock = threading.Lock()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _tc(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, "tc", *args], capture_output=True, text=True, check=check, timeout=30)


def _taken_subnets() -> set[tuple[int, int]]:
    out = _ip("-o", "-4", "addr", "show").stdout
    return {(int(a), int(b)) for a, b in re.findall(r"inet 10\.(\d+)\.(\d+)\.", out)}


@dataclass
class NetHost:
    name: str  # the namespace
    host: str  # its address, as this host reaches it
    peer: str  # this host's address on the pair to the router
    outside: str  # the veth end on this host
    router: str  # the router's namespace: its interfaces `ra` (towards this host) and `rb` (towards the host)

    @classmethod
    def make(cls) -> NetHost:
        """A new namespace with its loopback up, reached through a router namespace of its own (root only)."""
        with _lock:
            n = next(_counter)
            taken = _taken_subnets()
            free = [(a, b) for a in range(200, 250) for b in range(256) if (a, b) not in taken]
            a, b = random.choice(free)
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
            except subprocess.CalledProcessError as exc:
                made.close()
                raise RuntimeError(f"cannot make network namespace {made.name}: {exc.stderr.strip()}") from None
            return made

    def _qdisc(self, *spec: str) -> None:
        """The same root qdisc on both of the router's interfaces (each shapes what it forwards), or none."""
        for dev in ("ra", "rb"):
            _tc("qdisc", "del", "dev", dev, "root", netns=self.router, check=False)
            if spec:
                _tc("qdisc", "add", "dev", dev, "root", *spec, netns=self.router)

    def cut(self) -> None:
        """Drop every packet both ways (a partition: connections hang, nothing is refused)."""
        self._qdisc("tbf", "rate", "1kbit", "burst", "10", "limit", "10")

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

    def close(self) -> None:
        """The namespaces go, and with them the veth pairs and the route (a process left in one is the caller's)."""
        _ip("netns", "del", self.name, check=False)
        _ip("netns", "del", self.router, check=False)
        _ip("link", "del", self.outside, check=False)


def sweep() -> list[str]:
    """Remove the namespaces (and their veth pairs) of test runs whose process is gone."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        match = re.match(rf"({PREFIX}(\d+)-\d+r?)", line)
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
def clusters_apart(state_dir: Path, aliases: tuple[str, ...] = ("source", "target")) -> Iterator[Apart]:
    """The local clusters, each on a host of its own (`NetHost`), started, and at the end stopped and their hosts
    removed."""
    hosts: dict[str, NetHost] = {}
    try:
        for alias in aliases:
            hosts[alias] = NetHost.make()
        clusters = LocalClusters(
            state_dir,
            progress=lambda _line: None,
            placement={a: Placement(h.name, h.host) for a, h in hosts.items()},
        )
        try:
            clusters.up(aliases, tie_to_parent=True)
            yield Apart(clusters, hosts)
        finally:
            clusters.down(aliases)
    finally:
        for host in hosts.values():
            host.heal()
            host.close()


@dataclass(frozen=True)
class Apart:
    clusters: LocalClusters
    hosts: Mapping[str, NetHost]
