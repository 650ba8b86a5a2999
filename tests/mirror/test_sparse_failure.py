"""A run that failed in sparse mode (one report per run of records) holds the partition's acknowledged position below
it, whatever the reports of the runs after it say (`mirror.delivery.Delivery.sparse_failed`). Seen on real brokers
(tests/mirror/test_mm1_and_bad_input.py, 1 run in 3): a gapless producer's fatal error failed the request holding a
record too large for the target while the next request, already sent, was written; its report acknowledged through
it, and the replay began past the refused record, which reached neither the target nor the dead-letter topic."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from mirror.delivery import Delivery
from mirror.progress import PartitionProgress


@pytest.mark.parametrize("later_run_first", [True, False])
def test_a_failed_run_holds_the_acknowledged_position_below_it(later_run_first: bool) -> None:
    progress = PartitionProgress(start_offset=10)
    for offset in range(10, 21):  # offset 10 alone in one request, 11-20 in the next
        progress.dispatch(offset, 1)
    delivery = SimpleNamespace(sparse_failure=None)
    refused = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    if later_run_first:
        progress.ack_through(20)
    Delivery.sparse_failed(delivery, progress, ("orders", 0), 10, 10, refused)  # type: ignore[arg-type]
    if not later_run_first:
        progress.ack_through(20)
    assert progress.acked == 10 and progress.offset_to_commit() == 10
    assert delivery.sparse_failure is not None and delivery.sparse_failure.startswith("orders[0]@10: ")
