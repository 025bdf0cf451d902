"""What every handler works with: the Broker (whose calls block, so they run on worker threads,
where concurrent appends to one partition are grouped into one write and one CAS), the address
clients are told, and the signal that wakes parked fetches when this server appends."""

from __future__ import annotations

import asyncio
import base64
import functools
import socket
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from .. import layout
from ..broker import Broker, GroupConfigs, GroupServer, GroupSnapshots, LiveGroup, ShareStates, Snapshot
from ..broker.acls import CLUSTER
from ..errors import InvalidTopicError
from .authorization import REFUSALS, Authorization
from .classic_members import PROTOCOL_TYPE, ClassicMembers
from .consumer_group import ConsumerGroup
from .consumer_group_coordinator import ConsumerGroupCoordinator
from .event_wait import wait_set
from .group import Group, GroupState
from .group_membership import GroupMembership
from .group_publisher import GroupPublisher, snapshot
from .group_servers import GroupServers
from .listeners import Listener
from .messages import RequestHeader
from .metrics import ServerMetrics
from .sasl import Validate
from .session import ANONYMOUS
from .share_groups import ShareGroup, ShareGroupCoordinator
from .transaction_coordinator import TransactionCoordinator

T = TypeVar("T")
R = TypeVar("R")

NODE_ID = 0  # one node leads every partition and is controller and coordinator


