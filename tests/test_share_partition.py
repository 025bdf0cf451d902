"""A share group's state of one partition (``SharePartition``), driven as consumers drive it: the
promises of KIP-932 hold at every step, whatever members fetch, acknowledge, give up or let time
out, and through a snapshot taken and restored (a restart) at any point."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kop_spark.broker import ShareRecordState, ShareStates
from kop_spark.kafka.share_partition import ACCEPT, REJECT, RELEASE, SharePartition
from kop_spark.storage.metadata import open_metadata_store

LIMIT, LOCK_MS, MAX_IN_FLIGHT = 3, 1000, 6
MEMBERS = ("a", "b", "c")

steps = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(1, 5)),
        st.tuples(st.just("fetch"), st.sampled_from(MEMBERS), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.sampled_from([ACCEPT, RELEASE, REJECT])),
        st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
        st.tuples(st.just("wait"), st.integers(0, 2 * LOCK_MS)),
        st.tuples(st.just("restart")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_each_record_is_held_by_one_member_at_most_and_never_delivered_once_done(steps) -> None:
    sp, log_end, now = SharePartition(0), 0, 0
    held: dict[int, str] = {}  # offset -> member, as the members believe
    done: set[int] = set()  # accepted or rejected: never to be delivered again
    deliveries: dict[int, int] = {}
    for step in steps:
        kind = step[0]
        if kind == "produce":
            log_end += step[1]
        elif kind == "fetch":
            _, member, most = step
            sp.fetch_position(0, now, LIMIT)
            for first, last, count in sp.acquire(member, log_end, most, now, LOCK_MS, MAX_IN_FLIGHT):
                for offset in range(first, last + 1):
                    assert offset not in done, f"{offset} delivered again after it was done"
                    deliveries[offset] = deliveries.get(offset, 0) + 1
                    assert count == deliveries[offset] <= LIMIT
                    held[offset] = member
        elif kind == "ack":
            _, member, how = step
            mine = sorted(o for o, m in held.items() if m == member)
            for offset in mine:
                record = sp.records.get(offset)
                holds = record is not None and record.state == ShareRecordState.ACQUIRED and record.member == member
                code = sp.acknowledge(member, offset, offset, (how,), LIMIT)
                assert code == (ErrorCode.none if holds else ErrorCode.invalid_record_state)  # its lock expired
                del held[offset]
                if code == ErrorCode.none and how in (ACCEPT, REJECT):
                    done.add(offset)
        elif kind == "leave":
            sp.release_member(step[1], LIMIT)
            held = {o: m for o, m in held.items() if m != step[1]}
        elif kind == "wait":
            now += step[1]
        else:
            sp = SharePartition.from_json(json.loads(json.dumps(sp.to_json())))
            held.clear()  # locks do not outlive a restart
        acquired = [o for o, r in sp.records.items() if r.state == ShareRecordState.ACQUIRED]
        assert len(acquired) == len(set(acquired))
        assert all(o >= sp.start_offset for o in sp.records), "a record before the SPSO still in flight"
        assert sp.start_offset <= sp.next_offset <= log_end
        assert len(sp.records) <= MAX_IN_FLIGHT  # records nobody acknowledges do not pile up
        assert all(o in sp.records or o < sp.start_offset for o in range(sp.start_offset, sp.next_offset))
    # Left alone long enough, everything not done is delivered again, until its limit.
    now += LOCK_MS
    sp.fetch_position(0, now, LIMIT)
    again = {
        o for f, la, _ in sp.acquire("z", log_end, log_end + 1, now, LOCK_MS, log_end + 1) for o in range(f, la + 1)
    }
    assert not again & done
    assert again == {o for o in range(log_end) if o not in done and deliveries.get(o, 0) < LIMIT}


def test_a_record_released_past_the_delivery_limit_is_archived_and_the_start_moves_past_it() -> None:
    sp = SharePartition(10)
    for delivery in range(1, LIMIT + 1):
        sp.fetch_position(10, 0, LIMIT)
        assert sp.acquire("a", 12, 1, 0, LOCK_MS, 10) == [(10, 10, delivery)]
        assert sp.acknowledge("a", 10, 10, (RELEASE,), LIMIT) == ErrorCode.none
    assert sp.start_offset == 11  # archived: done
    assert sp.acquire("a", 12, 5, 0, LOCK_MS, 10) == [(11, 11, 1)]


def test_acknowledgements_of_records_not_held_change_nothing() -> None:
    sp = SharePartition(0)
    sp.acquire("a", 3, 3, 0, LOCK_MS, 10)
    assert sp.acknowledge("b", 0, 0, (ACCEPT,), LIMIT) == ErrorCode.invalid_record_state
    assert sp.acknowledge("a", 0, 5, (ACCEPT,), LIMIT) == ErrorCode.invalid_record_state  # 3..5 not held
    assert sp.acknowledge("a", 0, 2**62, (ACCEPT,), LIMIT) == ErrorCode.invalid_record_state  # no work per offset
    assert sp.acknowledge("a", 0, 2, (ACCEPT, RELEASE), LIMIT) == ErrorCode.invalid_request  # types for 2 of 3
    assert sp.acknowledge("a", 0, 2, (5,), LIMIT) == ErrorCode.invalid_request  # no such type (4, Renew, is v2's)
    assert all(r.state == ShareRecordState.ACQUIRED for r in sp.records.values())
    assert sp.acknowledge("a", 0, 2, (ACCEPT, REJECT, ACCEPT), LIMIT) == ErrorCode.none
    assert sp.start_offset == 3 and not sp.records


def test_the_lag_is_what_is_not_done_from_the_start_offset_to_the_log_end() -> None:
    sp = SharePartition(0)
    sp.acquire("a", 5, 5, 0, LOCK_MS, 10)
    assert sp.acknowledge("a", 1, 4, (ACCEPT,), LIMIT) == ErrorCode.none  # 0 still held: the start stays
    assert ShareStates.lag(sp.to_json(), 10) == 6  # 0, and 5-9 never delivered


def test_each_group_lists_its_own_partitions_only(tmp_path: Path) -> None:
    states = ShareStates(open_metadata_store(str(tmp_path / "metadata")))
    for group in ("sg", "sg2", "s/g"):  # one name a prefix of another, one with the separator
        for p in range(2):
            states.save(group, "t", p, ShareStates.started_at(len(group) + p))
    assert set(states.partitions("sg")) == {("t", 0), ("t", 1)}
    assert states.partitions("sg2")[("t", 1)]["start_offset"] == 4
    assert states.partitions("s/g")[("t", 0)]["start_offset"] == 3
    assert states.groups() == ["s/g", "sg", "sg2"]
    assert states.forget("sg") and not states.forget("sg")
    assert states.groups() == ["s/g", "sg2"] and states.partitions("sg") == {}
    assert len(states.partitions("sg2")) == 2
