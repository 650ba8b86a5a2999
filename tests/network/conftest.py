"""The clusters apart (bench.netns), made once for the network tests of this package and torn down after them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from bench.netns import Apart, clusters_apart, sweep


@pytest.fixture(scope="package")
def apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apart]:
    sweep()  # what a killed run left
    with clusters_apart(tmp_path_factory.mktemp("apart"), client=True, lean=True) as made:
        assert made.client is not None
        names = [n for h in made.hosts.values() for n in (h.name, h.router)]
        names += [made.client.name, *(d.router for d in made.client.doors.values())]
        yield made
    # torn down: no namespace, veth pair or route of ours left (the brokers stopped before)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not [n for n in names if n in left.split()], left
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert not [h.outside for h in made.hosts.values() if f" {h.outside}@" in links or f" {h.outside}:" in links]
