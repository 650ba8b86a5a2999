#!/usr/bin/env bash
# The container image (`make image`), built without a Docker daemon or a registry (issue #68):
#   1. the base: Debian bookworm's minimal system with python3, python3-venv, ca-certificates and tini, made by
#      mmdebstrap from Debian's packages and imported into podman (kept in ~/.cache/mirrorwatch/image/ by its
#      package list, so a second build does not fetch it again);
#   2. mirrorwatch's wheel, built from the checkout's files as they are (committed or not), and the wheels of its
#      dependencies at the versions of requirements.lock, fetched (or, for an sdist, built) by `pip wheel`;
#   3. `podman build` of deploy/image/Containerfile on them, tagged mirrorwatch:<version> (mirrorwatch:<version>-spark
#      with --spark: pyspark and a JRE for a link with engine spark).
# Nothing is built again when an image of that tag holds the same sources (a label carries their digest): the tests
# call this and pay for one build per change of the sources. Prints the tag and the image's size.
#
#   bash scripts/image.sh [--spark] [--base]
#
# --base: only the base (step 1), then exit; `make setup` makes it, so that neither the tests nor a first `make image`
# wait on mmdebstrap (80-100 s of the suite's main phase on a fresh machine, flaky37).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'image: %s\n' "$*" >&2; }

variant="" extras="" packages="python3,python3-venv,ca-certificates,tini" base_only=""
for arg in "$@"; do
    case "$arg" in
        --spark) variant="-spark" extras="[spark]" packages="$packages,openjdk-17-jre-headless,procps" ;;
        --base) base_only=1 ;;
        *) say "unknown argument $arg (bash scripts/image.sh [--spark] [--base])"; exit 2 ;;
    esac
done
export CONTAINERS_CONF=$PWD/deploy/image/containers.conf
version=$(.venv/bin/python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
tag="localhost/mirrorwatch:$version$variant"

# what setuptools packages (pyproject.toml's [tool.setuptools.packages.find] include, read from it) and what the
# build reads besides
packaged=$(.venv/bin/python -c 'import tomllib
found = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["packages"]["find"]["include"]
print(" ".join(p.rstrip("*") for p in found))')
sources() {
    # shellcheck disable=SC2086  # one folder a word
    git ls-files -co --exclude-standard -- $packaged pyproject.toml README.md | grep -v '/tests/'
}
digest=$({ sources; echo requirements.lock deploy/image/Containerfile scripts/image.sh; } | sort \
    | xargs sha256sum | { cat; echo "$packages $extras"; } | sha256sum | cut -c1-16)
if [ -z "$base_only" ] && podman image exists "$tag" \
    && [ "$(podman image inspect --format '{{ index .Labels "io.mirrorwatch.sources" }}' "$tag")" = "$digest" ]; then
    say "$tag is up to date (sources $digest)"
    echo "$tag"
    exit 0
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/mirrorwatch/image
mkdir -p "$cache"
base_id=$(echo "bookworm $packages merged-usr" | sha256sum | cut -c1-12)
base="localhost/mirrorwatch-base:$base_id"
if ! podman image exists "$base"; then
    if [ ! -s "$cache/base-$base_id.tar" ]; then
        say "making the base (Debian bookworm, $packages) with mmdebstrap"
        # a second try: one -spark base failed once in apt's install step and passed at once when run again
        for try in 1 2; do
            mmdebstrap --quiet --format=tar --variant=minbase --include="$packages" \
                --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
                --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
                --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
                bookworm "$cache/base-$base_id.tar.part" http://deb.debian.org/debian && break
            [ "$try" -eq 2 ] && exit 1
            say "mmdebstrap failed; once more"
        done
        mv "$cache/base-$base_id.tar.part" "$cache/base-$base_id.tar"
    fi
    podman import --quiet "$cache/base-$base_id.tar" "$base" >/dev/null
fi
if [ -n "$base_only" ]; then
    exit 0
fi

work=$(mktemp -d -t mirrorwatch-image-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/wheels" "$work/jars"
sources | tar -cf - -T - | tar -xf - -C "$work/src"
say "building the wheel and fetching its dependencies' wheels (requirements.lock)"
.venv/bin/python -m build --wheel --no-isolation --outdir "$work/wheels" "$work/src" >/dev/null 2>&1 \
    || { .venv/bin/python -m build --wheel --no-isolation --outdir "$work/wheels" "$work/src"; exit 1; }
wheel=$(ls "$work/wheels"/mirrorwatch-*.whl)
# wheels as PyPI has them; pyspark, an sdist only, built once (pip's wheel cache keeps it)
.venv/bin/python -m pip wheel --quiet --disable-pip-version-check --constraint requirements.lock \
    --wheel-dir "$work/wheels" "$wheel$extras"
if [ -n "$variant" ]; then  # the spark engine's Kafka connector jars, as the jar cache holds them (no Maven inside)
    jars=$(.venv/bin/python -c 'from localkafka.jars import SPARK_KAFKA, resolve_jars
print(resolve_jars(SPARK_KAFKA, progress=lambda _: None))')
    cp -r "$jars" "$work/jars/"
fi
cp deploy/image/Containerfile "$work/Containerfile"
say "podman build $tag"
podman build --quiet --network none --pull=never --build-arg "BASE=$base" --build-arg "EXTRAS=$extras" \
    --label "io.mirrorwatch.sources=$digest" --label "org.opencontainers.image.version=$version" \
    --tag "$tag" "$work" >/dev/null
podman image prune --force --filter "label=io.mirrorwatch.sources" >/dev/null  # the builds this one replaced
size=$(podman image inspect --format '{{.Size}}' "$tag")
say "$tag: $((size / 1000000)) MB"
echo "$tag"
