"""A rolling restart of a busy link's three workers (issue #45), on real brokers, with B11's scenario
(bench.rolling_restart): each `mirrorwatch mirror` in turn gets SIGTERM and is started again at once while records
flow. The truth is taken outside mirrorwatch: the producer's acknowledgements and a consumer following the target.

Then `mirrorwatch run` joins the link as one more worker (with its monitor and canary), and `mirrorwatch monitor` and
`mirrorwatch canary` run beside the workers, each SIGTERMed in turn under the same load.

Facts: every worker exits 0 on SIGTERM, cleanly, and so do `run`, `monitor` and `canary`; every acknowledged record reaches the target and none twice (a
clean hand-over flushes what it sent and commits it before its partitions move, `LinkWorker._on_revoke`, and the
cooperative protocol moves only those); the link never falls as far behind as a hand-over waiting out a session
timeout would put it (`LAG_BOUND_S`). How fast each worker exits and how far the link fell behind are printed here
and measured by `python -m bench.rolling_restart` at 5,000 records/s (the README's B11), not judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.rolling_restart import LAG_BOUND_S, roll
from kernel.config import MirrorwatchConfig

pytestmark = pytest.mark.integration


def test_a_rolling_restart_of_three_busy_workers_loses_nothing_repeats_nothing_and_never_waits_a_session_timeout(
    clusters_config: MirrorwatchConfig, tmp_path: Path
) -> None:
    result = roll(clusters_config, tmp_path, rate=2000, workers=3, settle_s=6)
    print(result)
    assert result.exit_codes == [0, 0, 0], f"a worker did not stop cleanly on SIGTERM: {result}"
    assert {kind: code for kind, (_seconds, code) in result.others.items()} == {"run": 0, "monitor": 0, "canary": 0}
    assert result.acked > 0 and result.missing == 0, f"{result.missing} of {result.acked} records not on the target"
    assert result.duplicates == 0, f"{result.duplicates} records arrived twice across clean hand-overs"
    assert result.peak_lag_seconds < LAG_BOUND_S, f"the link fell {result.peak_lag_seconds:.1f} s behind"
