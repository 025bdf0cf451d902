"""Records of the offsets topic ``__consumer_offsets``, in Kafka's own binary schemas.

Keys (an int16 version, then the fields)::

    OffsetCommitKey   v0-1: group string, topic string, partition int32
    GroupMetadataKey  v2:   group string

Values (an int16 version, then the fields; a null value is a tombstone)::

    OffsetCommitValue v0: offset int64, metadata string, commit_timestamp int64
                      v1: ... commit_timestamp int64, expire_timestamp int64
                      v2: offset, metadata, commit_timestamp
                      v3: offset int64, leader_epoch int32, metadata string, commit_timestamp int64
                      v4: as v3, flexible (compact strings, tagged fields)
    GroupMetadataValue v0-3: protocol_type, generation, protocol, leader, [current_state_timestamp v2+],
                      members [member_id, [group_instance_id v3+], client_id, client_host,
                      [rebalance_timeout v1+], session_timeout, subscription, assignment]

Strings are int16-length UTF-8 (-1 = null in nullable fields); bytes are int32-length. As Kafka
does, offsets are written as v3, or v1 when an expire timestamp is given, and v0-v4 are read. A key
of another version is a record type this version does not know (Kafka 4's consumer and share group
records are keys v3 and up), which a loader skips, as Kafka's does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import CorruptRecordError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, in 32-bit arithmetic."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_group(group: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % n`` (``Utils.abs`` maps MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


class OffsetCommitKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupMetadataKey(NamedTuple):
    group: str


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only in v1
    leader_epoch: int = -1  # v3+


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str = "consumer"
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


class UnknownKey(NamedTuple):
    """A key of a record type this version does not know."""

    version: int


Key = OffsetCommitKey | GroupMetadataKey


# -- primitive writers and readers ----------------------------------------------------------


def _string(s: str | None, nullable: bool = False) -> bytes:
    if s is None:
        if not nullable:
            raise ValueError("null in a non-nullable string field")
        return struct.pack(">h", -1)
    data = s.encode("utf-8")
    if len(data) > 32767:
        raise ValueError(f"string of {len(data)} bytes is longer than Kafka's 32767")
    return struct.pack(">h", len(data)) + data


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


class _Reader:
    def __init__(self, data: bytes, what: str):
        self.data = data
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what}: truncated at byte {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def string(self) -> str:
        return self._take(self.int16()).decode("utf-8")

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n == -1 else self._take(n).decode("utf-8")

    def bytes_(self) -> bytes:
        return self._take(self.int32())

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._take(n).decode("utf-8")

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise CorruptRecordError(f"{self.what}: {len(self.data) - self.pos} unexpected trailing bytes")


# -- keys ------------------------------------------------------------------------------------


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return (
            struct.pack(">h", OFFSET_COMMIT_KEY_VERSION)
            + _string(key.group)
            + _string(key.topic)
            + struct.pack(">i", key.partition)
        )
    return struct.pack(">h", GROUP_METADATA_KEY_VERSION) + _string(key.group)


def decode_key(data: bytes) -> Key | UnknownKey:
    r = _Reader(data, "offsets topic key")
    try:
        version = r.int16()
        if version in (0, 1):
            key: Key = OffsetCommitKey(r.string(), r.string(), r.int32())
        elif version == 2:
            key = GroupMetadataKey(r.string())
        else:
            return UnknownKey(version)
        r.done()
    except UnicodeDecodeError as e:
        raise CorruptRecordError(f"offsets topic key is not UTF-8: {e}") from e
    return key


# -- values ----------------------------------------------------------------------------------


def encode_offset_value(v: OffsetCommitValue) -> bytes:
    if v.expire_timestamp >= 0:
        return (
            struct.pack(">hq", 1, v.offset)
            + _string(v.metadata)
            + struct.pack(">qq", v.commit_timestamp, v.expire_timestamp)
        )
    return (
        struct.pack(">hqi", 3, v.offset, v.leader_epoch) + _string(v.metadata) + struct.pack(">q", v.commit_timestamp)
    )


def decode_offset_value(data: bytes) -> OffsetCommitValue:
    r = _Reader(data, "OffsetCommitValue")
    version = r.int16()
    offset = r.int64()
    if version in (0, 1, 2):
        metadata = r.string()
        commit_ts = r.int64()
        expire_ts = r.int64() if version == 1 else -1
        value = OffsetCommitValue(offset, metadata, commit_ts, expire_ts)
    elif version == 3:
        epoch = r.int32()
        value = OffsetCommitValue(offset, r.string(), r.int64(), -1, epoch)
    elif version == 4:
        epoch = r.int32()
        metadata = r.compact_string() or ""
        value = OffsetCommitValue(offset, metadata, r.int64(), -1, epoch)
        r.skip_tagged_fields()
    else:
        raise CorruptRecordError(f"OffsetCommitValue has unknown version {version}")
    r.done()
    return value


def encode_group_value(v: GroupMetadataValue) -> bytes:
    out = [struct.pack(">h", 3), _string(v.protocol_type), struct.pack(">i", v.generation)]
    out += [_string(v.protocol, True), _string(v.leader, True), struct.pack(">q", v.current_state_timestamp)]
    out.append(struct.pack(">i", len(v.members)))
    for m in v.members:
        out += [_string(m.member_id), _string(m.group_instance_id, True), _string(m.client_id), _string(m.client_host)]
        out += [
            struct.pack(">ii", m.rebalance_timeout, m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(out)


def decode_group_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data, "GroupMetadataValue")
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise CorruptRecordError(f"GroupMetadataValue has unknown version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    members: list[MemberMetadata] = []
    for _ in range(r.int32()):
        member_id = r.string()
        instance = r.nullable_string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        members.append(
            MemberMetadata(member_id, client_id, client_host, session, r.bytes_(), r.bytes_(), rebalance, instance)
        )
    r.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
