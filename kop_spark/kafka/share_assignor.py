"""The share-group assignor (KIP-932's ``simple``): which partitions each member of a share group
fetches from.

As Kafka's: each partition goes to ``ceil(members / partitions)`` members (one while partitions
are at least as many as members; shared, each record still to one member, when members outnumber
them), members' counts differ by at most one where their subscriptions allow, and a member keeps
what it had where that balance allows. A member subscribed to a topic with partitions gets at
least one. A partition moved away loses nothing: what its old member holds stays its own, to
acknowledge, until its lock ends."""

from __future__ import annotations

from collections.abc import Mapping

TopicPartition = tuple[str, int]


def assign(
    subscriptions: Mapping[str, frozenset[str]],
    current: Mapping[str, frozenset[TopicPartition]],
    partitions: Mapping[str, int],
) -> dict[str, frozenset[TopicPartition]]:
    """Each member's partitions, from its subscription (``subscriptions``), what it has now
    (``current``) and each topic's partition count (topics missing have none)."""
    eligible = {
        m: {(t, p) for t in topics for p in range(partitions.get(t, 0))} for m, topics in sorted(subscriptions.items())
    }
    wanted = sorted(set().union(*eligible.values()))
    members = [m for m, tps in eligible.items() if tps]
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    if not wanted:
        return {m: frozenset() for m in out}
    sharing = -(-len(members) // len(wanted))
    fewest, more = divmod(len(wanted) * sharing, len(members))  # ``more`` members may have one more
    owners: dict[TopicPartition, int] = dict.fromkeys(wanted, 0)
    for m in members:  # stickiness: keep what still fits the balance
        kept = [tp for tp in sorted(current.get(m, frozenset()) & eligible[m]) if owners[tp] < sharing]
        if len(kept) > fewest and more:
            more -= 1
            kept = kept[: fewest + 1]
        else:
            kept = kept[:fewest]
        out[m].update(kept)
        for tp in kept:
            owners[tp] += 1
    for tp in wanted:  # the rest to the members with the fewest
        while owners[tp] < sharing:
            free = [m for m in members if tp in eligible[m] and tp not in out[m]]
            if not free:
                break
            m = min(free, key=lambda m: len(out[m]))
            out[m].add(tp)
            owners[tp] += 1
    for m in members:  # none left out, where subscriptions are uneven
        if not out[m]:
            tp = min(eligible[m], key=lambda tp: (owners[tp], tp))
            out[m].add(tp)
            owners[tp] += 1
    return {m: frozenset(tps) for m, tps in out.items()}
