"""Which source topics a link mirrors (pure, the shared kernel: the engines, the failover and the CLI agree): those its
whitelist selects, less the internal topics, which no link mirrors unless it says `exclude_internal_topics: false`."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kernel.config import TopicSelection

__all__ = ["INTERNAL_TOPIC_PATTERNS", "is_internal_topic", "select_topics"]

# Never mirrored unless a link says `exclude_internal_topics: false`: Kafka's own (__consumer_offsets,
# __transaction_state), Kafka Streams and MirrorMaker 2 internals (*-internal, *.internal), Confluent Platform's, and
# mirrorwatch's own state topics (its canary topic is added back explicitly by the canary).
INTERNAL_TOPIC_PATTERNS = (
    re.compile(r"__.*"),
    re.compile(r".*[.-]internal"),
    re.compile(r"_confluent.*"),
    re.compile(r"mirrorwatch[._-].*"),
)


def is_internal_topic(topic: str) -> bool:
    return any(p.fullmatch(topic) for p in INTERNAL_TOPIC_PATTERNS)


def select_topics(
    topics: Iterable[str], selection: TopicSelection, *, exclude_internal: bool = True, always: Iterable[str] = ()
) -> list[str]:
    """Source topics the link mirrors, sorted. Topics in `always` (the canary topic) are in whenever they exist."""
    wanted = set(always)
    return sorted(
        t for t in topics if t in wanted or (selection.matches(t) and not (exclude_internal and is_internal_topic(t)))
    )
