"""The composition root's pure pieces (the processes themselves are exercised by the integration tests)."""

from __future__ import annotations

from mirrorwatch.services import canary_readings
from monitor.history import CanaryReading


def test_a_canary_document_gives_each_link_its_worst_partition_s_p99_and_absence() -> None:
    def partition(p99: float | None) -> dict[str, object]:
        return {"e2e_latency": {"p99_seconds": p99}}

    document = {
        "links": [
            {"link": "dr", "absent": False, "partitions": [partition(0.5), partition(2.25), partition(None)]},
            {"link": "quiet", "absent": True, "partitions": [partition(None)]},
        ]
    }
    assert canary_readings(document) == {"dr": CanaryReading(2.25, False), "quiet": CanaryReading(None, True)}
    assert canary_readings(None) == {}
