# The two commands of the quick start. Both set everything up first (Debian packages, .venv, Maven jars).
.PHONY: demo test check setup lint bench image image-spark

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

# The container image, without a Docker daemon: mmdebstrap's Debian base, podman build (scripts/image.sh says more).
image: setup
	bash scripts/image.sh

# ... and its -spark variant (pyspark and a JRE, for a link with engine spark)
image-spark: setup
	bash scripts/image.sh --spark
