"""MirrorMaker 1 command lines and bad input, on the real local clusters."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.config import ClusterConfig, MirrorwatchConfig, reveal
from kernel.processes import free_port
from kernel.wait import wait_until
from mirror.java_client import java_properties
from tests.kafka_helpers import (
    Record,
    by_partition,
    committed_offsets,
    end_offsets,
    produce,
    provenance,
    read_all,
    read_to_end,
    wait_for_commits,
)
from tests.mirror.test_pause import link_command
from tests.processes import MirrorProcess

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent / "data"


def java_security(cluster: ClusterConfig, tmp_path: Path) -> str:
    """The cluster's client security as a Java client's properties file says it (`sasl.jaas.config`, an OAuth
    login's handler and token endpoint, PEM truststore and keystore), for a session on secured clusters
    (`--security`); nothing on plaintext ones."""
    given = reveal(cluster.properties)
    if not given:
        return ""
    lines = [f"security.protocol={given['security.protocol']}"]
    if given.get("sasl.mechanism") == "OAUTHBEARER":  # the product's own mapping, which the spark engine uses
        java = java_properties(given)
        names = ("sasl.mechanism", "sasl.jaas.config", "sasl.login.callback.handler.class")
        lines += [f"{name}={java[name]}" for name in (*names, "sasl.oauthbearer.token.endpoint.url") if name in java]
    elif "sasl.username" in given:
        module = "org.apache.kafka.common.security.scram.ScramLoginModule"
        lines += [
            f"sasl.mechanism={given['sasl.mechanism']}",
            f'sasl.jaas.config={module} required username="{given["sasl.username"]}" password="{given["sasl.password"]}";',
        ]
    if "ssl.ca.location" in given:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={given['ssl.ca.location']}"]
    if "ssl.certificate.location" in given:  # Java's PEM keystore: the key and the chain in one file
        keystore = tmp_path / "keystore.pem"
        keystore.write_text(
            Path(given["ssl.key.location"]).read_text() + Path(given["ssl.certificate.location"]).read_text()
        )
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}"]
    return "\n".join(["", "# the secured clusters' client settings, as a Java client has them", *lines, ""])


def classic_files(tmp_path: Path, config: MirrorwatchConfig) -> tuple[Path, Path]:
    """The classic example files with their placeholder hosts pointed at the local clusters (and their security
    settings in the Java client's terms when the session's clusters are secured)."""
    consumer, producer = tmp_path / "consumer.properties", tmp_path / "producer.properties"
    source, target = config.clusters["source"], config.clusters["target"]
    consumer.write_text(
        (DATA / "consumer.properties").read_text().replace("cluster1:9092", source.bootstrap_servers)
        + java_security(source, tmp_path)
    )
    producer.write_text(
        (DATA / "producer.properties").read_text().replace("cluster2:9092", target.bootstrap_servers)
        + java_security(target, tmp_path)
    )
    return consumer, producer


@pytest.mark.secured
def test_the_classic_mirrormaker_1_command_line_works(
    tmp_path: Path,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    consumer, producer = classic_files(tmp_path, clusters_config)
    topic = make_topic("source", 3, name=unique("topic-mirror"))
    produce(source, "source", topic, [Record(value=f"{i}".encode(), partition=i % 3) for i in range(300)])
    mirror = start_mirror("--consumer.config", str(consumer), "--producer.config", str(producer), "--whitelist", topic)
    got = read_all(target, "target", topic, expected=300)
    assert sorted(int(r.value or b"") for r in got) == list(range(300))
    # group.id=groupIdMirror from the file holds the progress, where Burrow and kafka_exporter can see it.
    wait_for_commits(source, "source", "groupIdMirror", topic, 3, timeout_s=30)
    assert mirror.stop() == 0
    assert "RoundRobinAssignor is an eager assignor" in mirror.log()


def test_num_streams_and_the_rename_topic_handler(
    tmp_path: Path,
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    consumer, producer = classic_files(tmp_path, clusters_config)
    group = unique("streams")
    consumer.write_text(consumer.read_text().replace("groupIdMirror", group))
    prefix = unique("test").replace("-", "_")
    src, src2 = make_topic("source", 4, name=f"{prefix}_source"), make_topic("source", 2, name=f"{prefix}_source2")
    produce(source, "source", src, [Record(value=b"one", partition=i % 4) for i in range(400)])
    produce(source, "source", src2, [Record(value=b"two", partition=i % 2) for i in range(200)])
    mirror = start_mirror(
        "--consumer.config",
        str(consumer),
        "--producer.config",
        str(producer),
        "--num.streams",
        "2",
        "--whitelist",
        f"{prefix}_.*",
        "--message.handler",
        "com.opencore.RenameTopicHandler",
        "--message.handler.args",
        f"{src},{prefix}_target;{src2},{prefix}_target2",
    )
    got = read_all(target, "target", f"{prefix}_target", expected=400)
    got2 = read_all(target, "target", f"{prefix}_target2", expected=200)
    assert {r.value for r in got} == {b"one"} and {r.value for r in got2} == {b"two"}
    assert sorted(r.partition for r in got) == sorted(i % 4 for i in range(400))  # partitions kept through renaming
    wait_for_commits(source, "source", group, src, 4, timeout_s=30)
    assert mirror.stop() == 0
    log = mirror.log()
    assert "started 2 worker process(es)" in log
    assert "mirrorwatch.mirror[0]" in log and "mirrorwatch.mirror[1]" in log


def test_an_unreachable_bootstrap_is_retried_with_log_lines_and_stops_cleanly(
    tmp_path: Path,
    write_config: Callable[..., Path],
    start_mirror: Callable[..., MirrorProcess],
) -> None:
    path = write_config([{"name": "nowhere", "source": "source", "target": "target"}])
    path.write_text(
        path.read_text().replace(
            path.read_text().split("bootstrap_servers: ")[1].split("\n")[0], f"127.0.0.1:{free_port()}", 1
        )
    )
    mirror = start_mirror("--config", str(path))
    mirror.wait_for_log("cannot reach source cluster 'source'")
    mirror.wait_for_log("retrying in 2s")  # the second attempt, with back-off
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()


def test_a_record_too_large_for_the_target_stops_its_partition_alone_and_loses_nothing(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    """A record the target refuses for good (MirrorMaker's poison record) stops its partition alone with the reason,
    committed below it, while the link's other partition goes on (issue #42); with a dead-letter topic it goes
    there and every record arrives."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", 2)
    make_topic("target", 2, name=topic, config={"max.message.bytes": "2000"})
    small = [f"small-{i:03d}-".encode() + b"x" * 80 for i in range(20)]
    big = b"B" * 10_000
    produce(
        source,
        "source",
        topic,
        [Record(value=v, partition=0) for v in small[:10]]
        + [Record(value=big, partition=0)]
        + [Record(value=v, partition=0) for v in small[10:]],
    )
    group = unique("g")
    link = {
        "name": "toolarge",
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "group_id": group,
        "offset_commit_interval_ms": 500,
    }

    config = write_config([link])
    mirror = start_mirror("--config", str(config))
    mirror.wait_for_log(f"the target refused {topic}[0]@10 for topic {topic!r}")
    others = [f"other-{i}".encode() for i in range(30)]
    produce(source, "source", topic, [Record(value=v, partition=1) for v in others])  # after the stop: copied
    wait_for_commits(source, "source", group, topic, 2, upto=[10, 30], while_running=mirror.running, timeout_s=60)

    def failed() -> dict[str, str]:  # what `mirrorwatch link status` says of the running worker's partitions
        (entry,) = json.loads(link_command(config, "status", "--link", "toolarge", "--json").stdout)
        return {where: why for w in entry["workers"] for where, why in w["failed"].items()}

    wait_until(lambda: f"{topic}[0]" in failed(), timeout_s=30, description="the status to say the partition failed")
    assert list(failed()) == [f"{topic}[0]"] and "MSG_SIZE_TOO_LARGE" in failed()[f"{topic}[0]"]
    log = mirror.log()
    assert "MSG_SIZE_TOO_LARGE" in log and "The partition stopped alone" in log and "nothing is lost" in log
    # One report per run of records (sparse) could not say which record; the worker went back and found it.
    assert "going back to the last acknowledged offsets to find it" in log
    assert mirror.stop() == 0 and "Traceback" not in mirror.log()
    assert committed_offsets(source, "source", group, topic, 2) == [10, 30]  # stopped below the refused record
    on_target = read_to_end(target, "target", topic, 2)
    assert {r.value for r in on_target if r.partition == 0} >= set(small[:10])
    assert sorted(r.value or b"" for r in on_target if r.partition == 1) == sorted(others)

    dead_letters = unique("dlq")
    mirror = start_mirror("--config", str(write_config([{**link, "dead_letter_topic": dead_letters}])))
    wait_for_commits(
        source, "source", group, topic, 2, upto=[21, 30], timeout_s=60, description="the link to pass the record"
    )
    (dead,) = read_all(target, "target", dead_letters, expected=1)
    assert dead.value == big
    headers = dict(dead.headers)
    assert headers["mirrorwatch.error.code"] == b"MSG_SIZE_TOO_LARGE"
    assert headers["mirrorwatch.target.topic"] == topic.encode()
    assert provenance(dead, "source.offset") == b"10"
    assert {r.value for r in read_to_end(target, "target", topic, 2) if r.partition == 0} == set(small)
    assert "going back to the last acknowledged offsets to find it" in mirror.log()
    assert mirror.stop() == 0


def test_a_refused_record_among_busy_partitions_is_found_dead_lettered_and_every_other_record_arrives_in_order(
    clusters_config: MirrorwatchConfig,
    make_topic: Callable[..., str],
    write_config: Callable[..., Any],
    start_mirror: Callable[..., MirrorProcess],
    unique: Callable[[str], str],
) -> None:
    """Sparse delivery reports cannot name the refused record: the worker goes back to the acknowledged offsets of
    every partition and finds it with a report per record; records after those offsets may come twice, none is lost
    and each partition's records keep their order."""
    source, target = clusters_config.clusters["source"], clusters_config.clusters["target"]
    topic = make_topic("source", 3)
    make_topic("target", 3, name=topic, config={"max.message.bytes": "2000"})
    small = {p: [f"p{p}-{i:04d}-".encode() + b"x" * 80 for i in range(300)] for p in range(3)}
    big = b"B" * 10_000
    records = [Record(value=v, partition=p) for p in (0, 2) for v in small[p]]
    records += [Record(value=v, partition=1) for v in small[1][:150]] + [Record(value=big, partition=1)]
    records += [Record(value=v, partition=1) for v in small[1][150:]]
    produce(source, "source", topic, records)
    group, dead_letters = unique("g"), unique("dlq")
    link = {
        "name": "busy",
        "source": "source",
        "target": "target",
        "topics": {"include": [topic]},
        "group_id": group,
        "offset_commit_interval_ms": 500,
        "dead_letter_topic": dead_letters,
    }

    mirror = start_mirror("--config", str(write_config([link])))
    wait_for_commits(source, "source", group, topic, 3, upto=[300, 301, 300], timeout_s=90)
    (dead,) = read_all(target, "target", dead_letters, expected=1)
    assert dead.value == big
    assert (provenance(dead, "source.partition"), provenance(dead, "source.offset")) == (b"1", b"150")
    log = mirror.log()
    assert "going back to the last acknowledged offsets to find it" in log
    assert f"the target refused {topic}[1]@150 for {topic}" in log
    mirrored = read_all(target, "target", topic, expected=sum(end_offsets(target, "target", topic, 3)), partitions=3)
    for partition, records_there in by_partition(mirrored).items():
        first_seen = list(dict.fromkeys(r.value for r in records_there))
        assert first_seen == small[partition], f"partition {partition}: lost or reordered records"
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()
