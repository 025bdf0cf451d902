"""Waiting for an asyncio event with a timeout, in a way a cancellation always ends."""

from __future__ import annotations

import asyncio


async def wait_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` has passed; whether it was set.

    Not ``asyncio.wait_for``: before Python 3.12 it swallows a cancellation that comes as the
    awaited event is set (gh-86296), so a loop around it, cancelled by a stop just as a change
    wakes it, ran on and the stop never ended. ``asyncio.wait`` passes every cancellation on."""
    waiting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiting}, timeout=timeout_s)
    finally:
        waiting.cancel()
    return event.is_set()
