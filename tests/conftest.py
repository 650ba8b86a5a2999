"""Fixtures shared by every test.

Integration tests ask for `local_clusters` (or a fixture built on it): two real Kafka clusters started once per
session and always stopped, also on Ctrl-C and failures (and, should pytest itself be killed, by the kernel through
PR_SET_PDEATHSIG). To run against clusters already up (`mirrorwatch local up --state-dir DIR`), pass
`--clusters DIR` or set MIRRORWATCH_TEST_CLUSTERS=DIR: the suite then neither starts nor stops them. With
`--security MODE` the clusters the run starts are secured as `mirrorwatch local up --security MODE` makes them (the
tests that run on secured pairs in CI are those marked `secured`). Under pytest-xdist (`-n 3`, as `make test` runs
the suite) each worker starts a pair of its own; `--clusters` is one pair, so it is refused with more than one worker
(a test that kills a broker would fail the other worker's tests).
Unit tests ask for none of this and need no broker.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _pytest.capture import EncodedFile, FDCapture

from kernel.config import MirrorwatchConfig, load_config
from kernel.kafka import create_topics, new_admin
from localkafka.local import ALIASES, LocalClusters
from localkafka.local_security import MODES, TOKEN_SECONDS_ENV
from tests.kafka_helpers import remove_made
from tests.line_profile import LineSampler
from tests.processes import MirrorProcess, canary_topic_of, session_document
from tests.prometheus import prometheus_server
from tests.schedule import balanced, longest_files_first

# Every JVM the tests start (brokers, Spark drivers and workers, MirrorMaker 2) lives seconds to minutes and carries a
# few thousand records: the C2 compiler's work never pays back there. C1 alone (`TieredStopAtLevel=1`) takes a third of
# a test's CPU off (test_engine.py 91 -> 60 CPU-s, a Spark link 63 -> 37 CPU-s, a pair of brokers up in 5 CPU-s instead
# of 9), and on 2 cores the suite's time is its CPU. Users' JVMs and the bench's keep the full JIT; set here, before any
# fixture starts one, so every subprocess inherits it (each such JVM says "Picked up JAVA_TOOL_OPTIONS" on its stderr).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
if TEST_JVM_OPTIONS not in os.environ.get("JAVA_TOOL_OPTIONS", ""):
    os.environ["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {TEST_JVM_OPTIONS}".strip()


TEST_TOKEN_SECONDS = 20  # the oidc pair's token lifetime: librdkafka asks for the next one at 80 % of it


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--clusters",
        metavar="DIR",
        default=os.environ.get("MIRRORWATCH_TEST_CLUSTERS"),
        help="state dir of clusters already started with `mirrorwatch local up` (env MIRRORWATCH_TEST_CLUSTERS)",
    )
    parser.addoption(
        "--security",
        choices=MODES,
        default=os.environ.get("MIRRORWATCH_TEST_SECURITY", "plaintext"),
        help="how the clusters the run starts are secured, as `local up --security` (env MIRRORWATCH_TEST_SECURITY)",
    )
    parser.addoption(
        "--share",
        metavar="K/N",
        type=_share_option,
        help="run only share K (0 to N-1) of the selected tests, the N shares of about equal seconds (`alone(seconds=)`"
        " marks): N processes side by side, as scripts/test.sh runs the alone phase",
    )


def _share_option(value: str) -> str:
    index, _, shares = value.partition("/")
    if not (index.isdigit() and shares.isdigit() and int(index) < int(shares)):
        raise argparse.ArgumentTypeError(f"--share wants K/N with 0 <= K < N, not {value!r}")
    return value


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_HANG_STDERR] = os.dup(sys.__stderr__.fileno() if sys.__stderr__ else 2)  # before any capture
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist): workers inherit the variable
        os.environ[_CRASHED] = str(Path(tempfile.mkdtemp(prefix="mirrorwatch-tests-")) / "crashed")
        if os.environ.get(_PROGRESS):
            config.pluginmanager.register(_Progress(Path(os.environ[_PROGRESS])), "mirrorwatch-progress")
    else:
        _keep_captured_stderr(config)
    _dump_stacks_on_sigusr1(config)
    if os.environ.get("MIRRORWATCH_TEST_LINES") and not config.getoption("numprocesses", default=None):
        # where each test's seconds go, line by line (tests/line_profile.py): in each process that runs tests
        config.pluginmanager.register(LineSampler(Path(os.environ["MIRRORWATCH_TEST_LINES"])), "mirrorwatch-lines")
    workers = config.getoption("numprocesses", default=None)
    if config.getoption("--clusters") and isinstance(workers, int) and workers > 1:
        raise pytest.UsageError(
            f"--clusters {config.getoption('--clusters')} is one pair of clusters for all {workers} workers (a test "
            "that kills a broker would fail the other workers' tests): run it without -n"
        )


# The secured subset (`-m secured --security MODE`, scripts/test.sh): a test marked `secured` runs on every secured
# mode, one marked `secured("oidc")` on the modes it names only (and on plaintext, as every test does), one marked
# `secured("oidc", only=True)` on the modes it names and nowhere else (token refreshes: there is nothing to refresh
# elsewhere). What differs between the modes is how a client authenticates and so who its principal is (SCRAM's user,
# the certificate's name, the token's subject): the clients of each kind (python, Spark, MirrorMaker 1's properties),
# the local pair and whatever names principals (check, ACL sync) run on every mode; what only uses a client runs on
# the token modes (docs/development.md says which).
def _deselect_other_modes(config: pytest.Config, items: list[pytest.Item]) -> None:
    mode = config.getoption("--security")
    kept: list[pytest.Item] = []
    other: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("secured")
        named = marker.args if marker is not None else ()
        only = marker is not None and marker.kwargs.get("only", False)  # a fact of those modes alone (not plaintext)
        (other if (mode != "plaintext" or only) and named and mode not in named else kept).append(item)
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = kept


# The alone phase (scripts/test.sh): N pytest processes side by side (4), each with a pair of its own, each given
# `--share K/N`: the tests of share K, where `tests.schedule.balanced` puts each test marked `alone(seconds=N)` (what
# it took in that phase, three or four at a time) so that the shares' seconds are about equal. (pytest-xdist's
# `--dist load` hands them out in collection order two at a time per worker, the longest started last: three workers
# ran 372 s for 348 s each; its loadgroup, which could pin them, does not group under pytest 9, whose node ids it
# cannot suffix.)
def _share(config: pytest.Config, items: list[pytest.Item]) -> None:
    share = config.getoption("--share")
    if not share:
        return
    index, shares = (int(part) for part in share.split("/"))
    seconds = []
    for item in items:
        marker = item.get_closest_marker("alone")
        seconds.append(float(marker.kwargs.get("seconds", 0)) if marker is not None else 0.0)
    chosen = balanced(seconds, shares)
    other = [item for item, share_of in zip(items, chosen, strict=True) if share_of != index]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = [item for item, share_of in zip(items, chosen, strict=True) if share_of == index]


# The 3-worker phase (`-n 3 --dist loadfile --no-loadscope-reorder`): whole files, the longest first
# (`tests.schedule.longest_files_first`, by each file's budget in tests/durations.json for that phase), so that no long
# file is the last one a worker takes. Without --no-loadscope-reorder pytest-xdist orders the files by how many tests
# each has (test_spark_cluster.py, one test of 150-230 s, came last).
DURATIONS = Path(__file__).resolve().parent / "durations.json"


def _longest_files_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A pytest-xdist worker collects what the controller schedules, in the worker's order (each worker sorts alike;
    # on a worker, -n and --dist read None and "no": it is known by its workerinput).
    if not hasattr(config, "workerinput"):
        return
    budgets = json.loads(DURATIONS.read_text())
    seconds_of = {key.split(":", 1)[1]: float(s) for key, s in budgets.items() if key.startswith("main:")}
    items[:] = [items[i] for i in longest_files_first([item.nodeid for item in items], seconds_of)]


@pytest.hookimpl(hookwrapper=True)  # after every plugin's own: the tests -m selected are the ones shared
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    yield
    _deselect_other_modes(config, items)
    _share(config, items)
    _longest_files_first(config, items)


# pytest-timeout (360 s, the signal method) fails a test that hangs in Python, but a call blocked inside a C library
# (librdkafka waiting on a broker) never returns to the interpreter for its signal handler to run: the run would
# hang to CI's limit. So a watchdog outside the interpreter (faulthandler's own thread) dumps every thread's stack
# and ends this process once a test outlives pytest-timeout by a margin; under pytest-xdist the worker is replaced,
# the test is reported failed ("worker crashed") and the run goes on (tests/test_harness.py shows it).
HANG_MARGIN_S = 60
_HANG_STDERR = pytest.StashKey[int]()


# A crashed worker's test is not run again: pytest-xdist (--dist loadfile) hands the rest of the crashed worker's file
# to a new worker, the crashed test included, and a test that crashes every time would take every new worker with it.
# The controller writes the crashed test's id to a file all workers know; a worker skips an id it finds there (its
# failure stands as reported).
_CRASHED = "MIRRORWATCH_TEST_CRASHED_FILE"


# scripts/phase.py runs each phase of `make test` with a time limit, and says what the phase was doing when the limit
# ended it: which tests had started and not ended (the controller writes a line as each starts and ends) and where
# every pytest process's threads stood (each dumps them to a file of its own on SIGUSR1).
_PROGRESS = "MIRRORWATCH_TEST_PROGRESS"
_STACKS = "MIRRORWATCH_TEST_STACKS"
_STACKS_FILE = pytest.StashKey[Any]()


class _Progress:
    def __init__(self, path: Path) -> None:
        self._file = path.open("a", buffering=1)
        self._outcomes: dict[str, str] = {}

    def _line(self, *fields: str) -> None:
        self._file.write("\t".join([f"{time.time():.1f}", *fields]) + "\n")

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._line("start", nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
        elif report.skipped:
            self._outcomes.setdefault(report.nodeid, "skipped")
        if report.when in ("teardown", "???"):  # "???": the report of a test whose worker crashed
            worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "")
            self._line("end", report.nodeid, self._outcomes.pop(report.nodeid, "passed"), worker)

    def pytest_unconfigure(self) -> None:
        self._file.close()


def _dump_stacks_on_sigusr1(config: pytest.Config) -> None:
    directory = os.environ.get(_STACKS)
    if not directory:
        return
    name = getattr(config, "workerinput", {}).get("workerid", "controller")
    stacks = open(Path(directory) / f"{name}.stacks", "w")  # noqa: SIM115 (open while the process lives)
    config.stash[_STACKS_FILE] = stacks
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    (Path(directory) / f"{name}.pid").write_text(str(os.getpid()))


def pytest_unconfigure(config: pytest.Config) -> None:
    os.close(config.stash[_HANG_STDERR])
    stacks = config.stash.get(_STACKS_FILE, None)
    if stacks is not None:
        faulthandler.unregister(signal.SIGUSR1)
        stacks.close()
    if not hasattr(config, "workerinput") and os.environ.get(_CRASHED):
        shutil.rmtree(Path(os.environ.pop(_CRASHED)).parent, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: object) -> None:
    path = os.environ.get(_CRASHED)
    if path:
        with open(path, "a") as crashed:
            crashed.write(crashitem + "\n")
        # what the crashed test wrote to fd 2 last (a C library's assertion, e.g. librdkafka's "*** ... assert ***")
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "")
        stderr = Path(path).parent / f"{worker}.stderr"
        if worker and stderr.exists():
            with stderr.open("rb") as f:
                f.seek(max(0, stderr.stat().st_size - 4000))
                tail = f.read().decode(errors="replace")
            report.longrepr = f"{report.longrepr}\n--- the end of what it wrote to stderr (fd 2) ---\n{tail}"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` whose crash recovery does not deadlock (`after_crash_loadfile`); None: xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    return after_crash_loadfile()(config, log)


def after_crash_loadfile() -> type:
    """pytest-xdist's LoadFileScheduling, but a crashed worker's *completed* files are not queued again. xdist's
    `remove_node` puts every file the worker was given back in the queue, finished ones included; each is later
    handed to a worker as an empty batch, which gives it nothing to run after the test it holds, so no test of it
    completes and it is never given more: once each worker holds one such, the run waits forever (seen: CI's main
    phase at its limit, every worker idle, the crashed worker's unfinished files never run)."""
    from xdist.scheduler.loadfile import LoadFileScheduling  # type: ignore[import-untyped]

    class AfterCrashLoadFile(LoadFileScheduling):  # type: ignore[misc]
        def remove_node(self, node: Any) -> str | None:
            workload = self.assigned_work.get(node, {})
            for scope in [scope for scope, unit in workload.items() if all(unit.values())]:
                del workload[scope]
            crashitem: str | None = super().remove_node(node)
            return crashitem

    return AfterCrashLoadFile


def _keep_captured_stderr(config: pytest.Config) -> None:
    """Under pytest-xdist: what a test writes to fd 2 is captured into a file that outlives the worker (pytest's own
    is unlinked, and gone with a worker that aborts), so that the controller can show it (`pytest_handlecrashitem`).
    pytest's capture internals; nothing changes where they are not as expected."""
    capman = config.pluginmanager.getplugin("capturemanager")
    err = getattr(getattr(capman, "_global_capturing", None), "err", None)
    workerinput = getattr(config, "workerinput", {})
    crashed = os.environ.get(_CRASHED)
    if not (crashed and isinstance(err, FDCapture) and err.targetfd == 2 and err._state in ("started", "suspended")):
        return
    raw = (Path(crashed).parent / f"{workerinput.get('workerid', 'gw')}.stderr").open("w+b", buffering=0)
    kept = EncodedFile(raw, encoding="utf-8", errors="replace", newline="", write_through=True)
    if err._state == "started":  # else resume() points fd 2 at the new file
        os.dup2(raw.fileno(), 2)
    if sys.stderr is err.tmpfile:
        sys.stderr = kept
    if getattr(err.syscapture, "tmpfile", None) is err.tmpfile:
        err.syscapture.tmpfile = kept  # type: ignore[attr-defined]
    err.tmpfile = kept


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    path = os.environ.get(_CRASHED)
    if path and os.path.exists(path) and item.nodeid in Path(path).read_text().splitlines():
        pytest.skip("crashed its pytest-xdist worker earlier in this run (reported failed there): not run again")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    marker = item.get_closest_marker("timeout")  # a test's own pytest-timeout, else the ini's
    own = (marker.args[0] if marker.args else marker.kwargs.get("timeout")) if marker is not None else None
    limit = float(own if own is not None else item.config.getini("timeout") or 0)
    timeout = float(os.environ.get("MIRRORWATCH_TEST_HANG_EXIT_S") or (limit + HANG_MARGIN_S))
    faulthandler.dump_traceback_later(timeout, exit=True, file=item.config.stash[_HANG_STDERR])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Status files of configs without `state_dir` go below the test's own directory (also in its subprocesses)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def gc_restored() -> Iterator[None]:
    """For a test that runs code which tunes this process's garbage collector (mirror.runner.tune_gc): the
    collector as it was, before and after."""
    before = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.fixture(scope="session")
def local_clusters(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusters]:
    existing = request.config.getoption("--clusters")
    if existing:
        clusters = LocalClusters(Path(existing), progress=lambda _line: None)
        down = [s.cluster.alias for s in clusters.status() if not s.is_running]
        if len(clusters.status()) != len(ALIASES) or down:
            pytest.exit(f"--clusters {existing}: clusters not running ({down or 'none defined'})", returncode=2)
        os.environ.update(clusters.security.environment())  # the client password, for this run's subprocesses too
        yield clusters
        return
    security = request.config.getoption("--security")
    if security == "oidc":  # tokens that expire every 20 s: every test on the oidc pair runs across refreshes (#65)
        os.environ.setdefault(TOKEN_SECONDS_ENV, str(TEST_TOKEN_SECONDS))
    clusters = LocalClusters(
        tmp_path_factory.mktemp("clusters"), progress=lambda _line: None, security=security, lean=True
    )
    try:
        clusters.up(tie_to_parent=True)
        os.environ.update(clusters.security.environment())
        yield clusters
    finally:
        clusters.down()


@pytest.fixture(autouse=True)
def _clusters_left_up(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that kills or freezes a broker and fails before it restarts or thaws it would leave this worker's every
    later test waiting on a dead broker to its own timeouts (a phase that crawls to its limit): after each test that
    used the clusters, a broker found down is started again and one found stopped (SIGSTOP) is thawed, and the test
    errors in its teardown saying so. Then what the test made there goes with it (`kafka_helpers.remove_made`), so
    that the worker's shared pair is as small for its last test as for its first."""
    yield
    if "local_clusters" not in request.fixturenames:
        return
    try:
        clusters: LocalClusters = request.getfixturevalue("local_clusters")
        config: MirrorwatchConfig = request.getfixturevalue("clusters_config")
    except Exception:  # they never started: the test has already failed saying why
        return
    mended = [] if request.config.getoption("--clusters") else mend(clusters)
    # What the test made goes with it (`kafka_helpers.remove_made`): names from `unique`, and its canary topic.
    made = re.compile(
        rf"-{re.escape(test_in_names(request))}-[0-9a-f]{{8}}|^{re.escape(canary_topic_of(request.node.nodeid))}$"
    )
    for line in remove_made(config.clusters, made):
        print(f"left on the clusters after the test: {line}", file=sys.stderr)
    if mended:
        pytest.fail(f"the test left its clusters broken ({'; '.join(mended)})")


def mend(clusters: LocalClusters) -> list[str]:
    """Start a broker found down and thaw one found stopped (SIGSTOP); what was done, for each."""
    mended = []
    for status in clusters.status():
        alias = status.cluster.alias
        if status.pid is None:
            clusters.up([alias], tie_to_parent=True)
            mended.append(f"{alias} was down: started again")
        elif _is_stopped(status.pid):
            clusters.thaw(alias)
            mended.append(f"{alias} was stopped (SIGSTOP): thawed")
    return mended


def _is_stopped(pid: int) -> bool:
    """Whether a thread of the process is stopped (SIGSTOP; the others follow within milliseconds)."""
    for task in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            if task.read_text().rsplit(")", 1)[1].split()[0] == "T":
                return True
        except (OSError, IndexError):
            continue
    return False


@pytest.fixture(scope="session")
def owns_clusters(request: pytest.FixtureRequest) -> bool:
    """True when this test run started the clusters (and so may tie restarted brokers to itself)."""
    return not request.config.getoption("--clusters")


@pytest.fixture(scope="session")
def clusters_config(local_clusters: LocalClusters) -> MirrorwatchConfig:
    return load_config(local_clusters.config_path)


def test_in_names(request: pytest.FixtureRequest) -> str:
    """The test as `unique` names carry it."""
    return re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60].strip("-")


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names no other test (or earlier run against the same clusters) uses: `<prefix>-<test>-<random>`."""
    test = test_in_names(request)

    def make(prefix: str) -> str:
        return f"{prefix}-{test}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def make_topic(clusters_config: MirrorwatchConfig, unique: Callable[[str], str]) -> Callable[..., str]:
    """Create a topic with a unique name on a cluster; returns its name. Time-based retention is off unless `config`
    sets it: tests write records with timestamps from 2023, which the broker's retention check (every 5 minutes)
    would otherwise delete in the middle of a later test."""

    def make(alias: str, partitions: int = 1, *, name: str | None = None, config: dict[str, str] | None = None) -> str:
        topic = name or unique("t")
        settings = {"retention.ms": "-1", **(config or {})}
        create_topics(new_admin(clusters_config.clusters[alias], alias), {topic: partitions}, config=settings)
        return topic

    return make


@pytest.fixture
def write_config(clusters_config: MirrorwatchConfig, tmp_path: Path) -> Callable[..., Path]:
    """A config file with the session clusters and the given links (dicts as in YAML)."""
    counter = iter(range(1000))

    def write(links: list[dict[str, Any]], **sections: Any) -> Path:
        document = session_document(clusters_config, links, **sections)
        path = tmp_path / f"mirrorwatch-{next(counter)}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    return write


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """`prometheus(port, thresholds, labels=None)`: a real Prometheus scraping 127.0.0.1:port with the shipped rules
    (with these thresholds, `labels` added to the target's series); its URL. Stopped at teardown."""
    with prometheus_server(tmp_path) as start:
        yield start


@pytest.fixture
def start_mirror(tmp_path: Path) -> Iterator[Callable[..., MirrorProcess]]:
    """Start `mirrorwatch mirror ARGS...` (or another command) as a real process; whatever is still running at
    teardown gets SIGTERM."""
    started: list[MirrorProcess] = []
    counter = iter(range(1000))

    def start(*args: str, command: str = "mirror") -> MirrorProcess:
        log_path = tmp_path / f"{command}-{next(counter)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "mirrorwatch.cli", command, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() takes the workers down with it
                cwd=tmp_path,  # what a process leaves in its working directory (a killed Spark driver: artifacts/)
            )
        started.append(MirrorProcess(process, log_path))
        return started[-1]

    yield start
    for mirror in started:
        if mirror.process.poll() is None:
            mirror.process.send_signal(signal.SIGTERM)
            try:
                mirror.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                mirror.process.kill()
                mirror.process.wait(timeout=10)
