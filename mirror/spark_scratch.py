"""Spark's scratch on this host (`SparkLinkPlan.scratch`): what a killed driver of the link left there goes at its
next start."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["SCRATCH_LEFTOVERS", "clear_scratch"]

# What Spark (and lz4-java in its JVM) leave in their scratch: deleted by a driver that stops, left by one killed
SCRATCH_LEFTOVERS = ("blockmgr-*", "spark-*", "liblz4-java-*")


def clear_scratch(scratch: Path) -> int:
    """Make the link's scratch directory, and remove what an earlier driver of the link left in it (one driver of a
    link at a time uses it, as its checkpoint); how many entries were removed."""
    scratch.mkdir(parents=True, exist_ok=True)
    removed = 0
    for pattern in SCRATCH_LEFTOVERS:
        for path in scratch.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed
