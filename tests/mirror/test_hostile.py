"""Hostile records on the real clusters (issue #22): a record whose header *name* is not valid UTF-8 (kcat writes
one; confluent-kafka raises SystemError reading it and hands out a tuple holding NULL on the next read, which
crashed the interpreter) stops the link cleanly at its coordinates, or goes to the dead-letter topic while every
other record arrives."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from mirrorwatch.config import MirrorwatchConfig
from tests.kafka_helpers import (
    Record,
    committed_offsets,
    end_offsets,
    produce,
    provenance,
    read_all,
    wait_for_commits,
)
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration


def produce_with_bad_header_name(bootstrap: str, topic: str, value: bytes) -> None:
    """One record whose only header has the name b'\\xff\\xfebad' (not UTF-8), written by kcat."""
    subprocess.run(
        [b"kcat", b"-P", b"-b", bootstrap.encode(), b"-t", topic.encode(), b"-p", b"0", b"-H", b"\xff\xfebad=val"],
        input=value + b"\n",
        check=True,
        timeout=60,
    )


def test_a_header_name_that_is_not_utf8_stops_the_link_cleanly_or_is_dead_lettered(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group = make_topic("source", 1), unique("g")
    # 300 records with headers first: by the bad one, the per-record loop's call of headers() is specialised (the
    # unchecked call that crashed), not the first, checked one
    good = [f"good-{i}".encode() for i in range(310)]
    produce(source, "source", topic, [Record(value=v, headers=(("app", b"1"),)) for v in good[:300]])
    produce_with_bad_header_name(source.bootstrap_servers, topic, b"bad")
    produce(source, "source", topic, [Record(value=v) for v in good[300:]])
    link = {
        "name": "hostile",
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "group_id": group,
        "offset_commit_interval_ms": 500,
    }
    # No dead-letter topic: a clean stop naming the record, nothing committed past it; the same on a restart
    for _attempt in range(2):
        mirror = start_mirror("--config", str(write_config([link])))
        assert mirror.wait_exit() == 1, mirror.log()
        log = mirror.log()
        assert f"{topic}[0]@300 cannot be mirrored: a header name is not valid UTF-8" in log
        assert "nothing is lost" in log and "Traceback" not in log
        assert committed_offsets(source, "source", group, topic, 1) == [300]
    assert {r.value for r in read_all(target, "target", topic, expected=300)} >= set(good[:300])

    # With a dead-letter topic: it goes there (key, value, provenance, the reason) and every other record arrives
    dead_letters = unique("dlq")
    mirror = start_mirror("--config", str(write_config([{**link, "dead_letter_topic": dead_letters}])))
    wait_for_commits(
        source, "source", group, topic, 1, upto=[311], timeout_s=60, description="the link past the record"
    )
    (dead,) = read_all(target, "target", dead_letters, expected=1)
    assert dead.value == b"bad"
    headers = dict(dead.headers)
    assert headers["mirrorwatch.error.code"] == b"_BAD_MSG"
    assert b"not valid UTF-8" in headers["mirrorwatch.error.message"]
    assert provenance(dead, "source.offset") == b"300"
    arrived = read_all(target, "target", topic, expected=sum(end_offsets(target, "target", topic, 1)))
    assert {r.value for r in arrived} == set(good)
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()
