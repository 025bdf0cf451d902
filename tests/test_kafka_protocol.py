"""The wire protocol, checked against a second implementation: for every API and version the
server advertises, kafka-python's codec (generated from the same JSON schemas, independently)
and kio's must agree byte for byte on the request, and on the server's real response. Then the
server's defences: a malformed, truncated, oversized or unknown request closes that connection
only, and fuzzed frames never take the server down."""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kio.serial import entity_writer

from kop_spark import Broker, Record
from kop_spark.kafka.apis import APIS
from kop_spark.kafka.messages import decode_request, request_class
from kop_spark.record import build_record_batch

from .kafka_wire import connect, exchange, response_class, wire_request
from .kop_server import KopServer

BATCH = build_record_batch([Record(value=b"v", key=b"k", timestamp_ms=1_700_000_000_000)])
MB = 1 << 20


ACL_FILTER = {  # literal bindings of topics, of any name, principal, host, operation and permission
    "resource_type_filter": 2,
    "resource_name_filter": None,
    "pattern_type_filter": 3,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}
WANTED_OFFSETS = {"name": "t", "partition_indexes": [0]}
# A realistic request of each API, by version, as kafka-python builds it, and the errors it may get.
REQUESTS: dict[int, Callable[[int], Any]] = {
    0: lambda v: wire_request(
        ProduceRequest,
        v,
        acks=-1,
        timeout_ms=5000,
        topic_data=[{"name": "t", "partition_data": [{"index": 0, "records": BATCH}]}],
    ),
    1: lambda v: wire_request(
        FetchRequest,
        v,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=MB,
        topics=[{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": MB}]}],
        forgotten_topics_data=[],
    ),
    2: lambda v: wire_request(
        ListOffsetsRequest,
        v,
        replica_id=-1,
        topics=[{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -2}]}],
    ),
    3: lambda v: wire_request(MetadataRequest, v, topics=[{"name": "t"}], allow_auto_topic_creation=False),
    8: lambda v: wire_request(
        OffsetCommitRequest,
        v,
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=-1,
        topics=[
            {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": "m"}]}
        ],
    ),
    9: lambda v: wire_request(
        OffsetFetchRequest,
        v,
        **(
            {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1, "topics": [WANTED_OFFSETS]}]}
            if v >= 8  # several groups at once
            else {"group_id": "g", "topics": [WANTED_OFFSETS]}
        ),
    ),
    10: lambda v: wire_request(FindCoordinatorRequest, v, key="g", key_type=0, coordinator_keys=["g"]),
    18: lambda v: wire_request(ApiVersionsRequest, v, client_software_name="kop-test", client_software_version="1"),
    19: lambda v: wire_request(
        CreateTopicsRequest,
        v,
        topics=[
            {"name": f"created{v}", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
        ],
        timeout_ms=5000,
        validate_only=False,
    ),
    20: lambda v: wire_request(DeleteTopicsRequest, v, topic_names=[f"deleted{v}"], timeout_ms=5000),
    22: lambda v: wire_request(InitProducerIdRequest, v, transactional_id=None, transaction_timeout_ms=60000),
    24: lambda v: wire_request(
        AddPartitionsToTxnRequest,
        v,
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[{"name": "t", "partitions": [0]}],
    ),
    25: lambda v: wire_request(
        AddOffsetsToTxnRequest, v, transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g"
    ),
    26: lambda v: wire_request(
        EndTxnRequest, v, transactional_id="tx", producer_id=1, producer_epoch=0, committed=True
    ),
    28: lambda v: wire_request(
        TxnOffsetCommitRequest,
        v,
        transactional_id="tx",
        group_id="g",
        producer_id=1,
        producer_epoch=0,
        topics=[{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
    ),
    11: lambda v: wire_request(
        JoinGroupRequest,
        v,
        group_id=f"joined{v}",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b""}],
    ),
    12: lambda v: wire_request(HeartbeatRequest, v, group_id="g", generation_id=1, member_id="m"),
    13: lambda v: wire_request(
        LeaveGroupRequest, v, group_id="g", member_id="m", members=[{"member_id": "m", "group_instance_id": None}]
    ),
    14: lambda v: wire_request(
        SyncGroupRequest, v, group_id="g", generation_id=1, member_id="m", protocol_type="consumer", assignments=[]
    ),
    15: lambda v: wire_request(DescribeGroupsRequest, v, groups=["g", "unknown"]),
    16: lambda v: wire_request(ListGroupsRequest, v, states_filter=[]),
    42: lambda v: wire_request(DeleteGroupsRequest, v, groups_names=["deletable"]),
    47: lambda v: wire_request(
        OffsetDeleteRequest, v, group_id="g", topics=[{"name": "t", "partitions": [{"partition_index": 0}]}]
    ),
    32: lambda v: wire_request(
        DescribeConfigsRequest,
        v,
        resources=[
            {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "0", "configuration_keys": ["retention.ms"]},
        ],
    ),
    21: lambda v: wire_request(
        DeleteRecordsRequest,
        v,
        topics=[{"name": "t", "partitions": [{"partition_index": 0, "offset": 0}]}],
        timeout_ms=5000,
    ),
    29: lambda v: wire_request(DescribeAclsRequest, v, **ACL_FILTER),
    30: lambda v: wire_request(
        CreateAclsRequest,
        v,
        creations=[
            {
                "resource_type": 2,
                "resource_name": f"acl{v}",
                "resource_pattern_type": 3,
                "principal": "User:alice",
                "host": "*",
                "operation": 3,
                "permission_type": 3,
            }
        ],
    ),
    31: lambda v: wire_request(DeleteAclsRequest, v, filters=[ACL_FILTER]),
    33: lambda v: wire_request(
        AlterConfigsRequest,
        v,
        resources=[{"resource_type": 2, "resource_name": "t", "configs": [{"name": "retention.ms", "value": "9000"}]}],
        validate_only=True,
    ),
    44: lambda v: wire_request(
        IncrementalAlterConfigsRequest,
        v,
        resources=[
            {
                "resource_type": 2,
                "resource_name": "t",
                "configs": [{"name": "cleanup.policy", "config_operation": 2, "value": "compact"}],
            }
        ],
        validate_only=True,
    ),
    37: lambda v: wire_request(
        CreatePartitionsRequest,
        v,
        topics=[{"name": f"grown{v}", "count": 3, "assignments": None}],
        timeout_ms=5000,
        validate_only=False,
    ),
    50: lambda v: wire_request(DescribeUserScramCredentialsRequest, v, users=None),
    51: lambda v: wire_request(
        AlterUserScramCredentialsRequest,
        v,
        deletions=[],
        upsertions=[{"name": "u", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}],
    ),
    35: lambda v: wire_request(DescribeLogDirsRequest, v, topics=[{"topic": "t", "partitions": [0]}]),
    60: lambda v: wire_request(DescribeClusterRequest, v, include_cluster_authorized_operations=False),
    61: lambda v: wire_request(DescribeProducersRequest, v, topics=[{"name": "t", "partition_indexes": [0, 9]}]),
    65: lambda v: wire_request(DescribeTransactionsRequest, v, transactional_ids=["unknown-tx"]),
    66: lambda v: wire_request(
        ListTransactionsRequest,
        v,
        state_filters=["Ongoing"],
        producer_id_filters=[],
        duration_filter=-1,
        transactional_id_pattern=None,
    ),
    17: lambda v: wire_request(SaslHandshakeRequest, v, mechanism="SCRAM-SHA-256"),
    36: lambda v: wire_request(SaslAuthenticateRequest, v, auth_bytes=b"n,,n=u,r=x"),
}
# What each asks of a group that does not have the member it names; a SASL request on a PLAINTEXT
# listener is ILLEGAL_SASL_STATE.
# A transactional request naming an id with no producer is INVALID_PRODUCER_ID_MAPPING; describing
# one is TRANSACTIONAL_ID_NOT_FOUND; describing the producers of a partition that does not exist is
# UNKNOWN_TOPIC_OR_PARTITION.
EXPECTED_ERRORS = {
    11: {0, 79},
    12: {25},
    13: {0, 25},
    14: {25},
    17: {34},
    36: {34},
    24: {49},
    25: {49},
    26: {49},
    28: {49},
    65: {105},
    61: {0, 3},
}
# kafka-python 3 has no codec of the consumer rebalance protocol's APIs, nor of share groups':
# librdkafka's, through its consumers, share consumers, admin client and mock cluster, checks them
# instead (test_kafka_consumer_protocol, test_kafka_share_groups).
WITHOUT_KAFKA_PYTHON_CODEC = {68, 69, 76, 77, 78, 79, 90, 91, 92}
CASES = [
    (key, v)
    for key, api in sorted(APIS.items())
    if key not in WITHOUT_KAFKA_PYTHON_CODEC
    for v in range(api.min_version, api.max_version + 1)
]


