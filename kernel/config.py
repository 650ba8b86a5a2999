"""The one config model every command loads (see ARCHITECTURE.md, "Config contract").

`load_config(path)` reads YAML, expands `${ENV_VAR}` in the `clusters` section, validates the whole document and
reports *every* problem at once as `path: message` lines (`links[0].topics.include[1]: invalid regex '(': ...`).
Models are frozen, unknown keys are errors, regexes are compiled here, secrets become `SecretStr` so that no
repr, log line or `config show` ever prints them.

Pure: no Kafka clients, no clock. The environment is passed in (defaults to `os.environ`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
)
from pydantic_core import PydanticCustomError

from kernel.alert_thresholds import AlertThresholds
from kernel.config_document import Loc, check_references, expand_env, format_loc, loc_sort_key
from kernel.config_types import ByteRate, Name, Regex, TopicName, is_secret_property, properties_validator
from kernel.errors import ConfigError, ConfigProblem
from kernel.yaml_file import read_yaml

__all__ = [
    "CanaryConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "FormatRename",
    "GroupSelection",
    "HttpConfig",
    "IdentityRename",
    "LinkConfig",
    "MapRename",
    "MirrorwatchConfig",
    "MonitorConfig",
    "PrefixRename",
    "ProgressConfig",
    "RenameConfig",
    "SyncOptions",
    "TopicSelection",
    "is_secret_property",
    "load_config",
    "parse_config",
    "render_config",
    "reveal",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def reveal(properties: Mapping[str, str | SecretStr]) -> dict[str, str]:
    """Properties with secrets revealed: for the client factories and Spark only, never for output."""
    return {name: v.get_secret_value() if isinstance(v, SecretStr) else v for name, v in properties.items()}


# The components that may connect as principals of their own (`clusters.X.clients.<role>`), each with least privilege.
Role = Literal["mirror", "monitor", "canary", "failover"]
ROLES: tuple[Role, ...] = ("mirror", "monitor", "canary", "failover")
_CLUSTER_PROPERTIES = Annotated[
    dict[str, str | SecretStr], properties_validator({"bootstrap.servers": "set bootstrap_servers instead"})
]


class ClusterConfig(_Model):
    """How to reach one cluster. `properties` are librdkafka properties (values may come from `${ENV_VAR}`);
    `clients.<role>` are properties one component uses over them (its own principal: `sasl.username`, a certificate)."""

    bootstrap_servers: Annotated[str, StringConstraints(min_length=1)]
    properties: _CLUSTER_PROPERTIES = Field(default_factory=dict)
    clients: dict[Role, _CLUSTER_PROPERTIES] = Field(default_factory=dict)

    def client_properties(self) -> dict[str, str]:
        """librdkafka properties with secrets revealed: for the client factory only, never for output."""
        return {"bootstrap.servers": self.bootstrap_servers, **reveal(self.properties)}

    def as_client(self, role: Role) -> ClusterConfig:
        """This cluster as `role` connects to it: its `clients.<role>` properties over the common ones."""
        return ClusterConfig(bootstrap_servers=self.bootstrap_servers, properties=self.role_properties(role))

    def role_properties(self, role: Role) -> dict[str, str | SecretStr]:
        return {**self.properties, **self.clients.get(role, {})}


class TopicSelection(_Model):
    """Which source topics a link mirrors: full-match regexes; a topic must match an include and no exclude."""

    include: tuple[Regex, ...] = Field(default=(re.compile(".*"),), min_length=1)
    exclude: tuple[Regex, ...] = ()

    def matches(self, topic: str) -> bool:
        return any(p.fullmatch(topic) for p in self.include) and not any(p.fullmatch(topic) for p in self.exclude)


class GroupSelection(TopicSelection):
    """Which consumer groups of the source a standby keeps ready: full-match regexes on the group id."""


class CheckpointConfig(_Model):
    """Standby groups kept ready (MirrorMaker 2's emit.checkpoints and sync.group.offsets, translated exactly):
    every `interval_seconds` the selected source groups are translated to the target and published; with
    `sync_group_offsets` the translations are committed to the target groups that have no active members, only
    forward."""

    groups: GroupSelection = GroupSelection()
    interval_seconds: Annotated[float, Field(ge=1, le=3600)] = 10
    sync_group_offsets: bool = False


class IdentityRename(_Model):
    """Target topic = source topic (MirrorMaker 1, IdentityReplicationPolicy)."""

    policy: Literal["identity"] = "identity"


class PrefixRename(_Model):
    """Target topic = `<source alias><separator><topic>` (MirrorMaker 2's DefaultReplicationPolicy)."""

    policy: Literal["prefix"]
    separator: Annotated[str, StringConstraints(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")] = "."


class FormatRename(_Model):
    """Target topic from a template with `${topic}` (and optionally `${source}`), as Confluent Replicator does."""

    policy: Literal["format"]
    format: str

    @field_validator("format")
    @classmethod
    def _has_topic(cls, value: str) -> str:
        if "${topic}" not in value:
            raise PydanticCustomError(
                "format_without_topic", "must contain {topic}, got {value}", {"topic": "${topic}", "value": value}
            )
        leftover = re.sub(r"\$\{(topic|source)\}", "", value)
        if "${" in leftover:
            raise PydanticCustomError(
                "format_placeholder",
                "only {topic} and {source} may be used, got {value}",
                {"topic": "${topic}", "source": "${source}", "value": value},
            )
        return value


class MapRename(_Model):
    """Explicit `source topic: target topic` pairs; unlisted topics keep their name. Must be one-to-one."""

    policy: Literal["map"]
    map: dict[TopicName, TopicName] = Field(min_length=1)

    @field_validator("map")
    @classmethod
    def _one_to_one(cls, value: dict[str, str]) -> dict[str, str]:
        seen: dict[str, str] = {}
        for src, dst in value.items():
            if dst in seen:
                raise PydanticCustomError(
                    "map_not_injective",
                    "topics {a} and {b} both map to {dst}: the map must be one-to-one so it can be inverted",
                    {"a": repr(seen[dst]), "b": repr(src), "dst": repr(dst)},
                )
            seen[dst] = src
        return value


RenameConfig = Annotated[
    IdentityRename | PrefixRename | FormatRename | MapRename,
    Field(discriminator="policy"),
]


_SET_BY_MIRRORWATCH = dict.fromkeys(
    ("bootstrap.servers", "group.id", "transactional.id", "enable.auto.commit"),
    "set by mirrorwatch itself (see the link's group_id and delivery)",
)
ClientProperties = Annotated[dict[str, str | SecretStr], properties_validator(_SET_BY_MIRRORWATCH)]
HandlerRef = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")]


class SparkOptions(_Model):
    """How a link with `engine: spark` runs (ignored by the python engine)."""

    master: Annotated[str, StringConstraints(min_length=1)] = "local[*]"  # or spark://host:7077, yarn, k8s://...
    max_offsets_per_trigger: Annotated[int, Field(ge=1)] | None = None  # records per micro-batch (Spark's option)
    trigger_interval_seconds: Annotated[float, Field(ge=0)] = 1.0  # 0: next micro-batch as soon as one ends
    checkpoint_dir: Annotated[str, StringConstraints(min_length=1)] | None = (
        None  # default <state_dir>/checkpoints/<link>
    )
    # extra Spark settings, e.g. spark.executor.memory; secret-named ones (spark.authenticate.secret) masked in output
    conf: Annotated[dict[str, str | SecretStr], properties_validator({})] = Field(default_factory=dict)


class SyncOptions(_Model):
    """What a link keeps in step on the target besides the records, at each topic refresh
    (`refresh_topics_interval_seconds`). Partition counts always are (`partitioning: preserve`)."""

    # The source topics' explicitly set configs applied to their copies (MirrorMaker 2's sync.topic.configs.enabled):
    # set where they differ, removed where only the copy sets one (it then has the target's default, as the source
    # has its own). Never synced: mirror.topics.NOT_COPIED_CONFIGS (they describe a cluster, not the data).
    topic_configs: bool = False
    # Config names (full-match regexes) this link never syncs (MirrorMaker 2's config.properties.exclude).
    topic_configs_exclude: tuple[Regex, ...] = ()
    # The source's literal ACLs on the mirrored topics written for their copies (MirrorMaker 2's
    # sync.topic.acls.enabled): ALLOW WRITE left out, ALLOW ALL narrowed to READ (mirror.acl_sync); removed again
    # when the source loses them, if the link made them. Needs DescribeAcls at the source, CreateAcls at the target.
    acls: bool = False
    # Whose ACLs: full-match regexes on the principal ("User:app-.*").
    acl_principals: TopicSelection = TopicSelection()
    # With acls: the literal ACLs on these consumer groups too (full-match regexes on the group id; none by default),
    # under the same names, by the same rules: a standby group's application may then use it on the target.
    acl_groups: GroupSelection | None = None
    # With acls, once the target is no longer a mirror (after a promotion): ALLOW WRITE and ALLOW ALL copied as they
    # are. Off by default: nobody writes into a mirror while it is one.
    acl_write: bool = False
    # A copy whose source topic was deleted: deleted too (on), said and kept (dry-run), or left (off); only a copy
    # the link created, and only once its source has been gone for the grace period (mirror.deletions).
    topic_deletions: Literal["off", "dry-run", "on"] = "off"
    topic_deletion_grace_seconds: Annotated[float, Field(ge=0)] = 3600


class LinkConfig(_Model):
    """A directed flow `source -> target` with its topic selection, rename policy, engine and delivery mode."""

    name: Name
    source: Name
    target: Name
    topics: TopicSelection = TopicSelection()
    rename: RenameConfig = IdentityRename()
    engine: Literal["python", "spark"] = "python"
    delivery: Literal["at-least-once", "exactly-once"] = "at-least-once"
    # The source consumer group holding the link's progress (default mirrorwatch-<name>).
    group_id: Annotated[str, StringConstraints(min_length=1)] | None = None
    # preserve: target partition = source partition (needs as many partitions); hash: by key (Java's murmur2);
    # modulo: source partition modulo the target's partition count.
    partitioning: Literal["preserve", "hash", "modulo"] = "preserve"
    # Where each record came from, as one header (compact: mirrorwatch.provenance = path;topic;partition;offset) or
    # six (full: mirrorwatch.source.cluster/.topic/.partition/.offset, mirrorwatch.path, mirrorwatch.hops).
    provenance: Literal["compact", "full"] = "compact"
    offset_commit_interval_ms: Annotated[int, Field(ge=100, le=3_600_000)] = 5000
    refresh_topics_interval_seconds: Annotated[float, Field(gt=0)] = 30
    # Where records the target refuses go (on the target cluster). Unset: such a record stops its partition alone
    # (the exactly-once engine: the link).
    dead_letter_topic: TopicName | None = None
    handler: HandlerRef | None = None
    handler_args: str | None = None
    num_streams: Annotated[int, Field(ge=1, le=64)] = 1
    exclude_internal_topics: bool = True
    replication_factor: Annotated[int, Field(ge=1, le=32)] | None = None
    start_from: Literal["earliest", "latest"] = "earliest"
    # Records gone from the source before the link copied them (retention passed its position): stop the partition
    # (failed, with the offsets lost; the others go on) or skip them and go on. Counted and said either way. The spark
    # engine stops the whole link (one query reads every partition) and cannot skip.
    on_gap: Literal["stop", "skip"] = "stop"
    # A source topic deleted and created again under its name (a new topic id) while the link had copied part of the
    # old one: stop its partitions (failed, said; the others go on) or restart them at the new topic's beginning, into
    # the same target topic. Counted and said either way; never read on at the old topic's offsets. The spark engine
    # stops the whole link and cannot restart (its checkpoint names topics, not ids).
    on_recreate: Literal["stop", "restart"] = "stop"
    # A target topic deleted (or deleted and created again) under the link: the records it had copied there are gone
    # from the target. Stop its partitions (failed, said, the topic not created again; the others go on) or copy again
    # what the source still has, from its log start, into the topic created anew. Counted and said either way. The
    # spark engine stops the whole link and cannot copy again.
    on_target_loss: Literal["stop", "recopy"] = "stop"
    # A bandwidth budget (bytes/s of keys and values given to the target: 1048576, "1MB", "800KiB/s"), the whole
    # link's, each worker taking its share of the link's partitions; per worker besides (the lower wins). Unset: none.
    # Changed at run time with `mirrorwatch link budget` (kernel.link_control).
    max_bytes_per_second: ByteRate | None = None
    worker_max_bytes_per_second: ByteRate | None = None
    consumer_properties: ClientProperties = Field(default_factory=dict)
    producer_properties: ClientProperties = Field(default_factory=dict)
    spark: SparkOptions = SparkOptions()
    sync: SyncOptions = SyncOptions()
    # Standby groups kept ready on the target (failover checkpoints); unset: none.
    checkpoint: CheckpointConfig | None = None

    @property
    def consumer_group(self) -> str:
        return self.group_id or f"mirrorwatch-{self.name}"


CompatStyle = Literal["kafka_exporter", "kafka_lag_exporter", "burrow"]


class MonitorShard(_Model):
    clusters: tuple[Name, ...] = ()
    groups: GroupSelection = GroupSelection()


class MonitorConfig(_Model):
    interval_seconds: Annotated[float, Field(gt=0)] = 10
    window: Annotated[int, Field(ge=2, le=1000)] = 10
    # Lag at or below either threshold is OK (Burrow's rule 1); seconds are the age of the oldest unread record.
    allowed_lag_records: Annotated[int, Field(ge=0)] = 0
    allowed_lag_seconds: Annotated[float, Field(gt=0)] | None = None
    # STOP and STALL never fire before an offset has stood still (with records waiting) this long, whatever the
    # group's commit cadence (three of its commit gaps, learned from its moves).
    min_stop_seconds: Annotated[float, Field(ge=0)] = 30
    # Until a group's cadence is known (two moves seen), commits this far apart count as normal: WARN after 1.5
    # times, STOP/STALL after twice this long (MirrorMaker 1 commits every 60 s). A python link's own group is taken
    # to commit every offset_commit_interval_ms of its link instead.
    max_commit_interval_seconds: Annotated[float, Field(gt=0)] = 60
    # The share of the window that must be filled before lag trends (STALL, WARN) are judged.
    min_complete: Annotated[float, Field(gt=0, le=1)] = 0.5
    # Windows of groups or partitions not seen for this long are forgotten.
    expire_group_seconds: Annotated[float, Field(gt=0)] = 7 * 24 * 3600
    # Other exporters' families /metrics also serves, with their names and labels (mirrorwatch's own always).
    compatible_metrics: tuple[CompatStyle, ...] = ("kafka_exporter", "kafka_lag_exporter", "burrow")
    # Where committed offsets are read: auto follows __consumer_offsets (each commit once, one request per round;
    # needs READ on that topic) with one OffsetFetch per group as the fallback; admin_api only the latter.
    commits_from: Literal["auto", "admin_api"] = "auto"
    # Groups whose per-partition series the borrowed families serve (all keep their per-group series).
    partition_series_groups: GroupSelection = GroupSelection()
    # At most this many group-partitions get per-partition series in the borrowed families (monitor.cardinality): a
    # fleet's scrape stays within what a Prometheus server is sized for; per-group series are kept for every group.
    partition_series_limit: Annotated[int, Field(ge=0)] = 10_000
    # Kept in memory: `history_seconds` of the monitor's own figures (0: none), the newest `events` transitions.
    history_seconds: Annotated[float, Field(ge=0, le=7 * 24 * 3600)] = 3600
    events: Annotated[int, Field(ge=0, le=1_000_000)] = 10_000
    alert_thresholds: AlertThresholds = {}  # /mirror/alerts judges with these (as `alerts build --set` NAME=VALUE)
    # This monitor's share of a sharded fleet: the clusters it collects (empty: all) and the groups it watches there
    # (the groups of the links it measures always). Each shard serves the same HTTP API and /metrics for its share.
    shard: MonitorShard = MonitorShard()


class CanaryConfig(_Model):
    enabled: bool = True  # `mirrorwatch run` starts the canary for every link
    interval_seconds: Annotated[float, Field(gt=0)] = 60
    topic: TopicName = "mirrorwatch.canary"
    # A probe not read back at the target within this long is counted lost (and late if it turns up afterwards).
    sla_seconds: Annotated[float, Field(gt=0)] = 120
    # A link is absent when no probe has arrived at its target for this many intervals.
    absent_after_intervals: Annotated[int, Field(ge=1, le=1000)] = 3
    # The probe topic's replication factor when the canary creates it (default: the broker default).
    replication_factor: Annotated[int, Field(ge=1, le=32)] | None = None
    # Probes are signed with this key (HMAC-SHA256) and only signed ones are counted: whoever can write the probe
    # topic cannot fake results. Every canary reading the same probes needs the same key; `${ENV}` is expanded.
    signing_key: Annotated[SecretStr, Field(min_length=16)] | None = None


class ProgressConfig(_Model):
    """Where mirror workers publish their positions for any monitor to read (`kernel.progress_topic`): a compacted
    topic on each link's target cluster (and its source: `on_source`), beside the status files of one host."""

    enabled: bool = True
    topic: TopicName = "mirrorwatch.progress"
    # Also on each link's source cluster (as MirrorMaker 2 keeps its offset syncs there): the positions of a worker
    # that cannot reach its target still reach the monitor, so that a target outage reads exactly on every host.
    on_source: bool = True
    # A worker publishes its positions at most this often (its status files are rewritten every 0.5 s).
    interval_seconds: Annotated[float, Field(ge=0.2, le=60)] = 1.0
    # The progress topic's replication factor when a worker creates it (default: the broker default).
    replication_factor: Annotated[int, Field(ge=1, le=32)] | None = None


class HttpConfig(_Model):
    host: str = "127.0.0.1"  # loopback unless said otherwise (0.0.0.0: every interface, for a remote Prometheus)
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    web_config_file: Annotated[str, StringConstraints(min_length=1)] | None = None  # TLS, basic auth: web_config.py


class MirrorwatchConfig(_Model):
    clusters: dict[Name, ClusterConfig] = Field(min_length=1)
    links: tuple[LinkConfig, ...] = ()
    monitor: MonitorConfig = MonitorConfig()
    canary: CanaryConfig = CanaryConfig()
    progress: ProgressConfig = ProgressConfig()
    http: HttpConfig = HttpConfig()
    # Where workers publish their status for the monitor, and Spark keeps its checkpoints.
    # Default: $XDG_STATE_HOME/mirrorwatch (~/.local/state/mirrorwatch).
    state_dir: Annotated[str, StringConstraints(min_length=1)] | None = None

    @property
    def state_path(self) -> Path:
        if self.state_dir is not None:
            return Path(self.state_dir).expanduser()
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(base) / "mirrorwatch"

    def as_client(self, role: Role) -> MirrorwatchConfig:
        """The config as one component uses it: every cluster's `clients.<role>` over its common properties. Every
        command applies its role once, where it starts; applying it again changes nothing."""
        if not any(cluster.clients for cluster in self.clusters.values()):
            return self
        clusters = {alias: cluster.as_client(role) for alias, cluster in self.clusters.items()}
        return self.model_copy(update={"clusters": clusters})

    def link(self, name: str) -> LinkConfig:
        for link in self.links:
            if link.name == name:
                return link
        known = ", ".join(link.name for link in self.links) or "none"
        raise ConfigError([ConfigProblem("links", f"no link named {name!r} (links: {known})")])


# --------------------------------------------------------------------------------------------------------------------
# Loading


def _all_field_names() -> set[str]:
    models: list[type[BaseModel]] = [
        MirrorwatchConfig,
        ClusterConfig,
        TopicSelection,
        IdentityRename,
        PrefixRename,
        FormatRename,
        MapRename,
        LinkConfig,
        MonitorConfig,
        CanaryConfig,
        ProgressConfig,
        HttpConfig,
    ]
    return {name for model in models for name in model.model_fields}


_RENAME_TAGS = ("identity", "prefix", "format", "map")


def _strip_union_tags(loc: Loc) -> Loc:
    """Discriminated unions put the tag after `rename` in the loc (`rename.prefix.x`): not a key the user wrote."""
    out: list[str | int] = []
    for i, part in enumerate(loc):
        if i > 0 and loc[i - 1] == "rename" and part in _RENAME_TAGS and i + 1 < len(loc):
            continue
        out.append(part)
    return tuple(out)


def _problem_message(error: Any, loc: Loc) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else ""
        close = difflib.get_close_matches(key, _all_field_names(), n=1)
        return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        ctx = error.get("ctx", {})
        discriminator = str(ctx.get("discriminator", "tag")).strip("'")
        return f"unknown {discriminator} {ctx.get('tag')!r} (expected one of {ctx.get('expected_tags')})"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    secret = any(isinstance(part, str) and is_secret_property(part) for part in loc)
    custom = kind.startswith(
        ("invalid_regex", "regex_type", "format_", "map_", "duplicate_", "reserved_", "properties_")
    )
    if custom or secret or _mentions_secret(value):
        return message
    if isinstance(value, str | int | float | bool) and value is not None:
        message += f" (got {value!r})"
    return message


def _mentions_secret(value: object) -> bool:
    """A raw input that names a secret property (`sasl.password=x`, `ssl.key.password: x`): never echoed."""
    return isinstance(value, str) and any(is_secret_property(word) for word in re.split(r"[\s=:,;]+", value))


def parse_config(doc: object, *, source: str | None = None, env: Mapping[str, str] | None = None) -> MirrorwatchConfig:
    """Validate an already-parsed YAML document; raise `ConfigError` listing every problem."""
    environment = os.environ if env is None else env
    problems: list[tuple[Loc, str]] = []
    if isinstance(doc, dict) and "clusters" in doc:
        doc = {**doc, "clusters": expand_env(doc["clusters"], environment, ("clusters",), problems)}
    canary = doc.get("canary") if isinstance(doc, dict) else None
    if isinstance(canary, dict) and isinstance(canary.get("signing_key"), str):
        key = expand_env(canary["signing_key"], environment, ("canary", "signing_key"), problems)
        doc = {**doc, "canary": {**canary, "signing_key": key}}  # type: ignore[dict-item]
    problems.extend(check_references(doc))
    config: MirrorwatchConfig | None = None
    if not isinstance(doc, dict):
        problems.append(((), f"the config must be a mapping with a 'clusters' key, got {type(doc).__name__}"))
    else:
        try:
            config = MirrorwatchConfig.model_validate(doc)
        except ValidationError as exc:
            errors = exc.errors()
            item_locs = {_strip_union_tags(e["loc"])[:-1] for e in errors if e["type"] != "too_short"}
            for error in errors:
                loc = _strip_union_tags(error["loc"])
                if error["type"] == "too_short" and loc in item_locs:
                    continue  # "too few items" only because an item failed: that item's error says it all
                problems.append((loc, _problem_message(error, loc)))
    if problems or config is None:
        problems.sort(key=lambda item: loc_sort_key(item[0]))
        raise ConfigError([ConfigProblem(format_loc(loc), msg) for loc, msg in problems], source)
    return config


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> MirrorwatchConfig:
    """Read and validate a mirrorwatch YAML file."""
    return parse_config(read_yaml(path), source=str(path), env=env)


def render_config(config: MirrorwatchConfig) -> str:
    """The effective config (defaults filled in) as YAML, with every secret masked."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, default_flow_style=False)
