"""Share groups (KIP-932) over the wire, with librdkafka's share consumer: consumers sharing one
partition get each record once; a record released comes again, one rejected never does; a killed
consumer's records go to another once their lock expires; accepted records stay accepted through
a restart of the server, and records held then are delivered again."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import subprocess
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DeleteGroupsRequest, ListGroupsRequest
from kio.schema.alter_share_group_offsets.v0 import request as aso
from kio.schema.delete_share_group_offsets.v0 import request as dsgo
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.describe_share_group_offsets.v1 import request as dso
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.share_acknowledge.v1 import request as sa
from kio.schema.share_fetch.v1 import request as sf

from kop_spark import Broker, layout
from kop_spark.config import Config
from kop_spark.kafka.messages import request_class
from kop_spark.kafka.share_groups import ShareGroupCoordinator

from .conftest import PYTHON, python_subprocess_env
from .group_clients import until_live
from .kafka_wire import call, connect, kio_call, wire_request
from .kop_server import KopServer
from .test_cli import kop
from .test_kafka_consumer_protocol import _classic_join, _consumer_join
from .test_kafka_groups import ANY_CHARACTERS

LOCK_MS = 2000
CONF = [
    "share.auto.offset.reset=earliest",
    f"group.share.record.lock.duration.ms={LOCK_MS}",
    "group.share.heartbeat.interval.ms=500",
    "group.share.delivery.count.limit=3",
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[KopServer]:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 1)
    with KopServer(root, CONF) as s:
        yield s


@pytest.fixture
def share_consumer(server: KopServer) -> Iterator[Callable[..., ShareConsumer]]:
    made: list[ShareConsumer] = []

    def make(**extra: Any) -> ShareConsumer:
        made.append(ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": "sg", **extra}))
        made[-1].subscribe(["t"])
        return made[-1]

    yield make
    for c in made:
        with contextlib.suppress(Exception):  # closed by the test
            c.close()


def _produce(server: KopServer, n: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(start, start + n):
        p.produce("t", value=f"{i}".encode(), partition=0)
    assert p.flush(30) == 0


def _poll_until(consumers: list[ShareConsumer], done: Callable[[list[Any]], bool], timeout: float = 30) -> list[Any]:
    """Polls each consumer in turn until ``done(messages so far)``; (consumer index, message) each."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"not done within {timeout} s: {len(got)} messages"
        for i, c in enumerate(consumers):
            got += [(i, m) for m in c.poll(0.2) or [] if m.error() is None]
    return got


def _kept(server: KopServer) -> dict[str, Any]:
    """The share group's state of t-0 as the server keeps it."""
    with Broker(server.root) as b:
        value = b.store.get(layout.share_partition_key("sg", "t", 0)).value
    assert value is not None
    return value


def _until_all_done(server: KopServer, end: int) -> None:
    deadline = time.monotonic() + 30
    while (kept := _kept(server))["start_offset"] != end:
        assert time.monotonic() < deadline, f"not every record was acknowledged: {kept}"
        time.sleep(0.05)


def test_consumers_sharing_a_partition_get_each_record_once(
    server: KopServer, share_consumer: Callable[..., ShareConsumer]
) -> None:
    first, second = (share_consumer(**{"max.poll.records": 5}) for _ in range(2))  # ShareFetch max_records
    _produce(server, 200)
    got = _poll_until([first, second], lambda got: len(got) >= 200)
    offsets = [m.offset() for _, m in got]
    assert sorted(offsets) == list(range(200))  # each once, none twice
    assert {i for i, _ in got} == {0, 1}  # both had a share of the one partition
    assert all(m.delivery_count() == 1 for _, m in got)
    for c in (first, second):
        c.commit_sync()  # implicit acknowledgement: what each polled is accepted
    _until_all_done(server, 200)


