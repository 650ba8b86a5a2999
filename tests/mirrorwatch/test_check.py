"""Least privilege on real brokers (#23): each component runs as its own principal with only the ACLs
`kernel.acl` says it needs; `mirrorwatch check` names a removed ACL with the kafka-acls.sh line that grants it;
the running mirror says it once with the resource and loses nothing when the ACL comes back.

The ground truth is the broker's: a consumer of the mirror's principal is refused an unrelated topic, the records on
the target are read by a consumer of the operator's principal, and the grant line `check` prints is applied as
printed."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from kernel.config import ClusterConfig, MirrorwatchConfig, load_config
from kernel.kafka import new_admin
from kernel.wait import wait_until
from localkafka.local import LocalClusters
from tests.acl_helpers import binding as _binding
from tests.acl_helpers import grant as _grant
from tests.acl_helpers import grant_required as _grant_required
from tests.acl_helpers import revoke as _revoke
from tests.acl_helpers import run_check as _check
from tests.acl_helpers import with_component_principals as _with_component_principals
from tests.kafka_helpers import Record, end_offsets, produce, read_all, wait_for_commits
from tests.processes import MirrorProcess

pytestmark = [pytest.mark.integration, pytest.mark.secured]


def _topic_error(cluster: ClusterConfig, alias: str, topic: str) -> KafkaError | None:
    """The broker's answer about `topic` to a client with these settings: None when the principal may see it. A
    principal that may not even describe a topic may not read it (Read implies Describe)."""
    metadata = new_admin(cluster, alias).list_topics(topic, timeout=30).topics[topic]
    error = metadata.error
    return error if isinstance(error, KafkaError) else None


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def _grant_as_printed(operator: MirrorwatchConfig, line: str) -> tuple[str, str, str]:
    """Apply a kafka-acls.sh line `check` printed (a topic ACL) as the operator; its principal, operation, topic."""
    printed = re.fullmatch(
        r"kafka-acls\.sh --bootstrap-server (\S+) --command-config admin\.properties --add "
        r"--allow-principal (\S+) --operation (\w+) --topic (\S+)",
        line,
    )
    assert printed is not None, line
    assert printed.group(1) == operator.clusters["source"].bootstrap_servers
    principal, operation, topic = printed.group(2), printed.group(3), printed.group(4)
    _grant(operator, "source", [_binding("topic", topic, "literal", principal, operation)])
    return principal, operation, topic


def _canary_and_monitor_work(running: MirrorProcess, link: str, topic: str) -> None:
    """The canary's probes go through with the canary's principal; the monitor, with its own, sees the link caught
    up on the test's topic (the canary's probes keep coming on the link's other one)."""
    base = running.http_base()
    wait_until(
        lambda: any(each["received_total"] > 0 for each in _json(base + "/canary")["links"]),
        timeout_s=60,
        description="a canary probe read back at the target",
    )
    seen: list[Any] = []

    def caught_up() -> bool:
        try:
            seen.append(_json(f"{base}/mirror/links/{link}"))
        except urllib.error.HTTPError as exc:
            if exc.code == 503:  # the monitor's first round not ended yet (the canary's first probe can come sooner)
                return False
            raise
        return [p["replication_lag_records"] for p in seen[-1]["partitions"] if p["topic"] == topic] == [0, 0, 0]

    try:
        wait_until(caught_up, timeout_s=60, description="the monitor to see the link caught up")
    except Exception as exc:
        said = json.dumps(seen[-1], indent=1) if seen else f"no link view ({exc})"
        raise AssertionError(f"{said}\n--- the log's end:\n{running.log()[-4000:]}") from None


def test_each_component_works_with_only_its_acls_and_a_removed_one_is_named_once_and_loses_nothing(
    local_clusters: LocalClusters,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
) -> None:
    security = local_clusters.security
    topic = make_topic("source", 3, name=unique("acl"))
    unrelated = make_topic("source", 1)
    link_doc: dict[str, Any] = {"name": unique("l"), "source": "source", "target": "target"}
    link_doc |= {"topics": {"include": [topic]}, "refresh_topics_interval_seconds": 2}
    path = write_config(
        [link_doc],
        canary={"interval_seconds": 2, "topic": unique("canary")},
        monitor={"interval_seconds": 2},
        http={"port": 0},
    )
    config = _with_component_principals(path, local_clusters)
    link = config.links[0]
    operator = load_config(local_clusters.config_path)
    produce(operator.clusters["source"], "source", unrelated, [Record(b"not for the mirror")])
    produce(
        operator.clusters["source"], "source", topic, [Record(b"%d" % i, key=b"%d" % (i % 11)) for i in range(2000)]
    )

    principals = _grant_required(config, operator, local_clusters)
    code, said = _check(path)
    assert code == 0, said
    assert "every required permission is held" in said

    running = start_mirror("--config", str(path), command="run")
    wait_for_commits(operator.clusters["source"], "source", link.consumer_group, topic, 3, timeout_s=120)
    copies = read_all(operator.clusters["target"], "target", topic, 2000, partitions=3)
    assert sorted(int(r.value or b"") for r in copies) == list(range(2000))
    _canary_and_monitor_work(running, link.name, topic)
    assert "not allowed" not in running.log(), running.log()

    refused = _topic_error(config.clusters["source"].as_client("mirror"), "source", unrelated)
    if security.mode == "plaintext":  # no authorizer: nothing is refused, and nothing is missing
        assert refused is None
        return
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    # Take the mirror's Read on the topic away while records keep coming.
    read = _binding("topic", topic, "literal", principals["mirror"], "Read")
    _revoke(operator, "source", read)
    code, said = _check(path)
    assert code == 1, said
    missing = [line for line in said.splitlines() if line.strip().startswith("missing:")]
    assert missing == [f"  missing: Read on topic {topic!r} (consume it)"], said
    grant = said.splitlines()[said.splitlines().index(missing[0]) + 1].strip()
    produce(
        operator.clusters["source"],
        "source",
        topic,
        [Record(b"%d" % i, key=b"%d" % (i % 11)) for i in range(2000, 3000)],
    )
    denied = f"Read on topic {topic!r} is not allowed"
    running.wait_for_log(denied, timeout_s=60)
    running.wait_for_log(f"mirroring 1 topic(s): {config.canary.topic}", timeout_s=60)  # it retried meanwhile
    time.sleep(5)

    # Grant it back exactly as `check` printed it.
    assert _grant_as_printed(operator, grant) == (principals["mirror"], "Read", topic)
    running.wait_for_log(f"Read on topic {topic!r} is allowed again", timeout_s=60)
    wait_for_commits(operator.clusters["source"], "source", link.consumer_group, topic, 3, timeout_s=120)
    assert running.log().count(denied) == 1, running.log()
    copies = read_all(
        operator.clusters["target"],
        "target",
        topic,
        sum(end_offsets(operator.clusters["target"], "target", topic, 3)),
        partitions=3,
    )
    values = [int(r.value or b"") for r in copies]
    assert set(values) == set(range(3000)), f"missing: {sorted(set(range(3000)) - set(values))[:20]}"
    code, said = _check(path)
    assert code == 0, said
