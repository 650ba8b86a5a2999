#!/usr/bin/env bash
# The whole check: lint, format, types, then every test (unit and integration on real local Kafka clusters), in
# three phases (only when no pytest arguments are given; with arguments, pytest runs them as given):
#   1. everything not marked `alone`, on pytest-xdist workers (MIRRORWATCH_TEST_WORKERS, default 3), a file at a time
#      (`--dist loadfile`), each worker with a pair of local clusters of its own: a test that kills or freezes a
#      broker only ever hits its own pair;
#   2. the tests marked `alone` (they judge what happens against a clock: the monitor against the truth through
#      incidents, statuses within a minute of a stop), one at a time with nothing beside them;
#   3. the `secured` subset again on a SASL_SSL pair and on a mutual-TLS pair, the two side by side.
# Every phase runs even when an earlier one failed; the exit code says whether all passed. At the end: the slowest
# 20 tests, each file's time against its budget (tests/durations.json), the tests that failed and one closing line of
# totals. Each phase has a time limit (scripts/phase.py; all of them under CI's 90 minutes); a phase ended by it says, at
# the very end, which tests were running and where their threads stood. The JUnit XML of each phase is left in
# .test-results/ (scripts/flakiness.sh reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
began=$(date +%s)
bash scripts/setup.sh
echo "== setup took $(($(date +%s) - began)) s"
began=$(date +%s)
echo "== ruff"; .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
if [ $# -gt 0 ]; then
    echo "== pytest $*"; exec .venv/bin/pytest "$@"
fi

results=.test-results
rm -rf "$results" && mkdir -p "$results"
failed=()
took() {  # took WHAT STARTED-AT
    echo "== $1 took $(($(date +%s) - $2)) s"
}

workers=${MIRRORWATCH_TEST_WORKERS:-3}
# Each phase has a limit so that no hang holds the run to CI's limit: a test that hangs is already ended by the
# suite's watchdog (tests/conftest.py); these catch what hangs outside a test, or a phase that crawls.
phase() {  # phase NAME LIMIT COMMAND...
    python3 scripts/phase.py --name "$1" --limit "$2" --dir "$results" -- "${@:3}"
}
at=$(date +%s)
echo "== pytest ($workers workers): everything but the tests marked alone"
phase main 2100 .venv/bin/pytest -n "$workers" --dist loadfile -m "not alone" --junitxml="$results/main.xml" --durations=10 || failed+=(main)
took "the $workers-worker phase" "$at"

at=$(date +%s)
echo "== pytest -m alone: one at a time, nothing beside them (-rP: the truth tests' tables of errors, for the log)"
phase alone 1800 .venv/bin/pytest -m alone -rP --junitxml="$results/alone.xml" --durations=10 || failed+=(alone)
took "the alone phase" "$at"

at=$(date +%s)
echo "== pytest -m secured --security sasl_ssl, and --security mtls beside it"
pids=()
for mode in sasl_ssl mtls; do
    phase "$mode" 600 .venv/bin/pytest -m secured --security "$mode" --junitxml="$results/$mode.xml" --durations=5 \
        > "$results/$mode.log" 2>&1 &
    pids+=($!)
done
for i in 0 1; do
    mode=$([ "$i" -eq 0 ] && echo sasl_ssl || echo mtls)
    wait "${pids[$i]}" || failed+=("$mode")
    echo "== pytest -m secured --security $mode"
    cat "$results/$mode.log"
done
took "the secured phase" "$at"

python3 scripts/test_report.py durations "$results" || true  # no results at all: said there; the phases decide
echo "== make test took $(($(date +%s) - began)) s, set-up excluded"
for diagnosis in "$results"/*.diagnosis; do  # a phase its limit ended: what it was doing (scripts/phase.py)
    if [ -e "$diagnosis" ]; then head -n 80 "$diagnosis"; fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "== FAILED phases: ${failed[*]}"
    exit 1
fi
