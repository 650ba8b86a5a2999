"""What a link does when its next offset is not on the source any more (`mirror.gaps`), and the ledger that keeps the
records it lost said after a restart (`kernel.gap_ledger`). Pure and file-only; the real cases are in
tests/mirror/test_retention_gap.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernel.gap_ledger import GapLedger, newer
from kernel.worker_status import Gap, WorkerStatus
from mirror.gaps import OutOfRange, Recreated, TargetLost, out_of_range, recreated, target_lost, truncated_at

NOW = 1_800_000_000_000


def decide(
    position: int | None, low: int, high: int, *, start_from: str = "earliest", on_gap: str = "stop"
) -> OutOfRange:
    return out_of_range("orders", 3, position, low, high, start_from=start_from, on_gap=on_gap, now_ms=NOW)


@pytest.mark.parametrize(("start_from", "expected"), [("earliest", 100), ("latest", 250)])
def test_a_partition_without_a_position_starts_where_the_link_begins_and_nothing_is_lost(
    start_from: str, expected: int
) -> None:
    assert decide(None, 100, 250, start_from=start_from) == OutOfRange("start", expected)
    assert decide(-1001, 100, 250, start_from=start_from) == OutOfRange("start", expected)  # librdkafka's INVALID


def test_retention_past_the_position_is_a_gap_of_exactly_the_records_between_stopped_by_default() -> None:
    stop = decide(1000, 1500, 2000)
    assert stop == OutOfRange("stop", None, Gap("orders", 3, 1000, 1500, "retention", "stopped", NOW))
    assert stop.gap is not None and stop.gap.records == 500
    skip = decide(1000, 1500, 2000, on_gap="skip")
    assert skip == OutOfRange("skip", 1500, Gap("orders", 3, 1000, 1500, "retention", "skipped", NOW))


@pytest.mark.parametrize("on_gap", ["stop", "skip"])
def test_a_log_truncated_below_the_position_stops_whatever_the_rule(on_gap: str) -> None:
    """Going on would write new records under offsets the target already holds others for."""
    decision = decide(2000, 0, 1800, on_gap=on_gap)
    assert decision == OutOfRange("stop", None, Gap("orders", 3, 1800, 2000, "truncated", "stopped", NOW))


def test_a_position_inside_the_log_after_all_is_read_again() -> None:
    for position in (1500, 1700, 2000):  # the log start, inside, the end (nothing new yet)
        assert decide(position, 1500, 2000) == OutOfRange("retry", position)


def test_a_gap_says_which_records_how_many_why_and_what_the_link_did() -> None:
    gap = Gap("orders", 3, 1000, 1500, "retention", "stopped", NOW)
    assert gap.describe("dc1-to-dc2") == (
        "link dc1-to-dc2: 500 records of orders[3] lost, offsets 1000 to 1499: the source's log start had passed "
        "them (retention or delete-records) before the link copied them; the partition is stopped (on_gap: stop)"
    )
    truncated = Gap("orders", 3, 1800, 2000, "truncated", "stopped", NOW)
    assert "200 records of orders[3] lost, offsets 1800 to 1999: the source's log ends below" in truncated.describe("l")


def test_gaps_travel_in_the_worker_status() -> None:
    gap = Gap("orders", 3, 1000, 1500, "retention", "skipped", NOW)
    status = WorkerStatus("l", 0, "python", NOW, 500, "running", (), gaps=(gap,))
    assert WorkerStatus.from_json(status.as_json()) == status
    # an older worker's status has none; a foreign field in a gap is ignored
    body = status.as_json()
    del body["gaps"]
    assert WorkerStatus.from_json(body) == replace(status, gaps=())
    body = status.as_json()
    body["gaps"][0]["newer_field"] = 1
    assert WorkerStatus.from_json(body) == status


def test_the_ledger_keeps_each_gap_once_across_restarts_and_survives_a_torn_line(tmp_path: Path) -> None:
    first = Gap("orders", 3, 1000, 1500, "retention", "stopped", NOW)
    again = replace(first, at_ms=NOW + 60_000)  # the same records, found again after a restart
    other = Gap("orders", 1, 10, 20, "retention", "skipped", NOW + 1)
    ledger = GapLedger(tmp_path / "lost", "dc1/to:dc2")
    assert ledger.record(first) and not ledger.record(again) and ledger.record(other)
    assert ledger.gaps() == (first, other)
    with ledger.path.open("a") as out:
        out.write('{"topic": "orders", "partit')  # a crash in the middle of a write
    reopened = GapLedger(tmp_path / "lost", "dc1/to:dc2")
    assert reopened.gaps() == (first, other) and not reopened.record(again)
    third = Gap("orders", 0, 5, 7, "retention", "skipped", NOW + 2)
    assert reopened.record(third)  # written on a line of its own, after the torn one
    assert GapLedger(tmp_path / "lost", "dc1/to:dc2").gaps() == (first, other, third)
    lines = ledger.path.read_text().splitlines()
    assert len(lines) == 4 and lines[2].startswith('{"topic": "orders", "partit')  # no blank line between
    # the operator chose to go on (on_gap: skip): the same records, now skipped, written again; the newest line wins
    skipped = replace(first, action="skipped", at_ms=NOW + 120_000)
    assert reopened.record(skipped)
    assert GapLedger(tmp_path / "lost", "dc1/to:dc2").gaps() == (other, third, skipped)
    assert ledger.path.parent == tmp_path / "lost" and "/" not in ledger.path.name


def test_the_ledger_offers_each_gap_to_the_progress_topic_until_taken_and_learns_those_found_on_other_hosts(
    tmp_path: Path,
) -> None:
    """The sharing half of the ledger (`kernel.gap_ledger`): what is written down is offered until the cluster took it
    as it is (a gap refused, or grown since, is offered again; one handed over waits for the answer); a gap learnt
    from the topic is written down here, never offered back, and one already known as it is, or less, is not news."""
    ledger = GapLedger(tmp_path / "here", "dr")
    first = Gap("orders", 3, 1000, 1500, "retention", "stopped", NOW)
    ledger.record(first)
    assert ledger.unshared() == [first]
    ledger.sharing(first)
    assert ledger.unshared() == []  # handed over: the answer awaited
    ledger.shared(first, False)
    assert ledger.unshared() == [first]  # refused (the target down): offered again
    ledger.sharing(first)
    ledger.shared(first, True)
    assert ledger.unshared() == []
    growing = Gap("orders", 0, 0, 700, "target-retention", "copied", NOW)
    ledger.record(growing)
    ledger.sharing(growing)
    ledger.shared(growing, True)
    grown = replace(growing, end_offset=900, at_ms=NOW + 10_000)
    ledger.record(grown)
    assert ledger.unshared() == [grown]  # the topic has it smaller
    ledger.shared(growing, True)  # a late answer for the smaller one changes nothing
    assert ledger.unshared() == [grown]

    # another host's worker found these; this host's ledger learns them, writes them down, does not offer them back
    elsewhere = Gap("orders", 5, 10, 40, "recreated", "stopped", NOW + 5)
    assert GapLedger(tmp_path / "here", "dr").learn([elsewhere, first, growing]) == [elsewhere]
    there = GapLedger(tmp_path / "there", "dr")
    assert there.learn([elsewhere, first]) == [elsewhere, first]
    assert there.unshared() == [] and there.learn([first, replace(first, at_ms=NOW - 1)]) == []
    assert GapLedger(tmp_path / "there", "dr").gaps() == (first, elsewhere)
    skipped = replace(first, action="skipped", at_ms=NOW + 60_000)  # the operator chose to go on, elsewhere
    assert there.learn([skipped]) == [skipped] and there.gaps() == (elsewhere, skipped)
    assert newer(skipped, first) is skipped and newer(grown, growing) is grown and newer(None, first) is first


@pytest.mark.parametrize(("rule", "action", "did"), [("stop", "stop", "stopped"), ("restart", "restart", "restarted")])
def test_a_recreated_topic_is_a_gap_of_the_old_topics_records_not_copied_and_its_rule_decides(
    rule: str, action: str, did: str
) -> None:
    decision = recreated("orders", 3, 1000, 1200, on_recreate=rule, now_ms=NOW)
    assert decision == Recreated(action, Gap("orders", 3, 1000, 1200, "recreated", did, NOW))
    assert decision.gap.records == 200
    # nothing known past the position (no high-watermark noted), or no position: nothing counted, still said
    assert recreated("orders", 3, 1000, None, on_recreate=rule, now_ms=NOW).gap.records == 0
    assert recreated("orders", 3, None, None, on_recreate=rule, now_ms=NOW).gap.first_offset == 0


def test_a_recreated_gap_says_so_and_what_the_link_does() -> None:
    stopped = Gap("orders", 3, 1000, 1200, "recreated", "stopped", NOW).describe("l")
    assert stopped == (
        "link l: source topic 'orders' was deleted and created again (a new topic id): 200 records of the old "
        "orders[3] were not copied, offsets 1000 to 1199; its new partition is stopped (on_recreate: stop)"
    )
    restarted = Gap("orders", 3, 1000, 1000, "recreated", "restarted", NOW).describe("l")
    assert (
        "0 records of the old orders[3] were not copied; the link mirrors the new topic from its beginning" in restarted
    )


def test_a_truncation_librdkafka_found_by_leader_epoch_is_exact_even_when_new_records_passed_the_position() -> None:
    message = (
        "Partition log truncation detected at offset 100 (leader epoch 0): broker end offset is 60 (offset leader "
        "epoch 0). Reset to INVALID.: Local: Partition log truncation detected (broker 1)"
    )  # librdkafka 2.16's text, as a real broker's truncated log gave it (tests/mirror/test_truncated.py)
    assert truncated_at(message) == 60
    assert truncated_at("Broker: Offset out of range") is None
    for high in (80, 130):  # 20 new records after the cut, or 70: the old offsets 60..99 are other records now
        decision = out_of_range(
            "orders", 3, 100, 0, high, start_from="earliest", on_gap="skip", now_ms=NOW, truncated_at=60
        )
        assert decision == OutOfRange("stop", None, Gap("orders", 3, 60, 100, "truncated", "stopped", NOW))


@pytest.mark.parametrize(("rule", "action", "did"), [("stop", "stop", "stopped"), ("recopy", "recopy", "recopied")])
@pytest.mark.parametrize("how", ["deleted", "recreated"])
def test_a_lost_target_topic_counts_what_it_had_that_the_source_still_has_and_its_rule_decides(
    rule: str, action: str, did: str, how: str
) -> None:
    # the link had copied up to 1200; the source keeps 300.. (what retention took before is gone from both sides)
    decision = target_lost("orders", 3, 1200, 300, how=how, on_target_loss=rule, now_ms=NOW)
    assert decision == TargetLost(action, Gap("orders", 3, 300, 1200, f"target-{how}", did, NOW))
    assert decision.gap.records == 900
    # nothing copied yet, or only what the source no longer has: nothing counted, still said (and read from 300)
    assert target_lost("orders", 3, None, 300, how=how, on_target_loss=rule, now_ms=NOW).gap.records == 0
    assert target_lost("orders", 3, 100, 300, how=how, on_target_loss=rule, now_ms=NOW).gap.first_offset == 300


def test_a_lost_target_gap_says_which_records_the_target_no_longer_has_and_what_the_link_does() -> None:
    stopped = Gap("orders", 3, 300, 1200, "target-deleted", "stopped", NOW).describe("l")
    assert stopped == (
        "link l: the target topic of orders[3] was deleted under the link: 900 records the link had copied there "
        "are gone from the target and still on the source, offsets 300 to 1199; the partition is stopped and the "
        "topic not created again (on_target_loss: stop)"
    )
    recopied = Gap("orders", 3, 300, 1200, "target-recreated", "recopied", NOW).describe("l")
    assert "was deleted and created again (another topic id) under the link" in recopied
    assert recopied.endswith("the link copies them again from the source's log start (on_target_loss: recopy)")
