"""The runner's process settings (no brokers: the workers themselves are tested in test_engine)."""

from __future__ import annotations

import gc

import pytest

from mirror.runner import GC_THRESHOLDS, tune_gc


@pytest.mark.usefixtures("gc_restored")
def test_tune_gc_collects_rarely_and_freezes_what_start_up_made() -> None:
    assert gc.get_freeze_count() == 0
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > 700  # CPython's default youngest-generation threshold: the one that cost the engine
    assert gc.get_freeze_count() > 0
