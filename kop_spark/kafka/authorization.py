"""The ACLs a server checks requests against (``authorizationEnabled``): a snapshot of the store's
bindings, read again every ``REFRESH_S`` so that a change made by ``kop acls`` (or by another
server) takes effect without a restart, and checked without a store read per request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from ..broker.acls import CLUSTER, AclBinding, Authorizer

log = logging.getLogger(__name__)

REFRESH_S = 1.0


class AuthorizationFailedError(Exception):
    """A request the client's principal may not make."""


class TopicAuthorizationFailedError(AuthorizationFailedError):
    """Kafka's TOPIC_AUTHORIZATION_FAILED."""


class GroupAuthorizationFailedError(AuthorizationFailedError):
    """Kafka's GROUP_AUTHORIZATION_FAILED."""


class ClusterAuthorizationFailedError(AuthorizationFailedError):
    """Kafka's CLUSTER_AUTHORIZATION_FAILED."""


class TransactionalIdAuthorizationFailedError(AuthorizationFailedError):
    """Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""


REFUSALS: dict[str, type[AuthorizationFailedError]] = {
    "Topic": TopicAuthorizationFailedError,
    "Group": GroupAuthorizationFailedError,
    "Cluster": ClusterAuthorizationFailedError,
    "TransactionalId": TransactionalIdAuthorizationFailedError,
}


class Authorization:
    """``topic_name`` gives the name a topic is listed under. A topic has several spellings (``t``,
    ``public/default/t``, ``persistent://public/default/t``), and a Deny of one must not be passed by
    another, so topics are checked, and literal topic bindings apply, under that one name."""

    def __init__(self, enabled: bool, super_users: Iterable[str], topic_name: Callable[[str], str] = str):
        self.enabled = enabled
        self._super_users = tuple(u.strip() for u in super_users if u.strip())
        self._topic_name = topic_name
        self._authorizer = Authorizer((), self._super_users)

    def load(self, bindings: Iterable[AclBinding]) -> None:
        self._authorizer = Authorizer(map(self._listed, bindings), self._super_users)

    def _listed(self, b: AclBinding) -> AclBinding:
        if (b.resource_type, b.pattern_type) != ("Topic", "Literal") or b.resource_name == "*":
            return b
        return b._replace(resource_name=self._topic_name(b.resource_name))

    async def run(self, read: Callable[[], Awaitable[list[AclBinding]]]) -> None:
        """Keep the snapshot fresh until cancelled; a failed read keeps the last one."""
        while self.enabled:
            await asyncio.sleep(REFRESH_S)
            try:
                self.load(await read())
            except Exception as e:
                log.warning("cannot read the ACLs (keeping the last ones read): %s", e)

    def allowed(self, principal: str, operation: str, resource_type: str, name: str = CLUSTER) -> bool:
        if not self.enabled:
            return True
        listed = self._topic_name(name) if resource_type == "Topic" else name
        return self._authorizer.allowed(principal, operation, resource_type, listed)
