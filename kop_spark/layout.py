"""Where everything lives under a store root, and the metadata store's keys: the one module that
knows the layout (docs/ledger-format.md draws it)::

    <root>/_metadata/                        the metadata store of a local root (metadataStoreUrl)
    <root>/ledgers/<tenant>/<ns>/<topic>-partition-<n>/<ledger id>.ledger
    <root>/_staging/<writer>/<batch>/<task dir>/<id>.ledger    a sink's output no reader sees yet
    <root>/_staging/<writer>/<batch>/<task dir>/<id>.staged    (empty) names a ledger staged in its
                                                               partition's directory (no renames)
    <root>/_staging/txn-<digest>/<transaction>/producer/...    a Kafka transaction's produced batches
    <root>/_faults/<point>                   crash points armed by tests

    topics/<tenant>/<ns>/<topic>                                 a topic: partitions, config
    managed-ledgers/<tenant>/<ns>/persistent/<topic>-partition-<n>   a partition's log
    sinks/<writer>                                               an exactly-once writer's batch record
    kafka/producer-ids                                           the next idempotent producer id
    kafka/groups/<group>                                         a group's live members (kop serve)
    kafka/group-snapshots/<group>                                a group's membership, for a restart
    kafka/group-configs/<group>                                  a group's own settings
    kafka/share-groups/<group>/<topic>/<n>                       a share group's state of a partition
    kafka/users/<user>                                           a SASL/SCRAM user's credentials
    kafka/transactions/txn-<digest>                              a transactional id's producer and state
    kafka/metric-names/<tenant>/<ns>/<topic with '.' as '_'>     the topic holding a metric name

Pulsar names managed ledgers tenant/namespace/persistent/topic; so does this layout.
"""

from __future__ import annotations

import hashlib
import re

from .topic_name import TopicName

METADATA_DIR = "_metadata"
LEDGERS_DIR = "ledgers"
STAGING_DIR = "_staging"
FAULTS_DIR = "_faults"
LEDGER_SUFFIX = ".ledger"

TOPICS = "topics"
MANAGED_LEDGERS = "managed-ledgers"
SINKS = "sinks"
KAFKA = "kafka"
METADATA_PREFIXES = (TOPICS, MANAGED_LEDGERS, SINKS, KAFKA)
PRODUCER_IDS_KEY = f"{KAFKA}/producer-ids"  # the next idempotent producer id to hand out


TRANSACTIONS = f"{KAFKA}/transactions"


def transaction_writer(transactional_id: str) -> str:
    """The name a transactional id's commits and staging go by: a digest, as an id may hold any
    character and must be a path component on every store."""
    return "txn-" + hashlib.sha256(transactional_id.encode()).hexdigest()[:32]


def transaction_key(transactional_id: str) -> str:
    """Where a transactional id's producer, epoch and transaction state are kept (``broker.transactions``)."""
    return f"{TRANSACTIONS}/{transaction_writer(transactional_id)}"


# A name kept as it is: the metadata stores' alphabet, not "." or "..", not beginning with "-".
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]*")
_PLAIN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._")
_ESCAPE = re.compile(r"-([0-9A-F]{2})")
_MAX_FILE_NAME = 255


def name_segment(name: str) -> str:
    """A group's, user's or topic's name as one metadata key segment. Kafka lets a group id or a
    user name hold any character (``app:orders``, ``alice@example.com``) and the stores take few: a
    name of their alphabet is its own segment, any other is "-" (which begins no plain name) and its
    UTF-8 with each byte outside ``[A-Za-z0-9._]`` as ``-XX``, so each name has one segment and
    ``name_of_segment`` reads it back. ``ValueError`` for one past a file name's 255 bytes."""
    if _PLAIN_NAME.fullmatch(name) and name not in (".", ".."):
        segment = name
    else:
        segment = "-" + "".join(chr(b) if b in _PLAIN_BYTES else f"-{b:02X}" for b in name.encode())
    if len(segment) > _MAX_FILE_NAME:
        raise ValueError(f"name {name!r} is too long to keep: {len(segment)} bytes as a key, at most {_MAX_FILE_NAME}")
    return segment


def name_of_segment(segment: str) -> str:
    if not segment.startswith("-"):
        return segment
    one_char_a_byte = _ESCAPE.sub(lambda m: chr(int(m[1], 16)), segment[1:])
    return one_char_a_byte.encode("latin-1").decode()


GROUP_SNAPSHOTS = f"{KAFKA}/group-snapshots"


def group_snapshot_key(group: str) -> str:
    """Where a consumer group's membership is kept for a restarted server (``broker.group_snapshots``)."""
    return f"{GROUP_SNAPSHOTS}/{name_segment(group)}"


def group_config_key(group: str) -> str:
    """Where a group's own settings are kept (``broker.group_configs``)."""
    return f"{KAFKA}/group-configs/{name_segment(group)}"


