"""`mirrorwatch failover promote`: a link's whole cutover, in steps that each say what they checked (issue #42).

1. quiet: the source's producers have stopped: no new record on the link's topics over `settle_s` (the high-watermarks
   read twice);
2. copied: the link has copied everything: its own group has committed the high-watermark of every partition (the
   mirror commits only what the target acknowledged), waited for up to `wait_s`;
3. canary: the canary's probes come back through the link (when a canary publishes on this host; else said, not
   judged);
4. groups: every chosen group (default: every group committed on the link's topics) translated exactly and committed
   on the target, by `failover apply`'s rules (members refused, never backwards);
5. stop: the link is promoted: where each partition was copied up to is written on the target (topic
   `mirrorwatch.promotions`, compacted, keyed by the link: it survives the source's loss), then in the link's control
   document, which every worker obeys within a status interval (`kernel.link_control`: it copies nothing more, and no
   resume lifts that).

With the source lost (`source_lost`: it cannot be read), steps 1-3 cannot be judged and say so; where each
partition was copied up to is read off the copies on the target (their provenance, `failover.copied`), and step 4
keeps the groups' positions on the target (a link's standby with `checkpoint.sync_group_offsets` keeps them there;
a group named that has none is refused). What the source took after the last copy is its tail: `failover diverged`
lists it once the source is back.

A step that fails stops the promotion with its reason (exit 1); run again, it starts over and goes as far as it can
(a group already committed is unchanged). `dry_run` runs the checks and says what step 4 would commit and step 5
record, changing nothing. A promoted link is refused (it is reversed, not promoted twice), and so is a paused one (it
would never copy what is left)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec, TopicMetadata

from failover.apply import apply_plan, preview_plan
from failover.copied import AmbiguousSource, copied_up_to
from failover.plan import FailoverUsageError, cluster_id_of, committed_offsets, find_link, make_plan, select_groups
from failover.report import outcome_lines
from failover.scan import last_copies, watermarks
from kernel.config import LinkConfig, MirrorwatchConfig
from kernel.control_store import load_control, save_control
from kernel.errors import MirrorwatchError
from kernel.kafka import create_topics, kafka_error, new_admin, new_producer
from kernel.link_control import LinkControl, Promotion
from kernel.rename import rename_policy
from kernel.selection import select_topics
from kernel.wait import WaitTimeout, wait_until

__all__ = ["PROMOTIONS_TOPIC", "PromoteRefused", "Step", "promote", "topics_of"]

PROMOTIONS_TOPIC = "mirrorwatch.promotions"
TIMEOUT_S = 30.0
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
Key = tuple[str, int]
Offset = tuple[str, int, int]  # topic, partition, offset


class PromoteRefused(MirrorwatchError):
    """The link cannot be promoted as it stands (already promoted, paused): nothing changed."""


@dataclass(frozen=True)
class Step:
    name: str
    ok: bool
    said: str
    lines: tuple[str, ...] = ()  # the details (each group's outcome)


@dataclass(frozen=True)
class Options:
    groups: tuple[str, ...] = ()
    pattern: str | None = None
    group_map: Mapping[str, str] | None = None
    settle_s: float = 10.0
    wait_s: float = 60.0
    dry_run: bool = False
    by: str = ""
    mm2_checkpoints: str | None = None
    source_lost: bool = False  # the source cannot be read: steps 1-3 not judged, the copies say where the link stood


def promote(
    config: MirrorwatchConfig,
    link_name: str,
    options: Options,
    *,
    canary: Callable[[], Mapping[str, Any] | None] = lambda: None,
    progress: Callable[[str], None] = lambda _line: None,
) -> list[Step]:
    """The steps run, in order; the last one is the first that failed (or the fifth). Raises PromoteRefused (exit
    1) for a link that cannot be promoted as it stands, FailoverUsageError (exit 2) for an unknown link or group."""
    link = find_link(config, link_name)
    if link.engine == "spark":  # its driver does not read the link's control: promoted, a restart would copy again
        raise FailoverUsageError(
            f"link {link.name} runs on the spark engine, whose query does not obey a link's control yet: promoting it "
            "is not built (stop its query, then move the groups with failover apply); nothing changed"
        )
    control = load_control(config, link)
    if control.promoted is not None:
        raise PromoteRefused(f"link {link.name} is already promoted ({control.describe()}): nothing changed")
    if control.paused or control.paused_topics:
        raise PromoteRefused(
            f"link {link.name} is {control.state} ({control.describe()}): resume it so that it copies what is left "
            "first (mirrorwatch link resume); nothing changed"
        )
    if options.source_lost:
        return _promote_lost(config, link, control, options, progress)
    admin = new_admin(config.clusters[link.source], link.source)
    partitions = _partitions(admin, link)
    steps = [_quiet(admin, partitions, options.settle_s, progress)]
    if steps[-1].ok:
        steps.append(_copied(config, link, _highs(admin, partitions), options.wait_s, progress))
    if steps[-1].ok:
        steps.append(_canary(link.name, canary()))
    if steps[-1].ok:
        steps.append(_groups(config, link, options, progress))
    if steps[-1].ok:
        steps.append(_stop(config, link, control, partitions, options))
    return steps


def topics_of(admin: AdminClient, alias: str) -> dict[str, TopicMetadata]:
    """The cluster's topics (a KafkaClientError naming it when it does not answer)."""
    try:
        return dict(admin.list_topics(timeout=TIMEOUT_S).topics)
    except (KafkaException, TimeoutError) as exc:
        raise kafka_error(exc, f"listing the topics of {alias}") from None


