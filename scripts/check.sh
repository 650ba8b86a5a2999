#!/usr/bin/env bash
# The inner loop for whoever changes the code: ruff, ruff format, mypy and the unit tests (every test not marked
# `integration`: no broker, no JVM, no clock judged) on two pytest-xdist workers. `make test` runs all of it again
# and everything that needs the local clusters; this is what to run before each commit.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$(date +%s)
bash scripts/lint.sh
echo "== pytest -m 'not integration' (2 workers)"
.venv/bin/pytest -q -n 2 -m "not integration" --durations=5 "$@"
echo "== make check took $(($(date +%s) - began)) s"
