"""Message handlers: loading, result shapes, and the RenameTopicHandler equivalent."""

from __future__ import annotations

import pytest

from kernel.errors import ConfigError
from mirror.handler import MirrorRecord, load_handler, rename_topics, run_handler


def record(topic: str = "test_source") -> MirrorRecord:
    return MirrorRecord(
        topic=topic,
        partition=2,
        key=b"k",
        value=b"v",
        headers=[("h", b"1")],
        timestamp_ms=5,
        source_topic=topic,
        source_partition=2,
        source_offset=9,
    )


def test_rename_topics_is_mirrormaker_1s_rename_topic_handler() -> None:
    handler = rename_topics("test_source,test_target;test_source2,test_target2")
    assert run_handler(handler, record("test_source")) == [record("test_source").retarget("test_target")]
    assert run_handler(handler, record("test_source2"))[0].topic == "test_target2"
    assert run_handler(handler, record("other"))[0].topic == "other"
    assert run_handler(handler, record("test_source"))[0].partition == 2


@pytest.mark.parametrize(
    ("result", "expected_topics"),
    [
        (None, []),
        (record("a"), ["a"]),
        ([record("a"), record("b")], ["a", "b"]),
        ((r for r in [record("c")]), ["c"]),
    ],
)
def test_handler_results(result: object, expected_topics: list[str]) -> None:
    assert [r.topic for r in run_handler(lambda _r: result, record())] == expected_topics  # type: ignore[arg-type,return-value]


def test_a_handler_returning_something_else_is_an_error() -> None:
    with pytest.raises(TypeError, match="expected MirrorRecord"):
        run_handler(lambda _r: [b"bytes"], record())  # type: ignore[list-item]


def test_load_handler_by_reference_and_java_name() -> None:
    assert run_handler(load_handler("mirror.handler:rename_topics", "a,b"), record("a"))[0].topic == "b"
    java = load_handler("com.opencore.RenameTopicHandler", "a,b")
    assert run_handler(java, record("a"))[0].topic == "b"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_such_module_xyz:f", "cannot load handler 'no_such_module_xyz:f': No module named 'no_such_module_xyz'"),
        ("mirror.handler:nope", "cannot load handler 'mirror.handler:nope'"),
        ("mirror.handler:__doc__", "handler 'mirror.handler:__doc__' is not callable"),
        ("com.example.JavaHandler", "'com.example.JavaHandler' is not 'package.module:callable'"),
    ],
)
def test_load_handler_errors(ref: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_handler(ref, None, path="links[0].handler")
    (problem,) = info.value.problems
    assert problem.path == "links[0].handler"
    assert problem.message.startswith(message)
