"""Failover translation as a Python library (issue #42): the counterpart of MirrorMaker 2's
`RemoteClusterUtils.translateOffsets`, exact (by provenance) where that one is approximate.

    from failover.api import translate_offsets

    offsets = translate_offsets("mirrorwatch.yaml", link="dr", group="billing")
    # {("orders", 0): 1207, ("orders", 1): 1187, ...}: where `billing` starts on each partition of the link's
    # target topics, so that it reads every record it had not read on the source, once
    consumer.assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])

`plan_groups` gives the whole plan (`failover plan --json` as objects: per partition the method and what a start
there reads twice, records not mirrored yet, records lost). Both read the clusters of the config (the source's
committed offsets, the target's copies) and change nothing; committing is `failover apply`'s. A config is a path to
a mirrorwatch YAML file or one already loaded (`kernel.config.load_config`). Errors: `kernel.errors.ConfigError` (a
wrong config), `failover.plan.FailoverUsageError` (no such link, a group with nothing to translate),
`kernel.errors.KafkaClientError` (a cluster that does not answer)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from failover.plan import FailoverPlan, make_plan
from kernel.config import MirrorwatchConfig, load_config

__all__ = ["plan_groups", "translate_offsets"]


def _config(config: MirrorwatchConfig | str | Path) -> MirrorwatchConfig:
    loaded = config if isinstance(config, MirrorwatchConfig) else load_config(config)
    return loaded.as_client("failover")


def plan_groups(
    config: MirrorwatchConfig | str | Path, link: str, groups: Iterable[str] = (), *, pattern: str | None = None
) -> FailoverPlan:
    """The failover plan of link `link` for the groups named or matching `pattern` (a full-match regex; neither:
    every group committed on the source but the mirrors' own)."""
    return make_plan(_config(config), link, groups=list(groups), pattern=pattern)


def translate_offsets(config: MirrorwatchConfig | str | Path, link: str, group: str) -> dict[tuple[str, int], int]:
    """Where `group` starts on each partition of link `link`'s target topics: (target topic, partition) -> offset."""
    (plan,) = plan_groups(config, link, [group]).groups
    return {(t.topic, t.partition): t.offset for t in plan.translations}