def test_a_member_subscribing_by_a_full_name_gets_the_topics_records(server: KopServer) -> None:
    """As a consumer group's: a subscription to ``public/default/t`` is one to ``t``."""
    consumer = ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": "sg"})
    try:
        consumer.subscribe(["public/default/t"])
        _produce(server, 10)
        assert sorted(m.offset() for _, m in _poll_until([consumer], lambda got: len(got) >= 10)) == list(range(10))
    finally:
        consumer.close()


def test_members_split_the_partitions_and_share_them_only_when_they_outnumber_them(tmp_path: Path) -> None:
    """Kafka's simple assignor: two members of a four-partition topic take two partitions each and
    read only from them; a third takes one from whoever had two."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 4)
    with KopServer(root, CONF) as server:
        consumers = []
        for _ in range(2):
            consumers.append(ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": "sg"}))
            consumers[-1].subscribe(["t"])
        try:
            halves = _assigned(server, consumers, [2, 2])
            p = Producer({"bootstrap.servers": server.bootstrap})
            got = []
            for _ in range(2):  # a member may still fetch from a partition it had, until it takes the news in
                for i in range(40):
                    p.produce("t", value=f"{i}".encode(), partition=i % 4)
                assert p.flush(30) == 0
                got = _poll_until(consumers, lambda got: len(got) == 40)
                assert len({(m.partition(), m.offset()) for _, m in got}) == 40
            read_by = [{m.partition() for i, m in got if i == c} for c in range(2)]
            assert sorted(map(sorted, read_by)) == sorted(sorted(p for _, p in half) for half in halves.values())
            consumers.append(ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": "sg"}))
            consumers[-1].subscribe(["t"])
            thirds = _assigned(server, consumers, [1, 1, 2])
            kept = sum(len(set(halves[member]) & set(thirds[member])) for member in halves)
            assert kept == 3  # one partition moved, to the new member
        finally:
            for c in consumers:
                c.close()


def _assigned(server: KopServer, consumers: list[ShareConsumer], sizes: list[int]) -> dict[str, tuple[Any, ...]]:
    """Until the group's members have partitions in these numbers, all of t's and none twice;
    each member's, by its id."""
    deadline = time.monotonic() + 30
    with Broker(server.root) as b:
        while True:
            live = b.live_groups.get("sg")
            assigned = {m.member_id: m.partitions for m in live.members} if live else {}
            every = [tp for partitions in assigned.values() for tp in partitions]
            if sorted(map(len, assigned.values())) == sizes and sorted(every) == [("t", p) for p in range(4)]:
                return assigned
            assert time.monotonic() < deadline, f"members never had {sizes} partitions: {assigned}"
            for c in consumers:
                c.poll(0.1)


def test_a_released_record_comes_again_and_a_rejected_one_never(
    server: KopServer, share_consumer: Callable[..., ShareConsumer]
) -> None:
    c = share_consumer(**{"share.acknowledgement.mode": "explicit"})
    _produce(server, 3)
    (got,) = [_poll_until([c], lambda got: len(got) == 3)]
    for _, m in got:
        kind = {0: AcknowledgeType.ACCEPT, 1: AcknowledgeType.RELEASE, 2: AcknowledgeType.REJECT}[m.offset()]
        c.acknowledge(m, kind)
    c.commit_sync()
    again = _poll_until([c], lambda got: len(got) >= 1)
    assert [(m.offset(), m.delivery_count()) for _, m in again] == [(1, 2)]
    c.acknowledge(again[0][1], AcknowledgeType.ACCEPT)
    c.commit_sync()
    _until_all_done(server, 3)


_HOLDER = textwrap.dedent(
    """
    import json, sys
    from confluent_kafka import ShareConsumer
    c = ShareConsumer(json.loads(sys.argv[1]))
    c.subscribe(["t"])
    while True:
        got = [m for m in c.poll(0.2) or [] if m.error() is None]
        if got:
            print(json.dumps([m.offset() for m in got]), flush=True)
            while True:
                c.poll(0.2)  # it holds them, never acknowledging (explicit mode)
    """
)


