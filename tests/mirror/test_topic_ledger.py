"""The link's notes of its source topics' ids (`mirror.topic_ledger`): the ledger file shared by a host's workers, and
`Generations`, which finds a recreated topic by them. File-only, no broker (confluent_kafka's TopicPartition is the
value the consumer's callbacks hand over); the real cases are in tests/mirror/test_recreated.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from mirror.topic_ledger import Generations, PartitionNote, TopicLedger


def test_the_topic_ledger_keeps_the_newest_note_per_partition_across_workers_and_a_torn_line(tmp_path: Path) -> None:
    one, two = TopicLedger(tmp_path, "dc1/dc2"), TopicLedger(tmp_path, "dc1/dc2")
    one.write([PartitionNote("orders", 0, "id-a", 10, 12), PartitionNote("orders", 1, "id-a", 5, 5)])
    two.write([PartitionNote("orders", 1, "id-a", 7, 9)])
    with one.path.open("a") as out:
        out.write('{"topic":"orders","partition":0,"topic_id":"id-')  # a worker killed mid-line
    again = TopicLedger(tmp_path, "dc1/dc2")
    again.read()
    assert again.note("orders", 0) == PartitionNote("orders", 0, "id-a", 10, 12)
    assert again.note("orders", 1) == PartitionNote("orders", 1, "id-a", 7, 9)
    assert again.note("orders", 2) is None
    assert one.path.name == "dc1_dc2.jsonl"


def test_notes_are_stamped_offered_to_the_progress_topic_and_learnt_from_other_hosts_when_later(tmp_path: Path) -> None:
    """The ledger kept in step with the progress topic (`kernel.sharing`): a note written here is stamped with the
    writer's clock and offered until the cluster took it; a note another host's worker wrote is learnt when it is
    later than this host's (written down here, with its stamp: it wins a read of the file), never offered back."""
    now = [1_000]
    here = TopicLedger(tmp_path / "here", "dr", now_ms=lambda: now[0])
    here.write([PartitionNote("orders", 0, "id-a", 10, 12)])
    (mine,) = here.unshared()
    assert mine == PartitionNote("orders", 0, "id-a", 10, 12) and mine.noted_ms == 1_000
    here.sharing(mine)
    assert here.unshared() == []
    here.shared(mine, True)
    here.write([PartitionNote("orders", 0, "id-a", 10, 12)])  # unchanged: no news, nothing offered
    assert here.unshared() == [] and len(here.path.read_text().splitlines()) == 1

    stale = PartitionNote("orders", 0, "id-a", 8, 12, noted_ms=900)  # another host's, before this host's
    later = PartitionNote("orders", 0, "id-b", 0, 5, "", {"0": 40}, noted_ms=2_000)  # restarted there, since
    other = PartitionNote("orders", 1, "id-a", 3, 3, noted_ms=500)  # a partition this host never had
    assert here.learn([stale]) == [] and here.note("orders", 0) == mine
    assert here.learn([later, other]) == [later, other] and here.unshared() == []
    again = TopicLedger(tmp_path / "here", "dr")
    again.read()
    assert (again.note("orders", 0), again.note("orders", 1)) == (later, other)
    assert again.note("orders", 0).noted_ms == 2_000  # type: ignore[union-attr]

    now[0] = 3_000  # the partition is this host's again, read on: stamped later than the learnt note, offered
    here.write([PartitionNote("orders", 0, "id-b", 30, 35, "", {"0": 40})])
    assert [(n.acked, n.noted_ms) for n in here.unshared()] == [(30, 3_000)]


def test_the_topic_ledger_is_compacted_when_it_grows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kernel.topic_notes.COMPACT_AFTER", 5)
    ledger = TopicLedger(tmp_path, "l")
    for acked in range(12):
        ledger.write([PartitionNote("orders", 0, "id", acked, 20), PartitionNote("orders", 1, "id", acked, 20)])
    assert len(ledger.path.read_text().splitlines()) <= 5
    fresh = TopicLedger(tmp_path, "l")
    fresh.read()
    assert [fresh.note("orders", p) for p in (0, 1)] == [PartitionNote("orders", p, "id", 11, 20) for p in (0, 1)]


