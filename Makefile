# The two commands of the quick start. Both set everything up first (Debian packages, .venv, Maven jars).
.PHONY: demo test check setup lint bench

demo: setup
	.venv/bin/mirrorwatch demo

test:
	bash scripts/test.sh

# The fast inner loop (under 2 minutes here): lint, format, types and the unit tests (no broker, no JVM).
check: setup
	bash scripts/check.sh

lint: setup
	bash scripts/lint.sh

setup:
	bash scripts/setup.sh

# Every benchmark against its peers (well over an hour on 2 cores); not part of the tests.
bench: setup
	.venv/bin/python -m bench --json bench/results
