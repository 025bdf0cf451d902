"""The share-group assignor's promises, for any members, subscriptions and partition counts:
every partition subscribed has a member, balance as Kafka's ``simple`` assignor gives it, and a
member that joins or leaves moves no more than the balance needs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kop_spark.kafka.share_assignor import assign

TOPICS = ("t", "u", "v")
members = st.lists(st.sampled_from("abcdefghij"), min_size=1, max_size=8, unique=True)
counts = st.fixed_dictionaries({t: st.integers(0, 6) for t in TOPICS})


def _owners(assignment: dict[str, frozenset[tuple[str, int]]]) -> dict[tuple[str, int], int]:
    owners: dict[tuple[str, int], int] = {}
    for tps in assignment.values():
        for tp in tps:
            owners[tp] = owners.get(tp, 0) + 1
    return owners


@given(st.dictionaries(st.sampled_from("abcdefghij"), st.frozensets(st.sampled_from(TOPICS)), max_size=8), counts)
def test_each_partition_subscribed_has_a_member_and_each_member_only_what_it_subscribes(subscriptions, partitions):
    out = assign(subscriptions, {}, partitions)
    assert set(out) == set(subscriptions)
    wanted = {(t, p) for topics in subscriptions.values() for t in topics for p in range(partitions[t])}
    assert set(_owners(out)) == wanted
    for m, tps in out.items():
        assert {t for t, _ in tps} <= subscriptions[m]
        assert bool(tps) == any(partitions[t] for t in subscriptions[m])  # nobody with partitions left out


@given(members, counts)
def test_a_homogeneous_group_is_balanced_as_kafkas(names, partitions):
    """Each partition to ceil(members / partitions) members, members' counts within one."""
    out = assign(dict.fromkeys(names, frozenset(TOPICS)), {}, partitions)
    total = sum(partitions.values())
    if total:
        sharing = -(-len(names) // total)
        assert set(_owners(out).values()) == {sharing}
        sizes = [len(tps) for tps in out.values()]
        assert max(sizes) - min(sizes) <= 1


@given(members, st.sampled_from("klmnop"), counts, st.booleans())
def test_a_member_joining_or_leaving_moves_only_what_the_balance_needs(names, other, partitions, joining):
    group = dict.fromkeys(names, frozenset(TOPICS))
    before = assign(group, {}, partitions)
    if joining:
        group[other] = frozenset(TOPICS)
    else:
        del group[names[0]]
    after = assign(group, before, partitions)
    total = sum(partitions.values())
    if not total or not group or -(-len(group) // total) != -(-len(names) // total):
        return  # where a partition's share of members changes, what was shared must move
    fewest = total * -(-len(group) // total) // len(group)
    for m in set(group) & set(before):
        assert len(after[m] & before[m]) >= min(len(before[m]), fewest), (m, before, after)
