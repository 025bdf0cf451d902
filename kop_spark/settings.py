"""Every setting: its name, default, parser and meaning (Pulsar's ``ServiceConfiguration``).

Names follow Pulsar/KoP where Pulsar has the setting, Kafka's where Kafka has it and Pulsar does
not, and Kafka's dotted names for per-topic settings (``topic_settings``: the broker-wide default
of a setting ``create_topic(config=...)`` may override per topic). ``config`` loads them.
"""

from __future__ import annotations

from collections.abc import Mapping

from .setting import Setting, choice, int_at_least, parse_bool
from .topic_settings import KAFKA_TOPIC_SETTINGS


def _mechanisms(text: str) -> str:
    names = [m.strip().upper() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER")]
    if unknown or not names:
        raise ValueError(
            f"{', '.join(unknown) or 'none given'}: expected SCRAM-SHA-256, SCRAM-SHA-512, PLAIN or OAUTHBEARER"
        )
    return ",".join(names)


def _optional_port(text: str) -> int | None:
    if not text.strip():
        return None
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(f"{port} is not a port (0 to 65535)")
    return port


def _assignors(text: str) -> str:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ("uniform", "range")]
    if unknown or not names:
        raise ValueError(f"{', '.join(unknown) or 'none given'}: expected uniform, range or both")
    return ",".join(names)


MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")

SENSITIVE = frozenset({"ssl.key.password", "ssl.keystore.key"})  # never reported nor logged

