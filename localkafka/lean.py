"""Lean local brokers, for a test suite that runs ten of them beside its work on two cores (`LocalClusters(lean=True)`):
cheaper to start and to keep, not for figures (the benchmarks' brokers are the default ones).

Imports: nothing (text the brokers are started with)."""

from __future__ import annotations

__all__ = ["LEAN_JVM", "LEAN_PROPERTIES"]

# A lean broker (tests): fewer request and background threads, and the controller's no-op metadata record every 5 s
# instead of every 0.5 s (with one node it proves nothing to anyone). Measured on this machine, a pair's CPU: start
# 6.8 -> 4.9 s, 100,000 records in and out 3.0 -> 1.5 s, a minute idle 3.7 -> 1.8 s (with LEAN_JVM).
LEAN_PROPERTIES = """\
num.network.threads=1
num.io.threads=2
background.threads=2
metadata.max.idle.interval.ms=5000
"""
# ... and its JVM: C1 only (a test broker's run is short: C2's compilations cost more CPU than they save), one
# compiler thread and one GC thread of each kind.
LEAN_JVM = ("-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-XX:ParallelGCThreads=1", "-XX:ConcGCThreads=1")