def test_a_killed_consumers_records_go_to_another_once_their_lock_expires(
    server: KopServer, share_consumer: Callable[..., ShareConsumer]
) -> None:
    _produce(server, 20)
    conf = {"bootstrap.servers": server.bootstrap, "group.id": "sg", "share.acknowledgement.mode": "explicit"}
    holder = subprocess.Popen(
        [PYTHON, "-c", _HOLDER, json.dumps(conf)], stdout=subprocess.PIPE, text=True, env=python_subprocess_env()
    )
    try:
        assert holder.stdout is not None
        held = json.loads(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()
    assert held
    survivor = share_consumer()
    got = _poll_until([survivor], lambda got: {m.offset() for _, m in got} >= set(range(20)))
    redelivered = {m.offset(): m.delivery_count() for _, m in got if m.offset() in held}
    assert redelivered == dict.fromkeys(held, 2)  # delivered a second time, after the lock


@pytest.mark.parametrize(("stop", "group"), [("kill", "sg"), ("stop", ANY_CHARACTERS)])
def test_accepted_records_stay_accepted_through_a_restart_and_held_ones_come_again(
    server: KopServer, share_consumer: Callable[..., ShareConsumer], stop: str, group: str
) -> None:
    holder = share_consumer(**{"share.acknowledgement.mode": "explicit", "group.id": group})
    _produce(server, 10)
    held: list[int] = []
    deadline = time.monotonic() + 30
    while not held:  # it accepts 0-5, and holds the rest of the poll that reaches 6
        assert time.monotonic() < deadline, "records 6 and on never came"
        for m in holder.poll(0.2) or []:
            if m.offset() < 6:
                holder.acknowledge(m, AcknowledgeType.ACCEPT)
            else:
                held.append(m.offset())
    holder.commit_sync()  # the acceptances, kept before they are answered
    if stop == "kill":
        server.kill()
    else:
        assert server.stop() == 0
    server.start()
    _produce(server, 5, start=10)
    other = share_consumer(**{"group.id": group})
    got = _poll_until([other], lambda got: {m.offset() for _, m in got} >= set(range(6, 15)), timeout=60)
    assert min(m.offset() for _, m in got) == 6  # nothing accepted came again
    again = {m.offset(): m.delivery_count() for _, m in got if m.offset() in held}
    assert again == dict.fromkeys(held, 2)  # held at the restart: delivered again, counted


@pytest.mark.parametrize("stop", ["kill", "stop"])
def test_members_go_on_through_a_restart_at_the_epochs_they_were_told(server: KopServer, stop: str) -> None:
    """As Kafka keeps a share group's members in its records: a restarted server knows them, and
    their next heartbeats go on where they were, with no joining again."""
    heartbeat = request_class(76, 1)
    with connect(server) as sock:
        first = kio_call(sock, heartbeat(group_id="kept", member_id="a", member_epoch=0, subscribed_topic_names=("t",)))
        b = kio_call(sock, heartbeat(group_id="kept", member_id="b", member_epoch=0, subscribed_topic_names=("t",)))
        a = kio_call(sock, heartbeat(group_id="kept", member_id="a", member_epoch=first.member_epoch))
    assert a.member_epoch == b.member_epoch > first.member_epoch  # a was told of b's joining
    if stop == "kill":
        server.kill()
    else:
        assert server.stop() == 0
    server.start()
    with connect(server) as sock:
        described = kio_call(sock, request_class(77, 1)(group_ids=("kept",), include_authorized_operations=False))
        assert sorted(m.member_id for m in described.groups[0].members) == ["a", "b"]
        for member, told in (("a", a), ("b", b)):
            steady = kio_call(sock, heartbeat(group_id="kept", member_id=member, member_epoch=told.member_epoch))
            assert (steady.error_code, steady.member_epoch) == (ErrorCode.none, told.member_epoch)


def test_a_share_group_is_served_by_one_of_two_servers_over_a_store_at_a_time(server: KopServer) -> None:
    """As consumer groups: a member that comes to a second server while the group has members on
    the first is refused there, naming the first, and is taken in once the group is free."""
    heartbeat = request_class(76, 1)
    with KopServer(server.root, CONF) as other, connect(server) as here, connect(other) as there:
        kio_call(here, heartbeat(group_id="s", member_id="a", member_epoch=0, subscribed_topic_names=("t",)))
        until_live(server, 1, "s")
        joining = heartbeat(group_id="s", member_id="b", member_epoch=0, subscribed_topic_names=("t",))
        refused = kio_call(there, joining)
        assert refused.error_code == ErrorCode.not_coordinator
        assert refused.error_message == f"group 's' is served by the kop serve at PLAINTEXT://{server.bootstrap}"
        found = kio_call(there, request_class(10, 3)(key="s", key_type=0))
        assert (found.error_code, found.error_message) == (ErrorCode.coordinator_not_available, refused.error_message)
        kio_call(here, heartbeat(group_id="s", member_id="a", member_epoch=-1))  # leaves: the group is free
        until_live(server, 0, "s")
        assert kio_call(there, joining).error_code == ErrorCode.none


def test_a_member_kept_through_a_restart_that_never_comes_back_leaves_after_its_session_timeout(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 1)
    heartbeat = request_class(76, 1)
    with KopServer(root, [*CONF, "group.share.session.timeout.ms=1000"]) as server:
        with connect(server) as sock:
            kio_call(sock, heartbeat(group_id="gone", member_id="m", member_epoch=0, subscribed_topic_names=("t",)))
        server.kill()
        server.start()
        with connect(server) as sock:

            def members() -> list[str]:
                described = kio_call(
                    sock, request_class(77, 1)(group_ids=("gone",), include_authorized_operations=False)
                )
                return [m.member_id for m in described.groups[0].members]

            assert members() == ["m"]
            deadline = time.monotonic() + 30
            while members():
                assert time.monotonic() < deadline, "the member kept through the restart never left"
                time.sleep(0.05)


def test_a_share_group_is_listed_deleted_as_one_and_refuses_members_of_the_other_protocols(
    server: KopServer, share_consumer: Callable[..., ShareConsumer]
) -> None:
    c = share_consumer()
    _produce(server, 1)
    _poll_until([c], lambda got: len(got) == 1)

    def listed(sock: Any) -> list[tuple[str, str, str]]:
        groups = call(sock, wire_request(ListGroupsRequest, 5, states_filter=[], types_filter=["Share"])).groups
        return [(g.group_id, g.group_type, g.group_state) for g in groups]

    with connect(server) as sock:
        assert listed(sock) == [("sg", "share", "Stable")]
        assert call(sock, _classic_join("sg")).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
        assert kio_call(sock, _consumer_join("sg")).error_code == ErrorCode.group_id_not_found
        deleting = wire_request(DeleteGroupsRequest, 2, groups_names=["sg"])
        assert call(sock, deleting).results[0].error_code == 68  # NON_EMPTY_GROUP
    c.commit_sync()
    c.close()
    until_live(server, 0, "sg")
    with connect(server) as sock:
        assert listed(sock) == [("sg", "share", "Empty")]  # its states kept: a share group still
        assert call(sock, deleting).results[0].error_code == 0  # kafka-share-groups --delete
        assert listed(sock) == []
    assert _kop_share_groups(server, "list").stdout.split() == []


def _alter_group(sock: Any, group: str, name: str, value: str | None, op: int = 0) -> Any:
    change = iac.AlterableConfig(name=name, config_operation=op, value=value)
    resource = iac.AlterConfigsResource(resource_type=32, resource_name=group, configs=(change,))
    (answer,) = kio_call(sock, iac.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)).responses
    return answer