_SETTINGS = [
    Setting("storageRoot", "./kop-data", str, "Root URI of the store (local path, or any pyarrow filesystem URI)"),
    Setting(
        "metadataStoreUrl",
        "",
        str,
        "Metadata store: empty = beside the data (<storageRoot>/_metadata), a directory, "
        "zk:host:port[,host:port...][/chroot], etcd:http://host:port[,http://host:port...], or s3://, gs://, az:// URI",
    ),
    Setting(
        "wholeFileWrites",
        False,
        parse_bool,
        "Write ledgers as whole files, never appending, linking or locking, for mounts that take only whole "
        "files; on by itself under /Volumes/ and /dbfs/. Needs metadataStoreUrl=zk:... or etcd:...",
    ),
    Setting(
        "wholeLedgerMaxSizeMbytes",
        64,
        int_at_least(1),
        "Where ledgers are written whole (object stores, whole-file mounts) they are built in memory: "
        "a Spark task's output rolls to a new ledger at this many MiB",
        kafka_type="INT",
    ),
    Setting(
        "metadataStoreOperationTimeoutSeconds",
        30,
        int_at_least(1),
        "Give up on a metadata operation (ZooKeeper, etcd, object store) that has no answer after this long",
        kafka_type="INT",
    ),
    Setting(
        "metadataStoreSessionTimeoutMillis",
        30000,
        int_at_least(1000),
        "ZooKeeper session timeout",
        kafka_type="INT",
    ),
    Setting("kafkaTenant", "public", str, "Pulsar tenant of Kafka topics given by short name"),
    Setting("kafkaNamespace", "default", str, "Pulsar namespace of Kafka topics given by short name"),
    Setting("kafkaMetadataTenant", "public", str, "Tenant of the offsets topic"),
    Setting("kafkaMetadataNamespace", "__kafka", str, "Namespace of the offsets topic"),
    Setting(
        "defaultNumPartitions", 1, int_at_least(1), "Partitions of a topic created without a count", kafka_type="INT"
    ),
    Setting(
        "managedLedgerMaxEntriesPerLedger",
        50000,
        int_at_least(1),
        "Seal a ledger and start a new one after this many entries",
        kafka_type="INT",
    ),
    Setting(
        "managedLedgerMaxSizePerLedgerMbytes",
        2048,
        int_at_least(1),
        "... or once the ledger holds this many MiB",
        kafka_type="INT",
    ),
    Setting(
        "managedLedgerMaxLedgerRolloverTimeMinutes",
        240,
        int_at_least(1),
        "... or once the ledger is this old",
        kafka_type="INT",
    ),
    Setting(
        "managedLedgerMergeInPassing",
        16,
        int_at_least(0),
        "Merge a run of this many small ledgers as part of writing, so writers taking turns do not pile up ledgers (0: only kop maintenance merges)",
        kafka_type="INT",
    ),
    Setting(
        "managedLedgerCacheSizeMB",
        64,
        int_at_least(0),
        "On an object store, keep this much of the small ledgers (up to 256 KiB) this process uploaded lately, "
        "for its own reads of them: a consumer tailing a partition, merges in passing (0: read each from the store)",
        kafka_type="INT",
    ),
    Setting(
        "journalSyncData",
        True,
        parse_bool,
        "fsync ledger and metadata writes before confirming them (false survives process crashes only)",
    ),
    Setting(
        "producer.id.expiration.ms",
        86400000,
        int_at_least(1),
        "Forget an idempotent writer's last sequence after this long unused",
        kafka_type="INT",
    ),
    Setting(
        "kafkaMaxProducersPerPartition",
        1000,
        int_at_least(1),
        "Past this many idempotent producers known to a partition, forget those idle 15 min or more, longest idle first (each append rewrites them all)",
        kafka_type="INT",
    ),
    Setting(
        "maxExactlyOnceWritersPerPartition",
        1000,
        int_at_least(1),
        "Past this many exactly-once writers (Spark queries, Kafka transactional ids) a partition remembers, forget those whose batch is finished and idle 15 min or more, at each retention pass",
        kafka_type="INT",
    ),
    Setting(
        "transactional.id.expiration.ms",
        604800000,
        int_at_least(1),
        "Forget an exactly-once writer (a streaming query, a Kafka transactional id) this long after its last batch",
        kafka_type="INT",
    ),
    Setting(
        "transaction.max.timeout.ms",
        900000,
        int_at_least(1),
        "The longest transaction.timeout.ms a transactional producer may ask for",
        kafka_type="INT",
    ),
    Setting(
        "offsetsTopicNumPartitions",
        50,
        int_at_least(1),
        "Partitions of the offsets topic __consumer_offsets",
        kafka_type="INT",
    ),
    Setting(
        "offsetsRetentionMinutes",
        4320,
        int_at_least(1),
        "Expire a group's committed offsets this long after it became empty",
        kafka_type="INT",
    ),
    Setting("offsetsRetentionCheckIntervalMs", 600000, int_at_least(1), "How often expired offsets are looked for"),
    Setting(
        "log.retention.check.interval.ms",
        300000,
        int_at_least(1),
        "How often kop serve applies retention to every partition, those nobody writes to included",
    ),
    Setting(
        "log.cleaner.enable",
        True,
        parse_bool,
        "Whether kop serve compacts the topics whose cleanup.policy has compact, in the background",
    ),
    Setting(
        "log.cleaner.backoff.ms",
        15000,
        int_at_least(1),
        "How long kop serve's log cleaner waits between its passes over the compacted topics",
    ),
    Setting(
        "log.cleaner.dedupe.buffer.size",
        134217728,
        int_at_least(1),
        "About the most memory, in bytes, a compaction's map of keys takes (for each partition compacted at a "
        "time); a partition with more distinct new keys is compacted in several passes",
    ),
    Setting(
        "maintenanceIntervalSeconds",
        3600,
        int_at_least(0),
        "How often kop serve does what kop maintenance does besides retention and compaction: merge small "
        "ledgers, complete sink batches a dead driver left half done, remove orphaned files, forget expired "
        "writers (0: never; run kop maintenance instead)",
        kafka_type="INT",
    ),
    Setting(
        "maintenanceTargetLedgerMbytes",
        64,
        int_at_least(1),
        "Maintenance merges runs of small ledgers into ledgers of up to this many MiB; compaction writes "
        "ledgers of about this size",
        kafka_type="INT",
    ),
    Setting(
        "maintenanceOrphanGraceMinutes",
        60,
        int_at_least(0),
        "Maintenance removes a file nothing refers to once it is this old (a writer may still be about to refer to a younger one)",
        kafka_type="INT",
    ),
    Setting(
        "offsetMetadataMaxSize",
        4096,
        int_at_least(0),
        "Largest metadata string accepted with a committed offset",
        kafka_type="INT",
    ),
    Setting(
        "kafkaListeners",
        "PLAINTEXT://127.0.0.1:9092",
        str,
        "Where kop serve listens for Kafka clients: PROTOCOL://host:port[,...], PROTOCOL one of PLAINTEXT, SSL, "
        "SASL_PLAINTEXT, SASL_SSL (loopback unless told otherwise)",
    ),
    Setting(
        "connections.max.reauth.ms",
        0,
        int_at_least(0),
        "How long a SASL login lasts before the client must log in again on its connection (KIP-368; an OAuth "
        "token's expiry shortens it); 0: for ever",
    ),
    Setting(
        "webServicePort",
        None,
        _optional_port,
        "Port of the HTTP endpoint serving kop serve's metrics at /metrics, in Prometheus's format, with KoP's "
        "names (empty: none; 0: any free port)",
        kafka_type="INT",
    ),
    Setting("bindAddress", "127.0.0.1", str, "Address the metrics endpoint (webServicePort) listens on"),
    Setting(
        "kafkaAdvertisedListeners",
        "",
        str,
        "The addresses clients are told to connect to, in the same form (empty: kafkaListeners)",
    ),
    Setting(
        "sasl.enabled.mechanisms",
        "SCRAM-SHA-256,SCRAM-SHA-512",
        _mechanisms,
        "SASL mechanisms SASL listeners accept: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN (PLAIN sends the password: "
        "only over SASL_SSL), OAUTHBEARER (tokens an identity provider signed: sasl.oauthbearer.*)",
        kafka_type="LIST",
    ),
    Setting(
        "sasl.oauthbearer.jwks.endpoint.url",
        "",
        str,
        "Where the identity provider publishes the keys OAUTHBEARER tokens are signed with (a JWKS; https:// or "
        "file://)",
    ),
    Setting(
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        3600000,
        int_at_least(1),
        "How often the JWKS is read again (also whenever a token names a key not yet seen)",
    ),
    Setting("sasl.oauthbearer.expected.audience", "", str, "Audiences a token must name one of, comma-separated"),
    Setting("sasl.oauthbearer.expected.issuer", "", str, "The issuer (iss) a token must name"),
    Setting("sasl.oauthbearer.sub.claim.name", "sub", str, "The token claim naming its user (principal User:<it>)"),
    Setting(
        "sasl.oauthbearer.clock.skew.seconds",
        30,
        int_at_least(0),
        "Leeway for OAUTHBEARER tokens' times",
        kafka_type="INT",
    ),
    Setting("ssl.keystore.type", "PEM", choice("PEM"), "Format of the TLS keystore (KIP-651 PEM)"),
    Setting(
        "ssl.keystore.location",
        "",
        str,
        "PEM file with the private key and certificate chain of SSL/SASL_SSL listeners",
    ),
    Setting(
        "ssl.keystore.key",
        "",
        str,
        "The private key as PEM text (instead of ssl.keystore.location)",
        kafka_type="PASSWORD",
    ),
    Setting("ssl.keystore.certificate.chain", "", str, "The certificate chain as PEM text, with ssl.keystore.key"),
    Setting("ssl.key.password", "", str, "Password of an encrypted private key", kafka_type="PASSWORD"),
    Setting(
        "ssl.client.auth",
        "none",
        choice("none", "requested", "required"),
        "Ask TLS clients for a certificate; its subject becomes the principal (User:CN=...)",
    ),
    Setting("ssl.truststore.location", "", str, "PEM CA certificates client certificates are checked against"),
    Setting(
        "authorizationEnabled",
        False,
        parse_bool,
        "Check every Kafka request against the ACLs (`kop acls`): allowed only if one allows it and none denies it",
    ),
    Setting(
        "superUserRoles",
        "",
        str,
        "Principals ACLs do not apply to, comma-separated (User:admin,User:CN=ops)",
        kafka_type="LIST",
    ),
    Setting(
        "allowAutoTopicCreation",
        True,
        parse_bool,
        "Create a topic with defaultNumPartitions when a Kafka client asks for one that does not exist",
    ),
    Setting(
        "socket.request.max.bytes",
        104857600,
        int_at_least(1024),
        "Largest request kop serve reads; a larger one closes that connection",
        kafka_type="INT",
    ),
    Setting(
        "connections.max.idle.ms",
        600000,
        int_at_least(1),
        "kop serve closes a connection that owes no answer and has sent nothing (or only part of a request) "
        "for this long, as a Kafka broker does",
    ),
    Setting(
        "kafkaMinFetchPeriodMs",
        0,
        int_at_least(0),
        "Least time between kop serve's looks at an object store for appends made by other processes, "
        "shared by all its fetches of a topic (each look is a billed LIST): a FETCH may answer from a look "
        "taken this long before it came. 0: each FETCH looks itself first, and sees all acknowledged before it",
        kafka_type="INT",
    ),
    Setting(
        "group.initial.rebalance.delay.ms",
        3000,
        int_at_least(0),
        "How long an empty group waits for more members before its first rebalance (kop serve)",
        kafka_type="INT",
    ),
    Setting(
        "group.consumer.session.timeout.ms",
        45000,
        int_at_least(1),
        "How long a member of a consumer-protocol group (KIP-848) may go without a heartbeat",
        kafka_type="INT",
    ),
    Setting(
        "group.consumer.heartbeat.interval.ms",
        5000,
        int_at_least(1),
        "How often members of a consumer-protocol group (KIP-848) are told to heartbeat",
        kafka_type="INT",
    ),
    Setting(
        "group.consumer.assignors",
        "uniform,range",
        _assignors,
        "Server-side assignors of consumer-protocol groups (KIP-848); the first is the default",
        kafka_type="LIST",
    ),
    Setting(
        "group.consumer.migration.policy",
        "bidirectional",
        choice(*MIGRATION_POLICIES),
        "Whether a group moves between the classic and the consumer protocol as its members do "
        "(KIP-848): upgrade, downgrade, both (bidirectional) or neither (disabled)",
    ),
    Setting(
        "group.share.session.timeout.ms",
        45000,
        int_at_least(1),
        "How long a share group member may be silent",
        kafka_type="INT",
    ),
    Setting(
        "group.share.heartbeat.interval.ms",
        5000,
        int_at_least(1),
        "How often share group members heartbeat",
        kafka_type="INT",
    ),
    Setting(
        "group.share.record.lock.duration.ms",
        30000,
        int_at_least(1),
        "How long a share consumer holds the records it fetched before they go to another",
        kafka_type="INT",
    ),
    Setting(
        "group.share.delivery.count.limit",
        5,
        int_at_least(1),
        "Most deliveries of a record to share consumers",
        kafka_type="INT",
    ),
    Setting(
        "group.share.partition.max.record.locks",
        2000,
        int_at_least(1),
        "Most records of a partition a share group has in flight (delivered and not yet acknowledged)",
        kafka_type="INT",
    ),
    Setting(
        "share.auto.offset.reset",
        "latest",
        choice("latest", "earliest"),
        "Where a share group starts in a partition it has not read before, unless the group has its own "
        "(kafka-configs --entity-type groups)",
    ),
    Setting(
        "group.min.session.timeout.ms",
        6000,
        int_at_least(1),
        "Shortest session timeout a consumer may ask for",
        kafka_type="INT",
    ),
    Setting(
        "group.max.session.timeout.ms",
        1800000,
        int_at_least(1),
        "Longest session timeout a consumer may ask for",
        kafka_type="INT",
    ),
]

SETTINGS: Mapping[str, Setting] = {s.name: s for s in _SETTINGS + KAFKA_TOPIC_SETTINGS}  # topic ones last
TOPIC_SETTINGS = tuple(s.name for s in KAFKA_TOPIC_SETTINGS)
