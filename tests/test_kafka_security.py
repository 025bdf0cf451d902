"""``kop serve`` security with real clients: SASL/SCRAM (SHA-256, SHA-512) and PLAIN logins against
users made by ``kop users``, TLS listeners with and without client certificates, and ACLs made
by ``kop acls`` enforced as Kafka's simple authorizer enforces them."""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import ACLFilter as KAclFilter
from kafka.admin import ACLOperation as KOperation
from kafka.admin import ACLPermissionType as KPermission
from kafka.admin import ACLResourcePatternType as KPattern
from kafka.admin import ResourcePatternFilter as KResource
from kafka.admin import ResourceType as KResourceType
from kafka.errors import ClusterAuthorizationFailedError
from kafka.errors import InvalidRequestError as KafkaInvalidRequestError
from kafka.errors import NoError as KafkaNoError
from kafka.errors import TopicAuthorizationFailedError as KafkaTopicAuthorizationFailedError
from kafka.protocol.admin import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from kafka.protocol.sasl import SaslHandshakeRequest
from kio.schema.errors import ErrorCode

from kop_spark import Broker, Record
from kop_spark.broker.credentials import ScramCredential
from kop_spark.errors import ConfigError
from kop_spark.kafka.listeners import parse_listeners
from kop_spark.kafka.messages import request_class
from kop_spark.kafka.sasl import SaslAuthenticationError, ScramServer
from kop_spark.kafka.tls import certificate_principal, server_context
from kop_spark.record import build_record_batch

from .kafka_wire import call, kio_call, wire_request
from .kop_server import KopServer
from .pki import Pki, make_pki
from .test_cli import kop

OPS = "ops@example.com"  # a name of the characters Kafka user names hold and metadata keys do not
PASSWORDS = {"alice": "alice-Secret-1", "bob": "bob-Secret-2", "admin": "admin-Secret-3", OPS: "ops-Secret-4"}