def test_a_groups_own_share_auto_offset_reset_is_set_with_kafka_configs(tmp_path: Path) -> None:
    """``kafka-configs --entity-type groups --entity-name sg --alter --add-config
    share.auto.offset.reset=earliest``: the group reads what was there before it, where the
    server's default (latest) would start at the end."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 1)
    with KopServer(root) as server:
        _produce(server, 5)
        with connect(server) as sock:
            assert _alter_group(sock, "sg", "share.auto.offset.reset", "earliest").error_code == ErrorCode.none
            bad = _alter_group(sock, "sg", "share.auto.offset.reset", "sometime")
            assert bad.error_code == ErrorCode.invalid_config and "share.auto.offset.reset" in bad.error_message
            unknown = _alter_group(sock, "sg", "retention.ms", "1")
            assert unknown.error_code == ErrorCode.invalid_config and "'retention.ms'" in unknown.error_message
            asked = dc.DescribeConfigsResource(resource_type=32, resource_name="sg", configuration_keys=None)
            (described,) = kio_call(sock, dc.DescribeConfigsRequest(resources=(asked,))).results
            assert [(c.name, c.value, c.config_source) for c in described.configs] == [
                ("share.auto.offset.reset", "earliest", 8)  # GROUP_CONFIG
            ]
        c = ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": "sg"})
        c.subscribe(["t"])
        got = _poll_until([c], lambda got: len(got) == 5)
        assert sorted(m.offset() for _, m in got) == list(range(5))
        c.commit_sync()
        c.close()


def _kop_share_groups(server: KopServer, *args: str) -> Any:
    return kop(server.root, "share-groups", *args)


def test_kop_share_groups_describes_resets_and_deletes_an_inactive_group(
    server: KopServer, share_consumer: Callable[..., ShareConsumer]
) -> None:
    c = share_consumer()
    _produce(server, 10)
    _poll_until([c], lambda got: len(got) == 10)
    c.commit_sync()
    _until_all_done(server, 10)
    _produce(server, 5, start=10)
    assert _kop_share_groups(server, "list").stdout.split() == ["sg"]
    described = _kop_share_groups(server, "describe", "sg", "--output", "json")
    assert json.loads(described.stdout) == [{"group": "sg", "topic": "t", "partition": 0, "start_offset": 10, "lag": 5}]
    until_live(server, 1, "sg", partitions=1)
    (state,) = json.loads(_kop_share_groups(server, "describe", "sg", "--state", "--output", "json").stdout)
    assert (state["coordinator"].split()[0], state["strategy"], state["state"], state["members"]) == (
        f"PLAINTEXT://{server.bootstrap}",
        "simple",
        "Stable",
        1,
    )
    (member,) = json.loads(_kop_share_groups(server, "describe", "sg", "--members", "--output", "json").stdout)
    assert (member["partitions"], member["assignment"]) == (1, "t(0)")
    assert _kop_share_groups(server, "list", "--state").stdout.split() == ["GROUP", "STATE", "sg", "Stable"]
    assert _kop_share_groups(server, "describe", "--state", "sg").returncode == 0  # the group after --state
    refused = _kop_share_groups(server, "reset-offsets", "sg", "--all-topics", "--to-earliest", "--execute")
    assert refused.returncode != 0 and "is not empty" in refused.stderr
    c.close()
    until_live(server, 0, "sg")
    assert "Share group 'sg' has no active members." in _kop_share_groups(server, "describe", "sg", "--members").stdout
    reset = _kop_share_groups(server, "reset-offsets", "sg", "--all-topics", "--to-earliest", "--execute")
    assert reset.returncode == 0, reset.stderr
    again = share_consumer()
    got = _poll_until([again], lambda got: len(got) == 15)  # from the start again
    assert sorted(m.offset() for _, m in got) == list(range(15))
    again.close()
    until_live(server, 0, "sg")
    assert _kop_share_groups(server, "delete", "sg").returncode == 0
    assert _kop_share_groups(server, "list").stdout.split() == []
    missing = _kop_share_groups(server, "describe", "sg")
    assert missing.returncode != 0 and "Share group 'sg' does not exist." in missing.stderr


def test_share_consumers_take_read_on_their_group_and_on_the_topics(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        for topic in ("t", "secret", "seen"):
            b.create_topic(topic, 1)
    assert kop(root, "users", "add", "alice", stdin="alice-Secret-1").returncode == 0
    grants = [("Read", "--topic", "t"), ("Read", "--group", "queue"), ("Describe", "--topic", "seen")]
    for operation, *resource in grants:
        made = kop(root, "acls", "add", "--allow-principal", "User:alice", "--operation", operation, *resource)
        assert made.returncode == 0, made.stderr
    for topic in ("t", "secret", "seen"):
        assert kop(root, "produce", topic, stdin="a\nb\n").returncode == 0
    conf = ["authorizationEnabled=true", "share.auto.offset.reset=earliest"]
    with KopServer(root, conf, protocols=["SASL_PLAINTEXT"]) as server:
        alice = {
            "bootstrap.servers": server.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "alice-Secret-1",
        }

        def first(group: str, topic: str) -> str:
            """What a share consumer of ``group`` on ``topic`` gets first: a value, or an error."""
            c = ShareConsumer({**alice, "group.id": group})
            c.subscribe([topic])
            deadline = time.monotonic() + 15
            try:
                while time.monotonic() < deadline:
                    try:
                        for m in c.poll(0.3) or []:
                            return m.value().decode() if m.error() is None else m.error().name()
                    except KafkaException as e:
                        return e.args[0].name()
                return "nothing"
            finally:
                c.close()

        assert first("queue", "t") == "a"
        assert first("other", "t") == "GROUP_AUTHORIZATION_FAILED"
        assert first("queue", "secret") == "TOPIC_AUTHORIZATION_FAILED"
        assert first("queue", "seen") in ("TOPIC_AUTHORIZATION_FAILED", "nothing")  # described, never read


_offsets = st.integers(-3, 40) | st.sampled_from([2**62, -(2**62)])
_batches = st.lists(
    st.builds(
        sf.AcknowledgementBatch,
        first_offset=_offsets,
        last_offset=_offsets,
        acknowledge_types=st.lists(st.integers(-1, 5), max_size=4).map(tuple),
    ),
    max_size=3,
).map(tuple)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["fetch", "ack"]), st.sampled_from(["next", "next", "open", "close", "wrong"]), _batches
        ),
        min_size=1,
        max_size=5,
    )
)
def test_any_acknowledgements_and_session_epochs_are_answered_and_change_only_what_they_may(
    server: KopServer, steps: list[tuple[str, str, tuple[Any, ...]]]
) -> None:
    """A member's requests with whatever acknowledgement batches, in sessions opened, moved on,
    closed or named wrongly: each is answered with Kafka's codes, and the server goes on."""
    member = uuid.uuid4().hex
    with Broker(server.root) as b:
        topic_id = next(t.topic_id for t in b.topic_infos() if t.name == "t")
    _produce(server, 5)
    session = 0
    with connect(server) as sock:
        joined = kio_call(
            sock, request_class(76, 1)(group_id="fz", member_id=member, member_epoch=0, subscribed_topic_names=("t",))
        )
        assert joined.error_code == ErrorCode.none
        for kind, which, batches in steps:
            epoch = {"next": session, "open": 0, "close": -1, "wrong": session + 7}[which]
            topics = (
                sf.FetchTopic(
                    topic_id=topic_id,
                    partitions=(sf.FetchPartition(partition_index=0, acknowledgement_batches=batches),),
                ),
            )
            if kind == "fetch":
                request = sf.ShareFetchRequest(
                    group_id="fz",
                    member_id=member,
                    share_session_epoch=epoch,
                    max_wait=datetime.timedelta(0),
                    min_bytes=1,
                    max_records=3,
                    batch_size=3,
                    topics=topics,
                    forgotten_topics_data=(),
                )
            else:
                acks = (
                    sa.AcknowledgeTopic(
                        topic_id=topic_id,
                        partitions=(sa.AcknowledgePartition(partition_index=0, acknowledgement_batches=batches),),
                    ),
                )
                request = sa.ShareAcknowledgeRequest(
                    group_id="fz", member_id=member, share_session_epoch=epoch, topics=acks
                )
            answer = kio_call(sock, request)
            if answer.error_code == ErrorCode.none:
                session = 0 if epoch == -1 else epoch + 1
            assert answer.error_code in (
                ErrorCode.none,
                ErrorCode.invalid_request,
                ErrorCode.share_session_not_found,
                ErrorCode.invalid_share_session_epoch,
            )
            for t in answer.responses:
                for p in t.partitions:
                    ack = getattr(p, "acknowledge_error_code", p.error_code)
                    assert ack in (ErrorCode.none, ErrorCode.invalid_request, ErrorCode.invalid_record_state)
        kio_call(
            sock, request_class(76, 1)(group_id="fz", member_id=member, member_epoch=-1, subscribed_topic_names=None)
        )
    with connect(server) as sock:
        assert call(sock, wire_request(ListGroupsRequest, 5, states_filter=[], types_filter=[])).error_code == 0