def _partitions(admin: AdminClient, link: LinkConfig) -> list[Key]:
    topics = topics_of(admin, link.source)
    chosen = select_topics(topics, link.topics, exclude_internal=link.exclude_internal_topics)
    return sorted((t, p) for t in chosen for p in topics[t].partitions)


def _highs(admin: AdminClient, partitions: list[Key]) -> dict[Key, int]:
    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): _LATEST for t, p in partitions}, request_timeout=TIMEOUT_S)
    try:
        return {(tp.topic, tp.partition): int(f.result(timeout=TIMEOUT_S).offset) for tp, f in futures.items()}
    except (KafkaException, TimeoutError) as exc:
        raise kafka_error(exc, "listing the link's high-watermarks") from None


def _quiet(admin: AdminClient, partitions: list[Key], settle_s: float, progress: Callable[[str], None]) -> Step:
    if not partitions:
        return Step("quiet", False, "the link selects no topic on its source: nothing to promote")
    before = _highs(admin, partitions)
    progress(f"watching {len(partitions)} partition(s) for {settle_s:g} s: are the source's producers stopped?")
    time.sleep(settle_s)
    grown = {key: high - before[key] for key, high in _highs(admin, partitions).items() if high > before[key]}
    if grown:
        where = ", ".join(f"{t}[{p}] +{n}" for (t, p), n in sorted(grown.items())[:10])
        return Step(
            "quiet",
            False,
            f"producers still write: {sum(grown.values())} record(s) in {settle_s:g} s ({where}); stop them first",
        )
    return Step("quiet", True, f"no record written on {len(partitions)} partition(s) in {settle_s:g} s")


def _copied(
    config: MirrorwatchConfig, link: LinkConfig, highs: dict[Key, int], wait_s: float, progress: Callable[[str], None]
) -> Step:
    """The link's group committed every high-watermark: every record of the source is on the target."""
    short: dict[Key, int] = {}

    def done() -> bool:
        found = committed_offsets(config.clusters[link.source], link.source, [link.consumer_group])
        committed = found.get(link.consumer_group, {})
        short.clear()
        short.update({k: h - committed.get(k, 0) for k, h in highs.items() if committed.get(k, 0) < h})
        return not short

    if not done() and wait_s > 0:
        progress(f"waiting up to {wait_s:g} s for link {link.name} to copy {sum(short.values())} record(s)")
        with contextlib.suppress(WaitTimeout):
            wait_until(done, timeout_s=wait_s, interval_s=1.0, description=f"link {link.name} to copy")
    if short:
        where = ", ".join(f"{t}[{p}] {n}" for (t, p), n in sorted(short.items())[:10])
        return Step(
            "copied",
            False,
            f"link {link.name} has not copied {sum(short.values())} record(s) after {wait_s:g} s (its group "
            f"{link.consumer_group} commits what the target acknowledged: {where}); is its mirror running?",
        )
    return Step("copied", True, f"link {link.name} copied every record: {sum(highs.values())} offset(s) in all")


def _canary(link: str, document: Mapping[str, Any] | None) -> Step:
    mine = next((entry for entry in (document or {}).get("links", []) if entry.get("link") == link), None)
    if mine is None:
        return Step("canary", True, "not judged: no canary probing this link published on this host lately")
    if mine.get("absent"):
        return Step("canary", False, "the canary's probes do not come back through the link (absent)")
    return Step("canary", True, f"the canary's probes come back ({mine.get('received_total', 0)} received)")


