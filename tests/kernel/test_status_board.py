"""Status files: fresh ones are read, stale and withdrawn ones are not, a later update wins."""

from __future__ import annotations

from pathlib import Path

from kernel.status_board import HOST, PIDS, StatusBoard, pids_readable_here, stopped_cleanly


def test_fresh_statuses_are_read_per_name_oldest_first(tmp_path: Path) -> None:
    board = StatusBoard(tmp_path)
    board.publish("links", "a", 1, {"state": "running"}, now_ms=2_000)
    board.publish("links", "a", 0, {"state": "running"}, now_ms=1_000)
    board.publish("links", "b/odd name", 0, {"state": "failed"}, now_ms=1_500)
    board.publish("canary", "a", 0, {"probes": 3}, now_ms=1_000)

    found = board.read("links", now_ms=3_000, max_age_ms=5_000)

    assert sorted(found) == ["a", "b/odd name"]
    assert [(d["worker"], d["updated_ms"]) for d in found["a"]] == [(0, 1_000), (1, 2_000)]
    assert found["b/odd name"][0]["state"] == "failed"
    assert board.read("canary", now_ms=3_000)["a"][0]["probes"] == 3


def test_stale_and_withdrawn_statuses_are_ignored(tmp_path: Path) -> None:
    board = StatusBoard(tmp_path)
    board.publish("links", "killed", 0, {}, now_ms=1_000)
    board.publish("links", "stopped", 0, {}, now_ms=9_000)
    board.withdraw("links", "stopped", 0)
    board.withdraw("links", "never-there", 3)

    assert board.read("links", now_ms=10_000, max_age_ms=8_999) == {}
    assert list(board.read("links", now_ms=10_000, max_age_ms=9_000)) == ["killed"]


def test_unreadable_files_and_missing_folders_are_skipped(tmp_path: Path) -> None:
    board = StatusBoard(tmp_path / "nowhere")
    assert board.read("links", now_ms=0) == {}
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "half.0.json").write_text('{"name": "half", "upd')
    (tmp_path / "links" / "list.0.json").write_text("[1, 2]")
    assert StatusBoard(tmp_path).read("links", now_ms=0) == {}


def test_a_withdrawn_status_leaves_a_mark_that_tells_a_clean_stop_from_a_death(tmp_path: Path) -> None:
    """A worker that stopped cleanly removed its file, but its last status may still be on a progress topic whose
    tombstone the monitor has not read yet: its mark says it stopped (a monitor round in between read it as a worker
    that died, "workers gone", and the console said "(was workers gone)" instead of "(was running)"). A status of
    the same writer newer than the mark (its pid reused later), another host's, or one never withdrawn is not."""
    board = StatusBoard(tmp_path)
    last = board.publish("links", "dc1/to:dc2", 2, {"state": "running"}, now_ms=1_000)
    killed = board.publish("links", "other", 0, {"state": "running"}, now_ms=1_000)
    board.withdraw("links", "dc1/to:dc2", 2)
    withdrawn = board.withdrawn("links")
    assert board.read("links", now_ms=2_000) == {"other": [killed]}
    assert stopped_cleanly(last, withdrawn)
    assert not stopped_cleanly(killed, withdrawn)
    assert not stopped_cleanly({**last, "updated_ms": last["updated_ms"] + 10**13}, withdrawn)  # a later writer
    assert not stopped_cleanly({**last, "host": "elsewhere"}, withdrawn)
    # a container on this host's network: this hostname, its own pids (its pid 2 is not this one's pid 2)
    assert not stopped_cleanly({**last, "pids": f"{HOST} pid:[1]"}, withdrawn)
    assert stopped_cleanly({k: v for k, v in last.items() if k != "pids"}, withdrawn)  # an older writer's: host only
    assert not stopped_cleanly({"name": "dc1/to:dc2"}, withdrawn)  # not a status: never taken for one


def test_a_pid_is_looked_up_only_in_the_pid_namespace_it_was_written_in() -> None:
    """Two containers on one host's network (podman --network host, a hostNetwork pod) share the hostname: the
    monitor judged the other container's live worker dead by its pid (tests/deploy/test_image.py found it)."""
    assert PIDS.startswith(f"{HOST} pid:[")
    assert pids_readable_here(HOST, PIDS)
    assert pids_readable_here(HOST, "")  # a status of an older version says no namespace: the host decides
    assert not pids_readable_here(HOST, f"{HOST} pid:[1]")
    assert not pids_readable_here("elsewhere", PIDS.replace(HOST, "elsewhere", 1))