def test_admin_clients_describe_a_share_group_its_members_and_its_offsets(
    server: KopServer, share_consumer: Callable[..., ShareConsumer]
) -> None:
    """SHARE_GROUP_DESCRIBE and DESCRIBE_SHARE_GROUP_OFFSETS, which kafka-share-groups --describe
    (--members) asks: the member with its subscription and assignment, then each partition's start
    offset and lag, as ``kop share-groups describe`` shows them."""
    c = share_consumer(**{"client.id": "worker", "share.acknowledgement.mode": "explicit"})
    _produce(server, 10)
    accepted: set[int] = set()
    deadline = time.monotonic() + 30
    while accepted != set(range(1, 10)):  # 0 released each time it comes: the start stays at 0
        assert time.monotonic() < deadline, f"accepted {sorted(accepted)}"
        for m in c.poll(0.2) or []:
            c.acknowledge(m, AcknowledgeType.RELEASE if m.offset() == 0 else AcknowledgeType.ACCEPT)
            accepted |= {m.offset()} - {0}
        c.commit_sync()
    _produce(server, 4, start=10)
    with connect(server) as sock:
        described = kio_call(
            sock, request_class(77, 1)(group_ids=("sg", "nobody"), include_authorized_operations=False)
        )
        group, nobody = described.groups
        assert (group.error_code, group.group_state, nobody.error_code) == (0, "Stable", ErrorCode.group_id_not_found)
        (member,) = group.members
        assert (member.client_id, member.subscribed_topic_names) == ("worker", ("t",))
        assert [(t.topic_name, t.partitions) for t in member.assignment.topic_partitions] == [("t", (0,))]
        for version in (0, 1):
            asked = request_class(90, version)(
                groups=(dso.DescribeShareGroupOffsetsRequestGroup(group_id="sg", topics=None),)
            )
            (answer,) = kio_call(sock, asked).groups
            (topic,) = answer.topics
            (p,) = topic.partitions
            assert (topic.topic_name, p.partition_index, p.start_offset) == ("t", 0, 0)
            assert getattr(p, "lag", 5) == 5  # v1 adds the lag: 0 and 10-13, not the 9 accepted
    c.close()
    until_live(server, 0, "sg")
    with connect(server) as sock:
        (empty,) = kio_call(sock, request_class(77, 1)(group_ids=("sg",), include_authorized_operations=False)).groups
        assert (empty.error_code, empty.group_state, empty.members) == (0, "Empty", ())


