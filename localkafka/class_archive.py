"""A class-data-sharing archive of the Kafka broker's classes (the JDK's AppCDS): made once, mapped by every broker.

A broker JVM loads, verifies and links some 5,000 classes from the jars each time it starts; a dynamic archive
(`-XX:ArchiveClassesAtExit`, JDK 13+) written by one broker's run holds them ready, and every later broker maps it
(`-XX:SharedArchiveFile`, added by `LocalClusters` when the archive exists: jars.class_archive_options). Measured on
the 2-core machine: a pair of clusters up in 3 s with 5 CPU-s instead of 8 s with 16 CPU-s (the tests start dozens).
`mirrorwatch local fetch` (so setup) makes it, by starting and stopping one plaintext broker in a scratch directory.
The JVM checks the archive against its own build and the jars' sizes and times, and ignores a stale one.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from localkafka.jars import KAFKA, class_archive_path, resolve_jars
from localkafka.local import LocalClusters

__all__ = ["make_class_archive"]


def make_class_archive(*, progress: Callable[[str], None] = print) -> Path:
    """The archive of the broker's classes, made now unless one newer than the jars is there already."""
    jars = resolve_jars(KAFKA, progress=progress)
    path = class_archive_path(jars)
    with (jars.parent / f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another setup may be making it right now
        if path.is_file() and path.stat().st_mtime >= (jars / ".complete").stat().st_mtime:
            return path
        progress(f"making the class-data archive of the Kafka broker's classes into {path} (once) ...")
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        staging.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="mirrorwatch-class-archive-") as scratch:
            # The JVM writes the archive as it exits, after a clean shutdown (SIGTERM, `down`). The storage format's
            # JVM writes one first; the broker's, later and with more classes, takes its place.
            clusters = LocalClusters(
                Path(scratch), progress=lambda _line: None, jvm_options=[f"-XX:ArchiveClassesAtExit={staging}"]
            )
            try:
                clusters.up(["source"], tie_to_parent=True)
            finally:
                clusters.down()
        if not staging.is_file():
            progress("no class-data archive was written (see the JDK's CDS support); brokers load classes as before")
            return path
        staging.replace(path)
        return path
