"""Merging the shards' answers (`dashboards.shards.merge_answers`): pure."""

from __future__ import annotations

from dashboards.shards import merge_answers


def test_lists_are_joined_and_what_two_shards_both_serve_is_kept_once() -> None:
    a = {"groups": [{"cluster": "dc1", "group": "g1", "lag": 5}, {"cluster": "hub", "group": "m", "lag": 0}]}
    b = {"groups": [{"cluster": "dc2", "group": "g2", "lag": 1}, {"cluster": "hub", "group": "m", "lag": 0}]}
    merged = merge_answers([a, b])
    assert [(g["cluster"], g["group"]) for g in merged["groups"]] == [("dc1", "g1"), ("hub", "m"), ("dc2", "g2")]
    assert merge_answers([{"clusters": ["dc1", "hub"]}, {"clusters": ["hub", "dc2"]}]) == {
        "clusters": ["dc1", "hub", "dc2"]
    }


def test_events_stay_newest_first_across_shards() -> None:
    a = {"events": [{"at_ms": 30, "kind": "group", "subject": "g1"}, {"at_ms": 10, "kind": "group", "subject": "g1"}]}
    b = {"events": [{"at_ms": 20, "kind": "group", "subject": "g2"}]}
    assert [e["at_ms"] for e in merge_answers([a, b])["events"]] == [30, 20, 10]


def test_an_answer_only_one_shard_has_is_that_shards() -> None:
    answer = {"error": False, "status": {"group": "g2", "status": "OK"}}
    assert merge_answers([None, answer, None]) is answer
    assert merge_answers([None, None]) is None
    assert merge_answers(["text", "other"]) == "text"


def test_scalars_come_from_the_first_shard_and_keys_only_a_later_one_has_are_kept() -> None:
    merged = merge_answers([{"interval_seconds": 10, "links": []}, {"interval_seconds": 5, "links": [], "canary": 1}])
    assert merged == {"interval_seconds": 10, "links": [], "canary": 1}
