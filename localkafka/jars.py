"""JVM pieces from Maven Central: a small pom per jar set, `mvn dependency:copy-dependencies` into a reused cache.

The cache (`$MIRRORWATCH_JAR_CACHE`, default `~/.cache/mirrorwatch/jars`) holds one directory per jar set, marked
complete with the hash of the pom that filled it, so a changed pom refetches and an interrupted fetch never counts.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kernel.errors import SetupError

__all__ = [
    "CONNECT_MIRROR",
    "KAFKA",
    "SPARK_KAFKA",
    "SPARK_KAFKA_VERSION",
    "JarSet",
    "class_archive_options",
    "class_archive_path",
    "jar_cache_dir",
    "require_java",
    "resolve_jars",
]

MIN_JAVA_MAJOR = 17


@dataclass(frozen=True)
class JarSet:
    name: str
    pom_resource: str

    def pom_text(self) -> str:
        return resources.files("localkafka.resources").joinpath(self.pom_resource).read_text(encoding="utf-8")


KAFKA = JarSet("kafka-4.1.1", "kafka-pom.xml")
# Spark's Kafka source and sink for the spark engine; its version must equal the installed pyspark's.
SPARK_KAFKA = JarSet("spark-sql-kafka-4.0.0", "spark-kafka-pom.xml")
SPARK_KAFKA_VERSION = "4.0.0"
# MirrorMaker 2, the benchmarks' peer.
CONNECT_MIRROR = JarSet("connect-mirror-4.1.1", "connect-mirror-pom.xml")


# Every repository a pom declares is fetched through Maven Central: some (Spark's parent pom) name mirrors this
# machine cannot reach, and Central holds every artifact we use.
CENTRAL_ONLY_SETTINGS = """<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror><id>central-only</id><mirrorOf>*</mirrorOf><url>https://repo.maven.apache.org/maven2</url></mirror>
  </mirrors>
</settings>
"""


def jar_cache_dir() -> Path:
    configured = os.environ.get("MIRRORWATCH_JAR_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "mirrorwatch" / "jars"


def require_java() -> str:
    """Path of a Java >= 17 runtime, or a `SetupError` that says what to install."""
    java = shutil.which("java")
    hint = "install it with: apt-get install openjdk-17-jre-headless"
    if java is None:
        raise SetupError(f"Java {MIN_JAVA_MAJOR}+ is needed to run Kafka but 'java' is not on PATH; {hint}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"'{java} -version' failed ({exc}); {hint}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    if major < MIN_JAVA_MAJOR:
        raise SetupError(f"Java {MIN_JAVA_MAJOR}+ is needed to run Kafka 4.1 but {java} is Java {major}; {hint}")
    return java


def resolve_jars(jar_set: JarSet, *, cache_dir: Path | None = None, progress: Callable[[str], None] = print) -> Path:
    """The directory holding every jar of `jar_set`, fetching them with Maven the first time."""
    cache = cache_dir or jar_cache_dir()
    target = cache / jar_set.name
    pom = jar_set.pom_text()
    digest = hashlib.sha256(pom.encode()).hexdigest()
    marker = target / ".complete"
    if marker.is_file() and marker.read_text().strip() == digest:
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError(
            f"Maven ('mvn') is needed once to fetch the {jar_set.name} jars from Maven Central; "
            "install it with: apt-get install maven"
        )
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".{jar_set.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching the same set right now
        if marker.is_file() and marker.read_text().strip() == digest:
            return target
        staging = cache / f".{jar_set.name}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        (staging / "pom.xml").write_text(pom, encoding="utf-8")
        (staging / "settings.xml").write_text(CENTRAL_ONLY_SETTINGS, encoding="utf-8")
        progress(f"fetching the {jar_set.name} jars from Maven Central into {target} (once) ...")
        cmd = [
            mvn,
            "-B",
            "-q",
            "-s",
            str(staging / "settings.xml"),
            "-f",
            str(staging / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging / 'lib'}",
            "-DincludeScope=runtime",
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise SetupError(f"mvn could not fetch the {jar_set.name} jars (exit {result.returncode}):\n{tail}")
        shutil.rmtree(target, ignore_errors=True)
        (staging / "lib").rename(target)
        shutil.rmtree(staging, ignore_errors=True)
        marker.write_text(digest + "\n")
        progress(f"fetched {sum(1 for _ in target.glob('*.jar'))} jars for {jar_set.name}")
    return target


def class_archive_path(jars: Path) -> Path:
    """Where the class-data-sharing archive of the JVMs run on `jars` lives: beside the jar directory, in the cache
    (localkafka.class_archive makes it)."""
    return jars.with_name(f"{jars.name}.jsa")


def class_archive_options(jars: Path) -> list[str]:
    """The JVM options that map the archive of `jars`' classes when it has been made; none otherwise. An archive made
    by another JDK or for other jars is refused by the JVM itself, with a warning in its log, and the classes are then
    loaded from the jars as without it (`-Xshare:auto`, the default)."""
    path = class_archive_path(jars)
    return [f"-XX:SharedArchiveFile={path}"] if path.is_file() else []
