"""The options of ``format("kop")``, read and write: Kafka source and sink names, meanings,
defaults and precedence, over one case-insensitive map (Spark's ``CaseInsensitiveMap``).

Parsing happens once on the driver; every malformed value is a ``ConfigError`` naming its option.
Options Spark's Kafka connector refuses are refused here with the same explanation.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..config import CLOUD_OPTION_PREFIXES, Config
from ..errors import ConfigError
from ..record import CompressionType
from ..settings import SETTINGS
from ..topic_name import TopicPartition

PartitionOffsets = dict[TopicPartition, int]

EARLIEST_OFFSET = -2  # in startingOffsets / endingOffsets JSON, as in Spark's Kafka source
LATEST_OFFSET = -1

# Kafka consumer settings Spark's Kafka source refuses, and why (its own wording).
_UNSUPPORTED_KAFKA = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option 'startingOffsets' to "
        "'earliest' or 'latest' to specify where to start. Structured Streaming manages which offsets are consumed "
        "internally, rather than relying on the kafkaConsumer to do it. Note that 'startingOffsets' only applies "
        "when a new streaming query is started, and that resuming will always pick up from where the query left off."
    ),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported, as keys are deserialized as byte arrays with "
        "ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys."
    ),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported, as values are deserialized as byte arrays with "
        "ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the values."
    ),
    "enable.auto.commit": (
        "Kafka option 'enable.auto.commit' is not supported. The source commits a consumer group's offsets "
        "itself when option 'group.id' is set."
    ),
    "interceptor.classes": (
        "Kafka option 'interceptor.classes' is not supported as user-specified consumer interceptors are not supported."
    ),
}
_STREAM_ONLY_ENDINGS = {
    "endingoffsets": "ending offset not valid in streaming queries",
    "endingtimestamp": "ending timestamp not valid in streaming queries",
    "endingoffsetsbytimestamp": "ending timestamp not valid in streaming queries",
}
_DURATION = re.compile(r"(-?[0-9]+)\s*(us|ms|s|m|min|h|d)?")
_DURATION_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


# The Kafka client settings kop honours under their ``kafka.`` names; any other has no meaning
# without brokers, and silently ignoring it (kafka.bootstrap.servers above all) would mislead.
_SOURCE_KAFKA_OPTIONS = {"kafka.group.id"}
_SINK_KAFKA_OPTIONS = {"kafka.compression.type", "kafka.batch.size", "kafka.buffer.memory"}
_READ_UNPREFIXED = {"compression.type"}  # the sink's option (Spark's Kafka sink takes kafka.compression.type)


def _refuse_kafka_options(opts: Mapping[str, str], honoured: set[str]) -> None:
    for name in sorted(opts):
        if name.startswith("kafka.") and name not in honoured:
            raise ConfigError(
                f"option '{name}' is a Kafka client setting kop cannot honour: a kop topic lives in a store, "
                f"not on brokers; give the store with option 'kop.root' (or load(path))"
            )


class OptionMap(Mapping[str, str]):
    """Options as Spark passes them, looked up by name whatever its case; typed readers name the
    option in their errors."""

    def __init__(self, options: Mapping[str, object]):
        self._options = {k.lower(): str(v) for k, v in options.items()}

    def __getitem__(self, name: str) -> str:
        return self._options[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._options

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def boolean(self, name: str, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        word = text.strip().lower()
        if word not in ("true", "false"):
            raise ConfigError(f"option '{name}': expected 'true' or 'false', got {text!r}")
        return word == "true"

    def positive(self, name: str) -> int | None:
        text = self.get(name)
        if text is None:
            return None
        try:
            value = int(text.strip())
        except ValueError:
            value = 0
        if value <= 0:
            raise ConfigError(f"Invalid value '{text}' for option '{name}', must be a positive integer")
        return value

    def duration_ms(self, name: str, default: str) -> int:
        text = self.get(name, default).strip().lower()
        m = _DURATION.fullmatch(text)
        if m is None or int(m.group(1)) < 0:
            raise ConfigError(f"option '{name}': expected a duration such as '15m', '30s' or '500ms', got {text!r}")
        return int(int(m.group(1)) * _DURATION_MS[m.group(2)])


@dataclass(frozen=True)
class Earliest:
    pass


@dataclass(frozen=True)
class Latest:
    pass


@dataclass(frozen=True)
class GroupOffsets:
    """``startingOffsets=group``: the consumer group's committed offsets, earliest where none."""


