"""Records the target takes already older than its retention (pure `mirror.expiry`, the ledger's growing gaps, and
how they are counted: once per offset, whoever finds them)."""

from __future__ import annotations

from pathlib import Path

from failover.translate import Lost, lost_unread
from kernel.gap_ledger import GapLedger
from kernel.worker_status import Gap, records_by_partition
from mirror.admin import retention_by_timestamps
from mirror.expiry import WRITE_EVERY_MS, Expired, TargetExpiry

NOW = 1_800_000_000_000
HOUR = 3_600_000
KEY = ("orders", 0)


def test_records_acknowledged_while_the_newest_read_is_older_than_the_retention_are_one_growing_gap() -> None:
    """Retention 10 minutes; the link reads records written an hour ago. From where the owner began (offset 100) every
    record acknowledged is one incident, its end moving with each check; written to the ledger when it begins, every
    WRITE_EVERY_MS after, and when it ends — when the records read are younger than the retention again (those of
    the interval they came in are not counted: the segment's newest record keeps them for now)."""
    expiry, retention = TargetExpiry(), 600_000

    def check(acked: int, newest_ms: int, at_ms: int) -> Expired | None:
        return expiry.check(KEY, began=100, acked=acked, newest_ms=newest_ms, retention_ms=retention, now_ms=at_ms)

    first = check(250, NOW - HOUR, NOW)
    assert first is not None and first.new and first.durable
    assert first.gap == Gap("orders", 0, 100, 250, "target-retention", "copied", NOW)
    grown = check(400, NOW - HOUR + 500, NOW + 500)
    assert grown is not None and not grown.new and not grown.durable
    assert (grown.gap.first_offset, grown.gap.end_offset, grown.gap.at_ms) == (100, 400, NOW)
    assert grown.gap.key == first.gap.key
    assert check(400, NOW - HOUR + 500, NOW + 1_000) is None  # nothing acknowledged since: nothing new
    due = check(450, NOW - HOUR + 600, NOW + WRITE_EVERY_MS)
    assert due is not None and due.durable and due.gap.end_offset == 450
    ended = check(500, NOW, NOW + WRITE_EVERY_MS + 500)  # caught up past the retention: young records again
    assert ended is not None and ended.ended and ended.durable and ended.gap.end_offset == 450
    assert check(600, NOW + 1, NOW + WRITE_EVERY_MS + 1_000) is None
    again = check(700, NOW - HOUR, NOW + 20_000)  # a new incident begins where the last check stood
    assert again is not None and again.new and (again.gap.first_offset, again.gap.end_offset) == (600, 700)


def test_no_retention_by_timestamps_or_no_record_read_is_never_a_gap() -> None:
    expiry = TargetExpiry()
    for retention, newest in ((None, NOW - HOUR), (600_000, None)):
        assert expiry.check(KEY, began=0, acked=100, newest_ms=newest, retention_ms=retention, now_ms=NOW) is None
    assert expiry.check(("t", 1), began=None, acked=None, newest_ms=NOW - HOUR, retention_ms=1, now_ms=NOW) is None


def test_a_partition_given_away_ends_its_incident_and_its_next_ownership_begins_afresh() -> None:
    expiry = TargetExpiry()
    assert expiry.check(KEY, began=0, acked=50, newest_ms=NOW - HOUR, retention_ms=60_000, now_ms=NOW) is not None
    ended = expiry.forget(KEY)
    assert ended is not None and ended.ended and ended.gap.end_offset == 50
    assert expiry.forget(KEY) is None
    back = expiry.check(KEY, began=40, acked=90, newest_ms=NOW - HOUR, retention_ms=60_000, now_ms=NOW + 1)
    assert back is not None and back.new and (back.gap.first_offset, back.gap.end_offset) == (40, 90)


def test_growing_gaps_are_counted_once_per_offset_whoever_found_them() -> None:
    """A worker's incident 100..450, then its partition's next owner read again from the commit (300) and found
    300..800: 700 records, not 850. Gaps of other reasons add up as before; a growing gap seen at two sizes counts
    as far as it grew."""
    first = Gap("orders", 0, 100, 450, "target-retention", "copied", NOW)
    smaller = Gap("orders", 0, 100, 250, "target-retention", "copied", NOW)
    second = Gap("orders", 0, 300, 800, "target-retention", "copied", NOW + 5_000)
    retention = Gap("orders", 0, 0, 100, "retention", "skipped", NOW - HOUR)
    other = Gap("orders", 1, 10, 20, "target-retention", "copied", NOW)
    counts = records_by_partition([first, second, smaller, retention, other])
    assert counts == {
        ("orders", 0, "target-retention"): 700,
        ("orders", 0, "retention"): 100,
        ("orders", 1, "target-retention"): 10,
    }
    commits = {("orders", 0): 200, ("orders", 1): 0}
    assert lost_unread(commits, [first, second, retention, other]) == [
        Lost("orders", 0, 200, 800, "target-retention"),
        Lost("orders", 1, 10, 20, "target-retention"),
    ]


def test_the_ledger_keeps_a_growing_gap_as_it_grows_and_writes_it_when_told(tmp_path: Path) -> None:
    ledger = GapLedger(tmp_path, "l")
    gap = Gap("orders", 0, 100, 250, "target-retention", "copied", NOW)
    assert ledger.record(gap)
    assert ledger.record(Gap("orders", 0, 100, 400, "target-retention", "copied", NOW), durable=False)
    assert [g.end_offset for g in ledger.gaps()] == [400]  # the status says it as it stands
    assert [g.end_offset for g in GapLedger(tmp_path, "l").gaps()] == [250]  # the file, as last written
    assert not ledger.record(Gap("orders", 0, 100, 400, "target-retention", "copied", NOW))  # nothing new...
    assert [g.end_offset for g in GapLedger(tmp_path, "l").gaps()] == [400]  # ... but written now
    assert not ledger.record(gap)  # a smaller sighting of it is no news
    assert len((tmp_path / "l.jsonl").read_text().splitlines()) == 2


def test_a_target_gap_says_the_records_it_took_already_older_than_its_retention() -> None:
    text = Gap("orders", 2, 1000, 1500, "target-retention", "copied", NOW).describe("l")
    assert text == (
        "link l: 500 records of orders[2] (offsets 1000 to 1499) were older than the target topic's retention.ms when "
        "the target took them (the link lags by more than the target keeps records): its broker deletes them at its "
        "next retention check, unless newer records share their segment; the link goes on"
    )


def test_only_a_deleting_topic_that_keeps_the_records_timestamps_has_a_retention_by_them() -> None:
    assert retention_by_timestamps({"retention.ms": "600000", "cleanup.policy": "delete"}) == 600_000
    assert retention_by_timestamps({"retention.ms": "600000", "cleanup.policy": "compact, delete"}) == 600_000
    assert retention_by_timestamps({"retention.ms": "600000", "cleanup.policy": "compact"}) is None
    assert retention_by_timestamps({"retention.ms": "-1"}) is None
    assert retention_by_timestamps({"retention.ms": "600000", "message.timestamp.type": "LogAppendTime"}) is None
    assert retention_by_timestamps({"retention.ms": "ten minutes"}) is None
