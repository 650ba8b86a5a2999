#!/usr/bin/env bash
# The whole check: lint, format, types, then every test (unit and integration on real local Kafka clusters), then
# the `secured` subset again on a SASL_SSL pair and on a mutual-TLS pair (only when no pytest arguments are given).
# Without arguments the main run is spread over two pytest-xdist workers, a file at a time (`--dist loadfile`), each
# worker with a pair of local clusters of its own: a test that kills or freezes a broker only ever hits its own
# worker's pair. Most of the suite waits on brokers and injected faults, so two workers take ~19 min where one took
# ~33 on this 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff"; .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
if [ $# -gt 0 ]; then
    echo "== pytest $*"; exec .venv/bin/pytest "$@"
fi
echo "== pytest (2 workers)"; .venv/bin/pytest -n 2 --dist loadfile
for mode in sasl_ssl mtls; do
    echo "== pytest -m secured --security $mode"
    .venv/bin/pytest -m secured --security "$mode" --durations=10
done