@dataclass(frozen=True)
class SpecificOffsets:
    offsets: PartitionOffsets  # -2 earliest, -1 latest


@dataclass(frozen=True)
class GlobalTimestamp:
    timestamp: int
    no_match_latest: bool  # startingOffsetsByTimestampStrategy=latest


@dataclass(frozen=True)
class SpecificTimestamps:
    timestamps: PartitionOffsets
    no_match_latest: bool


OffsetLimit = Earliest | Latest | GroupOffsets | SpecificOffsets | GlobalTimestamp | SpecificTimestamps


@dataclass(frozen=True)
class Subscription:
    """Which topic partitions to read: exactly one of subscribe, subscribePattern, assign."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    @property
    def is_assign(self) -> bool:
        return bool(self.assigned)


@dataclass(frozen=True)
class SourceOptions:
    root: str
    conf: dict[str, str]
    subscription: Subscription
    starting: OffsetLimit
    ending: OffsetLimit
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id: str | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    max_bytes_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_partitions: int | None = None  # kop's own: small ranges read together, a task's cost shared
    min_fetch_period_ms: int | None = None  # None: the store's (``KopOffsetReader.min_fetch_period_ms``)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        opts = OptionMap(options)
        for name in opts:
            if name.startswith("kafka.") and name[6:] in _UNSUPPORTED_KAFKA:
                raise ConfigError(_UNSUPPORTED_KAFKA[name[6:]])
        _refuse_kafka_options(opts, _SOURCE_KAFKA_OPTIONS)
        if streaming:
            for name, message in _STREAM_ONLY_ENDINGS.items():
                if name in opts:
                    raise ConfigError(message)
        starting = _offset_limit(
            opts,
            "startingTimestamp",
            "startingOffsetsByTimestamp",
            "startingOffsets",
            Latest() if streaming else Earliest(),
        )
        ending = _offset_limit(opts, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets", Latest())
        group_id = _group_id(opts)
        if not streaming:
            _check_batch_limits(starting, ending)
        if isinstance(starting, GroupOffsets) and group_id is None:
            raise ConfigError(
                "option 'startingOffsets' is 'group' but no consumer group is named: set option 'group.id'"
            )
        if isinstance(ending, GroupOffsets):
            raise ConfigError("option 'endingOffsets' cannot be 'group'; use 'latest' or offsets")
        root, conf = store_options(opts)
        return cls(
            root=root,
            conf=conf,
            subscription=_subscription(opts),
            starting=starting,
            ending=ending,
            fail_on_data_loss=opts.boolean("failOnDataLoss", True),
            include_headers=opts.boolean("includeHeaders", False),
            group_id=group_id,
            max_offsets_per_trigger=opts.positive("maxOffsetsPerTrigger"),
            min_offsets_per_trigger=opts.positive("minOffsetsPerTrigger"),
            max_trigger_delay_ms=opts.duration_ms("maxTriggerDelay", "15m"),
            max_bytes_per_trigger=opts.positive("maxBytesPerTrigger"),
            min_partitions=opts.positive("minPartitions"),
            max_records_per_partition=opts.positive("maxRecordsPerPartition"),
            max_partitions=_max_partitions(opts),
            min_fetch_period_ms=opts.duration_ms("minFetchPeriod", "0") if "minFetchPeriod" in opts else None,
        )


def _max_partitions(opts: OptionMap) -> int | None:
    most = opts.positive("maxPartitions")
    if most is None:
        return None
    least = opts.positive("minPartitions")
    if least is not None and least > most:
        raise ConfigError(f"option 'minPartitions' ({least}) is more than option 'maxPartitions' ({most})")
    if "maxRecordsPerPartition" in opts:
        raise ConfigError(
            "options 'maxPartitions' and 'maxRecordsPerPartition' cannot both be set: the one bounds the tasks, "
            "the other each task's records, and a large batch cannot keep both"
        )
    return most


def store_options(opts: OptionMap) -> tuple[str, dict[str, str]]:
    """The store root (``kop.root``, else ``path``, else conf/kop.conf's storageRoot) and the
    ``kop.<setting>`` overrides of conf/kop.conf."""
    conf = {k[4:]: v for k, v in opts.items() if k.startswith("kop.") and k != "kop.root"}
    names = {n.lower(): n for n in SETTINGS}
    _refuse_unprefixed_settings(opts, names)
    overrides = {}
    for key, value in conf.items():
        if key.startswith(CLOUD_OPTION_PREFIXES):
            overrides[key] = value
            continue
        if key not in names:
            raise ConfigError(f"option 'kop.{key}': unknown setting (settings are those of conf/kop.conf)")
        overrides[names[key]] = value
    try:
        config = Config(overrides)
    except ConfigError as e:
        raise ConfigError(f"option 'kop.*': {e}") from None
    root = opts.get("kop.root") or opts.get("path") or str(config["storageRoot"])
    if "://" not in root:
        root = os.path.abspath(root)  # executors may run elsewhere: never ship a relative path
    return root, overrides


def _refuse_unprefixed_settings(opts: OptionMap, names: Mapping[str, str]) -> None:
    """A store setting given without its ``kop.`` prefix would be ignored, and a write land in
    another store than the one meant (the default root): it is refused, naming the option to give."""
    for name in sorted(opts):
        if name in ("root", "storageroot"):
            raise ConfigError(f"option '{name}' is not an option of format('kop'): give the store as option 'kop.root'")
        if name in names and name not in _READ_UNPREFIXED:
            raise ConfigError(
                f"option '{name}' is not an option of format('kop'): a setting of conf/kop.conf is given as "
                f"option 'kop.{names[name]}'"
            )


def _group_id(opts: OptionMap) -> str | None:
    named = {opts[k] for k in ("group.id", "kafka.group.id") if k in opts}
    if len(named) > 1:
        raise ConfigError(f"options 'group.id' and 'kafka.group.id' name different groups: {sorted(named)}")
    group = named.pop() if named else None
    if group is not None and not group.strip():
        raise ConfigError("option 'group.id' is empty")
    return group


def _subscription(opts: OptionMap) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if not given:
        raise ConfigError(
            "One of the following options must be specified for the kop source: subscribe, subscribePattern, assign."
        )
    if len(given) > 1:
        raise ConfigError(
            "Only one of the following options can be specified for the kop source: subscribe, subscribePattern, assign."
        )
    kind = given[0]
    value = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        if not value:
            raise ConfigError(
                f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{value}'"
            )
        try:
            re.compile(value)
        except re.error as e:
            raise ConfigError(f"option 'subscribePattern': {value!r} is not a valid regular expression: {e}") from None
        return Subscription(pattern=value)
    assigned = _json_assign(value)
    if not assigned:
        raise ConfigError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
    return Subscription(assigned=tuple(sorted(set(assigned))))


def _offset_limit(opts: OptionMap, global_ts: str, by_ts: str, offsets: str, default: OffsetLimit) -> OffsetLimit:
    # Precedence as in Spark: a global timestamp, then per-partition timestamps, then offsets.
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(
            f"option 'startingOffsetsByTimestampStrategy': expected 'error' or 'latest', got {strategy!r}"
        )
    latest_if_none = strategy == "latest" or offsets == "endingOffsets"
    if global_ts.lower() in opts:
        text = opts[global_ts.lower()].strip()
        try:
            return GlobalTimestamp(int(text), latest_if_none)
        except ValueError:
            raise ConfigError(f"option '{global_ts}': expected a single long value, got {text!r}") from None
    if by_ts.lower() in opts:
        example = '{"topicA": {"0": 1700000000000, "1": 1700000000000}}'
        return SpecificTimestamps(_json_partition_values(opts[by_ts.lower()], by_ts, example), latest_if_none)
    given = opts.get(offsets.lower())
    if given is None:
        return default
    text = given.strip()
    word = text.lower()
    if word == "earliest":
        return Earliest()
    if word == "latest":
        return Latest()
    if word == "group" and offsets == "startingOffsets":
        return GroupOffsets()
    if not text.startswith("{"):
        words = "'earliest', 'latest', 'group'" if offsets == "startingOffsets" else "'earliest', 'latest'"
        raise ConfigError(f"option '{offsets}': expected {words} or a JSON object, got {text!r}")
    values = _json_partition_values(text, offsets, '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}')
    for tp, off in values.items():
        if off < EARLIEST_OFFSET:
            raise ConfigError(
                f"option '{offsets}': offset {off} for {tp[0]}-{tp[1]} is not an offset, -1 (latest) or -2 (earliest)"
            )
    return SpecificOffsets(values)


def _check_batch_limits(starting: OffsetLimit, ending: OffsetLimit) -> None:
    if isinstance(starting, Latest):
        raise ConfigError("starting offset can't be latest for batch queries on kop")
    if isinstance(starting, SpecificOffsets):
        for (topic, p), off in starting.offsets.items():
            if off == LATEST_OFFSET:
                raise ConfigError(f"startingOffsets for {topic}-{p} can't be latest for batch queries on kop")
    if isinstance(starting, GroupOffsets):
        return
    if isinstance(ending, Earliest):
        raise ConfigError("ending offset can't be earliest for batch queries on kop")
    if isinstance(ending, SpecificOffsets):
        for (topic, p), off in ending.offsets.items():
            if off == EARLIEST_OFFSET:
                raise ConfigError(f"endingOffsets for {topic}-{p} can't be earliest for batch queries on kop")


def _json_partition_values(text: str, option: str, example: str) -> PartitionOffsets:
    try:
        parsed = json.loads(text)
        out = {}
        for topic, partitions in parsed.items():
            for p, v in partitions.items():
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError
                out[(str(topic), int(p))] = v
        return out
    except (ValueError, AttributeError, TypeError):
        raise ConfigError(f"option '{option}': expected e.g. {example}, got {text}") from None


def _json_assign(text: str) -> list[TopicPartition]:
    try:
        parsed = json.loads(text)
        out = []
        for topic, partitions in parsed.items():
            for p in partitions:
                if isinstance(p, bool) or not isinstance(p, int):
                    raise ValueError
                out.append((str(topic), p))
        return out
    except (ValueError, AttributeError, TypeError):
        raise ConfigError(f'option \'assign\': expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {text}') from None


DEFAULT_BUFFER_MEMORY = 32 << 20  # the Kafka producer's


@dataclass(frozen=True)
class SinkOptions:
    """The options of ``format("kop")`` writes (Spark's Kafka sink names; ``kafka.`` prefixes accepted)."""

    root: str
    conf: dict[str, str]
    topic: str | None
    compression: CompressionType
    batch_size: int | None  # None: the sink's default, sized to the topic
    auto_create: bool
    num_partitions: int | None
    buffer_memory: int  # bytes of rows a task may hold to fill its batches

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = OptionMap(options)
        _refuse_kafka_options(opts, _SINK_KAFKA_OPTIONS)
        root, conf = store_options(opts)
        codec_name = opts.get("compression.type", opts.get("kafka.compression.type", "none"))
        try:
            codec = CompressionType.from_name(codec_name.strip().lower())
        except (ValueError, KeyError, ConfigError):
            raise ConfigError(
                f"option 'compression.type': expected none, gzip, snappy, lz4 or zstd, got {codec_name!r}"
            ) from None
        batch_size = opts.positive("batch.size") or opts.positive("kafka.batch.size")
        topic = opts.get("topic")
        if topic is not None and not topic.strip():
            raise ConfigError("option 'topic' is empty")
        auto_create = opts.boolean("auto.create.topics.enable", False)
        buffer_memory = opts.positive("buffer.memory") or opts.positive("kafka.buffer.memory") or DEFAULT_BUFFER_MEMORY
        conf = {"managedLedgerCacheSizeMB": "0", **conf}  # its tasks and commits never read back what they upload
        return cls(root, conf, topic, codec, batch_size, auto_create, opts.positive("num.partitions"), buffer_memory)
