#!/usr/bin/env bash
# How often each test fails, measured: N runs (default 3) of `.ci/run`, each in a fresh clone of this checkout's HEAD
# (its own .venv, as CI builds one), one after another; then, per test, how many runs it failed in.
#
#   bash scripts/flakiness.sh [N] [WORKDIR]
#
# WORKDIR (default: a new temporary directory, kept) holds run-1 ... run-N: each clone's .test-results (JUnit XML per
# phase) and the run's whole output in ci.log. Every run is reported (exit code, total time, the time `make test`
# itself says it took), then the table of tests that failed at least once. Nothing is retried: a test that fails once
# in N is a test that fails. Exits non-zero when any test failed in any run.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
work=${2:-$(mktemp -d -t mirrorwatch-flakiness-XXXXXX)}
mkdir -p "$work"
echo "flakiness: $runs runs of .ci/run on fresh clones of $(git -C "$repo" rev-parse --short HEAD), in $work"
summary=()
run_pid=""
# Interrupted (Ctrl-C, kill), the run in progress goes with it: each .ci/run is a session of its own (setsid), and
# its whole process group is ended, brokers and all, instead of being left to go on beside the next run.
stop_run() {
    if [ -n "$run_pid" ]; then
        kill -TERM -- "-$run_pid" 2>/dev/null
        sleep 10
        kill -KILL -- "-$run_pid" 2>/dev/null
    fi
}
trap 'stop_run; exit 130' INT TERM
for i in $(seq 1 "$runs"); do
    clone=$(mktemp -d -t mirrorwatch-clone-XXXXXX)
    git clone --quiet "$repo" "$clone/mirrorwatch"
    echo "flakiness: run $i on $(git -C "$clone/mirrorwatch" rev-parse --short HEAD)"
    began=$(date +%s)
    (cd "$clone/mirrorwatch" && CI=true exec setsid bash .ci/run < /dev/null) > "$work/ci-$i.log" 2>&1 &
    run_pid=$!
    wait "$run_pid"
    code=$?
    run_pid=""
    took=$(($(date +%s) - began))
    mkdir -p "$work/run-$i"
    cp -r "$clone/mirrorwatch/.test-results/." "$work/run-$i/" 2>/dev/null
    mv "$work/ci-$i.log" "$work/run-$i/ci.log"
    rm -rf "$clone"
    itself=$(grep -o "make test took [0-9]* s, set-up excluded" "$work/run-$i/ci.log" | tail -1)
    closing=$(grep -E "^total: [0-9]+ passed" "$work/run-$i/ci.log" | tail -1)
    summary+=("run $i: exit $code in ${took} s (${itself:-make test did not finish}); ${closing:-no totals}")
    echo "flakiness: ${summary[-1]}"
done
echo
printf '%s\n' "${summary[@]}"
python3 "$repo/scripts/test_report.py" flakiness "$work"/run-*
