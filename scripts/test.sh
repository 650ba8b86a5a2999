#!/usr/bin/env bash
# The whole check: lint, format, types, then every test (unit and integration on real local Kafka clusters), then
# the `secured` subset again on a SASL_SSL pair and on a mutual-TLS pair (only when no pytest arguments are given).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff"; .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
echo "== pytest"; .venv/bin/pytest "$@"
if [ $# -eq 0 ]; then
    for mode in sasl_ssl mtls; do
        echo "== pytest -m secured --security $mode"
        .venv/bin/pytest -m secured --security "$mode" --durations=10
    done
fi