@pytest.fixture
def root(tmp_path) -> str:
    """A store with topics and the users alice (SCRAM-SHA-256, from a password file), bob
    (SCRAM-SHA-512, from stdin), admin (both) and OPS, made with the CLI."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        for topic in ("t", "orders-eu", "orders-secret", "other"):
            b.create_topic(topic, 1)
    secret = tmp_path / "alice.password"
    secret.write_text(PASSWORDS["alice"] + "\n")
    assert kop(root, "users", "add", "alice", "--password-file", str(secret)).returncode == 0
    assert kop(root, "users", "add", "bob", "--mechanism", "SCRAM-SHA-512", stdin=PASSWORDS["bob"]).returncode == 0
    assert kop(root, "users", "add", OPS, stdin=PASSWORDS[OPS]).returncode == 0
    made = kop(root, "users", "add", "admin", "--mechanism", "SCRAM-SHA-256", "--mechanism", "SCRAM-SHA-512",
               stdin=PASSWORDS["admin"])  # fmt: skip
    assert made.returncode == 0, made.stderr
    return root


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def sasl(server: KopServer, user: str, password: str, mechanism: str = "SCRAM-SHA-256", tls: Pki | None = None):
    conf = {
        "bootstrap.servers": server.bootstraps["SASL_SSL" if tls else "SASL_PLAINTEXT"],
        "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    return {**conf, "ssl.ca.location": str(tls.ca)} if tls else conf


def round_trip(conf: dict, topic: str = "t", group: str | None = None) -> bytes:
    """Produce one record and read it back; what was read."""
    value = uuid.uuid4().bytes
    producer = Producer({**conf, "enable.idempotence": True, "acks": "all"})
    producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": group or f"g-{uuid.uuid4().hex}", "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    consumer.assign([TopicPartition(topic, 0, end - 1)])
    m = consumer.poll(30)
    assert m is not None and m.error() is None, m and m.error()
    consumer.commit(m, asynchronous=False)
    consumer.close()
    return m.value()


def group_error(conf: dict, topic: str, group: str) -> int:
    """The error a consumer in ``group`` gets (a consumer's errors come as messages)."""
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while True:
            m = consumer.poll(30)
            assert m is not None, f"no error for group {group!r}"
            if m.error() is not None:
                return m.error().code()
    finally:
        consumer.close()


def plain_login(sock: socket.socket, user: str) -> None:
    """Log in by hand with SASL/PLAIN after a v0 handshake (a bare token, a bare answer)."""
    call(sock, wire_request(SaslHandshakeRequest, 0, mechanism="PLAIN"))
    token = b"\0" + user.encode() + b"\0" + PASSWORDS[user].encode()
    sock.sendall(struct.pack(">i", len(token)) + token)
    assert sock.recv(4) == b"\0\0\0\0"


def refusal(conf: dict) -> list[KafkaError]:
    """What a client is told when it cannot get in (its error callback's errors)."""
    told: list[KafkaError] = []
    admin = AdminClient({**conf, "socket.timeout.ms": 3000, "error_cb": told.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)
    admin.poll(1)  # delivers the error callbacks
    return told


def authentication_failed(told: list[KafkaError]) -> bool:
    return any(e.code() == KafkaError._AUTHENTICATION and "Authentication failed" in e.str() for e in told)


def test_scram_users_log_in_and_everyone_else_is_refused(root: str) -> None:
    with KopServer(root, protocols=["SASL_PLAINTEXT"]) as server:
        assert round_trip(sasl(server, "alice", PASSWORDS["alice"]))
        assert round_trip(sasl(server, "bob", PASSWORDS["bob"], "SCRAM-SHA-512"))
        assert round_trip(sasl(server, OPS, PASSWORDS[OPS]))
        producer = KafkaProducer(  # kafka-python 3, idempotent by default
            bootstrap_servers=server.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="admin",
            sasl_plain_password=PASSWORDS["admin"],
        )
        sent = producer.send("t", b"from kafka-python", partition=0).get(30)
        producer.close()
        with Broker(root) as b:
            assert b.fetch("t", 0, sent.offset)[0].value == b"from kafka-python"

        assert authentication_failed(refusal(sasl(server, "alice", "wrong")))
        assert authentication_failed(refusal(sasl(server, "nobody", "whatever")))
        assert authentication_failed(refusal(sasl(server, "bob", PASSWORDS["bob"], "SCRAM-SHA-256")))
        not_enabled = refusal(sasl(server, "alice", PASSWORDS["alice"], "PLAIN"))
        assert any("Unsupported SASL mechanism" in e.str() for e in not_enabled), not_enabled
        refusal({"bootstrap.servers": server.bootstrap})  # anonymous: no request before a login
        assert round_trip(sasl(server, "alice", PASSWORDS["alice"]))  # the server went on serving
    for _ in range(2):
        server.wait_for("failed SCRAM-SHA-256 login from 127.0.0.1")
    log = "".join(server.log)
    assert not any(p in log for p in ["wrong", "whatever", *PASSWORDS.values()])


def test_no_password_is_stored_or_shown(root: str) -> None:
    for path in Path(root).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(p.encode() in data for p in PASSWORDS.values()), path
    listed = kop(root, "users", "list")
    assert listed.stdout.splitlines() == [
        "admin\tSCRAM-SHA-256,SCRAM-SHA-512",
        "alice\tSCRAM-SHA-256",
        "bob\tSCRAM-SHA-512",
        f"{OPS}\tSCRAM-SHA-256",
    ]
    with Broker(root) as b:
        (stored,) = b.users.credentials("alice")
    assert stored.iterations >= 4096 and len(stored.salt) >= 16
    assert stored.verify_password(PASSWORDS["alice"]) and not stored.verify_password("alice")
    assert kop(root, "users", "delete", "bob").returncode == 0
    assert kop(root, "users", "list").stdout.split()[::2] == ["admin", "alice", OPS]
    assert kop(root, "users", "delete", "bob").returncode == 1
    refused = kop(root, "users", "add", "ANONYMOUS", stdin="pw")
    assert refused.returncode == 1 and "reserved" in refused.stderr


def test_plain_and_scram_over_sasl_ssl_and_plain_tls(root: str, pki: Pki) -> None:
    conf = ["sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512", f"ssl.keystore.location={pki.server}"]
    with KopServer(root, conf, protocols=["SASL_SSL", "SSL"]) as server:
        assert round_trip(sasl(server, "alice", PASSWORDS["alice"], "PLAIN", tls=pki))
        assert round_trip(sasl(server, "bob", PASSWORDS["bob"], "SCRAM-SHA-512", tls=pki))
        assert authentication_failed(refusal(sasl(server, "alice", "wrong", "PLAIN", tls=pki)))
        tls_only = {"bootstrap.servers": server.bootstraps["SSL"], "security.protocol": "SSL"}
        assert round_trip({**tls_only, "ssl.ca.location": str(pki.ca)})
        refusal({"bootstrap.servers": server.bootstraps["SSL"]})  # a plaintext client: its handshake fails
        consumer = KafkaConsumer(  # kafka-python over SASL_SSL with PLAIN
            bootstrap_servers=server.bootstraps["SASL_SSL"],
            security_protocol="SASL_SSL",
            ssl_cafile=str(pki.ca),
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORDS["alice"],
        )
        assert "t" in consumer.topics()
        consumer.close()
        assert round_trip({**tls_only, "ssl.ca.location": str(pki.ca)})  # still serving


def test_client_certificates_are_principals_for_acls(root: str, pki: Pki) -> None:
    assert kop(root, "acls", "add", "--allow-principal", pki.client_principal, "--operation", "Write",
               "--operation", "Read", "--topic", "t", "--group", "certified").returncode == 0  # fmt: skip
    conf = [
        f"ssl.keystore.location={pki.server}",
        "ssl.client.auth=required",
        f"ssl.truststore.location={pki.ca}",
        "authorizationEnabled=true",
    ]
    with KopServer(root, conf, protocols=["SSL"]) as server:
        client = {
            "bootstrap.servers": server.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        }
        assert round_trip(client, group="certified")
        assert group_error(client, "t", "uncertified") == KafkaError.GROUP_AUTHORIZATION_FAILED
        refusal({k: v for k, v in client.items() if not k.startswith(("ssl.cert", "ssl.key"))})  # no certificate


def test_acls_allow_deny_prefixes_super_users_and_change_without_a_restart(root: str) -> None:
    def acls(*args: str) -> None:
        done = kop(root, "acls", *args)
        assert done.returncode == 0, done.stderr

    acls("add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read",
         "--topic", "orders-", "--resource-pattern-type", "prefixed")  # fmt: skip
    acls("add", "--deny-principal", "User:alice", "--operation", "Read", "--topic", "orders-secret")
    acls("add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "bill",
         "--resource-pattern-type", "prefixed")  # fmt: skip
    acls("add", "--deny-principal", "User:alice", "--operation", "All", "--group", "billing-blocked")
    assert "Deny User:alice Read on Topic:Literal:orders-secret" in kop(root, "acls", "list").stdout
    conf = ["authorizationEnabled=true", "superUserRoles=User:admin"]
    with KopServer(root, conf, protocols=["SASL_PLAINTEXT"]) as server:
        alice = sasl(server, "alice", PASSWORDS["alice"])
        assert round_trip(alice, "orders-eu", group="billing")
        for refused in ("other-group", "billing-blocked"):  # not allowed; allowed by prefix, denied by name
            assert group_error(alice, "orders-eu", refused) == KafkaError.GROUP_AUTHORIZATION_FAILED
        producer = Producer(alice)
        failures: list[KafkaError] = []
        producer.produce("other", b"x", partition=0, on_delivery=lambda e, m: failures.append(e))
        producer.flush(30)
        assert failures[0] is not None and failures[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # Read is allowed on orders-* by prefix, and denied on orders-secret by name: deny wins.
        assert group_error(alice, "orders-secret", "billing") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        visible = AdminClient(alice).list_topics(timeout=30).topics
        assert set(visible) == {"orders-eu", "orders-secret"}  # Describe comes with Read/Write

        bob = sasl(server, "bob", PASSWORDS["bob"], "SCRAM-SHA-512")
        assert AdminClient(bob).list_topics(timeout=30).topics == {}
        acls("add", "--allow-principal", "User:bob", "--operation", "Describe", "--topic", "other")
        deadline = time.monotonic() + 30
        while "other" not in AdminClient(bob).list_topics(timeout=30).topics:  # no restart
            assert time.monotonic() < deadline, "an added ACL did not take effect"
        acls("remove", "--allow-principal", "User:bob", "--operation", "Describe", "--topic", "other")
        while AdminClient(bob).list_topics(timeout=30).topics:
            assert time.monotonic() < deadline + 30, "a removed ACL did not take effect"

        assert round_trip(sasl(server, "admin", PASSWORDS["admin"]), "other")  # a super user, without ACLs


def _produce_error(conf: dict, topic: str) -> int | None:
    """The error code a record produced to ``topic`` is failed with, or None if it is written."""
    failures: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 20_000})
    producer.produce(topic, b"x", partition=0, on_delivery=lambda e, m: failures.append(e))
    producer.flush(30)
    return failures[0].code() if failures[0] is not None else None


def test_every_spelling_of_a_topic_is_one_resource_to_acls(root: str) -> None:
    """``t``, ``public/default/t`` and ``persistent://public/default/t`` name one topic, so a Deny of
    one holds for all, and a binding written with another spelling applies to it."""
    for args in (
        ("--allow-principal", "User:alice", "--operation", "All", "--topic", "*"),
        ("--deny-principal", "User:alice", "--operation", "Write", "--topic", "orders-secret"),
        ("--allow-principal", "User:bob", "--operation", "Write", "--topic", "persistent://public/default/other"),
    ):
        assert kop(root, "acls", "add", *args).returncode == 0
    conf = ["authorizationEnabled=true"]
    with KopServer(root, conf, protocols=["SASL_PLAINTEXT"]) as server:
        alice = sasl(server, "alice", PASSWORDS["alice"])
        for name in ("orders-secret", "public/default/orders-secret", "persistent://public/default/orders-secret"):
            assert _produce_error(alice, name) == KafkaError.TOPIC_AUTHORIZATION_FAILED, name
        assert _produce_error(alice, "public/default/orders-eu") is None
        bob = sasl(server, "bob", PASSWORDS["bob"], "SCRAM-SHA-512")
        assert _produce_error(bob, "other") is None
        assert _produce_error(bob, "t") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with Broker(root) as b:
        assert b.list_offsets("orders-secret", 0, "latest") == 0
        assert b.list_offsets("orders-eu", 0, "latest") == b.list_offsets("other", 0, "latest") == 1


def test_altering_configs_takes_alter_configs_which_allows_describing_them_and_deleting_records_delete(
    root: str,
) -> None:
    def alter(admin: AdminClient, topic: str) -> None:
        entry = ConfigEntry("retention.ms", "90000", incremental_operation=AlterConfigOpType.SET)
        (future,) = admin.incremental_alter_configs(
            [ConfigResource("topic", topic, incremental_configs=[entry])]
        ).values()
        future.result(30)

    def delete_records(admin: AdminClient, topic: str) -> None:  # takes Delete, which bob has nowhere
        (future,) = admin.delete_records([TopicPartition(topic, 0, 0)]).values()
        future.result(30)

    def describe(admin: AdminClient, topic: str) -> str:
        (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
        return future.result(30)["retention.ms"].value

    for operation, topic in (("AlterConfigs", "other"), ("Describe", "t")):  # Describe: bob's client finds t
        added = kop(root, "acls", "add", "--allow-principal", "User:bob", "--operation", operation, "--topic", topic)
        assert added.returncode == 0, added.stderr
    with KopServer(root, ["authorizationEnabled=true"], protocols=["SASL_PLAINTEXT"]) as server:
        bob = AdminClient(sasl(server, "bob", PASSWORDS["bob"], "SCRAM-SHA-512"))
        for refused in (alter, describe, delete_records):
            with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
                refused(bob, "t")
        alter(bob, "other")
        assert describe(bob, "other") == "90000"
    with Broker(root) as b:
        assert b.topic_config("other", own=True) == {"retention.ms": 90000} and b.topic_config("t", own=True) == {}


def test_transactions_take_write_on_their_transactional_id_and_on_what_they_add(root: str) -> None:
    for args in (
        ("--operation", "Write", "--operation", "Read", "--topic", "orders-eu"),  # Read: its offsets go with it
        ("--operation", "Read", "--group", "billing"),
        ("--operation", "Write", "--transactional-id", "alice-", "--resource-pattern-type", "prefixed"),
    ):
        added = kop(root, "acls", "add", "--allow-principal", "User:alice", *args)
        assert added.returncode == 0, added.stderr
    assert "Allow User:alice Write on TransactionalId:Prefixed:alice-" in kop(root, "acls", "list").stdout
    with KopServer(root, ["authorizationEnabled=true"], protocols=["SASL_PLAINTEXT"]) as server:
        alice = sasl(server, "alice", PASSWORDS["alice"])
        with pytest.raises(KafkaException) as refused:
            Producer({**alice, "transactional.id": "bob-tx"}).init_transactions(30)
        assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        producer = Producer({**alice, "transactional.id": "alice-tx"})
        producer.init_transactions(30)
        producer.begin_transaction()
        try:
            producer.produce("other", b"refused", partition=0)  # no Write on the topic
        except KafkaException as e:  # librdkafka refuses at once if it has already learnt so
            assert e.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        else:  # else the transaction must abort
            with pytest.raises(KafkaException) as failed:
                producer.commit_transaction(30)
            assert failed.value.args[0].txn_requires_abort()
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.produce("orders-eu", b"allowed", partition=0)
        consumer = Consumer({**alice, "group.id": "billing"})
        producer.send_offsets_to_transaction(
            [TopicPartition("orders-eu", 0, 0)], consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        consumer.close()
    with Broker(root) as b:
        assert [r.value for r in b.fetch("orders-eu", 0, 0)] == [b"allowed"]
        assert [r.value for r in b.fetch("other", 0, 0)] == []
        assert b.fetch_offsets("billing")[("orders-eu", 0)].offset == 0


def test_each_transactional_request_checks_its_acls(root: str) -> None:
    for args in (
        ("--operation", "Write", "--topic", "orders-eu"),
        ("--operation", "Read", "--group", "billing"),
        ("--operation", "Write", "--transactional-id", "alice-tx"),
    ):
        added = kop(root, "acls", "add", "--allow-principal", "User:alice", *args)
        assert added.returncode == 0, added.stderr
    with Broker(root) as b:
        b.transactions.init_producer_id("bob-tx", 60_000)  # another principal's, not to be listed to alice
    conf = ["authorizationEnabled=true", "sasl.enabled.mechanisms=PLAIN"]
    with KopServer(root, conf, protocols=["SASL_PLAINTEXT"]) as server:
        host, port = server.bootstrap.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            plain_login(sock, "alice")
            find = call(sock, wire_request(FindCoordinatorRequest, 1, key="bob-tx", key_type=1))
            assert find.error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            init = wire_request(InitProducerIdRequest, 1, transactional_id="bob-tx", transaction_timeout_ms=60000)
            assert call(sock, init).error_code == 53
            init = wire_request(InitProducerIdRequest, 1, transactional_id="alice-tx", transaction_timeout_ms=60000)
            mine = call(sock, init)
            owner = {"producer_id": mine.producer_id, "producer_epoch": mine.producer_epoch}
            added = call(sock, wire_request(
                AddPartitionsToTxnRequest, 1, v3_and_below_transactional_id="alice-tx",
                v3_and_below_producer_id=mine.producer_id, v3_and_below_producer_epoch=mine.producer_epoch,
                v3_and_below_topics=[{"name": "orders-eu", "partitions": [0]}, {"name": "other", "partitions": [0]}],
            ))  # fmt: skip
            codes = {
                t.name: t.results_by_partition[0].partition_error_code for t in added.results_by_topic_v3_and_below
            }
            assert codes == {"orders-eu": 55, "other": 29}  # OPERATION_NOT_ATTEMPTED, TOPIC_AUTHORIZATION_FAILED
            offsets = wire_request(AddOffsetsToTxnRequest, 1, transactional_id="alice-tx", group_id="nobody", **owner)
            assert call(sock, offsets).error_code == 30  # GROUP_AUTHORIZATION_FAILED
            offsets = wire_request(AddOffsetsToTxnRequest, 1, transactional_id="alice-tx", group_id="billing", **owner)
            assert call(sock, offsets).error_code == 0
            commit = call(sock, wire_request(
                TxnOffsetCommitRequest, 1, transactional_id="alice-tx", group_id="billing", **owner,
                topics=[{"name": "orders-eu", "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
            ))  # fmt: skip
            assert commit.topics[0].partitions[0].error_code == 29  # offsets of a topic it may not Read
            theirs = call(sock, wire_request(
                TxnOffsetCommitRequest, 1, transactional_id="bob-tx", group_id="billing", **owner,
                topics=[{"name": "orders-eu", "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
            ))  # fmt: skip
            assert theirs.topics[0].partitions[0].error_code == 53
            end = wire_request(EndTxnRequest, 1, transactional_id="bob-tx", committed=True, **owner)
            assert call(sock, end).error_code == 53
            batch = build_record_batch(
                [Record(b"v")], producer_id=mine.producer_id, producer_epoch=0, base_sequence=0, is_transactional=True
            )
            produce = call(sock, wire_request(
                ProduceRequest, 3, transactional_id="bob-tx", acks=-1, timeout_ms=5000,
                topic_data=[{"name": "orders-eu", "partition_data": [{"index": 0, "records": batch}]}],
            ))  # fmt: skip
            assert produce.responses[0].partition_responses[0].error_code == 53
            end = wire_request(EndTxnRequest, 1, transactional_id="alice-tx", committed=False, **owner)
            assert call(sock, end).error_code == 0
            listing = wire_request(
                ListTransactionsRequest, 2, state_filters=[], producer_id_filters=[], duration_filter=-1,
                transactional_id_pattern=None,
            )  # fmt: skip
            assert [t.transactional_id for t in call(sock, listing).transaction_states] == ["alice-tx"]
            bad = wire_request(
                ListTransactionsRequest, 2, state_filters=[], producer_id_filters=[], duration_filter=-1,
                transactional_id_pattern="(",
            )  # fmt: skip
            assert call(sock, bad).error_code == 128  # INVALID_REGULAR_EXPRESSION
            described = call(
                sock, wire_request(DescribeTransactionsRequest, 0, transactional_ids=["bob-tx", "alice-tx"])
            )
            assert [t.error_code for t in described.transaction_states] == [53, 0]


ANY_ACL = KAclFilter(None, None, KOperation.ANY, KPermission.ANY, KResource(KResourceType.ANY, None, KPattern.ANY))


@contextlib.contextmanager
def kafka_python_admin(server: KopServer, user: str, mechanism: str) -> Iterator[KafkaAdminClient]:
    """kafka-python's admin client, closed after: its I/O thread would outlive the test."""
    client = KafkaAdminClient(
        bootstrap_servers=server.bootstraps["SASL_PLAINTEXT"],
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=PASSWORDS[user],
    )
    try:
        yield client
    finally:
        client.close()


def describe_acls(server: KopServer, user: str, mechanism: str, acl_filter: KAclFilter) -> tuple[list, Any]:
    with kafka_python_admin(server, user, mechanism) as client:
        return client.describe_acls(acl_filter)


def test_admin_clients_manage_acls_that_take_effect_without_a_restart(root: str) -> None:
    def acl(resource: ResourceType, name: str, pattern: ResourcePatternType, operation: AclOperation, host="*"):
        return AclBinding(resource, name, pattern, "User:alice", host, operation, AclPermissionType.ALLOW)

    def matching(pattern: ResourcePatternType, name: str | None = None, principal: str | None = None):
        return AclBindingFilter(
            ResourceType.ANY, name, pattern, principal, None, AclOperation.ANY, AclPermissionType.ANY
        )

    conf = ["authorizationEnabled=true", "superUserRoles=User:admin"]
    with KopServer(root, conf, protocols=["SASL_PLAINTEXT"]) as server:
        bob = AdminClient(sasl(server, "bob", PASSWORDS["bob"], "SCRAM-SHA-512"))  # nothing on the cluster
        # (librdkafka 2.x drops DescribeAcls' top-level error and answers []: kafka-python reports it)
        with pytest.raises(ClusterAuthorizationFailedError, match="User:bob may not Describe Cluster"):
            describe_acls(server, "bob", "SCRAM-SHA-512", ANY_ACL)
        for user, log_dirs in (("bob", 0), ("admin", 1)):  # DescribeLogDirs: Describe on the cluster
            with kafka_python_admin(server, user, "SCRAM-SHA-512") as client:
                assert len(client.describe_log_dirs()[0]["log_dirs"]) == log_dirs
        # DescribeProducers: Read on the topic
        with (
            kafka_python_admin(server, "bob", "SCRAM-SHA-512") as client,
            pytest.raises(KafkaTopicAuthorizationFailedError),
        ):
            client.describe_producers([KTopicPartition("t", 0)], broker_id=0)
        with kafka_python_admin(server, "admin", "SCRAM-SHA-512") as client:
            assert client.describe_producers([KTopicPartition("t", 0)], broker_id=0)[KTopicPartition("t", 0)]
        (refused,) = bob.create_acls(
            [acl(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, AclOperation.READ)]
        ).values()
        with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
            refused.result(30)
        (refused,) = bob.delete_acls([matching(ResourcePatternType.ANY)]).values()
        with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
            refused.result(30)

        admin_conf = sasl(server, "admin", PASSWORDS["admin"])
        admin = AdminClient(admin_conf)
        wanted = [  # created in order: once orders-eu is visible to alice, the group's binding is there too
            acl(ResourceType.GROUP, "billing", ResourcePatternType.LITERAL, AclOperation.READ),
            acl(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, AclOperation.READ),
            acl(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, AclOperation.READ, host="10.0.0.1"),
            acl(ResourceType.BROKER, "other", ResourcePatternType.LITERAL, AclOperation.ALTER),
        ]
        created = admin.create_acls(wanted)
        assert [created[b].result(30) for b in wanted[:2]] == [None, None]
        for refused, message in zip(
            wanted[2:], ("host must be", "the cluster's one name is 'kafka-cluster'"), strict=True
        ):
            with pytest.raises(KafkaException, match=message):  # each creation stands alone
                created[refused].result(30)
        alice = sasl(server, "alice", PASSWORDS["alice"])
        deadline = time.monotonic() + 30
        while "orders-eu" not in AdminClient(alice).list_topics(timeout=30).topics:  # Describe comes with Read
            assert time.monotonic() < deadline, "ACLs created through the admin API did not take effect"
        producer = Producer(admin_conf)
        producer.produce("orders-eu", b"for alice", partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({**alice, "group.id": "billing", "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders-eu"])
        m = consumer.poll(30)
        assert m is not None and m.error() is None and m.value() == b"for alice", m and m.error()
        consumer.commit(m, asynchronous=False)  # Read on the group
        consumer.close()

        # a Match filter: what applies to orders-eu; kafka-python reads the same bindings
        found = admin.describe_acls(matching(ResourcePatternType.MATCH, "orders-eu")).result(30)
        assert found == [wanted[1]]
        described, error = describe_acls(server, "admin", "SCRAM-SHA-256", ANY_ACL)
        assert error is KafkaNoError and len(described) == 2
        cluster_action = KAclFilter(None, None, KOperation.CLUSTER_ACTION, KPermission.ANY, ANY_ACL.resource_pattern)
        with pytest.raises(KafkaInvalidRequestError, match="ACL operation 9: kop's ACLs take All, Read"):
            describe_acls(server, "admin", "SCRAM-SHA-256", cluster_action)

        (deleted,) = admin.delete_acls([matching(ResourcePatternType.ANY, "orders-", "User:alice")]).values()
        assert deleted.result(30) == [wanted[1]]
    assert kop(root, "acls", "list").stdout.strip() == "Allow User:alice Read on Group:Literal:billing"


def test_admin_clients_manage_scram_users_and_send_no_password(root: str) -> None:
    sha256, sha512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
    secret = "carol-" + uuid.uuid4().hex

    def alter(admin: AdminClient, *changes: Any) -> None:
        (future,) = admin.alter_user_scram_credentials(list(changes)).values()
        future.result(30)

    def upsert(mechanism: ScramMechanism, iterations: int = 4096, user: str = "carol") -> Any:
        return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), secret.encode())

    def logs_in(server: KopServer, mechanism: str) -> bool:
        told: list[KafkaError] = []
        admin = AdminClient({**sasl(server, "carol", secret, mechanism), "error_cb": told.append})
        try:
            admin.list_topics(timeout=5)  # carol may describe nothing, but a login gets an answer
            return True
        except KafkaException:
            admin.poll(1)  # delivers the error callbacks
            assert authentication_failed(told), told
            return False

    conf = ["authorizationEnabled=true", "superUserRoles=User:admin"]
    with KopServer(root, conf, protocols=["SASL_PLAINTEXT"]) as server:
        bob = AdminClient(sasl(server, "bob", PASSWORDS["bob"], "SCRAM-SHA-512"))  # nothing on the cluster
        with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
            alter(bob, upsert(sha256))
        admin = AdminClient(sasl(server, "admin", PASSWORDS["admin"]))
        alter(admin, upsert(sha256, 8192), upsert(sha512))
        assert logs_in(server, "SCRAM-SHA-256") and logs_in(server, "SCRAM-SHA-512")
        (described,) = admin.describe_user_scram_credentials(["carol"]).values()
        infos = described.result(30).scram_credential_infos
        assert sorted((i.mechanism, i.iterations) for i in infos) == [(sha256, 8192), (sha512, 4096)]

        alter(admin, UserScramCredentialDeletion("carol", sha256))
        assert not logs_in(server, "SCRAM-SHA-256") and logs_in(server, "SCRAM-SHA-512")
        for refused, code in (
            (upsert(sha256, 100), "UNACCEPTABLE_CREDENTIAL"),  # Kafka's minimum is 4096 iterations
            (UserScramCredentialDeletion("carol", sha256), "RESOURCE_NOT_FOUND"),  # gone already
        ):
            with pytest.raises(KafkaException, match=code):
                alter(admin, refused)
        with pytest.raises(KafkaException, match="DUPLICATE_RESOURCE"):  # one change a mechanism, as in Kafka
            alter(admin, upsert(sha512), UserScramCredentialDeletion("carol", sha512))
        (nobody,) = admin.describe_user_scram_credentials(["nobody"]).values()
        with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND"):
            nobody.result(30)
    assert "carol\tSCRAM-SHA-512" in kop(root, "users", "list").stdout.splitlines()
    assert not any(secret.encode() in p.read_bytes() for p in Path(root).rglob("*") if p.is_file())


def test_a_v0_handshake_logs_in_with_bare_tokens(root: str) -> None:
    """SaslHandshake v0: the tokens that follow come without Kafka's request framing."""
    with KopServer(root, ["sasl.enabled.mechanisms=PLAIN"], protocols=["SASL_PLAINTEXT"]) as server:
        host, port = server.bootstrap.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            assert call(sock, wire_request(SaslHandshakeRequest, 0, mechanism="PLAIN")).error_code == 0
            token = b"\0alice\0" + PASSWORDS["alice"].encode()
            sock.sendall(struct.pack(">i", len(token)) + token)
            assert sock.recv(4) == b"\0\0\0\0"  # an empty token: logged in
            topics = call(sock, wire_request(MetadataRequest, 1, topics=None)).topics
            again = call(sock, wire_request(SaslHandshakeRequest, 1, mechanism="PLAIN"))
            assert again.error_code == 34  # ILLEGAL_SASL_STATE: no second login on a connection
            assert sock.recv(4) == b""  # and the connection is closed
        assert {t[1] for t in topics} >= {"t", "orders-eu"}
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            call(sock, wire_request(SaslHandshakeRequest, 0, mechanism="PLAIN"))
            token = b"\0alice\0wrong"
            sock.sendall(struct.pack(">i", len(token)) + token)
            assert sock.recv(4) == b""  # refused: the connection is closed


def test_tls_settings_are_checked_by_name(pki: Pki, tmp_path) -> None:
    base = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "",
        "ssl.keystore.key": pki.server_key_pem,
        "ssl.keystore.certificate.chain": pki.server_chain_pem,
        "ssl.key.password": "",
        "ssl.client.auth": "none",
        "ssl.truststore.location": "",
    }
    assert server_context(base) is not None  # the PEM text itself, as KIP-651 allows
    assert not list(tmp_path.iterdir())
    with pytest.raises(ConfigError, match=re.escape("ssl.keystore.location=/nowhere.pem")):
        server_context({**base, "ssl.keystore.location": "/nowhere.pem"})
    with pytest.raises(ConfigError, match=re.escape("needs ssl.keystore.location")):
        server_context({**base, "ssl.keystore.key": ""})
    with pytest.raises(ConfigError, match=re.escape("ssl.client.auth=required needs ssl.truststore.location")):
        server_context({**base, "ssl.client.auth": "required"})
    subject = ((("organizationName", "kop"),), (("commonName", "client, the first"),))
    assert certificate_principal({"subject": subject}) == "User:CN=client\\, the first,O=kop"
    assert certificate_principal({}) is None


@settings(max_examples=300, deadline=None)
@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_scram_logins_refuse_any_malformed_message_cleanly(first: bytes, final: bytes) -> None:
    """Whatever a client sends, a login fails with SaslAuthenticationError and nothing else."""
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    server = ScramServer("SCRAM-SHA-256", lambda user, mechanism: credential if user == "u" else None)
    for message in (b"n,,n=u,r=abc" if first[:1] == b"\0" else first, final):
        try:
            server.step(message)
        except SaslAuthenticationError:
            return
    assert server.user is None or final.startswith(b"c=biws,r=abc")


def test_listeners_of_every_protocol_parse_and_a_bad_one_is_named() -> None:
    parsed = parse_listeners("PLAINTEXT://127.0.0.1:9092, sasl_ssl://:9094,SSL://[::1]:9093,SASL_PLAINTEXT://h:0")
    assert [str(listener) for listener in parsed] == [
        "PLAINTEXT://127.0.0.1:9092",
        "SASL_SSL://0.0.0.0:9094",
        "SSL://[::1]:9093",
        "SASL_PLAINTEXT://h:0",
    ]
    for bad, says in (("GSSAPI://h:1", "GSSAPI is not supported"), ("h:1", "is not PROTOCOL://host:port"),
                      ("SSL://h", "needs a port")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"kafkaListeners: '{bad}'.*{says}"):
            parse_listeners(bad)


def test_consumer_protocol_members_take_read_on_their_group_and_see_only_topics_they_may_describe(root: str) -> None:
    for args in (("--topic", "t"), ("--topic", "orders-eu"), ("--group", "billing")):
        assert kop(root, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read", *args).returncode == 0
    described_only = ("--operation", "Describe", "--group", "described")  # found, but not joined
    assert kop(root, "acls", "add", "--allow-principal", "User:alice", *described_only).returncode == 0
    conf = ["authorizationEnabled=true", "sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN"]
    with KopServer(root, conf, protocols=["SASL_PLAINTEXT"]) as server:
        alice = sasl(server, "alice", PASSWORDS["alice"])
        admin = AdminClient(alice)

        def member_error(group: str, *subscription: str) -> tuple[KafkaError | None, set[str]]:
            """The first error the member is told, or what it is assigned once it is."""
            consumer = Consumer({**alice, "group.id": group, "group.protocol": "consumer"})
            consumer.subscribe(list(subscription))
            deadline = time.monotonic() + 30
            try:
                while time.monotonic() < deadline:
                    m = consumer.poll(0.1)
                    if m is not None and m.error() is not None:
                        return m.error(), set()
                    if consumer.assignment():  # and the server assigned it no more than it sees
                        (future,) = admin.describe_consumer_groups([group]).values()
                        (described,) = future.result(30).members
                        assert {tp.topic for tp in described.assignment.topic_partitions} == {
                            tp.topic for tp in consumer.assignment()
                        }
                        return None, {tp.topic for tp in consumer.assignment()}
                raise AssertionError(f"neither an error nor an assignment for {group!r}")
            finally:
                consumer.close()

        assert member_error("billing", "^.*") == (None, {"t", "orders-eu"})  # not orders-secret nor other
        for group, subscription, refusal in (
            ("other-group", ["t"], KafkaError.GROUP_AUTHORIZATION_FAILED),  # FindCoordinator refuses
            ("described", ["t"], KafkaError._FATAL),  # the heartbeat refuses: librdkafka gives up
            ("billing", ["t", "orders-secret"], KafkaError.TOPIC_AUTHORIZATION_FAILED),
        ):
            error, owned = member_error(group, *subscription)
            assert error is not None and error.code() == refusal and not owned, error
            assert "authorization failed" in error.str()
        (described,) = admin.describe_consumer_groups(["other-group"]).values()
        with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
            described.result(30)  # FindCoordinator refuses it first: ConsumerGroupDescribe by hand
        host, port = server.bootstrap.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            plain_login(sock, "alice")
            request = request_class(69, 0)(group_ids=("billing", "other-group"), include_authorized_operations=False)
            groups = kio_call(sock, request).groups
            assert [g.error_code for g in groups] == [
                ErrorCode.group_id_not_found,
                ErrorCode.group_authorization_failed,
            ]