def _request_bytes(key: int, version: int, correlation_id: int = 7) -> tuple[Any, bytes]:
    request = REQUESTS[key](version)
    request.with_header(correlation_id, "kop-test")
    return request, bytes(request.encode(header=True))


def test_every_advertised_api_has_a_case() -> None:
    assert set(REQUESTS) | WITHOUT_KAFKA_PYTHON_CODEC == set(APIS)


@pytest.mark.parametrize(("key", "version"), CASES, ids=[f"api{k}-v{v}" for k, v in CASES])
def test_kio_reads_and_writes_kafka_pythons_request_bytes(key: int, version: int) -> None:
    _, frame = _request_bytes(key, version)
    header, body = decode_request(frame, key, version)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        key,
        version,
        7,
        "kop-test",
    )
    out = io.BytesIO()
    cls = request_class(key, version)
    entity_writer(cls.__header_schema__)(out, _kio_header(cls, key, version))
    entity_writer(cls)(out, body)
    assert out.getvalue() == frame


def _kio_header(cls: Any, key: int, version: int) -> Any:
    return cls.__header_schema__(
        request_api_key=key, request_api_version=version, correlation_id=7, client_id="kop-test"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopServer]:
    root = str(tmp_path_factory.mktemp("wire") / "store")
    with Broker(root) as b:
        b.create_topic("t", 1)
        b.produce("t", [Record(value=b"x")], 0)
        b.commit_offsets("deletable", {("t", 0): 1})
    with KopServer(root, ["group.initial.rebalance.delay.ms=0"]) as s:
        yield s


