"""A class-data-sharing archive of the Spark driver's classes (the JDK's AppCDS): made once per pyspark install,
mapped by every driver the spark engine starts (`localkafka.class_archive` does the same for the local brokers).

A Spark driver JVM loads, verifies and links thousands of classes from pyspark's jars each time it starts; a dynamic
archive (`-XX:ArchiveClassesAtExit`, JDK 13+) written by one driver's run holds them ready. Measured on the 2-core
machine, a local driver up with a session and one Kafka read: 7.7-8.9 CPU-s and 13-18 s instead of 12.4-16.2 CPU-s and
27-31 s (the suite running beside it; G1 and the engine's parallel collector alike). `mirrorwatch local fetch` (so
setup) makes it by running a short Spark job (a streaming query from the rate source, a batch one) in a subprocess. The
archive belongs to one pyspark install (its jars' directory is in the file's name, and in a `.install` file beside it:
an archive whose install is gone is removed when another is made) and one JDK: the JVM checks it against its own build
and the jars' sizes and times, and a stale one is refused with one warning line on the driver's stderr, the classes then
loaded as without it.

Imports: localkafka.jars (the cache it lives in); pyspark only in the subprocess that makes the archive."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from localkafka.jars import jar_cache_dir

__all__ = ["driver_archive_options", "driver_archive_path", "make_driver_archive"]

# The short job whose driver writes the archive as it exits: a session, a micro-batch query (the engine's kind of
# work) from the rate source to the noop sink for a few batches, and a batch job.
_TRAINING = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("mirrorwatch-class-archive")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
         .config("spark.driver.extraJavaOptions", sys.argv[1]).getOrCreate())
query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
         .selectExpr("CAST(value AS STRING) AS key", "CAST(timestamp AS STRING) AS value")
         .writeStream.format("noop").option("checkpointLocation", sys.argv[2])
         .trigger(processingTime="200 milliseconds").start())
deadline = time.monotonic() + 60
while time.monotonic() < deadline and len(query.recentProgress) < 5:
    time.sleep(0.2)
query.stop()
spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
gateway = spark.sparkContext._gateway
spark.stop()
gateway.proc.stdin.close()  # the JVM exits when its stdin closes, and writes the archive as it does
gateway.proc.wait(timeout=300)
"""


def _jars_dir() -> Path | None:
    """pyspark's jars (the driver JVM's class path), found without importing pyspark; None when it is not installed."""
    spec = importlib.util.find_spec("pyspark")
    jars = Path(spec.origin).parent / "jars" if spec is not None and spec.origin else None
    return jars if jars is not None and jars.is_dir() else None


def driver_archive_path(jars: Path | None = None) -> Path | None:
    """Where the archive of this pyspark install's driver classes (`jars`: found when not given) lives, in the jar
    cache; None without pyspark."""
    jars = jars or _jars_dir()
    if jars is None:
        return None
    install = hashlib.sha256(str(jars.resolve()).encode()).hexdigest()[:12]
    return jar_cache_dir() / f"spark-driver-{metadata.version('pyspark')}-{install}.jsa"


def driver_archive_options() -> list[str]:
    """The driver JVM options that map the archive when it has been made for this install; none otherwise."""
    path = driver_archive_path()
    return [f"-XX:SharedArchiveFile={path}"] if path is not None and path.is_file() else []


def make_driver_archive(*, progress: Callable[[str], None] = print) -> Path | None:
    """The archive of the driver's classes, made now unless one newer than pyspark's jars is there already."""
    jars = _jars_dir()
    path = driver_archive_path(jars) if jars is not None else None
    if path is None or jars is None:
        progress("pyspark is not installed: no class-data archive of the Spark driver")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another setup may be making it right now
        if path.is_file() and path.stat().st_mtime >= jars.stat().st_mtime:
            path.with_suffix(".install").write_text(f"{jars.resolve()}\n")
            return path
        progress(f"making the class-data archive of the Spark driver's classes into {path} (once) ...")
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        staging.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="mirrorwatch-spark-archive-") as scratch:
            options = f"-XX:ArchiveClassesAtExit={staging} -Djava.io.tmpdir={scratch}"
            result = subprocess.run(
                [sys.executable, "-c", _TRAINING, options, str(Path(scratch) / "checkpoint")],
                capture_output=True,
                text=True,
                cwd=scratch,
                timeout=600,
                check=False,
            )
        if result.returncode != 0 or not staging.is_file():
            tail = "\n".join((result.stderr or "").splitlines()[-10:])
            progress(f"no class-data archive of the Spark driver was written (exit {result.returncode}); drivers load "
                     f"classes as before:\n{tail}")  # fmt: skip
            staging.unlink(missing_ok=True)
            return None
        staging.replace(path)
        path.with_suffix(".install").write_text(f"{jars.resolve()}\n")
        _forget_gone_installs(path.parent)
        return path


def _forget_gone_installs(cache: Path) -> None:
    """Remove the archives of pyspark installs that are gone (a fresh clone's virtualenv each: 150 MB apiece)."""
    for install in cache.glob("spark-driver-*.install"):
        if not Path(install.read_text().strip()).is_dir():
            install.with_suffix(".jsa").unlink(missing_ok=True)
            install.unlink(missing_ok=True)
