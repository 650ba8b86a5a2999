# The two commands of the quick start. Both set everything up first (Debian packages, .venv, Maven jars).
.PHONY: demo test setup lint

demo: setup
	.venv/bin/mirrorwatch demo

test:
	bash scripts/test.sh

setup:
	bash scripts/setup.sh