class Appends:
    """Wakes fetches parked on this server when it appends: a new event per round, set and replaced."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        await wait_set(self._event, timeout_s)


def _listed_names(broker: Broker) -> Callable[[str], str]:
    """The name each spelling of a topic is listed under (a name that is no topic name, as given)."""

    @functools.lru_cache(maxsize=4096)
    def listed(topic: str) -> str:
        try:
            return broker.admin.listed_name(topic)
        except InvalidTopicError:
            return topic

    return listed


class ServerContext:
    def __init__(
        self,
        broker: Broker,
        advertised: dict[str, Listener],
        tokens: Validate | None = None,
        workers: int = 32,
        bound: Sequence[Listener] = (),
    ):
        """``tokens``: checks OAUTHBEARER logins' tokens, where that mechanism is enabled;
        ``bound``: the listeners, which with the host name tell this server from others on the
        store, and from none it was before a restart (``group_servers``)."""
        self.broker = broker
        self.tokens = tokens
        self._advertised = advertised
        self.cluster_id = cluster_id_of(broker.root)
        config = broker.config
        self.sasl_mechanisms = tuple(config["sasl.enabled.mechanisms"].split(","))
        self.reauth_ms = config["connections.max.reauth.ms"]
        # each spelling of a topic (public/default/t, persistent://...) to the one it is listed under
        self.listed_topic = _listed_names(broker)
        self.authorization = Authorization(
            config["authorizationEnabled"], config["superUserRoles"].split(","), self.listed_topic
        )
        self.appends = Appends()
        self.metrics = ServerMetrics()
        self.membership = GroupMembership(broker.config["group.initial.rebalance.delay.ms"], self._changed)
        self.consumer_groups = ConsumerGroupCoordinator(
            config,
            lambda: self.call(broker.topic_infos),
            self._changed,
            downgrade=lambda group: self.classic_members.downgrade(group),
        )
        policy = config["group.consumer.migration.policy"]
        self.classic_members = ClassicMembers(self.consumer_groups, self.membership, policy)
        self.snapshots = GroupSnapshots(broker.store)
        self._kept: dict[str, Snapshot] = {}  # what the store holds of each group, as last saved
        self._saving = asyncio.Lock()
        addresses = ", ".join(str(listener) for listener in advertised.values())
        self.group_servers = GroupServers(
            GroupServer(" ".join([socket.gethostname(), *map(str, bound)]), addresses),
            lambda group: self.call(broker.live_groups.get, group),
            self._give_up_group,
        )
        self.publisher = GroupPublisher(
            lambda group, live, valid_ms: self.call(
                broker.live_groups.publish, group, live._replace(server=self.group_servers.me), valid_ms
            ),
            self.live_group,
            self.active_groups,
            self.save_group,
            self.group_servers.lost,
        )
        self.transactions = TransactionCoordinator(broker)
        self.group_configs = GroupConfigs(broker.store, config)
        self.share_states = ShareStates(broker.store)
        self.share_groups = ShareGroupCoordinator(
            config,
            lambda group, tp: self.call(self.share_states.load, group, *tp),
            lambda group, tp, state: self.call(self.share_states.save, group, *tp, state),
            lambda group, tp: self.call(self._share_start, group, tp),
            broker.clock.now_ms,
            self._changed,
        )
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="kop-serve")

    def advertised(self, header: RequestHeader) -> Listener:
        """The address a client is told: that of the listener it came in on."""
        protocol = header.session.protocol if header.session is not None else "PLAINTEXT"
        return self._advertised.get(protocol) or next(iter(self._advertised.values()))

    def allowed(self, header: RequestHeader, operation: str, resource_type: str, name: str = CLUSTER) -> bool:
        """Whether the client's principal may do ``operation`` on a resource (always, without
        authorizationEnabled)."""
        principal = header.session.principal if header.session is not None else ANONYMOUS
        return self.authorization.allowed(principal, operation, resource_type, name)

    def authorize(self, header: RequestHeader, operation: str, resource_type: str, name: str = CLUSTER) -> None:
        """``allowed``, or Kafka's *_AUTHORIZATION_FAILED for the resource's type."""
        if not self.allowed(header, operation, resource_type, name):
            principal = header.session.principal if header.session is not None else ANONYMOUS
            raise REFUSALS[resource_type](f"{principal} may not {operation} {resource_type} {name!r}")

    def _changed(self, group_id: str) -> None:
        self.publisher.changed(group_id)

    # -- groups of either protocol: the classic protocol's, until a consumer-protocol member
    # -- converts one; the consumer protocol's, which may have classic members too ------------

    def upgrade(self, group_id: str) -> bool:
        """Converts a classic group with members to the consumer protocol, if it is a group of
        consumers (Kafka's online upgrade); whether it was."""
        g = self.membership.groups.get(group_id)
        if g is None or not g.members or g.protocol_type != PROTOCOL_TYPE or not self.classic_members.upgrades:
            return False
        self.classic_members.adopt(self.membership.hand_over(group_id))
        return True

    def restore_groups(self) -> None:
        """Takes up the groups as a server before this one kept them. Called as the server starts,
        it reads them on the event loop, so no request is served before they are back."""
        self._kept = self.snapshots.load()
        for group_id, value in self._kept.items():
            if value["type"] == "consumer":
                self.consumer_groups.install(ConsumerGroup.from_snapshot(value))
            elif value["type"] == "share":
                self.share_groups.install(ShareGroup.from_snapshot(value))
            else:
                self.membership.restore(Group.from_snapshot(value))
                self._changed(group_id)

    async def save_group(self, group_id: str) -> None:
        """Keeps the group's membership for a restarted server to take up: a classic group's
        generation once it has settled (while it rebalances, the last settled one stands), a
        consumer-protocol or share group's as it is, nothing once it has no members. The requests
        whose answers tell members what it holds (SyncGroup, ConsumerGroupHeartbeat,
        ShareGroupHeartbeat) wait for it, as Kafka's wait for the group's records; saves go one at
        a time, each of the state then."""
        async with self._saving:
            classic, consumer = self.membership.groups.get(group_id), self.consumer_groups.groups.get(group_id)
            share = self.share_groups.groups.get(group_id)
            if classic is not None and classic.members:
                if classic.state != GroupState.STABLE:
                    return
                value: Snapshot | None = classic.to_snapshot()
            elif consumer is not None and consumer.members:
                value = consumer.to_snapshot()
            else:
                value = share.to_snapshot() if share is not None and share.members else None
            if value != self._kept.get(group_id):
                await self.call(self.snapshots.save, group_id, value)
                if value is None:
                    self._kept.pop(group_id)
                else:
                    self._kept[group_id] = value

    def _share_start(self, group_id: str, tp: tuple[str, int]) -> int:
        """Where a share group starts in a partition it has not read: its ``share.auto.offset.reset``."""
        return self.broker.list_offsets(*tp, self.group_configs.effective(group_id)["share.auto.offset.reset"])

    def live_group(self, group_id: str) -> LiveGroup | None:
        g = self.membership.groups.get(group_id)
        if g is not None and g.members:
            return snapshot(g)
        return self.consumer_groups.live(group_id) or self.share_groups.live(group_id)

    def _give_up_group(self, group_id: str) -> None:
        self.consumer_groups.give_up(group_id)
        self.membership.give_up(group_id)
        self.share_groups.give_up(group_id)

    def active_groups(self) -> list[str]:
        classic = [gid for gid, g in self.membership.groups.items() if g.members]
        share = [gid for gid in self.share_groups.groups if self.share_groups.is_active(gid)]
        return classic + [gid for gid in self.consumer_groups.groups if self.consumer_groups.is_active(gid)] + share

    @staticmethod
    def unkeepable_group_id(group_id: str) -> str | None:
        """Why a group cannot be kept (INVALID_GROUP_ID): an id too long for a metadata key."""
        try:
            layout.group_snapshot_key(group_id)
        except ValueError as e:
            return str(e)
        return None

    def group_active(self, group_id: str) -> bool:
        return (
            self.membership.is_active(group_id)
            or self.consumer_groups.is_active(group_id)
            or self.share_groups.is_active(group_id)
        )

    def validate_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None, plain_v8: bool = False
    ) -> ErrorCode:
        """A commit's fencing (OffsetCommit's, TxnOffsetCommit's) by the group's protocol: its
        generation is a member epoch in a consumer-protocol group (``plain_v8``: an OffsetCommit
        older than v9, which such members may not send)."""
        if self.consumer_groups.is_active(group_id):
            return self.consumer_groups.validate_commit(group_id, member_id, generation, plain_v8)
        return self.membership.validate_commit(group_id, generation, member_id, instance_id)

    def subscribed_topics(self, group_id: str) -> set[str]:
        return self.membership.subscribed_topics(group_id) | self.consumer_groups.subscribed_topics(group_id)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking Broker call on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def call_asked(
        self, fn: Callable[[list[Any]], Sequence[T]], calls: Sequence[tuple[Any, ...] | R]
    ) -> list[T | R]:
        """``fn`` of the calls given as tuples (a request's partitions to look up), in one worker
        call, each answer in its call's place; a call given as anything else (why it was refused
        before it ran) is answered with itself."""
        answers = iter(await self.call(fn, [c for c in calls if isinstance(c, tuple)]))
        return [next(answers) if isinstance(c, tuple) else c for c in calls]

    def close(self) -> None:
        self.membership.close()
        self.consumer_groups.close()
        self.share_groups.close()
        self._executor.shutdown(wait=True)


def cluster_id_of(root: str) -> str:
    """Kafka's cluster id form (a UUID in 22 characters of URL-safe base64), stable for a store."""
    return base64.urlsafe_b64encode(uuid.uuid5(uuid.NAMESPACE_URL, root).bytes).decode().rstrip("=")
