"""The spark link's scratch (mirror.spark_scratch): what a killed driver left there goes at the next start."""

from __future__ import annotations

from pathlib import Path

from mirror.spark_scratch import clear_scratch


def test_what_a_killed_driver_left_in_the_scratch_goes_at_the_next_start_and_anything_else_stays(
    tmp_path: Path,
) -> None:
    scratch = tmp_path / "spark" / "l"
    assert clear_scratch(scratch) == 0 and scratch.is_dir()
    (scratch / "blockmgr-1" / "0c").mkdir(parents=True)
    (scratch / "spark-2" / "userFiles-3").mkdir(parents=True)
    (scratch / "liblz4-java-4.so").write_bytes(b"\x7fELF")
    (scratch / "notes.txt").write_text("an operator's")
    assert clear_scratch(scratch) == 3
    assert sorted(p.name for p in scratch.iterdir()) == ["notes.txt"]
