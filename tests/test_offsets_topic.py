"""Offsets topic records, checked against bytes worked out by hand from Kafka's message definitions
(OffsetCommitKey.json, OffsetCommitValue.json, GroupMetadataKey.json, GroupMetadataValue.json)."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kop_spark.errors import CorruptRecordError
from kop_spark.group.offsets_topic import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    java_string_hash,
    partition_for_group,
)


def test_group_partition_is_kafkas():
    assert partition_for_group("test", 50) == 48
    assert partition_for_group("my-group", 50) == 12
    assert java_string_hash("") == 0 and java_string_hash("hello") == 99162322
    # The one string whose hashCode is Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for_group("polygenelubricants", 50) == 0
    assert java_string_hash("grüße-😀") == java_string_hash("grüße-😀")  # non-ASCII via UTF-16 units


def test_offset_commit_key_bytes():
    # version 1 | group "g" | topic "t" | partition 3
    assert encode_key(OffsetCommitKey("g", "t", 3)) == bytes.fromhex("000100016700017400000003")
    assert decode_key(bytes.fromhex("00000002676700017400000001")) == OffsetCommitKey("gg", "t", 1)


def test_group_metadata_key_bytes():
    assert encode_key(GroupMetadataKey("grp")) == bytes.fromhex("00020003677270")
    assert decode_key(bytes.fromhex("00020003677270")) == GroupMetadataKey("grp")


def test_offset_commit_value_v3_bytes():
    # version 3 | offset 42 | leader epoch -1 | metadata "m" | commit timestamp 1000
    expected = bytes.fromhex("0003000000000000002affffffff00016d00000000000003e8")
    assert encode_offset_value(OffsetCommitValue(42, "m", 1000)) == expected
    assert decode_offset_value(expected) == OffsetCommitValue(42, "m", 1000)


def test_offset_commit_value_v1_when_expiring():
    # version 1 | offset 7 | metadata "" | commit 5 | expire 9
    expected = bytes.fromhex("00010000000000000007000000000000000000050000000000000009")
    assert encode_offset_value(OffsetCommitValue(7, "", 5, expire_timestamp=9)) == expected
    assert decode_offset_value(expected) == OffsetCommitValue(7, "", 5, 9)


def test_offset_commit_value_v0_v2_v4_read():
    v0 = bytes.fromhex("00000000000000000001000268690000000000000002")
    assert decode_offset_value(v0) == OffsetCommitValue(1, "hi", 2)
    v2 = bytes.fromhex("0002000000000000000100000000000000000003")
    assert decode_offset_value(v2) == OffsetCommitValue(1, "", 3)
    # v4 is flexible: compact string (length + 1 as unsigned varint) and an empty tagged-field section.
    v4 = bytes.fromhex("0004000000000000000500000002036869000000000000000600")
    assert decode_offset_value(v4) == OffsetCommitValue(5, "hi", 6, -1, 2)


def test_group_metadata_value_v3_bytes_and_older_versions():
    empty = GroupMetadataValue("consumer", 0, None, None, 77, ())
    expected = bytes.fromhex("00030008" + b"consumer".hex() + "00000000ffffffff000000000000004d00000000")
    assert encode_group_value(empty) == expected
    assert decode_group_value(expected) == empty
    member = MemberMetadata("m1", "c1", "/h", 10000, b"\x01", b"\x02", 30000, None)
    v3 = GroupMetadataValue("consumer", 4, "range", "m1", 88, (member,))
    assert decode_group_value(encode_group_value(v3)) == v3
    # v0: no state timestamp, no rebalance timeout, no instance id.
    v0 = (
        struct.pack(">h", 0)
        + b"\x00\x08consumer"
        + struct.pack(">i", 1)
        + b"\x00\x05range"
        + b"\x00\x02m1"
        + struct.pack(">i", 1)
        + b"\x00\x02m1"
        + b"\x00\x02c1"
        + b"\x00\x02/h"
        + struct.pack(">i", 10000)
        + struct.pack(">i", 1)
        + b"\x01"
        + struct.pack(">i", 1)
        + b"\x02"
    )
    decoded = decode_group_value(v0)
    assert (decoded.generation, decoded.protocol, decoded.current_state_timestamp) == (1, "range", -1)
    assert decoded.members == (MemberMetadata("m1", "c1", "/h", 10000, b"\x01", b"\x02", -1, None),)


@given(
    st.text(max_size=50),
    st.text(max_size=50),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.text(max_size=100),
    st.integers(0, 2**42),
)
def test_round_trips(group, topic, partition, offset, metadata, ts):
    assert decode_key(encode_key(OffsetCommitKey(group, topic, partition))) == OffsetCommitKey(group, topic, partition)
    v = OffsetCommitValue(offset, metadata, ts)
    assert decode_offset_value(encode_offset_value(v)) == v


def test_garbage_is_corrupt():
    for bad in (b"", b"\x00\x01\x00", bytes.fromhex("000100016700017400000003ff")):
        with pytest.raises(CorruptRecordError):
            decode_key(bad)
    with pytest.raises(CorruptRecordError):
        decode_offset_value(b"\x00\x07" + b"\x00" * 20)


@given(st.integers(-(1 << 15), (1 << 15) - 1).filter(lambda v: v not in (0, 1, 2)), st.binary(max_size=20))
def test_a_key_of_another_version_is_a_record_type_not_known_here(version, rest):
    """Kafka 4's consumer and share group records (keys v3 and up) and whatever a later version
    adds: a loader skips them, as Kafka's does, rather than calling the partition corrupt."""
    assert decode_key(struct.pack(">h", version) + rest) == UnknownKey(version)
