"""Kafka's per-topic settings (``create_topic(config=...)``, CreateTopics, IncrementalAlterConfigs),
by Kafka's names: each is also the broker-wide default of its name in conf/kop.conf."""

from __future__ import annotations

from .setting import Setting, choice, fraction, int_at_least, parse_bool

_POLICIES = ("compact", "delete")


def _cleanup_policy(text: str) -> str:
    # A list, as Kafka's: any order, written back in one (so "delete,compact" is "compact,delete").
    names = {n.strip().lower() for n in text.split(",") if n.strip()}
    if not names or names - set(_POLICIES):
        raise ValueError("expected delete, compact, or both (compact,delete)")
    return ",".join(p for p in _POLICIES if p in names)


_SMALLEST_BATCH = 70
LONG_MAX = (1 << 63) - 1  # Kafka's "never" for a long setting


KAFKA_TOPIC_SETTINGS = [
    Setting(
        "retention.ms",
        604800000,
        int_at_least(-1),
        "Drop ledgers whose newest record is older than this (-1: keep forever)",
    ),
    Setting(
        "retention.bytes",
        -1,
        int_at_least(-1),
        "Drop the oldest ledgers while a partition is larger than this (-1: no limit)",
    ),
    Setting(
        "cleanup.policy",
        "delete",
        _cleanup_policy,
        "delete (retention), compact (latest value per key), or both",
        kafka_type="LIST",
    ),
    Setting("delete.retention.ms", 86400000, int_at_least(0), "How long compaction keeps tombstones"),
    Setting(
        "min.cleanable.dirty.ratio",
        0.5,
        fraction,
        "Compact a partition once this share of its bytes (those of ledgers no writer holds open) came after "
        "its last compaction",
    ),
    Setting(
        "message.timestamp.type",
        "CreateTime",
        choice("CreateTime", "LogAppendTime"),
        "Keep the producer's timestamps, or stamp the broker's append time",
    ),
    Setting(
        "message.timestamp.before.max.ms",
        LONG_MAX,
        int_at_least(0),
        "Refuse a produce (INVALID_TIMESTAMP) holding a record stamped more than this before the broker's time "
        "(CreateTime topics only)",
    ),
    Setting(
        "message.timestamp.after.max.ms",
        3600000,
        int_at_least(0),
        "Refuse a produce (INVALID_TIMESTAMP) holding a record stamped more than this after the broker's time "
        "(CreateTime topics only; Kafka 4's default, an hour)",
    ),
    # 61 bytes of batch header and a few of record: no record fits a smaller batch.
    Setting(
        "max.message.bytes", 1048588, int_at_least(_SMALLEST_BATCH), "Largest record batch accepted", kafka_type="INT"
    ),
    Setting(
        "file.delete.delay.ms",
        60000,
        int_at_least(0),
        "Grace period before an unreferenced ledger file is deleted",
    ),
    Setting(
        "segment.bytes",
        1073741824,
        int_at_least(14),
        "Seal a partition's ledger once it holds this many bytes, as Kafka rolls a segment (or at "
        "managedLedgerMaxSizePerLedgerMbytes, whichever is smaller)",
        kafka_type="INT",
    ),
    Setting(
        "segment.ms",
        604800000,
        int_at_least(1),
        "Seal a partition's ledger once it is this old, as Kafka rolls a segment (or at "
        "managedLedgerMaxLedgerRolloverTimeMinutes, whichever is sooner)",
    ),
    Setting(
        "min.compaction.lag.ms",
        0,
        int_at_least(0),
        "Compaction leaves out the ledgers holding records stamped less than this long ago",
    ),
    Setting(
        "max.compaction.lag.ms",
        LONG_MAX,
        int_at_least(1),
        "Compact a partition once the ledger with its oldest record not yet compacted is this old, however "
        "little of it is new (min.cleanable.dirty.ratio); a compacted topic's ledgers also roll at this age, "
        "and the cleaner closes an open one that reaches it. At least min.compaction.lag.ms",
    ),
    # Kafka's settings for what kop does another way, accepted (Kafka Streams, Connect and admin
    # scripts set them) and shown as set, never acted on.
    Setting(
        "compression.type",
        "producer",
        choice("producer"),
        "Batches are kept as the producer compressed them (producer only: kop does not recompress)",
    ),
    Setting(
        "min.insync.replicas",
        1,
        int_at_least(1),
        "Accepted, no effect: a produce is answered once its ledger entry is synced to the store, which "
        "keeps the copies (as acks=all with this many replicas in sync would)",
        kafka_type="INT",
    ),
    Setting(
        "unclean.leader.election.enable",
        False,
        parse_bool,
        "Accepted, no effect: there are no replicas to elect, every acknowledged record is in the store",
    ),
    Setting(
        "flush.messages",
        LONG_MAX,
        int_at_least(1),
        "Accepted, no effect: every produce is synced before it is answered, as if this were 1",
    ),
    Setting(
        "flush.ms",
        LONG_MAX,
        int_at_least(0),
        "Accepted, no effect: every produce is synced before it is answered, as if this were 0",
    ),
    Setting(
        "index.interval.bytes",
        4096,
        int_at_least(0),
        "Accepted, no effect: a ledger's entry table indexes every entry",
        kafka_type="INT",
    ),
    Setting(
        "segment.index.bytes",
        10485760,
        int_at_least(4),
        "Accepted, no effect: a ledger's entry table indexes every entry",
        kafka_type="INT",
    ),
    Setting(
        "segment.jitter.ms",
        0,
        int_at_least(0),
        "Accepted, no effect: ledgers roll at segment.ms exactly",
    ),
    Setting(
        "preallocate",
        False,
        parse_bool,
        "Accepted, no effect: ledger files grow as they are written",
    ),
]