def test_generations_find_a_recreated_topic_by_its_note_and_pass_over_a_refusal_queued_before_a_restart(
    tmp_path: Path,
) -> None:
    ledger = TopicLedger(tmp_path, "l")
    ledger.write([PartitionNote("orders", 0, "old", 1000, 1200), PartitionNote("orders", 1, "old", 50, 50)])
    generations, decided = Generations(TopicLedger(tmp_path, "l")), []

    def rule(topic: str, partition: int, position: int | None, high: int | None) -> str:
        decided.append((topic, partition, position, high))
        return "restart" if partition == 0 else "stop"

    committed = [TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("orders", 2)]
    ends = {0: 1000, 1: 990}  # the target topic's partitions' ends when the restart was decided
    starts = generations.assigned(committed, {"orders": "new"}, rule, lambda _t: ends)  # Kafka dropped the commits
    assert decided == [("orders", 0, 1000, 1200), ("orders", 1, 50, 50)]  # what the notes knew; no note: no question
    assert [(tp.partition, tp.offset) for tp in starts] == [(0, OFFSET_BEGINNING), (1, -1001), (2, -1001)]
    assert generations.of == {("orders", 0): "new", ("orders", 1): "old", ("orders", 2): "new"}  # 1 stays the old's
    assert generations.changed(generations.of, {"orders": "new"}, stopped={("orders", 1)}) == []
    assert generations.changed(generations.of, {"orders": "newer"}) == [("orders", 0), ("orders", 1), ("orders", 2)]
    # the restarted partition's copies begin at those ends, noted for failover (and read back by the next owner)
    assert generations.target_from == {("orders", 0): {"0": 1000, "1": 990}}
    generations.write([("orders", 0)], {("orders", 0): 0}, {}, set())
    again = Generations(TopicLedger(tmp_path, "l"))
    again.assigned([TopicPartition("orders", 0)], {"orders": "new"}, rule)
    assert again.ledger.note("orders", 0) == PartitionNote("orders", 0, "new", 0, None, "", {"0": 1000, "1": 990})
    assert again.target_from == {("orders", 0): {"0": 1000, "1": 990}}

    generations.restart(("orders", 0), "newer", {})
    assert generations.restarting(("orders", 0), None)  # nothing read since: a queued old refusal
    assert not generations.restarting(("orders", 0), 1)  # read from the new topic: a refusal now is real
    assert not generations.restarting(("orders", 0), None)


def test_generations_note_the_target_topic_id_once_and_a_starting_worker_learns_them(tmp_path: Path) -> None:
    ledger = TopicLedger(tmp_path, "l")
    ledger.write([PartitionNote("orders", 0, "src", 10, 10, "tgt-old"), PartitionNote("orders", 1, "src", 5, 5)])
    generations = Generations(TopicLedger(tmp_path, "l"))
    assert generations.noted_targets(lambda t: f"dc1.{t}") == {"dc1.orders": "tgt-old"}  # before any is created
    committed = [TopicPartition("orders", 0, 10), TopicPartition("orders", 1, 5)]
    generations.assigned(committed, {"orders": "src"}, lambda *_a: "stop")
    assert generations.target_of == {("orders", 0): "tgt-old"}
    progress = {("orders", 0): 10, ("orders", 1): 5}
    # the keeper's id now is another (the target topic was created again): partition 0's records went to the old
    # one, and its note says so until it is copied again; partition 1 had no target noted and takes today's
    generations.write([("orders", 0), ("orders", 1)], progress, {}, set(), {"orders": "tgt-new"})
    again = TopicLedger(tmp_path, "l")
    again.read()
    assert again.note("orders", 0) == PartitionNote("orders", 0, "src", 10, None, "tgt-old")
    assert again.note("orders", 1) == PartitionNote("orders", 1, "src", 5, None, "tgt-new")
    generations.target_of[("orders", 0)] = "tgt-new"  # copied again into the new one
    generations.write([("orders", 0)], progress, {}, set(), {"orders": "tgt-new"})
    again.read()
    assert again.note("orders", 0) == PartitionNote("orders", 0, "src", 10, None, "tgt-new")
    # a note written before target ids were noted reads as none
    with again.path.open("a") as older:
        older.write('{"topic":"t","partition":0,"topic_id":"x","acked":1,"high":2}\n')
    again.read()
    assert again.note("t", 0) == PartitionNote("t", 0, "x", 1, 2, "")
