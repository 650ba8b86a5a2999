"""The suite's own harness: a test that hangs where no Python signal handler can reach it, or aborts its worker, ends
as a failure with what it last wrote to stderr, and the run goes on (tests/conftest.py). Without it, one librdkafka
abort held a CI run until its limit, its assertion message lost with pytest's capture file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernel.config import MirrorwatchConfig
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from tests.conftest import _is_stopped, after_crash_loadfile, mend
from tests.kafka_helpers import Record, produce, read_all
from tests.line_profile import LineSampler
from tests.processes import MirrorProcess
from tests.schedule import balanced, longest_files_first

REPO = Path(__file__).resolve().parents[1]


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without what the harness gives its own phase (the inner run is not part of it)."""
    own = (
        "MIRRORWATCH_TEST_PROGRESS",
        "MIRRORWATCH_TEST_STACKS",
        "MIRRORWATCH_TEST_CRASHED_FILE",
        "MIRRORWATCH_TEST_LINES",
    )
    return {**{k: v for k, v in os.environ.items() if k not in own}, "PYTHONPATH": str(REPO), **extra}


def test_a_test_that_hangs_or_aborts_its_worker_fails_saying_why_and_the_others_run(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # none of the repo's settings (pytest-timeout's 600 s)
    (tmp_path / "test_hang.py").write_text(
        "import os, time\n"
        "def test_before(): pass\n"
        "def test_hangs(): time.sleep(300)\n"
        "def test_aborts():\n"
        "    os.write(2, b'*** rdkafka_fake.c:1:f: assert: what a C library says before it aborts ***\\n')\n"
        "    os.abort()\n"
        "def test_after(): pass\n"
    )
    env = clean_environment(MIRRORWATCH_TEST_HANG_EXIT_S="3")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-c",
            str(tmp_path / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadfile",
            "-rf",
            str(tmp_path / "test_hang.py"),
        ],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 failed, 2 passed, 2 skipped" in out, out  # a crashed test is not run again by the next worker
    assert "crashed while running 'test_hang.py::test_hangs'" in out, out
    assert "Timeout (0:00:03)!" in out and "in test_hangs" in out, out  # every thread's stack, the hung one's too
    # the message a C library wrote to fd 2 before it aborted the worker (pytest's capture would have lost it)
    assert "crashed while running 'test_hang.py::test_aborts'" in out, out
    assert "*** rdkafka_fake.c:1:f: assert: what a C library says before it aborts ***" in out, out


def test_a_phase_past_its_limit_is_ended_saying_what_ran_where_and_what_had_failed(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_quick.py").write_text("def test_passes(): pass\ndef test_fails(): assert False\n")
    (tmp_path / "test_slow.py").write_text(
        "import time\ndef wait_for_a_broker_that_never_answers(): time.sleep(300)\n"
        "def test_crawls(): wait_for_a_broker_that_never_answers()\n"
    )
    results = tmp_path / "results"
    # 45 s: the inner run's three processes import the suite's conftest first, and on the loaded machine that took
    # more than 20 s once (flaky35: no test had even started when a 20 s limit ended it)
    phase = [sys.executable, "scripts/phase.py", "--name", "main", "--limit", "45", "--dir", str(results), "--"]
    pytest_command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-c", str(tmp_path / "pytest.ini")]
    pytest_command += ["--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile"]
    (tmp_path / "tmp").mkdir()  # the run ended at its limit leaves its temp files (conftest's crash file) here
    run = subprocess.run(
        [*phase, *pytest_command, str(tmp_path / "test_quick.py"), str(tmp_path / "test_slow.py")],
        check=False,
        cwd=REPO,
        env=clean_environment(TMPDIR=str(tmp_path / "tmp")),
        capture_output=True,
        text=True,
        timeout=150,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 124, out
    diagnosis = (results / "main.diagnosis").read_text()
    assert diagnosis in run.stdout  # printed, and kept for the end of `make test`
    assert "== main: ended at its limit of 45 s; 2 test(s) had ended, 1 failed" in diagnosis, diagnosis
    assert "failed: test_quick.py::test_fails" in diagnosis, diagnosis
    assert "still running (1):" in diagnosis and "s  test_slow.py::test_crawls" in diagnosis, diagnosis
    assert "in wait_for_a_broker_that_never_answers" in diagnosis, diagnosis  # the worker's stack, where it waits
    # every pytest process of the phase is gone (each wrote its pid), none left beside the next phase
    pids = [int(p.read_text()) for p in (results / "main.stacks").glob("*.pid")]
    assert len(pids) == 3, pids  # the controller and two workers
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], pids
    # and the end-of-run report says how far the phase came, its tests left out of the totals
    report = closing_report(results)
    assert "main: no JUnit XML (the phase did not finish); tests that had ended: 1 failed, 1 passed" in report.stdout


def closing_report(results: Path) -> subprocess.CompletedProcess[str]:
    """What `make test` prints at its end for these phase results (scripts/test_report.py)."""
    command = [sys.executable, "scripts/test_report.py", "durations", str(results)]
    return subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True)


def test_a_phase_terminated_ends_its_command_with_it(tmp_path: Path) -> None:
    """An interrupted scripts/flakiness.sh terminates the phase; the command (its own session) must not run on."""
    child_pid = tmp_path / "child.pid"
    command = f"import os, time; open({str(child_pid)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    phase_command = [sys.executable, "scripts/phase.py", "--name", "main", "--limit", "600", "--dir", str(tmp_path)]
    phase = subprocess.Popen([*phase_command, "--", sys.executable, "-c", command], cwd=REPO)
    try:
        wait_until(lambda: child_pid.exists() and child_pid.read_text(), timeout_s=30, description="the command's pid")
        pid = int(child_pid.read_text())
        phase.terminate()
        assert phase.wait(timeout=90) == 130
        assert not Path(f"/proc/{pid}").exists()
    finally:
        phase.kill()


def test_the_closing_report_names_each_failed_test_with_its_message(tmp_path: Path) -> None:
    """CI keeps only part of a run's log: the failure's first line is printed beside its name at the very end."""
    (tmp_path / "main.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.monitor.test_x" name="test_ok" time="1.5"/>'
        '<testcase classname="tests.monitor.test_x" name="test_waits" time="31.2">'
        '<failure message="TimeoutError: timed out after 30 s waiting for the monitor to list g&#10;more">tb</failure>'
        "</testcase></testsuite></testsuites>"
    )
    report = closing_report(tmp_path)
    lines = report.stdout.splitlines()
    at = lines.index("  main      tests/monitor/test_x.py::test_waits  (31 s)")
    assert lines[at + 1].strip() == "TimeoutError: timed out after 30 s waiting for the monitor to list g", lines
    assert "total: 1 passed, 1 failed, 0 skipped" in report.stdout


def test_a_process_that_does_not_stop_fails_with_a_line_per_thread_and_the_report_prints_them(tmp_path: Path) -> None:
    """A command that ignores SIGTERM (a CI run once saw `mirrorwatch run` still running after 60 s, and kept only
    the first line of the failure): the failure says where each of its threads waits, and so does the report."""
    script = tmp_path / "hangs.py"
    script.write_text(
        "import faulthandler, signal, threading, time\n"
        "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        "signal.signal(signal.SIGTERM, lambda *_: None)\n"
        "def stuck_in_shutdown():\n"
        "    threading.Event().wait(300)\n"
        "threading.Thread(target=stuck_in_shutdown, daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    log = tmp_path / "hangs.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=subprocess.STDOUT)
    hung = MirrorProcess(process, log)
    try:
        hung.wait_for_log("ready", timeout_s=30)
        with pytest.raises(AssertionError) as failure:
            hung.stop(timeout_s=1)
    finally:
        process.kill()
        process.wait(timeout=30)
    message = str(failure.value)
    threads = [line for line in message.splitlines() if line.startswith("  thread 0x")]
    assert len(threads) == 2, message
    # innermost the standard library's wait, then the code that called it
    stuck = f": wait (python{sys.version_info.major}.{sys.version_info.minor}/threading.py:"
    assert any(stuck in line and line.endswith(f"< stuck_in_shutdown ({tmp_path.name}/hangs.py:5)") for line in threads)
    assert any(line.endswith(f": <module> ({tmp_path.name}/hangs.py:8)") for line in threads), threads
    case = ET.Element("testcase", classname="tests.failover.test_x", name="test_stops", time="63.0")
    ET.SubElement(case, "failure", message=message).text = "tb"
    suite = ET.Element("testsuites")
    ET.SubElement(suite, "testsuite", name="pytest").append(case)
    ET.ElementTree(suite).write(tmp_path / "main.xml")
    lines = closing_report(tmp_path).stdout.splitlines()
    at = lines.index("  main      tests/failover/test_x.py::test_stops  (63 s)")
    assert lines[at + 1].strip() == "still running 1 s after SIGTERM; its threads (innermost frame first):", lines
    assert [line.strip() for line in lines[at + 2 : at + 4]] == [line.strip() for line in threads], lines


@pytest.mark.integration
def test_a_broker_a_test_left_down_or_frozen_is_started_or_thawed_for_the_next_test(
    local_clusters: LocalClusters, clusters_config: MirrorwatchConfig, make_topic: Callable[..., str]
) -> None:
    topics = {alias: make_topic(alias) for alias in ("source", "target")}
    local_clusters.kill("target")
    local_clusters.freeze("source")
    (source,) = [s.pid for s in local_clusters.status() if s.cluster.alias == "source"]
    try:
        assert source is not None
        # SIGSTOP is delivered to the JVM's threads asynchronously (seen: not yet stopped when asked at once)
        wait_until(lambda: _is_stopped(source), timeout_s=30, description="the source broker to be stopped")
        mended = mend(local_clusters)
    finally:
        mend(local_clusters)  # whatever happens here, the worker's next test gets its clusters back
    assert mended == ["source was stopped (SIGSTOP): thawed", "target was down: started again"], mended
    # each takes an idempotent producer's record and gives it back (the restarted one settled: the worker's next
    # test, e.g. the canary's, counts late probes on a broker still loading its state)
    for alias, topic in topics.items():
        produce(clusters_config.clusters[alias], alias, topic, [Record(value=b"mended")])
        assert [r.value for r in read_all(clusters_config.clusters[alias], alias, topic, 1)] == [b"mended"], alias
    assert mend(local_clusters) == []  # nothing left to mend


def test_a_crashed_workers_unfinished_files_are_queued_again_and_its_finished_ones_never() -> None:
    """pytest-xdist's own loadfile scheduler queues the finished files too; handed out as empty batches, they left
    every worker holding one test with nothing after it, waiting forever (tests/conftest.py)."""

    class Node:
        def __init__(self, name: str) -> None:
            self.gateway = SimpleNamespace(id=name)
            self.shutting_down = False
            self.sent: list[list[int]] = []
            self.done = 0

        def shutdown(self) -> None:
            self.shutting_down = True

        def send_runtest_some(self, indices: list[int]) -> None:
            self.sent.append(list(indices))

    options = {"tx": ["popen"] * 3, "numprocesses": 3}
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True), getvalue=options.get)
    scheduler = after_crash_loadfile()(config, None)
    collection = [f"test_{f:02d}.py::test_{i}" for f in range(12) for i in range(2)]
    gw0, gw1, gw2 = Node("gw0"), Node("gw1"), Node("gw2")
    for node in (gw0, gw1, gw2):
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()

    def run(node: Node) -> None:  # every test it was given, but the one it holds until it learns the next
        given = [i for batch in node.sent for i in batch]
        while node.done < len(given) - 1:
            scheduler.mark_test_complete(node, given[node.done])
            node.done += 1
            given = [i for batch in node.sent for i in batch]

    for _ in range(3):
        for node in (gw2, gw0, gw1):
            run(node)
    held = [i for batch in gw2.sent for i in batch][gw2.done]
    assert scheduler.remove_node(gw2) == collection[held]  # it crashed in the test it held
    queued = [[test for test, done in unit.items() if not done] for unit in scheduler.workqueue.values()]
    assert queued == [[collection[held]]]  # only the file it had not finished, not the 7 it had
    gw3 = Node("gw3")
    scheduler.add_node(gw3)
    scheduler.add_node_collection(gw3, collection)
    scheduler.schedule()
    assert [collection[i] for batch in gw3.sent for i in batch] == [collection[held]]


