"""Kafka topic names mapped to Pulsar full names, exactly as KoP maps them.

``orders`` -> ``persistent://<kafkaTenant>/<kafkaNamespace>/orders``; ``tenant/ns/orders`` and
``persistent://tenant/ns/orders`` are taken as given. Partition N is ``<full name>-partition-N``.
Every part must pass Kafka's rules (letters, digits, ``.``, ``_``, ``-``; at most 249 characters;
not ``.`` or ``..``), so a name can never reach outside the store root.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._\-]+$")
_PARTITION_SUFFIX = re.compile(r"-partition-\d+$")
PERSISTENT = "persistent://"


def _check_part(part: str, what: str, original: str) -> None:
    if not part:
        raise InvalidTopicError(f"topic {original!r}: {what} is empty")
    if part in (".", ".."):
        raise InvalidTopicError(f"topic {original!r}: {what} cannot be {part!r}")
    if len(part) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic {original!r}: {what} is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(part):
        raise InvalidTopicError(
            f"topic {original!r}: {what} {part!r} contains characters other than ASCII letters, digits, '.', '_' and '-'"
        )


@dataclass(frozen=True)
class TopicName:
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str, default_tenant: str = "public", default_namespace: str = "default") -> TopicName:
        if not isinstance(name, str):
            raise InvalidTopicError(f"topic name must be a string, not {type(name).__name__}")
        return _parse(name, default_tenant, default_namespace)

    @property
    def full_name(self) -> str:
        return f"{PERSISTENT}{self.tenant}/{self.namespace}/{self.local_name}"

    def partition_name(self, partition: int) -> str:
        return f"{self.full_name}-partition-{partition}"

    def kafka_name(self, default_tenant: str, default_namespace: str) -> str:
        """The name a Kafka client uses: short in the default namespace, tenant/ns/topic elsewhere."""
        if (self.tenant, self.namespace) == (default_tenant, default_namespace):
            return self.local_name
        return f"{self.tenant}/{self.namespace}/{self.local_name}"


# Kafka's offsets topic, which kop keeps in its metadata namespace (kafkaMetadataTenant/Namespace)
# as KoP does: the bare name is the one Kafka's tools and monitors read it by.
OFFSETS_TOPIC = "__consumer_offsets"


def has_collision_chars(name: str) -> bool:
    """Kafka's ``Topic.hasCollisionChars``: a name that may collide with another (see ``collides``)."""
    return "." in name or "_" in name


def collides(a: str, b: str) -> bool:
    """Kafka's ``Topic.hasCollision``: different names whose metric names are the same."""
    return a != b and a.replace(".", "_") == b.replace(".", "_")


# A topic (as its user names it) and a partition of it: Kafka's TopicPartition, as a plain tuple so
# that users' ``("orders", 0)`` keys are ones.
TopicPartition = tuple[str, int]


def partition_label(tp: TopicPartition) -> str:
    """``orders-0``, as Kafka writes a topic partition in messages."""
    return f"{tp[0]}-{tp[1]}"


# Names are parsed for every request a partition is named in (each fetch, every few milliseconds
# for a parked one); a name parses the same each time, and a TopicName is immutable.
@functools.lru_cache(maxsize=4096)
def _parse(name: str, default_tenant: str, default_namespace: str) -> TopicName:
    rest = name
    if "://" in name:
        if not name.startswith(PERSISTENT):
            raise InvalidTopicError(f"topic {name!r}: only persistent:// topics are supported")
        rest = name[len(PERSISTENT) :]
        parts = rest.split("/")
        if len(parts) != 3:
            raise InvalidTopicError(f"topic {name!r}: expected persistent://tenant/namespace/topic")
    else:
        parts = rest.split("/")
        if len(parts) == 1:
            parts = [default_tenant, default_namespace, parts[0]]
        elif len(parts) != 3:
            raise InvalidTopicError(
                f"topic {name!r}: expected topic, tenant/namespace/topic or persistent://tenant/namespace/topic"
            )
    for part, what in zip(parts, ("tenant", "namespace", "topic name"), strict=False):
        _check_part(part, what, name)
    if _PARTITION_SUFFIX.search(parts[2]):
        raise InvalidTopicError(f"topic {name!r}: names ending in -partition-N are reserved for partitions")
    return TopicName(*parts)