def _groups(config: MirrorwatchConfig, link: LinkConfig, options: Options, progress: Callable[[str], None]) -> Step:
    plan = make_plan(
        config,
        link.name,
        groups=options.groups,
        pattern=options.pattern,
        group_map=dict(options.group_map or {}),
        mm2_checkpoints=options.mm2_checkpoints,
        progress=progress,
    )
    if not options.groups:  # the groups committed on the link's topics (others are not this link's business)
        plan.groups[:] = [g for g in plan.groups if g.translations]
    outcomes = preview_plan(plan) if options.dry_run else apply_plan(config, plan)
    refused = [o for o in outcomes if o.outcome == "refused"]
    said = f"{len(outcomes)} group(s)" + (" would be committed" if options.dry_run else " committed or unchanged")
    if refused:
        said = f"{len(refused)} of {len(outcomes)} group(s) refused"
    return Step("groups", not refused, said, tuple(outcome_lines(outcomes)))


def _stop(
    config: MirrorwatchConfig, link: LinkConfig, control: LinkControl, partitions: list[Key], options: Options
) -> Step:
    """The promotion point: the link's commits, equal to the high-watermarks (step 2), the producers stopped."""
    found = committed_offsets(config.clusters[link.source], link.source, [link.consumer_group])
    committed = found.get(link.consumer_group, {})
    offsets = tuple(sorted((t, p, committed.get((t, p), 0)) for t, p in partitions))
    return _promoted(config, link, control, options, offsets)


def _promoted(
    config: MirrorwatchConfig,
    link: LinkConfig,
    control: LinkControl,
    options: Options,
    offsets: tuple[Offset, ...],
) -> Step:
    partitions = [(t, p) for t, p, _ in offsets]
    promotion = Promotion(
        int(time.time() * 1000), options.by, offsets, _target_ends(config, link, partitions), options.source_lost
    )
    if options.dry_run:
        return Step("stop", True, f"would promote link {link.name} at the offsets of {len(offsets)} partition(s)")
    failed = _record_on_target(config, link, promotion)
    if failed:
        return Step("stop", False, f"the promotion was not written to {link.target}:{PROMOTIONS_TOPIC}: {failed}")
    missed = save_control(config, link, control.promote(promotion))
    if missed is not None:  # the workers on this host stopped; those on other hosts would copy on
        return Step(
            "stop",
            False,
            f"link {link.name} promoted on this host only: its control was not published for its workers on other "
            f"hosts ({missed}); stop them by hand",
        )
    published = f" (its workers on every host read it on {link.target}:{config.progress.topic})"
    return Step(
        "stop",
        True,
        f"link {link.name} promoted: it copies nothing more{published if config.progress.enabled else ''}; where "
        f"each of {len(offsets)} partition(s) stood is on {link.target}:{PROMOTIONS_TOPIC} and in "
        f"{config.state_path}/control",
    )


def _target_ends(
    config: MirrorwatchConfig, link: LinkConfig, partitions: list[Key]
) -> tuple[tuple[str, int, int], ...]:
    """Each partition of the link's target topics at its end: where the records the target takes on its own begin."""
    policy = rename_policy(link.rename, link.source)
    admin = new_admin(config.clusters[link.target], link.target)
    listing = topics_of(admin, link.target)
    topics = {policy.target_topic(t) for t, _ in partitions} & set(listing)
    ends = _highs(admin, sorted((t, p) for t in topics for p in listing[t].partitions))
    return tuple(sorted((t, p, o) for (t, p), o in ends.items()))


def _record_on_target(config: MirrorwatchConfig, link: LinkConfig, promotion: Promotion) -> str | None:
    """The promotion on the target, keyed by the link (the latest per link is kept); why not (None: written)."""
    target = config.clusters[link.target]
    create_topics(new_admin(target, link.target), {PROMOTIONS_TOPIC: 1}, config={"cleanup.policy": "compact"})
    producer = new_producer(target, link.target, {"acks": "all", "enable.idempotence": True})
    failed: list[str] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failed.append(error.str())

    record = {"link": link.name, "source": link.source, **promotion.as_json()}
    producer.produce(PROMOTIONS_TOPIC, key=link.name.encode(), value=json.dumps(record).encode(), on_delivery=delivered)
    if producer.flush(TIMEOUT_S):
        return "no answer within 30 s"
    return "; ".join(failed) or None


