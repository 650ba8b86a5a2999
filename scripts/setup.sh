#!/usr/bin/env bash
# Everything a fresh machine needs, idempotent and quick when already done:
#   1. Debian packages for the commands mirrorwatch runs (java, mvn, promtool, chromium, kcat, openssl, systemd-analyze)
#      and builds with (podman, runc, mmdebstrap), only when missing;
#   2. the virtualenv .venv with the pinned Python dependencies of requirements.lock and mirrorwatch itself;
#   3. the Kafka jars and Spark's Kafka connector jars from Maven Central into the jar cache;
#   4. the Go tools in .tools/bin: helm (HELM_VERSION, from the Go module proxy) and deploy/helm/check, the chart's
#      manifests checked against Kubernetes' API types (a first build of helm takes minutes; later ones are cached).
#   5. the container image's Debian base (scripts/image.sh --base), made once.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

# command -> Debian package that provides it
declare -A NEEDED=(
  [java]=openjdk-17-jre-headless
  [mvn]=maven
  [promtool]=prometheus
  [chromium]=chromium
  [kcat]=kcat
  [openssl]=openssl  # the tests' throwaway CA and certificates
  [systemd-analyze]=systemd  # deploy/systemd's units verified as systemd reads them
  [podman]=podman  # the container image, built and run without a Docker daemon (scripts/image.sh)
  [runc]=runc  # podman's runtime here (deploy/image/containers.conf)
  [mmdebstrap]=mmdebstrap  # the image's Debian base, from Debian's packages (no registry)
)
missing=()
for cmd in "${!NEEDED[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEEDED[$cmd]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    say "missing Debian packages: ${missing[*]} (install them with: apt-get install ${missing[*]})"
    exit 1
  fi
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  say "Python 3.11 or newer is needed ($PYTHON is $("$PYTHON" --version 2>&1))"
  exit 1
fi

stamp_want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
stamp_file=.venv/.mirrorwatch-installed
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp_want" ]; then
  say "creating .venv with the pinned dependencies of requirements.lock"
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$stamp_want" > "$stamp_file"
fi

.venv/bin/mirrorwatch local fetch >/dev/null

# the chart's tools: helm at the version named here, the checker rebuilt when its sources change. They need the
# machine's Go (1.24 or newer: Debian's golang-go, 1.19, cannot build them)
HELM_VERSION=v4.3.2
if ! command -v go >/dev/null 2>&1; then
  say "Go 1.24 or newer is needed to build helm and deploy/helm/check (https://go.dev/dl/); it is not on PATH"
  exit 1
fi
tools=$PWD/.tools/bin
mkdir -p "$tools"
if [ ! -x "$tools/helm" ] || [ "$(cat "$tools/.helm" 2>/dev/null)" != "$HELM_VERSION" ]; then
  say "building helm $HELM_VERSION (Go module helm.sh/helm/v4) into .tools/bin"
  GOBIN=$tools GOFLAGS=-mod=mod go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  echo "$HELM_VERSION" > "$tools/.helm"
fi
check_want=$(cat deploy/helm/check/go.mod deploy/helm/check/go.sum deploy/helm/check/*.go | sha256sum | cut -d' ' -f1)
if [ ! -x "$tools/manifestcheck" ] || [ "$(cat "$tools/.manifestcheck" 2>/dev/null)" != "$check_want" ]; then
  say "building deploy/helm/check into .tools/bin/manifestcheck"
  (cd deploy/helm/check && go build -o "$tools/manifestcheck" .)
  echo "$check_want" > "$tools/.manifestcheck"
fi

# the container image's Debian base (mmdebstrap, then podman import; kept by its package list): made here, once, so
# that the image's test builds only mirrorwatch's layers on it (scripts/image.sh --base)
bash scripts/image.sh --base
