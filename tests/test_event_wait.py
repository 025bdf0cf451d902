"""A stop cancels the server's waiting loops; a cancellation that comes as the awaited event is
set must still end them (``asyncio.wait_for`` swallowed it before Python 3.12, and a ``kop
serve`` that had just seen a group change never stopped)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kop_spark.broker import LiveGroup
from kop_spark.kafka.context import Appends
from kop_spark.kafka.event_wait import wait_set
from kop_spark.kafka.group_publisher import GroupPublisher


async def _cancelled_as_woken(waiting: asyncio.Future[object], wake: Callable[[], object]) -> asyncio.Future[object]:
    """Cancel ``waiting`` in the same step as ``wake()`` sets what it waits for; it, once ended."""
    await asyncio.sleep(0)  # it is waiting
    wake()
    waiting.cancel()
    done, _ = await asyncio.wait({waiting}, timeout=5)
    assert done, "a cancelled wait went on"
    return waiting


def test_a_wait_ends_as_its_event_is_set_or_its_time_passes() -> None:
    async def run() -> tuple[bool, bool]:
        event = asyncio.Event()
        asyncio.get_running_loop().call_soon(event.set)
        was_set = await wait_set(event, 5)
        return was_set, await wait_set(asyncio.Event(), 0.01)

    assert asyncio.run(run()) == (True, False)


def test_a_wait_cancelled_as_its_event_is_set_is_cancelled() -> None:
    async def run() -> asyncio.Future[object]:
        event = asyncio.Event()
        return await _cancelled_as_woken(asyncio.ensure_future(wait_set(event, 10)), event.set)

    assert asyncio.run(run()).cancelled()


def test_a_parked_fetch_cancelled_as_an_append_wakes_it_is_cancelled() -> None:
    async def run() -> asyncio.Future[object]:
        appends = Appends()
        return await _cancelled_as_woken(asyncio.ensure_future(appends.wait(10)), appends.notify)

    assert asyncio.run(run()).cancelled()


def test_a_stop_ends_the_group_publisher_even_as_a_change_wakes_it() -> None:
    published: list[str] = []

    async def publish(group_id: str, live: LiveGroup, valid_ms: int) -> None:
        published.append(group_id)

    async def save(group_id: str) -> None:
        pass

    async def run() -> asyncio.Future[object]:
        publisher = GroupPublisher(publish, lambda g: None, lambda: (), save, lambda g, there: None)
        return await _cancelled_as_woken(asyncio.ensure_future(publisher.run()), lambda: publisher.changed("g"))

    assert asyncio.run(run()).cancelled()
    assert published == []  # stopped, it published nothing more
