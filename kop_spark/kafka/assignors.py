"""The server-side assignors of consumer-protocol groups (KIP-848), under Kafka's names:
``uniform`` (the default: partitions spread evenly, each member keeping what it has where the
balance allows, so a rebalance moves as little as it can; a group whose members all subscribe to
the same topics, the usual one, is assigned in O(P log P), others by moving partitions one at a
time from the fullest members to the emptiest) and ``range`` (each topic's partitions in
contiguous ranges, in member-id order, as the classic range assignor gives them).

An assignment maps each member to the partitions (topic, partition) it is to own. Every
partition of a subscribed topic goes to exactly one member subscribed to it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

TopicPartition = tuple[str, int]
Assignment = dict[str, frozenset[TopicPartition]]


def tps_to_json(tps: Iterable[TopicPartition]) -> list[list[Any]]:
    """Partitions as a group snapshot keeps them: ``[topic, partition]`` pairs, sorted."""
    return [[t, p] for t, p in sorted(tps)]


def tps_from_json(value: list[list[Any]]) -> frozenset[TopicPartition]:
    return frozenset((t, p) for t, p in value)


class Assignor(Protocol):
    def assign(
        self,
        subscriptions: Mapping[str, frozenset[str]],
        partitions: Mapping[str, int],
        current: Mapping[str, frozenset[TopicPartition]],
    ) -> Assignment:
        """``subscriptions``: each member's topics; ``partitions``: each topic's partition
        count; ``current``: the assignment in force, which a sticky assignor keeps where it can."""
        ...


class UniformAssignor:
    def assign(
        self,
        subscriptions: Mapping[str, frozenset[str]],
        partitions: Mapping[str, int],
        current: Mapping[str, frozenset[TopicPartition]],
    ) -> Assignment:
        if len(set(subscriptions.values())) == 1:
            return _homogeneous(subscriptions, partitions, current)
        owned: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
        owner: dict[TopicPartition, str] = {}
        for member, tps in current.items():
            for tp in tps:
                if member in owned and _eligible(tp, member, subscriptions, partitions) and tp not in owner:
                    owned[member].add(tp)
                    owner[tp] = member
        for tp in _all(subscriptions, partitions):
            if tp not in owner:
                takers = [m for m in sorted(owned) if tp[0] in subscriptions[m]]
                taker = min(takers, key=lambda m: len(owned[m]))
                owned[taker].add(tp)
                owner[tp] = taker
        _balance(owned, subscriptions)
        return {m: frozenset(tps) for m, tps in owned.items()}


def _homogeneous(
    subscriptions: Mapping[str, frozenset[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, frozenset[TopicPartition]],
) -> Assignment:
    """Every member subscribes to the same topics (the usual group), in O(P log P): each member's
    share is P / M, the extra ones going to the members that own most already; each keeps what it
    owns up to its share, and what is left fills the members short of theirs."""
    every = _all(subscriptions, partitions)
    valid = set(every)
    kept: dict[str, list[TopicPartition]] = {}
    taken: set[TopicPartition] = set()
    for member in sorted(subscriptions):
        mine = sorted(tp for tp in current.get(member, ()) if tp in valid and tp not in taken)
        kept[member] = mine
        taken.update(mine)
    base, extra = divmod(len(every), len(subscriptions))
    by_holding = sorted(subscriptions, key=lambda m: (-len(kept[m]), m))
    shares = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
    owned = {m: kept[m][: shares[m]] for m in subscriptions}
    held = {tp for tps in owned.values() for tp in tps}
    free = iter(tp for tp in every if tp not in held)
    for member in sorted(subscriptions):
        owned[member].extend(next(free) for _ in range(shares[member] - len(owned[member])))
    return {m: frozenset(tps) for m, tps in owned.items()}


def _balance(owned: dict[str, set[TopicPartition]], subscriptions: Mapping[str, frozenset[str]]) -> None:
    """Moves partitions from the fullest members to the emptiest that may take them until no
    move narrows the gap: members' counts then differ by at most one where they share topics."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[giver]):
                takers = [m for m in owned if tp[0] in subscriptions[m] and len(owned[m]) + 1 < len(owned[giver])]
                if takers:
                    taker = min(takers, key=lambda m: (len(owned[m]), m))
                    owned[giver].discard(tp)
                    owned[taker].add(tp)
                    moved = True
                    break
            if moved:
                break


class RangeAssignor:
    def assign(
        self,
        subscriptions: Mapping[str, frozenset[str]],
        partitions: Mapping[str, int],
        current: Mapping[str, frozenset[TopicPartition]],
    ) -> Assignment:
        out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
        for topic in sorted(partitions):
            members = sorted(m for m, topics in subscriptions.items() if topic in topics)
            if not members:
                continue
            share, extra = divmod(partitions[topic], len(members))
            start = 0
            for i, member in enumerate(members):
                count = share + (1 if i < extra else 0)
                out[member].update((topic, p) for p in range(start, start + count))
                start += count
        return {m: frozenset(tps) for m, tps in out.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": UniformAssignor(), "range": RangeAssignor()}


def _eligible(
    tp: TopicPartition, member: str, subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int]
) -> bool:
    return tp[0] in subscriptions[member] and 0 <= tp[1] < partitions.get(tp[0], 0)


def _all(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int]) -> list[TopicPartition]:
    wanted = set().union(*subscriptions.values()) if subscriptions else set()
    return [(t, p) for t in sorted(wanted) if t in partitions for p in range(partitions[t])]
