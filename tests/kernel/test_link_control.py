"""The link's control document (kernel.link_control): what pause and resume make of it, and documents that are not
one (a hand edit, a forged or truncated file) refused with the reason, never taken as "active"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel.link_control import (
    ControlUnreadable,
    LinkControl,
    Promotion,
    control_path,
    newest,
    read_control,
    write_control,
)


def test_pause_and_resume_of_a_link_and_of_topics_alone() -> None:
    active = LinkControl("dr")
    assert (active.state, active.holds("orders")) == ("active", False)

    some = active.pause(("orders", "billing"), 1_000, "reindex", "ops@h1").pause(("orders",), 2_000, "", "ops@h2")
    assert (some.state, some.paused_topics, some.since_ms, some.reason) == (
        "partly paused",
        ("billing", "orders"),
        2_000,
        "reindex",
    )
    assert some.holds("orders") and not some.holds("payments")
    left = some.resume(("orders",), 3_000, "ops@h1")
    assert (left.state, left.paused_topics) == ("partly paused", ("billing",))
    assert left.resume(("billing",), 4_000, "ops@h1") == LinkControl("dr", False, (), 4_000, "", "ops@h1")

    whole = some.pause((), 5_000, "failover drill", "ops@h1")
    assert (whole.state, whole.holds("anything"), whole.paused_topics) == ("paused", True, ())
    assert "failover drill" in whole.describe() and "ops@h1" in whole.describe()
    with pytest.raises(ValueError, match="paused as a whole"):
        whole.resume(("orders",), 6_000, "ops@h1")
    assert whole.resume((), 6_000, "ops@h1").state == "active"


def test_the_document_is_written_atomically_and_read_back_the_same(tmp_path: Path) -> None:
    assert read_control(tmp_path, "dr") == LinkControl("dr")  # no document: active
    control = LinkControl("dr").pause(("orders",), 1_000, "why", "ops@h1")
    path = write_control(tmp_path, control)
    assert path == control_path(tmp_path, "dr") and read_control(tmp_path, "dr") == control
    assert [p.name for p in path.parent.iterdir()] == ["dr.json"]  # no temporary file left beside it
    assert control_path(tmp_path, "../etc/x") == tmp_path / "control" / ".._etc_x.json"  # a name is never a path


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ("{", "Expecting"),  # truncated
        ("[]", "expected a JSON object"),
        ('{"version": 2, "link": "dr"}', "version 2"),
        ('{"version": 1, "link": "other"}', "link 'other'"),
        ('{"version": 1, "link": "dr", "paused": "yes", "paused_topics": [], "since_ms": 0}', "paused: 'yes'"),
        ('{"version": 1, "link": "dr", "paused": false, "paused_topics": [1], "since_ms": 0}', "paused_topics"),
        ('{"version": 1, "link": "dr", "paused": false, "paused_topics": [], "since_ms": true}', "since_ms"),
        ('{"version": 1, "link": "dr", "paused": false, "paused_topics": [], "since_ms": 0, "by": 7}', "text"),
    ],
)
def test_a_document_that_is_not_one_is_refused_naming_the_file_and_why(
    tmp_path: Path, document: str, said: str
) -> None:
    path = control_path(tmp_path, "dr")
    path.parent.mkdir(parents=True)
    path.write_text(document)
    with pytest.raises(ControlUnreadable) as refused:
        read_control(tmp_path, "dr")
    assert str(path) in str(refused.value) and said in str(refused.value)


def test_as_json_says_the_state_for_readers_of_the_file(tmp_path: Path) -> None:
    write_control(tmp_path, LinkControl("dr").pause(("t",), 7, "", "me@h"))
    document = json.loads(control_path(tmp_path, "dr").read_text())
    assert document == {
        "version": 1,
        "link": "dr",
        "state": "partly paused",
        "paused": False,
        "paused_topics": ["t"],
        "since_ms": 7,
        "reason": "",
        "by": "me@h",
        "promoted": None,
        "max_bytes_per_second": None,
    }


def test_a_budget_set_at_run_time_overrides_the_configs_survives_pauses_and_reads_back(tmp_path: Path) -> None:
    """`mirrorwatch link budget`: the operator's rate wins over the config's, 0 lifts any budget, None (cleared)
    gives the config's back; pausing, resuming and promoting keep it; the file reads back the same."""
    control = LinkControl("dr")
    assert (control.budget_of(None), control.budget_of(1_000_000)) == (None, 1_000_000)
    set_ = control.budget(250_000, 5, "ops@h")
    assert (set_.budget_of(None), set_.budget_of(1_000_000), set_.state) == (250_000, 250_000, "active")
    assert control.budget(0, 6, "ops@h").budget_of(1_000_000) is None
    assert set_.budget(None, 7, "ops@h").budget_of(1_000_000) == 1_000_000
    kept = set_.pause(("t",), 8, "", "ops@h").resume(("t",), 9, "ops@h").pause((), 10, "", "ops@h")
    assert kept.max_bytes_per_second == 250_000
    write_control(tmp_path, kept)
    assert read_control(tmp_path, "dr") == kept
    with pytest.raises(ValueError, match="0 for none"):
        control.budget(-1, 5, "ops@h")


