"""Run a config's python links: in this process when there is one worker, else one process per worker.

`num_streams: N` runs N worker processes in the link's consumer group (the GIL makes threads useless for this
work); the group spreads the partitions over them. Workers get SIGTERM when the runner is stopped and die with it
(PR_SET_PDEATHSIG) if it is killed. The runner's exit code is the worst of its workers'.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import signal
import sys
import threading
from multiprocessing.context import SpawnProcess

from kernel.access import require_access
from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.errors import ConfigError, ConfigProblem, MirrorwatchError
from mirror.engine import LinkWorker
from mirror.settings import client_problems
from mirror.worker import WorkerBase

__all__ = ["GC_THRESHOLDS", "python_links", "run_links", "tune_gc", "worker_for"]

log = logging.getLogger("mirrorwatch.mirror")

WORKER_STOP_TIMEOUT_S = 60.0
# CPython collects its youngest generation every 700 new container objects and, now and then, every object alive.
# A busy worker keeps every in-flight record's delivery-report tuple alive (up to queue.buffering.max.messages),
# so with the defaults the collector re-scanned hundreds of thousands of live objects over and over: measured
# 2.1 of 2.6 us per record in a loop shaped like the engine's, and most of the engine's CPU on 100-byte records.
# The engine makes next to no reference cycles, so it collects rarely; `gc.freeze()` also moves everything alive
# after start-up (modules, config) out of the collector's way for good.
GC_THRESHOLDS = (50_000, 20, 100)


def python_links(config: MirrorwatchConfig, only: str | None = None, *, skip_spark: bool = False) -> list[LinkConfig]:
    """The python-engine links to run (all, or the one named). A spark link runs alone, as its own Spark driver
    (`mirrorwatch mirror --config F --link NAME`): it is refused here, or left out with a log line (`skip_spark`)."""
    links = [config.link(only)] if only else list(config.links)
    if not links:
        raise ConfigError([ConfigProblem("links", "the config has no links to mirror")])
    spark = [link for link in links if link.engine == "spark"]
    if spark and not skip_spark:
        raise ConfigError(
            [
                ConfigProblem(
                    f"links[{config.links.index(link)}].engine",
                    f"link {link.name!r} uses engine spark, which runs one link per Spark driver: "
                    f"run it with `mirrorwatch mirror --config F --link {link.name}`",
                )
                for link in spark
            ]
        )
    for link in spark:
        log.warning("link %s uses engine spark: not run here; run `mirrorwatch mirror --link %s`", link.name, link.name)
    chosen = [link for link in links if link.engine == "python"]
    problems = [problem for link in chosen for problem in client_problems(config, link)]
    if problems:
        raise ConfigError(problems)
    return chosen


def worker_for(config: MirrorwatchConfig, link: LinkConfig, *, stop: threading.Event, worker: int = 0) -> WorkerBase:
    config = config.as_client("mirror")  # its own principal, when `clusters.X.clients.mirror` names one
    if link.delivery == "exactly-once":
        from mirror.transactional import TransactionalLinkWorker

        return TransactionalLinkWorker(config, link, stop=stop, worker=worker)
    return LinkWorker(config, link, stop=stop, worker=worker)


def tune_gc() -> None:
    """Garbage-collector settings for a process that mirrors (see GC_THRESHOLDS); the process's, so call it where a
    process starts mirroring, once."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run_links(config: MirrorwatchConfig, links: list[LinkConfig], stop: threading.Event) -> int:
    config = config.as_client("mirror")
    require_access(config, [alias for link in links for alias in (link.source, link.target)], ("mirror",))
    workers = [(link, i) for link in links for i in range(link.num_streams)]
    if len(workers) == 1:
        link, _ = workers[0]
        tune_gc()
        return worker_for(config, link, stop=stop).run()
    context = multiprocessing.get_context("spawn")
    level = logging.getLogger().getEffectiveLevel()
    processes: list[SpawnProcess] = []
    for link, i in workers:
        process = context.Process(
            target=_worker_main, args=(config, link.name, i, level), name=f"mirrorwatch-{link.name}-{i}"
        )
        process.start()
        processes.append(process)
    log.info("started %d worker process(es) for %d link(s)", len(processes), len(links))
    while not stop.is_set() and all(p.is_alive() for p in processes):
        stop.wait(0.5)
    for process in processes:
        if process.is_alive() and process.pid is not None:
            process.terminate()  # SIGTERM: the worker stops cleanly and commits
    codes = []
    for process in processes:
        process.join(WORKER_STOP_TIMEOUT_S)
        if process.is_alive():
            log.error("worker %s did not stop within %gs; killing it", process.name, WORKER_STOP_TIMEOUT_S)
            process.kill()
            process.join(10)
        codes.append(process.exitcode if process.exitcode is not None else 1)
    failed = [c for c in codes if c != 0]
    if not failed:
        return 0
    return 2 if all(c == 2 for c in failed) else 1  # 2 only when every failure was bad config


def _worker_main(config: MirrorwatchConfig, link_name: str, worker: int, level: int) -> None:
    from kernel.processes import die_with_parent

    die_with_parent()
    logging.basicConfig(
        level=level, format=f"%(asctime)s %(levelname)s %(name)s[{worker}]: %(message)s", stream=sys.stderr
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the runner decides
    tune_gc()
    try:
        code = worker_for(config, config.link(link_name), stop=stop, worker=worker).run()
    except MirrorwatchError as exc:
        log.error("%s", exc)
        code = exc.exit_code
    sys.exit(code)