@pytest.mark.parametrize(("key", "version"), CASES, ids=[f"api{k}-v{v}" for k, v in CASES])
def test_kafka_python_decodes_every_response_to_the_same_bytes(server: KopServer, key: int, version: int) -> None:
    request, frame = _request_bytes(key, version)
    with Broker(server.root) as b:
        if key == 20:
            b.create_topic(f"deleted{version}", 1)
        if key == 42:
            b.commit_offsets("deletable", {("t", 0): 1})
        if key == 47:  # whether or not an OffsetCommit case ran first
            b.commit_offsets("g", {("t", 0): 1})
        if key == 37:
            b.create_topic(f"grown{version}", 1)
    with connect(server) as sock:
        answer = exchange(sock, frame)
    decoded = response_class(request).decode(answer, header=True)
    assert decoded.header.correlation_id == 7
    decoded.with_header(7)
    assert bytes(decoded.encode(header=True)) == answer
    assert _error_codes(decoded.to_dict()) <= EXPECTED_ERRORS.get(key, {0})


def _error_codes(value: Any) -> set[int]:
    if isinstance(value, dict):
        found = {v for k, v in value.items() if k == "error_code"}
        return found.union(*(_error_codes(v) for v in value.values()))
    if isinstance(value, list | tuple):
        return set().union(*(_error_codes(v) for v in value))
    return set()


def test_an_unsupported_api_versions_version_gets_the_v0_answer_with_unsupported_version(server: KopServer) -> None:
    frame = struct.pack(">hhih", 18, 99, 3, -1)
    with connect(server) as sock:
        answer = exchange(sock, frame)
        correlation_id, error = struct.unpack_from(">ih", answer)
        assert (correlation_id, error) == (3, 35)
        assert exchange(sock, _request_bytes(18, 3)[1])  # the connection stays usable