def _promote_lost(
    config: MirrorwatchConfig,
    link: LinkConfig,
    control: LinkControl,
    options: Options,
    progress: Callable[[str], None],
) -> list[Step]:
    """The steps with the source lost: where the link stood is read off its copies on the target."""
    lost = "not judged: the source is lost (--source-lost)"
    tail = "what its producers wrote after the last copy is its tail (failover diverged)"
    steps = [Step("quiet", True, f"{lost}; {tail}")]
    copied, lines = _copied_lost(config, link, progress)
    if copied is None:
        return [*steps, Step("copied", False, lines[0])]
    steps.append(
        Step(
            "copied",
            True,
            f"{lost}: the link had copied {sum(o for _, _, o in copied)} offset(s) of {len(copied)} partition(s), "
            f"by the provenance of its last copies on {link.target}",
            tuple(lines),
        )
    )
    steps.append(Step("canary", True, lost))
    steps.append(_target_groups(config, link, options, {t for t, _, _ in copied}))
    if steps[-1].ok:
        steps.append(_promoted(config, link, control, options, copied))
    return steps


def _copied_lost(
    config: MirrorwatchConfig, link: LinkConfig, progress: Callable[[str], None]
) -> tuple[tuple[Offset, ...] | None, list[str]]:
    """Per source partition the offset the link had copied up to, from the copies' provenance, and a line each (or
    None and why not)."""
    policy = rename_policy(link.rename, link.source)
    target = config.clusters[link.target]
    admin = new_admin(target, link.target)
    listing = topics_of(admin, link.target)
    origin = {t: s for t in listing if (s := policy.source_topic(t)) is not None}
    chosen = set(select_topics(origin.values(), link.topics, exclude_internal=link.exclude_internal_topics))
    partitions = sorted((t, p) for t, s in origin.items() if s in chosen for p in listing[t].partitions)
    if not partitions:
        return None, [f"no copy of the link's topics on {link.target}: nothing was mirrored to promote"]
    progress(f"reading where the copies on {len(partitions)} partition(s) of {link.target} end")
    found = last_copies(target, link.target, watermarks(admin, partitions))
    try:
        _source, copied = copied_up_to(found, cluster_id_of(admin, link.target).encode())
    except AmbiguousSource as exc:
        raise FailoverUsageError(f"{exc}: which is the lost source cannot be told; nothing changed") from None
    if not copied:
        return None, [f"no record on the link's topics of {link.target} is a copy: nothing was mirrored to promote"]
    mirrored = {t for t, _ in copied}
    for t, p in partitions:  # a partition of a copy without a copy of its own (none written, all expired): its start
        if origin[t] in mirrored:
            copied.setdefault((origin[t], p), 0)
    lines = [f"{t}[{p}]: copied up to offset {o}" for (t, p), o in sorted(copied.items())]
    return tuple(sorted((t, p, o) for (t, p), o in copied.items())), lines


def _target_groups(config: MirrorwatchConfig, link: LinkConfig, options: Options, topics: set[str]) -> Step:
    """With the source lost, the groups' positions on the target stand as they are: said per group; a group named
    that has none there is refused (nothing can translate it now)."""
    policy = rename_policy(link.rename, link.source)
    copies = {policy.target_topic(t) for t in topics}
    named = tuple((options.group_map or {}).get(g, g) for g in options.groups)
    target = config.clusters[link.target]
    own = {ln.consumer_group for ln in config.links}
    keeps = "a standby (checkpoint.sync_group_offsets) keeps a group's position there while the source lives"
    try:
        groups = select_groups(new_admin(target, link.target), link.target, named, options.pattern, own)
    except FailoverUsageError as exc:
        return Step("groups", False, f"{exc}: with the source lost its position cannot be read; {keeps}")
    found = committed_offsets(target, link.target, groups)
    lines, missing = [], []
    for group in groups:
        on_copies = {k: o for k, o in found.get(group, {}).items() if k[0] in copies}
        if not on_copies:
            missing.append(group)
            continue
        where = ", ".join(f"{t}[{p}] {o}" for (t, p), o in sorted(on_copies.items())[:10])
        lines.append(f"{group}: its position on {link.target} stands ({where})")
    if named and missing:
        said = f"{', '.join(missing)} ha{'s' if len(missing) == 1 else 've'} no position on the link's copies"
        return Step("groups", False, f"{said}: with the source lost it cannot be read; {keeps}", tuple(lines))
    said = f"{len(lines)} group(s) keep their position on {link.target} (the source's commits cannot be read)"
    return Step("groups", True, said, tuple(lines))
