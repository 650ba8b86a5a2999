"""Hostile records on the real clusters (issue #22): a record whose header *name* is not valid UTF-8 (kcat writes
one; confluent-kafka raises SystemError reading it and hands out a tuple holding NULL on the next read, which
crashed the interpreter) stops its partition alone, cleanly, at its coordinates while the others go on (issue #42), or
goes to the dead-letter topic while every other record arrives."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from kernel.config import MirrorwatchConfig
from tests.kafka_helpers import (
    Record,
    committed_offsets,
    end_offsets,
    produce,
    provenance,
    read_all,
    read_to_end,
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


def test_a_header_name_that_is_not_utf8_stops_its_partition_alone_cleanly_or_is_dead_lettered(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group = make_topic("source", 2), unique("g")
    # 300 records with headers first: by the bad one, the per-record loop's call of headers() is specialised (the
    # unchecked call that crashed), not the first, checked one
    good = [f"good-{i}".encode() for i in range(310)]
    produce(source, "source", topic, [Record(value=v, headers=(("app", b"1"),), partition=0) for v in good[:300]])
    produce_with_bad_header_name(source.bootstrap_servers, topic, b"bad")
    produce(source, "source", topic, [Record(value=v, partition=0) for v in good[300:]])
    link = {
        "name": "hostile",
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "group_id": group,
        "offset_commit_interval_ms": 500,
    }
    # No dead-letter topic: its partition stops alone naming the record, nothing committed past it, while the other
    # partition goes on (records written to it after the stop arrive); the same on a restart
    others: list[bytes] = []
    for attempt in range(2):
        mirror = start_mirror("--config", str(write_config([link])))
        mirror.wait_for_log(f"{topic}[0]@300 cannot be mirrored: a header name is not valid UTF-8")
        more = [f"other-{attempt}-{i}".encode() for i in range(20)]
        produce(source, "source", topic, [Record(value=v, partition=1) for v in more])
        others += more
        wait_for_commits(
            source, "source", group, topic, 2, upto=[300, len(others)], while_running=mirror.running, timeout_s=60
        )
        assert mirror.stop() == 0
        log = mirror.log()
        assert "The partition stopped alone" in log and "nothing is lost" in log and "Traceback" not in log
        assert committed_offsets(source, "source", group, topic, 2) == [300, len(others)]
    arrived = {r.value for r in read_to_end(target, "target", topic, 2)}
    assert arrived >= set(good[:300]) | set(others) and b"bad" not in arrived

    # With a dead-letter topic: it goes there (key, value, provenance, the reason) and every other record arrives
    dead_letters = unique("dlq")
    mirror = start_mirror("--config", str(write_config([{**link, "dead_letter_topic": dead_letters}])))
    wait_for_commits(
        source, "source", group, topic, 2, upto=[311, len(others)], timeout_s=60, description="the link past it"
    )
    (dead,) = read_all(target, "target", dead_letters, expected=1)
    assert dead.value == b"bad"
    headers = dict(dead.headers)
    assert headers["mirrorwatch.error.code"] == b"_BAD_MSG"
    assert b"not valid UTF-8" in headers["mirrorwatch.error.message"]
    assert provenance(dead, "source.offset") == b"300"
    arrived_0 = [r for r in read_to_end(target, "target", topic, 2) if r.partition == 0]
    assert {r.value for r in arrived_0} == set(good)
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()


def test_forged_paths_with_separators_do_not_fool_the_loop_check_of_an_active_active_pair(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    """Links A->B and B->A writing the compact form: records whose producers wrote `mirrorwatch.path` or
    `mirrorwatch.provenance` headers themselves, with `;` and `,` in them, reach the other cluster once and never come back
    (a `;` in a full-form path used to end the path when read back from the compact header: the record returned)."""
    a, b = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = unique("aa-forged")
    make_topic("source", 1, name=topic)
    make_topic("target", 1, name=topic)
    forged: list[tuple[str, bytes]] = [
        ("mirrorwatch.path", b"evil;"),
        ("mirrorwatch.path", b";;;"),
        ("mirrorwatch.path", b"x;y,z"),
        ("mirrorwatch.provenance", b"evil"),
        ("mirrorwatch.provenance", b"a;b"),
        ("mirrorwatch.provenance", b";t;0;1"),
        ("mirrorwatch.provenance", b"\xff;\x00;;"),
    ]
    for cluster, alias, origin in ((a, "source", b"a"), (b, "target", b"b")):
        produce(
            cluster,
            alias,
            topic,
            [Record(value=origin + b"-%d" % i, headers=(header,)) for i, header in enumerate(forged)],
        )
    group_ab, group_ba = unique("ab"), unique("ba")
    links = [
        {
            "name": name,
            "source": src,
            "target": dst,
            "topics": {"include": [topic]},
            "group_id": group,
            "offset_commit_interval_ms": 500,
        }
        for name, src, dst, group in (
            ("a-to-b", "source", "target", group_ab),
            ("b-to-a", "target", "source", group_ba),
        )
    ]
    mirror = start_mirror("--config", str(write_config(links)))
    want = {b"a-%d" % i for i in range(len(forged))} | {b"b-%d" % i for i in range(len(forged))}
    for cluster, alias in ((a, "source"), (b, "target")):
        records = read_all(cluster, alias, topic, expected=len(want), timeout_s=60)
        assert sorted(r.value or b"" for r in records) == sorted(want)
    # Both links have read everything on both sides (what they skipped included): nothing more will come.
    wait_for_commits(a, "source", group_ab, topic, 1, upto=[2 * len(forged)], timeout_s=60)
    wait_for_commits(b, "target", group_ba, topic, 1, upto=[2 * len(forged)], timeout_s=60)
    assert end_offsets(a, "source", topic, 1) == [2 * len(forged)]
    assert end_offsets(b, "target", topic, 1) == [2 * len(forged)]
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()


def test_a_regex_that_can_hang_a_match_is_refused_by_config_check_mirror_and_failover(
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    """`(a+)+$` took the python engine minutes against a topic named a x 40 + '!' (the process hung in one match,
    with the HTTP port closed and SIGTERM ignored): each command refuses it at once, naming the path, exit 2."""
    make_topic("source", 1, name="a" * 40 + "-x")
    link = {"name": "redos", "source": "source", "target": "target", "topics": {"include": ["(a+)+$"]}}
    config = str(write_config([link]))
    for args, command, where in (
        (("check", config), "config", "links[0].topics.include[0]: regex '(a+)+$' is refused"),
        (("--config", config), "mirror", "links[0].topics.include[0]: regex '(a+)+$' is refused"),
        (("--config", config), "run", "links[0].topics.include[0]: regex '(a+)+$' is refused"),
    ):
        process = start_mirror(*args, command=command)
        assert process.wait_exit(timeout_s=60) == 2, process.log()
        assert where in process.log() and "nested quantifiers" in process.log()
        assert "Traceback" not in process.log()
    good = str(write_config([{**link, "topics": {"include": [unique("t")]}, "group_id": unique("g")}]))
    plan = start_mirror("plan", "--config", good, "--link", "redos", "--groups", "(a|aa)+", command="failover")
    assert plan.wait_exit(timeout_s=60) == 2, plan.log()
    assert "--groups '(a|aa)+' is refused" in plan.log() and "Traceback" not in plan.log()


def test_a_bad_link_property_is_named_at_once_while_the_target_is_unreachable(
    clusters_config: MirrorwatchConfig, tmp_path: Any, start_mirror: Callable[..., MirrorProcess]
) -> None:
    """The link's misspelt consumer property is said at its own path, before any cluster is contacted: it used to
    be `clusters.source` and only once the unreachable target answered (never, here)."""
    source = clusters_config.clusters["source"]
    config = tmp_path / "unreachable.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "clusters": {
                    "source": {"bootstrap_servers": source.bootstrap_servers},
                    "target": {"bootstrap_servers": "127.0.0.1:1"},
                },
                "links": [
                    {
                        "name": "l1",
                        "source": "source",
                        "target": "target",
                        "topics": {"include": ["x"]},
                        "consumer_properties": {"fetch.wait.max.mz": 5},
                    }
                ],
            }
        )
    )
    expected = (
        "links[0].consumer_properties.fetch.wait.max.mz: the consumer configuration was rejected: "
        'No such configuration property: "fetch.wait.max.mz"'
    )
    for args, command in ((("--config", str(config)), "mirror"), (("check", str(config)), "config")):
        process = start_mirror(*args, command=command)
        assert process.wait_exit(timeout_s=30) == 2, process.log()
        assert expected in process.log() and "cannot reach" not in process.log(), process.log()
