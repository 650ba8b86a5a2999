"""Which partitions' target topic was lost under the link (`mirror.identity.lost_target`), per `on_target_loss`:
decided from what the keeper found and the target ids the partitions' records went to (no broker)."""

from __future__ import annotations

from typing import cast

from confluent_kafka.admin import AdminClient

from kernel.config import parse_config
from mirror.generation_worker import lost_target
from mirror.topic_keeper import TopicKeeper


def keeper(on_target_loss: str) -> TopicKeeper:
    config = parse_config(
        {
            "clusters": {"a": {"bootstrap_servers": "a:9092"}, "b": {"bootstrap_servers": "b:9092"}},
            "links": [
                {"name": "l", "source": "a", "target": "b", "topics": {"include": ["orders"]},
                 "rename": {"policy": "prefix"}, "on_target_loss": on_target_loss},
            ],
        },
        env={},
    )  # fmt: skip
    admin = cast(AdminClient, None)  # never asked: the decision reads what the keeper found
    return TopicKeeper(config, config.links[0], name="l", source_admin=admin, target_admin=admin)


def test_under_stop_every_partition_of_a_target_found_lost_is_lost_until_stopped() -> None:
    k = keeper("stop")
    k.target_ids = {"a.orders": "old"}  # kept: a stopped target stays lost
    assert not lost_target(("orders", 0), k, {("orders", 0): "old"}, stopped={})
    k.lost_targets = {"a.orders": "deleted"}
    assert lost_target(("orders", 0), k, {("orders", 0): "old"}, stopped={})
    assert lost_target(("orders", 1), k, {}, stopped={})  # no note: assigned while lost, still stopped
    assert not lost_target(("orders", 0), k, {}, stopped={("orders", 0): "stopped already"})
    assert not lost_target(("other", 0), k, {}, stopped={})


def test_under_recopy_a_partition_is_lost_while_its_records_went_to_another_id_than_the_target_has_now() -> None:
    k = keeper("recopy")
    k.lost_targets, k.target_ids = {"a.orders": "recreated"}, {"a.orders": "new"}
    assert lost_target(("orders", 0), k, {("orders", 0): "old"}, stopped={})
    assert not lost_target(("orders", 0), k, {("orders", 0): "new"}, stopped={})  # copied again already
    assert not lost_target(("orders", 1), k, {}, stopped={})  # nothing written anywhere yet: nothing lost


def test_under_recopy_a_target_found_deleted_is_lost_for_the_partitions_that_wrote_to_it() -> None:
    k = keeper("recopy")
    k.lost_targets, k.target_ids = {"a.orders": "deleted"}, {"a.orders": "old"}  # found gone, its id still held
    assert lost_target(("orders", 0), k, {("orders", 0): "old"}, stopped={})
    assert not lost_target(("orders", 0), k, {("orders", 0): ""}, stopped={})  # copied again, its topic not created yet
    k.target_ids = {}  # released: the keeper creates it anew at its next survey
    assert lost_target(("orders", 1), k, {("orders", 1): "old"}, stopped={})  # still wrote to the old one
    k.lost_targets, k.target_ids = {}, {"a.orders": "new"}  # created anew, copied into
    assert not lost_target(("orders", 0), k, {("orders", 0): "new"}, stopped={})
    k.lost_targets = {"a.orders": "deleted"}  # and deleted again
    assert lost_target(("orders", 0), k, {("orders", 0): "new"}, stopped={})