def test_admin_clients_reset_and_delete_an_inactive_share_groups_offsets(
    server: KopServer, share_consumer: Callable[..., ShareConsumer]
) -> None:
    """ALTER_SHARE_GROUP_OFFSETS and DELETE_SHARE_GROUP_OFFSETS (kafka-share-groups
    --reset-offsets --execute, --delete-offsets): refused while the group has members; then the
    group starts where it was told, or where share.auto.offset.reset says."""
    c = share_consumer()
    _produce(server, 6)
    _poll_until([c], lambda got: len(got) == 6)
    c.commit_sync()
    _until_all_done(server, 6)

    def reset(offset: int) -> Any:
        topic = aso.AlterShareGroupOffsetsRequestTopic(
            topic_name="t",
            partitions=(aso.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=offset),),
        )
        with connect(server) as sock:
            return kio_call(sock, aso.AlterShareGroupOffsetsRequest(group_id="sg", topics=(topic,)))

    assert reset(2).error_code == ErrorCode.non_empty_group
    c.close()
    until_live(server, 0, "sg")
    (beyond,) = reset(99).responses[0].partitions
    assert beyond.error_code == ErrorCode.offset_out_of_range and "0 to 6" in beyond.error_message
    answer = reset(2)
    assert (answer.error_code, answer.responses[0].partitions[0].error_code) == (0, 0)
    again = share_consumer()
    got = _poll_until([again], lambda got: len(got) == 4)
    assert sorted(m.offset() for _, m in got) == [2, 3, 4, 5]  # from the start it was told
    again.commit_sync()
    again.close()
    until_live(server, 0, "sg")
    with connect(server) as sock:
        deleted = kio_call(
            sock,
            dsgo.DeleteShareGroupOffsetsRequest(
                group_id="sg", topics=(dsgo.DeleteShareGroupOffsetsRequestTopic(topic_name="t"),)
            ),
        )
    assert (deleted.error_code, deleted.responses[0].error_code) == (0, 0)
    assert _kop_share_groups(server, "list").stdout.split() == []  # it starts again from share.auto.offset.reset


