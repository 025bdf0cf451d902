"""Kafka's rule that no two topics' names differ only by '.' for '_' (their metric names would be
one), held across processes: Kafka's one controller creates topics in turn, where kop's
creators are any number of processes. A claim key per metric name names the topic holding it.

A creator claims the name (a compare-and-set), makes its topic, then confirms the claim by a
second compare-and-set from the version it wrote (the new version is the point). A claim whose
topic does not stand (being made, its maker dead, or deleted since) may be taken over; the maker
whose claim was taken finds its confirmation refused, and removes the topic it made. So of racing
creators of colliding names one keeps its topic: a taker's compare-and-set and the confirmation
of the claim it takes cannot both go through. A maker killed between the two leaves both.
A deleted topic's claim goes with it, before its topic key: a store whose topics come and go
(a topic per test run, per customer) kept one claim per name ever used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from .. import layout
from ..errors import BadVersionError, InvalidTopicError
from ..retry import retry_cas
from ..storage.metadata_store import MetadataStore
from ..topic_name import TopicName, collides, has_collision_chars

TopicStands = Callable[[TopicName], bool]  # asked of the store itself: a kept answer could be stale


def claim(store: MetadataStore, name: TopicName, stands: TopicStands, shown: Callable[[TopicName], str]) -> int | None:
    """Claim ``name``'s metric name before its topic is made: the claim's version, for ``confirm``
    (None for a name no other can collide with). ``InvalidTopicError`` naming the topic that holds
    it, where that one stands."""
    if not has_collision_chars(name.local_name):
        return None

    def refuse(holder: TopicName | None) -> None:
        if holder is not None and stands(holder):
            raise InvalidTopicError(f"Topic '{shown(name)}' collides with existing topic: {shown(holder)}")

    for topic_key in store.list_keys(layout.topic_key(name).rpartition("/")[0]):  # topics older than claims
        other = layout.topic_of_key(topic_key)
        refuse(other if collides(other.local_name, name.local_name) else None)
    key = layout.metric_name_key(name)

    def attempt() -> int:
        current = store.get(key)
        refuse(_holder(name, current.value))
        return store.put(key, {"topic": name.local_name}, current.version)

    return retry_cas(f"metric name of topic {name.full_name}", attempt)


def confirm(store: MetadataStore, name: TopicName, version: int | None) -> TopicName | None:
    """Once ``name``'s topic stands: None if its claim (of ``version``) is still its own, else the
    topic whose maker took the claim over meanwhile, which keeps it."""
    if version is None:
        return None
    key = layout.metric_name_key(name)
    try:
        store.put(key, {"topic": name.local_name}, version)
        return None
    except BadVersionError:
        # Taken over, or claimed again by a creator of this same name, whom the topic's own
        # compare-and-set refused: the name is this topic's still.
        return _holder(name, store.get(key).value)


def release(store: MetadataStore, name: TopicName) -> None:
    """Drop ``name``'s claim while its topic, being deleted, no longer stands: only if the claim
    still names it, and as it was read (a claim taken over meanwhile is the taker's)."""
    if not has_collision_chars(name.local_name):
        return
    key = layout.metric_name_key(name)
    current = store.get(key)
    if current.value is not None and _holder(name, current.value) is None:
        with contextlib.suppress(BadVersionError):
            store.put(key, None, current.version)


def _holder(name: TopicName, claim_value: dict | None) -> TopicName | None:
    """The other topic a claim names, if it names one."""
    holder = (claim_value or {}).get("topic")
    return None if holder in (None, name.local_name) else TopicName(name.tenant, name.namespace, holder)
