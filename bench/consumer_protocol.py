"""Benchmark: what the consumer rebalance protocol (KIP-848) costs `kop serve`'s event loop. Every
member heartbeats every `group.consumer.heartbeat.interval.ms` (5 s), so the coordinator's work per
heartbeat, times members / 5 s, is CPU the server's one event loop gives up. A steady heartbeat's
cost is set against decoding its request and encoding its answer with kio (what the server pays
for any heartbeat, whatever the coordinator does), measured in the same run; the heartbeat that
joins a member to the group, which computes the group's new target assignment, against the first
member's, which joins it to an empty group.

    python bench/consumer_protocol.py [--members 100] [--topics 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import os
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from kop_spark.broker import TopicInfo
from kop_spark.config import Config
from kop_spark.kafka.consumer_group_coordinator import ConsumerGroupCoordinator, Heartbeat
from kop_spark.kafka.messages import request_class, response_module

PARTITIONS = 4


def codec_us(rounds: int = 2000) -> float:
    """µs to decode one member's steady heartbeat and encode its answer."""
    cls = request_class(68, 1)
    request = cls(group_id="bench", member_id="m0", member_epoch=5, topic_partitions=None)
    out = io.BytesIO()
    entity_writer(cls)(out, request)
    frame = out.getvalue()
    m = response_module(68, 1)
    answer = m.ConsumerGroupHeartbeatResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        member_id="m0",
        member_epoch=5,
        heartbeat_interval=datetime.timedelta(seconds=5),
    )
    read, write = entity_reader(cls), entity_writer(m.ConsumerGroupHeartbeatResponse)
    t = time.perf_counter()
    for _ in range(rounds):
        read(frame, 0)
        write(io.BytesIO(), answer)
    return (time.perf_counter() - t) / rounds * 1e6


async def heartbeats(members: int, topics: int, regex: bool) -> tuple[float, float, float]:
    """µs per heartbeat of a steady group; ms of the heartbeat that joins one more member, and of
    the first member's, which joins an empty group."""
    infos = [TopicInfo(f"t{i}", uuid.uuid4(), PARTITIONS) for i in range(topics)]

    async def read() -> list[TopicInfo]:
        return infos

    coordinator = ConsumerGroupCoordinator(Config(), read)
    owned: dict[str, Any] = {}
    epochs: dict[str, int] = {}

    async def beat(member: str, join: bool = False) -> None:
        fields: dict[str, Any] = {"topic_regex": "t.*"} if regex else {"topic_names": tuple(t.name for t in infos)}
        answer = await coordinator.heartbeat(
            Heartbeat(
                "bench",
                member,
                0 if join else epochs[member],
                ("bench", "/127.0.0.1"),
                owned=owned.get(member, ()),
                **(fields if join else {}),
            ),
            lambda topic: True,
        )
        epochs[member] = answer.member_epoch
        if answer.assignment is not None:
            owned[member] = answer.assignment

    names = [f"m{i}" for i in range(members)]
    t = time.perf_counter()
    await beat(names[0], join=True)
    first_ms = (time.perf_counter() - t) * 1e3
    for name in names[1:]:
        await beat(name, join=True)
    for _ in range(5):  # until every member has its partitions and the group is stable
        for name in names:
            await beat(name)
    rounds = 5
    t = time.perf_counter()
    for _ in range(rounds):
        for name in names:
            await beat(name)
    steady_us = (time.perf_counter() - t) / (rounds * members) * 1e6
    t = time.perf_counter()
    await beat("newcomer", join=True)
    join_ms = (time.perf_counter() - t) * 1e3
    coordinator.close()
    return steady_us, join_ms, first_ms


def run(members: int = 100, topics: int = 1000) -> list[tuple[str, float, str, float, str]]:
    codec = codec_us()
    rows = []
    for regex in (False, True):
        steady, join, first = asyncio.run(heartbeats(members, topics, regex))
        how = "a regex" if regex else "their names"
        shape = f"{members} members, {topics} topics of {PARTITIONS} partitions, subscribed by {how}"
        steady_row = f"consumer-protocol heartbeat, steady group ({shape})"
        rows.append((steady_row, steady, "µs", codec / steady, "kio decoding it and encoding its answer"))
        join_row = f"heartbeat joining member {members + 1} (new target assignment; {shape})"
        rows.append((join_row, join, "ms", first / join, "the first member's join"))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--topics", type=int, default=1000)
    args = ap.parse_args()
    for name, value, unit, ratio, base in run(args.members, args.topics):
        print(f"{name}: {value:,.1f} {unit} ({ratio:.2f}x {base})")
