"""mirrorwatch, the composition root: the `mirrorwatch` command (`cli`), the process wiring of `run`, `monitor` and
`canary` (`services`), the demo, and the commands that wire several domains (`check`, failover, migrate).

Imports: every room below it (the domains, `localkafka`, `kernel`); nothing imports it but the tests and the
benchmarks (`python -m mirrorwatch` and the console script start here)."""

__version__ = "0.1.0"
__all__ = ["__version__"]
