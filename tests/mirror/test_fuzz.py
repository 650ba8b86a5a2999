"""A property-based fuzz of the per-record path on the real clusters (issue #22): header names and values of
arbitrary bytes, empty and large keys and values, forged provenance of every form. Whatever the producers wrote,
the mirror stays up, every record is on the target with its key, value and own headers in order, or, when it cannot
be read (a header name that is not UTF-8), in the dead-letter topic with its key and value; nothing is lost and
nothing comes twice. Bounded: a few examples of a few dozen records each, no shrinking phase beyond hypothesis'
default budget."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kernel.config import MirrorwatchConfig
from kernel.provenance import (
    HOPS,
    PATH,
    PROVENANCE,
    SOURCE_CLUSTER,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from tests.kafka_helpers import Record, end_offsets, produce, read_all, wait_for_commits
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

OURS = [PROVENANCE, PATH, HOPS, SOURCE_CLUSTER, SOURCE_OFFSET, SOURCE_TOPIC, SOURCE_PARTITION]
# Any Unicode a str header name can hold (not NUL: the producer's C API would cut the name there)
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
BYTES = st.one_of(
    st.binary(max_size=64),
    st.text(alphabet=",;A0", max_size=10).map(str.encode),  # separators: where provenance parsing could go wrong
    st.integers(min_value=0, max_value=3).map(lambda n: bytes(n * 50_000)),  # up to 150 KB
)
HEADERS = st.lists(
    st.tuples(st.one_of(TEXT, st.sampled_from(OURS)), st.one_of(st.none(), BYTES)),
    max_size=6,
)
RECORDS = st.lists(
    st.tuples(st.one_of(st.none(), BYTES), st.one_of(st.none(), BYTES), HEADERS),  # key, value, headers
    min_size=1,
    max_size=30,
)
# Header names that are not UTF-8 (kcat writes them; confluent-kafka cannot): no '=', NUL or newline in kcat's -H
BAD_NAMES = st.lists(
    st.binary(min_size=1, max_size=8).map(lambda b: b"\xff" + b).filter(lambda b: not any(c in b for c in b"=\x00\n")),
    max_size=2,
)


def produce_with_bad_name(bootstrap: str, topic: str, name: bytes, value: bytes) -> None:
    subprocess.run(
        [b"kcat", b"-P", b"-b", bootstrap.encode(), b"-t", topic.encode(), b"-p", b"0", b"-H", name + b"=v"],
        input=value + b"\n",
        check=True,
        timeout=60,
    )


@settings(
    max_examples=4,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: a failure prints its example as drawn
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(records=RECORDS, bad_names=BAD_NAMES)
def test_whatever_producers_write_every_record_is_mirrored_or_dead_lettered_once(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    bad_names: list[bytes],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic, group, dead_letters = make_topic("source", 1), unique("fuzz"), unique("fuzz-dlq")
    sent = [Record(key=k, value=v, partition=0, headers=tuple(h)) for k, v, h in records]  # type: ignore[arg-type]
    produce(source, "source", topic, sent)
    unreadable = [b"unreadable-%d" % i for i in range(len(bad_names))]
    for name, value in zip(bad_names, unreadable, strict=True):
        produce_with_bad_name(source.bootstrap_servers, topic, name, value)
    total = len(sent) + len(unreadable)
    link = {
        "name": "fuzz",
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "group_id": group,
        "offset_commit_interval_ms": 300,
        "dead_letter_topic": dead_letters,
    }
    mirror = start_mirror("--config", str(write_config([link])))
    try:
        wait_for_commits(source, "source", group, topic, 1, upto=[total], timeout_s=90)
        arrived = read_all(target, "target", topic, expected=len(sent), timeout_s=60)
        assert end_offsets(target, "target", topic, 1) == [len(sent)], "a record twice or an extra one"
        # key, value and the record's own headers in order; forged provenance replaced by this hop's, one header
        want = [(r.key, r.value, [(n, v) for n, v in r.headers if n not in OURS]) for r in sent]
        got = [(r.key, r.value, [(n, v) for n, v in r.headers if n != PROVENANCE]) for r in arrived]
        assert got == want
        assert all(sum(1 for n, _ in r.headers if n in OURS) == 1 for r in arrived)
        if unreadable:
            dead = read_all(target, "target", dead_letters, expected=len(unreadable), timeout_s=60)
            assert [r.value for r in dead] == unreadable
        assert mirror.process.poll() is None, mirror.log()
    finally:
        code = mirror.stop()
    assert code == 0 and "Traceback" not in mirror.log()