@pytest.mark.parametrize("budget", [-5, "1MB", True, 1.5])
def test_a_budget_in_the_file_that_is_not_bytes_per_second_is_unreadable(tmp_path: Path, budget: object) -> None:
    document = {**LinkControl("dr").as_json(), "max_bytes_per_second": budget}
    control_path(tmp_path, "dr").parent.mkdir(parents=True)
    control_path(tmp_path, "dr").write_text(json.dumps(document))
    with pytest.raises(ControlUnreadable, match="max_bytes_per_second"):
        read_control(tmp_path, "dr")


def test_a_promoted_link_holds_every_topic_and_is_never_resumed_or_paused_again(tmp_path: Path) -> None:
    """Its target took over: the link copies nothing (whatever was paused before), no resume lifts that, and the
    document keeps where the link stood, read back the same."""
    promotion = Promotion(
        9_000, "ops@h1", (("billing", 0, 12), ("orders", 0, 340), ("orders", 1, 338)), (("dr.orders", 0, 341),)
    )
    promoted = LinkControl("dr").pause(("orders",), 1_000, "", "ops@h1").promote(promotion)
    assert (promoted.state, promoted.holds("payments"), promoted.since_ms, promoted.by) == (
        "promoted",
        True,
        9_000,
        "ops@h1",
    )
    assert promoted.describe().startswith("promoted by ops@h1 (mirrorwatch failover promote)")
    with pytest.raises(ValueError, match=r"was promoted by ops@h1.*failover failback"):
        promoted.resume((), 10_000, "x")
    with pytest.raises(ValueError, match=r"was promoted by ops@h1"):
        promoted.pause(("t",), 10_000, "", "x")
    write_control(tmp_path, promoted)
    assert read_control(tmp_path, "dr") == promoted
    document = json.loads(control_path(tmp_path, "dr").read_text())
    assert document["state"] == "promoted"
    assert document["promoted"]["offsets"][1] == {"topic": "orders", "partition": 0, "offset": 340}
    assert document["promoted"]["target_offsets"] == [{"topic": "dr.orders", "partition": 0, "offset": 341}]
    assert document["promoted"]["source_lost"] is False


def test_a_promotion_with_the_source_lost_says_so_and_reads_back_the_same(tmp_path: Path) -> None:
    promoted = LinkControl("dr").promote(Promotion(9_000, "ops@h1", (("orders", 0, 40),), (), source_lost=True))
    assert promoted.describe().startswith("promoted by ops@h1 with its source lost (mirrorwatch failover promote)")
    write_control(tmp_path, promoted)
    assert read_control(tmp_path, "dr") == promoted
    assert json.loads(control_path(tmp_path, "dr").read_text())["promoted"]["source_lost"] is True


@pytest.mark.parametrize(
    "promoted",
    [
        "[]",
        '{"at_ms": "now", "by": "", "offsets": []}',
        '{"at_ms": 1, "by": "", "offsets": [{"topic": "t", "partition": -1, "offset": 3}]}',
        '{"at_ms": 1, "by": "", "offsets": [{"topic": "t", "partition": true, "offset": 3}]}',
        '{"at_ms": 1, "by": "", "offsets": [["t", 0, 3]]}',
        '{"at_ms": 1, "by": "", "offsets": [], "target_offsets": {"t": 3}}',
        '{"at_ms": 1, "by": "", "offsets": [], "target_offsets": [{"topic": "t", "partition": 0}]}',
        '{"at_ms": 1, "by": "", "offsets": [], "source_lost": "yes"}',
    ],
)
def test_a_promotion_that_is_not_one_is_refused(tmp_path: Path, promoted: str) -> None:
    path = control_path(tmp_path, "dr")
    path.parent.mkdir(parents=True)
    document = {"version": 1, "link": "dr", "paused": False, "paused_topics": [], "since_ms": 0}
    path.write_text(json.dumps(document)[:-1] + f', "promoted": {promoted}}}')
    with pytest.raises(ControlUnreadable, match="promoted"):
        read_control(tmp_path, "dr")


def test_a_worker_obeys_the_control_changed_last_this_hosts_on_a_tie() -> None:
    """`newest`: this host's document against the one on the progress topic (an operator on another host)."""
    here = LinkControl("dr").pause((), 1_000, "here", "a@h1")
    there = LinkControl("dr").resume((), 2_000, "b@h2")
    assert newest(here, there) is there  # resumed later, elsewhere
    assert newest(here, None) is here  # nothing published
    assert newest(LinkControl("dr"), here) is here  # no file on this host: the published one
    same = LinkControl("dr").pause((), 1_000, "here", "other@h3")
    assert newest(here, same) is here