def test_bytes_after_a_request_are_ignored_as_kafka_ignores_them(server: KopServer) -> None:
    # librdkafka 2.x sends three such bytes after a Metadata v12 request for every topic.
    request, frame = _request_bytes(3, 12)
    with connect(server) as sock:
        answer = exchange(sock, frame + b"\x01\x00\x00")
    assert response_class(request).decode(answer, header=True).topics[0].name == "t"


def _answers(request: Any, server: KopServer) -> dict[tuple[str, int], dict[str, Any]]:
    """Each partition's answer in a Produce or ListOffsets response, by topic and partition."""
    request.with_header(7, "kop-test")
    with connect(server) as sock:
        answer = response_class(request).decode(exchange(sock, bytes(request.encode(header=True))), header=True)
    body = answer.to_dict()
    topics = body.get("responses", body.get("topics"))
    return {
        (t["name"], p.get("index", p.get("partition_index"))): p
        for t in topics
        for p in t.get("partition_responses", t.get("partitions"))
    }


def test_each_partition_of_a_request_gets_its_own_answer(server: KopServer) -> None:
    # A partition that fails does not fail the request's others: they are answered, and written.
    # Partitions refused before the store is asked (no records, a spec not served) sit among them.
    with Broker(server.root) as b:
        end = b.list_offsets("t", 0, "latest")
    produced = _answers(
        wire_request(
            ProduceRequest,
            9,
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                {
                    "name": "t",
                    "partition_data": [
                        {"index": 5, "records": None},
                        {"index": 0, "records": BATCH},
                        {"index": 9, "records": BATCH},
                    ],
                },
                {"name": "absent", "partition_data": [{"index": 0, "records": BATCH}]},
            ],
        ),
        server,
    )
    assert {tp: (p["error_code"], p["base_offset"]) for tp, p in produced.items()} == {
        ("t", 5): (87, -1),
        ("t", 0): (0, end),
        ("t", 9): (3, -1),
        ("absent", 0): (3, -1),
    }
    listed = _answers(
        wire_request(
            ListOffsetsRequest,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=[
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 5, "timestamp": -4},
                        {"partition_index": 0, "timestamp": -1},
                        {"partition_index": 9, "timestamp": -1},
                    ],
                },
                {"name": "absent", "partitions": [{"partition_index": 0, "timestamp": -2}]},
            ],
        ),
        server,
    )
    assert {tp: (p["error_code"], p["offset"]) for tp, p in listed.items()} == {
        ("t", 5): (42, -1),
        ("t", 0): (0, end + 1),
        ("t", 9): (3, -1),
        ("absent", 0): (3, -1),
    }


@pytest.mark.parametrize(
    "bad",
    [
        struct.pack(">i", 200 * MB),  # larger than socket.request.max.bytes
        struct.pack(">i", 5) + b"\0\3",  # truncated, then the client goes away
        struct.pack(">ihhi", 8, 3, 99, 1),  # an unknown version of Metadata
        struct.pack(">ihhi", 8, 999, 0, 1),  # an unknown API
        struct.pack(">ihhih", 40, 3, 12, 1, 400) + b"\xff" * 30,  # a body that does not parse
    ],
    ids=["oversized", "truncated", "unknown-version", "unknown-api", "garbage"],
)
def test_a_bad_request_closes_that_connection_only(server: KopServer, bad: bytes) -> None:
    with connect(server) as healthy, connect(server) as sock:
        sock.sendall(bad)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b"", "the connection was not closed"
        assert exchange(healthy, _request_bytes(3, 12)[1])
    assert server.proc is not None and server.proc.poll() is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from(sorted(APIS)),
    version=st.integers(0, 16),
    body=st.binary(max_size=200),
)
def test_fuzzed_requests_never_take_the_server_down(server: KopServer, key: int, version: int, body: bytes) -> None:
    frame = struct.pack(">hhih", key, version, 1, -1) + body
    with connect(server) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass  # an answer, or the connection closed: either is fine
    with connect(server) as sock:
        assert exchange(sock, _request_bytes(18, 3)[1])