def inner_pytest(tmp_path: Path, *args: str) -> str:
    """pytest with this suite's conftest on the files under tmp_path (none of the repo's settings); its output."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: a\n    secured: s\n")
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-c", str(tmp_path / "pytest.ini")]
    run = subprocess.run(
        [*command, "--rootdir", str(tmp_path), "-p", "no:cacheprovider", *args],
        check=False,
        cwd=REPO,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_the_main_phase_runs_whole_files_the_longest_first_each_in_its_own_order() -> None:
    nodeids = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "d.py::t1"]
    order = longest_files_first(nodeids, {"a.py": 10, "c.py": 300, "b.py": 40})
    assert [nodeids[i] for i in order] == ["c.py::t1", "c.py::t2", "b.py::t1", "a.py::t1", "a.py::t2", "d.py::t1"]


def test_the_alone_phase_gives_each_process_a_balanced_share_and_a_secured_test_runs_on_the_modes_it_names(
    tmp_path: Path,
) -> None:
    """`--share K/3` over `alone(seconds=N)` tests: each of the three runs the share `balanced` chose (the most loaded
    as small as can be), together every test once; `secured("sasl_ssl")` is not run on mtls, `secured("oidc",
    only=True)` on oidc alone (not on plaintext either)."""
    seconds = [20, 150, 90, 60, 190, 110, 40]
    alone = [194, 154, 154, 146, 140, 111, 92, 55]  # the alone phase's tests three at a time, seconds
    chosen = balanced(alone, 3)
    assert sorted(sum(s for s, w in zip(alone, chosen, strict=True) if w == k) for k in range(3)) == [348, 349, 349]
    assert len(set(balanced(list(range(1, 30)), 4))) == 4  # past a few tests, longest first still shares
    (tmp_path / "test_timed.py").write_text(
        "import pytest\n"
        + "".join(f"@pytest.mark.alone(seconds={s})\ndef test_{i}(): pass\n" for i, s in enumerate(seconds))
        + "def test_untimed(): pass\n"
        + "@pytest.mark.secured\ndef test_both(): pass\n"
        + '@pytest.mark.secured("sasl_ssl")\ndef test_sasl_only(): pass\n'
        + '@pytest.mark.secured("oidc", only=True)\ndef test_oidc_alone(): pass\n'
    )
    shares = [
        sorted(int(line.split("::test_")[1]) for line in out.splitlines() if "::test_" in line)
        for out in (
            inner_pytest(tmp_path, "-m", "alone", "--share", f"{k}/3", "--co", "-q", str(tmp_path / "test_timed.py"))
            for k in range(3)
        )
    ]
    assert sorted(i for share in shares for i in share) == list(range(len(seconds)))
    assert max(sum(seconds[i] for i in share) for share in shares) == 230  # 190+40 | 150+60+20 | 90+110
    on = {
        mode: inner_pytest(tmp_path, "-m", "secured", "--security", mode, "--co", "-q", str(tmp_path / "test_timed.py"))
        for mode in ("sasl_ssl", "mtls", "oidc", "plaintext")
    }
    assert "test_sasl_only" in on["sasl_ssl"] and "test_both" in on["sasl_ssl"], on
    assert "test_sasl_only" not in on["mtls"] and "test_both" in on["mtls"], on
    assert "test_oidc_alone" in on["oidc"] and "test_both" in on["oidc"] and "test_sasl_only" not in on["oidc"], on
    assert "test_sasl_only" in on["plaintext"] and "test_oidc_alone" not in on["plaintext"], on


def _waits_here() -> None:
    time.sleep(1.5)


def test_the_line_profile_says_where_a_test_waited_and_what_its_processes_burned(tmp_path: Path) -> None:
    """`MIRRORWATCH_TEST_LINES` (tests/line_profile.py): a test's seconds by the line of tests/ it stood on, and its
    CPU: its own process's and that of the processes it started and waited for; the report prints both."""
    sampler = LineSampler(tmp_path)
    test = "tests/test_x.py::test_waits_and_burns"
    protocol = sampler.pytest_runtest_protocol(SimpleNamespace(nodeid=test))  # type: ignore[arg-type]
    next(protocol)
    _waits_here()
    subprocess.run([sys.executable, "-c", "sum(range(30_000_000))"], check=True)  # ~1 CPU-s in a child
    with pytest.raises(StopIteration):
        next(protocol)
    sampler.pytest_sessionfinish()
    report = subprocess.run(
        [sys.executable, "scripts/test_report.py", "lines", str(tmp_path)], check=True, cwd=REPO, capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    waited = [line for line in report.splitlines() if "tests/test_harness.py" in line and "_waits_here" in line]
    assert waited and float(waited[0].split()[0]) >= 1.0, report
    (cpu,) = [line for line in report.splitlines() if line.endswith(test) and "+" in line]
    own, children = float(cpu.split()[1]), float(cpu.split()[3])
    assert children > 0.3 and own < children, report
