#!/usr/bin/env bash
# The whole check: lint, format, types, then every test (unit and integration on real local Kafka clusters), in
# three phases (only when no pytest arguments are given; with arguments, pytest runs them as given):
#   1. everything not marked `alone`, on pytest-xdist workers (MIRRORWATCH_TEST_WORKERS, default 3), a file at a time
#      (`--dist loadfile`), each worker with a pair of local clusters of its own: a test that kills or freezes a
#      broker only ever hits its own pair;
#   2. the tests marked `alone` (they judge what happens against a clock: the monitor against the truth through
#      incidents, statuses within a minute of a stop), two at a time (MIRRORWATCH_ALONE_WORKERS, default 2), each
#      worker with a pair of clusters of its own, and nothing else beside them: each holds a few hundred records/s
#      and mostly waits on its incidents' clocks (one at a time the phase took 960 s, the machine mostly idle);
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
bash scripts/lint.sh
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
alone_workers=${MIRRORWATCH_ALONE_WORKERS:-2}
echo "== pytest -m alone: $alone_workers at a time, nothing else beside them (-rP: the truth tests' tables of errors)"
phase alone 1800 .venv/bin/pytest -n "$alone_workers" -m alone -rP --junitxml="$results/alone.xml" --durations=10 \
    || failed+=(alone)
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
took_s=$(($(date +%s) - began))
echo "== make test took $took_s s, set-up excluded"
budget_s=1200  # the suite's budget: 20 minutes on this 2-core machine, set-up excluded (README, Development)
if [ "$took_s" -le "$budget_s" ]; then
    echo "== within the suite's budget of $budget_s s ($((budget_s - took_s)) s to spare)"
else
    echo "== OVER the suite's budget of $budget_s s by $((took_s - budget_s)) s (the slowest tests and files are above)"
fi
for diagnosis in "$results"/*.diagnosis; do  # a phase its limit ended: what it was doing (scripts/phase.py)
    if [ -e "$diagnosis" ]; then head -n 80 "$diagnosis"; fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "== FAILED phases: ${failed[*]}"
    exit 1
fi