def test_a_member_joining_again_is_told_its_assignment_again(server: KopServer) -> None:
    """As after a heartbeat answer lost: the member joins again (epoch 0) and must learn its
    partitions, though they have not changed."""
    heartbeat = request_class(76, 1)
    with connect(server) as sock:
        for _ in range(2):
            joined = kio_call(
                sock, heartbeat(group_id="again", member_id="m", member_epoch=0, subscribed_topic_names=("t",))
            )
            assert joined.error_code == ErrorCode.none and joined.assignment is not None
            assert [t.partitions for t in joined.assignment.topic_partitions] == [(0,)]
        steady = kio_call(sock, heartbeat(group_id="again", member_id="m", member_epoch=joined.member_epoch))
        assert steady.error_code == ErrorCode.none and steady.assignment is None  # unchanged: not repeated
        kio_call(sock, heartbeat(group_id="again", member_id="m", member_epoch=-1))


def test_leaving_a_group_one_was_never_in_leaves_no_group_behind(server: KopServer) -> None:
    with connect(server) as sock:
        left = kio_call(sock, request_class(76, 1)(group_id="ghost", member_id="nobody", member_epoch=-1))
        assert left.error_code == ErrorCode.none
        described = kio_call(sock, request_class(77, 1)(group_ids=("ghost",), include_authorized_operations=False))
        assert described.groups[0].error_code == ErrorCode.group_id_not_found


def test_what_a_share_member_is_told_is_published_as_it_is_told() -> None:
    """``kop groups`` shows each member's partitions from the group's published entry. A member
    is told them after its heartbeat is taken (the topics are read between), so an entry published
    on the heartbeat alone showed it with none until the next refresh, 10 s later."""
    changed: list[str] = []

    async def nothing(*_: Any) -> None:
        return None

    async def session() -> None:
        coordinator = ShareGroupCoordinator(Config(), nothing, nothing, nothing, lambda: 0, changed.append)
        member = coordinator.heartbeat("sg", "m", 0, ["t"], ("client", "127.0.0.1"))
        assert changed == ["sg"]
        assigned = coordinator.assignment("sg", member, lambda topic: 2)
        coordinator.told("sg", member, assigned)
        assert changed == ["sg", "sg"] and coordinator.live("sg").members[0].partitions == (("t", 0), ("t", 1))
        coordinator.told("sg", member, assigned)  # told again the same: nothing new to show
        assert changed == ["sg", "sg"]
        coordinator.give_up("sg")

    asyncio.run(session())