SHARE_GROUPS = f"{KAFKA}/share-groups"


def share_group_prefix(group: str) -> str:
    """Under which a share group's partition states are kept (``broker.share_states``)."""
    return f"{SHARE_GROUPS}/{name_segment(group)}"


def share_partition_key(group: str, topic: str, partition: int) -> str:
    """Where a share group's state of one partition is kept."""
    return f"{share_group_prefix(group)}/{name_segment(topic)}/{partition}"


LIVE_GROUPS = f"{KAFKA}/groups"


def live_group_key(group: str) -> str:
    """Where ``kop serve`` publishes a consumer group's live members (``broker.live_groups``)."""
    return f"{LIVE_GROUPS}/{name_segment(group)}"


USERS = f"{KAFKA}/users"


def user_key(name: str) -> str:
    """Where a SASL/SCRAM user's credentials are kept (``broker.credentials``)."""
    return f"{USERS}/{name_segment(name)}"


def topic_key(name: TopicName) -> str:
    return f"{TOPICS}/{name.tenant}/{name.namespace}/{name.local_name}"


def metric_name_key(name: TopicName) -> str:
    """Where the topic holding a name's metric name is named (``broker.metric_names``): '.' and
    '_' read alike there."""
    return f"{KAFKA}/metric-names/{name.tenant}/{name.namespace}/{name.local_name.replace('.', '_')}"


def topic_of_key(key: str) -> TopicName:
    """The topic a ``topic_key`` names."""
    _, tenant, namespace, local = key.split("/")
    return TopicName(tenant, namespace, local)


def _partition_path(name: TopicName, partition: int) -> str:
    # One path component per partition while it fits a file name (255 bytes); a name near
    # Kafka's 249 characters would not, so its partitions go one directory deeper.
    flat = f"{name.local_name}-partition-{partition}"
    return flat if len(flat) <= _MAX_FILE_NAME else f"{name.local_name}/partition-{partition}"


def managed_ledger_key(name: TopicName, partition: int) -> str:
    return f"{MANAGED_LEDGERS}/{name.tenant}/{name.namespace}/persistent/{_partition_path(name, partition)}"


def data_dir(name: TopicName, partition: int) -> str:
    return f"{LEDGERS_DIR}/{name.tenant}/{name.namespace}/{_partition_path(name, partition)}"


def ledger_file(directory: str, ledger_id: int) -> str:
    return f"{directory}/{ledger_id:016x}{LEDGER_SUFFIX}"


def root_depths(parts: list[str]) -> list[int]:
    """Given a ledger file's path split into components, how many of them may lead to its store
    root: ``ledgers/<tenant>/<ns>/<partition dir(s)>/<file>`` follows the root."""
    return [i for i in (len(parts) - 5, len(parts) - 6) if i > 0 and parts[i] == LEDGERS_DIR]


def staging_dir(writer: str, batch: int | None = None) -> str:
    """A writer's staging directory, or that of one of its batches."""
    return f"{STAGING_DIR}/{writer}" if batch is None else f"{STAGING_DIR}/{writer}/{batch}"


def staging_task_dir(writer: str, batch: int, task: str) -> str:
    """Where one task attempt of a writer's batch stages its ledgers."""
    return f"{STAGING_DIR}/{writer}/{batch}/{task}"


def heartbeat_file(task_dir: str) -> str:
    return f"{task_dir}/.alive"


def staged_ledger_file(task_dir: str, name: str) -> str:
    return f"{task_dir}/{name}{LEDGER_SUFFIX}"


STAGED_MARKER_SUFFIX = ".staged"


def staged_marker_file(task_dir: str, ledger_id: int) -> str:
    """Where a task that stages a ledger in its partition's directory (on a store without renames)
    names it, so that maintenance leaves it alone while the task's job is alive."""
    return f"{task_dir}/{ledger_id:016x}{STAGED_MARKER_SUFFIX}"


def staged_ledger_id(path: str) -> int | None:
    """The ledger a staged file is (``staged_ledger_file``) or names (``staged_marker_file``), or
    None for a task's other files."""
    name = path.rsplit("/", 1)[-1]
    for suffix in (LEDGER_SUFFIX, STAGED_MARKER_SUFFIX):
        if name.endswith(suffix):
            try:
                return int(name.removesuffix(suffix), 16)
            except ValueError:
                return None  # not one of ours
    return None


def staging_batch_of(path: str) -> str:
    """The batch directory a staged file lies in."""
    return "/".join(path.split("/")[:3])


def staging_writer_of(path: str) -> str:
    """The writer a staged file, or a batch's directory, belongs to."""
    return path.split("/")[1]


def sink_key(writer: str) -> str:
    return f"{SINKS}/{writer}"


def writer_of_sink_key(key: str) -> str:
    return key.split("/", 1)[1]


def fault_file(point: str) -> str:
    return f"{FAULTS_DIR}/{point}"
