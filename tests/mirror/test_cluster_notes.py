"""A link's local notes belong to the clusters they were taken on (issue #67, item 7): a link name used before against
another pair of clusters (a re-created local pair; in life, a rebuilt DR cluster) starts on the new pair and mirrors
everything, saying once that the earlier notes were of other clusters and where they were set aside."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel.config import MirrorwatchConfig, load_config
from kernel.kafka import create_topics, new_admin
from localkafka.local import LocalClusters
from mirror.cluster_notes import claim_notes, link_stores
from tests.kafka_helpers import Record, produce, read_to_end, wait_for_commits
from tests.processes import MirrorProcess

PARTITIONS = 2


def test_notes_of_other_clusters_are_set_aside_once_and_the_record_follows_the_clusters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    stores = link_stores(state, "a/link", checkpoint=tmp_path / "elsewhere" / "checkpoint")
    assert claim_notes(state, "a/link", "S1", "T1") is None  # nothing yet: the record is written
    for place in stores[:2]:  # notes taken on S1/T1 (and one of the folders)
        place.parent.mkdir(parents=True, exist_ok=True)
        place.write_text("note\n")
    stores[-1].mkdir(parents=True)
    (stores[-1] / "offsets").write_text("0\n")
    assert claim_notes(state, "a/link", "S1", "T1", checkpoint=stores[-1]) is None  # the same clusters: kept
    assert all(p.exists() for p in stores[:2])

    with caplog.at_level(logging.WARNING, logger="mirrorwatch.mirror"):
        aside = claim_notes(state, "a/link", "S1", "T2", checkpoint=stores[-1])  # the target was rebuilt
    assert aside is not None and aside.parent == state / "set-aside"
    assert not any(p.exists() for p in stores)
    assert sorted(p.name for p in aside.iterdir()) == [
        "clusters.json",
        "elsewhere-checkpoint",
        "lost-a_link.jsonl",
        "topics-a_link.jsonl",
    ]
    assert (aside / "elsewhere-checkpoint" / "offsets").read_text() == "0\n"
    assert json.loads((aside / "clusters.json").read_text()) == {
        "were": {"source": "S1", "target": "T1"},
        "now": {"source": "S1", "target": "T2"},
    }
    (said,) = [r.getMessage() for r in caplog.records]
    assert "link a/link: its notes in" in said and "taken on other clusters (source S1, target T1" in said
    assert str(aside) in said
    assert claim_notes(state, "a/link", "S1", "T2") is None  # said once: the record now names T2
    assert claim_notes(state, "other", "S9", "T9") is None  # another link's record is its own


def test_notes_from_before_the_record_are_taken_as_the_first_clusters_met(tmp_path: Path) -> None:
    (tmp_path / "topics").mkdir()
    (tmp_path / "topics" / "l.jsonl").write_text("note\n")
    assert claim_notes(tmp_path, "l", "S", "T") is None
    assert (tmp_path / "topics" / "l.jsonl").read_text() == "note\n"


def _document(clusters: MirrorwatchConfig, links: list[dict[str, Any]], state: Path) -> dict[str, Any]:
    return {
        "clusters": {alias: {"bootstrap_servers": c.bootstrap_servers} for alias, c in clusters.clusters.items()},
        "links": links,
        "canary": {"enabled": False},
        "state_dir": str(state),
    }


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_link_run_again_on_a_recreated_pair_starts_and_mirrors_everything(
    clusters_config: MirrorwatchConfig,
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """A python link and a spark link run on the session's pair, then, with the same config file (the clusters'
    addresses changed), the same state directory and the same topic names, on a pair of clusters created for the
    test: both start, mirror every record on the new pair and say once that the notes were set aside."""
    state = tmp_path / "state"
    topics = {"kept": unique("kept"), "sparked": unique("sparked")}
    links = [
        {"name": name, "source": "source", "target": "target", "topics": {"include": [re.escape(topic)]},
         "group_id": f"{topic}-group", "refresh_topics_interval_seconds": 5,
         **({"engine": "spark", "spark": {"trigger_interval_seconds": 0.5}} if name == "sparked" else {})}
        for name, topic in topics.items()
    ]  # fmt: skip
    config = tmp_path / "mirrorwatch.yaml"

    def mirror_all(clusters: MirrorwatchConfig, first: int) -> list[MirrorProcess]:
        """Both links on these clusters until every record is committed: each topic created on both sides (a
        target topic that is there already, as on a rebuilt DR cluster) with 200 records from `first`."""
        config.write_text(yaml.safe_dump(_document(clusters, links, state), sort_keys=False))
        source = clusters.clusters["source"]
        for topic in topics.values():
            for alias in ("source", "target"):
                admin = new_admin(clusters.clusters[alias], alias)
                create_topics(admin, {topic: PARTITIONS}, config={"retention.ms": "-1"})
            sent = [Record(value=f"v{i}".encode(), partition=i % 2) for i in range(first, first + 200)]
            produce(source, "source", topic, sent)
        runs = [start_mirror("--config", str(config), "--link", name) for name in topics]
        for (name, topic), run in zip(topics.items(), runs, strict=True):
            group = f"{topic}-group"
            wait_for_commits(source, "source", group, topic, PARTITIONS, timeout_s=240, while_running=run.running)
            assert run.stop(timeout_s=120) == 0, f"{name}: {run.log()[-3000:]}"
            got = read_to_end(clusters.clusters["target"], "target", topic, PARTITIONS)
            assert sorted(r.value or b"" for r in got) == sorted(f"v{i}".encode() for i in range(first, first + 200))
        return runs

    before = mirror_all(clusters_config, 0)
    assert not any("set aside" in run.log() for run in before)
    recreated = LocalClusters(tmp_path / "recreated", progress=lambda _line: None, lean=True)
    try:
        recreated.up(tie_to_parent=True)
        after = mirror_all(load_config(recreated.config_path), 1000)
    finally:
        recreated.down()
    for name, run in zip(topics, after, strict=True):
        said = [line for line in run.log().splitlines() if "taken on other clusters" in line]
        assert len(said) == 1 and f"link {name}: its notes" in said[0], run.log()[-3000:]
        assert "Traceback" not in run.log()
    assert sorted(p.name.split(".")[0] for p in (state / "set-aside").iterdir()) == ["kept", "sparked"]
