"""The faults B5's harness injects (`bench.truth_harness`): process faults of the mirror and the brokers, and with the
clusters on hosts of their own (bench.netns; issue #44) the network's."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from bench.netns import ClientHost, NetHost
from localkafka.local import LocalClusters

__all__ = ["FAULTS", "NET_FAULTS", "SLOW_KBIT", "Fault", "check_faults", "fault_plan"]

FAULTS = ("mirror-kill", "mirror-stop", "target-kill", "target-stop", "source-restart")
# Faults of the network between this host and a cluster on a host of its own (bench.netns; issue #44): every packet
# dropped both ways (connections hang, nothing refused), rate-limited to SLOW_KBIT, or down 2 s / up 2 s.
# With the mirror on a client host of its own (`mirror_host`: bench.netns.ClientHost, a door into each cluster's host),
# these cut the mirror's doors, and "monitor-target-cut" the path from this host (the monitor's) to the target alone.
NET_FAULTS = ("target-cut", "source-cut", "target-slow", "target-flap", "monitor-target-cut")
SLOW_KBIT = 100


class Harnessed(Protocol):
    """What the faults act on: the run's clusters and its mirroring process (bench.truth_harness's harness; named
    here by what it offers, so that neither module imports the other)."""

    clusters: LocalClusters
    engine: subprocess.Popen[bytes] | None

    def start_engine(self) -> None: ...


def check_faults(
    faults: tuple[str, ...], *, one_process: bool, engine: str, network: bool, mirror_host: ClientHost | None
) -> None:
    """ValueError for a plan the harness cannot run."""
    unknown = set(faults) - set(FAULTS) - (set(NET_FAULTS) if network else set())
    if "monitor-target-cut" in faults and mirror_host is None:
        raise ValueError("monitor-target-cut cuts this host's path to the target: the mirror needs a host of its own")
    if mirror_host is not None and {"target-slow", "target-flap"} & set(faults):
        raise ValueError("a slow or flapping link is made on this host's path: run the mirror here for those")
    if unknown or (one_process and "mirror-stop" in faults) or (one_process and engine != "python"):
        raise ValueError(
            f"faults {sorted(unknown)} unknown (choose from {FAULTS}, and {NET_FAULTS} with clusters apart)"
            if unknown
            else "in one process a mirror freeze freezes the monitor too, and `run` carries python links only"
        )


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[], object]
    remove: Callable[[], object]
    hold_s: float  # how long it holds before it is removed (at least: see HELD_S)
    # The mirror falls behind only once the fault is removed (a source outage: nothing is acknowledged while the
    # source is down, then what the producers held arrives at once while the link's group joins again): the harness
    # waits for the truth to be HELD_S behind after the removal, not before it.
    behind_after_removal: bool = False
    holds_mirror: bool = True  # False: a fault of the monitor's alone, the mirror is not held back


def fault_plan(  # noqa: PLR0917 -- the run's parts, in order
    h: Harnessed,
    faults: tuple[str, ...],
    fault_s: float,
    tie_to_parent: bool,
    network: Mapping[str, NetHost],
    mirror_host: ClientHost | None = None,
) -> list[Fault]:
    def signal_engine(signum: int) -> Callable[[], None]:
        def send() -> None:  # to the process group: Spark's JVM is the driver's child
            assert h.engine is not None
            os.killpg(h.engine.pid, signum)
            if signum == signal.SIGKILL:
                h.engine.wait(30)

        return send

    clusters = h.clusters
    every: dict[str, Fault] = {
        "mirror-kill": Fault("mirror SIGKILL, restarted 3 s later", signal_engine(signal.SIGKILL), h.start_engine, 3),
        "mirror-stop": Fault(
            f"mirror SIGSTOP {fault_s:g} s", signal_engine(signal.SIGSTOP), signal_engine(signal.SIGCONT), fault_s
        ),
        "target-kill": Fault(
            f"target broker SIGKILL, restarted after {fault_s:g} s",
            lambda: clusters.kill("target"),
            lambda: clusters.up(["target"], tie_to_parent=tie_to_parent),
            fault_s,
        ),
        "target-stop": Fault(
            f"target broker SIGSTOP {fault_s:g} s",
            lambda: clusters.freeze("target"),
            lambda: clusters.thaw("target"),
            fault_s,
        ),
        # Down longer than the mirror's session timeout (10 s): the link's group loses its partitions and is given
        # them again once the source is back.
        "source-restart": Fault(
            f"source broker stopped {fault_s:g} s and restarted",
            lambda: clusters.down(["source"]),
            lambda: clusters.up(["source"], tie_to_parent=tie_to_parent),
            fault_s,
            behind_after_removal=True,
        ),
    }
    if network:
        flapping: list[contextlib.ExitStack] = []
        # the mirror's path to a cluster: its own door when it runs on a host of its own, else this host's
        target, source = (
            (mirror_host.doors[network[a].name] for a in ("target", "source"))
            if mirror_host is not None
            else (network["target"], network["source"])
        )

        def flap_start() -> None:
            flapping.append(contextlib.ExitStack())
            flapping[-1].enter_context(network["target"].flapping(2.0, 2.0))

        every |= {
            "target-cut": Fault(f"network to the target cut {fault_s:g} s", target.cut, target.heal, fault_s),
            # The source's producers are beside it (`truth_traffic.agent`): they go on, the mirror falls behind
            "source-cut": Fault(f"network to the source cut {fault_s:g} s", source.cut, source.heal, fault_s),
            "target-slow": Fault(
                f"network to the target slowed to {SLOW_KBIT} kbit/s for {fault_s:g} s",
                lambda: network["target"].slow(SLOW_KBIT),
                network["target"].heal,
                fault_s,
            ),
            # This host's path to the target: the monitor's alone once the mirror has doors of its own
            "monitor-target-cut": Fault(
                f"monitor cut off from the target {fault_s:g} s",
                network["target"].cut,
                network["target"].heal,
                fault_s,
                holds_mirror=False,
            ),
            "target-flap": Fault(
                f"network to the target flapping (2 s down, 2 s up) {fault_s:g} s",
                flap_start,
                lambda: flapping.pop().close(),
                fault_s,
            ),
        }
    return [every[name] for name in (*FAULTS, *NET_FAULTS) if name in faults]
