"""Group commit: appends to one partition that arrive while another is being written go together
in the next write, with one sync (or one upload) and one CAS for all of them.

Without it, threads appending to one partition (a server answering many producers, the Broker
shared by a thread pool) queue up behind one fsync and one metadata round trip each; on an object
store, behind one upload and one conditional PUT each. The first caller to find no commit under way
leads: it takes every append waiting, commits them as one change, and hands each its own result.
A lone caller leads a group of one, so nothing changes for it but a lock.

Each append in a group keeps what it would have alone: its own base offset (the group's appends
follow each other in arrival order), its idempotence check (a retry in the same group as its
original is answered with the original's offsets), and the all-or-nothing of its batches. What the
group shares is its fate: if the write or the CAS fails, every append in it fails with that error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import InvalidProducerEpochError, KopError, OutOfOrderSequenceError
from ..record import RecordBatch
from .ledger_metadata import LogMetadata, WriterRecord
from .producer_state import check_producers


class AppendResult(NamedTuple):
    base_offset: int  # -1 for a duplicate whose original offsets are no longer known
    record_count: int
    duplicate: bool = False


@dataclass
class AppendRequest:
    """One caller's append, waiting for its group's commit."""

    batches: Sequence[bytes]
    idempotence_key: tuple[str, int] | None = None
    broker_timestamp: int | None = None
    count: int = field(init=False)  # offsets it takes
    result: AppendResult | None = field(default=None, init=False)
    error: KopError | None = field(default=None, init=False)  # refused alone (an idempotent producer's batch)

    def __post_init__(self) -> None:
        self.count = sum(RecordBatch(b).offset_span for b in self.batches)


class GroupCommit:
    """Runs ``commit(requests)`` for groups of the requests submitted while it was busy."""

    def __init__(self, commit: Callable[[list[AppendRequest]], None]):
        self._commit = commit
        self._cond = threading.Condition()
        self._waiting: list[AppendRequest] = []
        self._done: dict[int, BaseException | None] = {}  # id(request) -> its group's error
        self._busy = False

    def submit(self, request: AppendRequest) -> AppendResult:
        self.enqueue(request)
        return self.wait(request)

    def enqueue(self, request: AppendRequest) -> None:
        """Queue ``request`` for the next group: requests are appended in the order they are queued."""
        with self._cond:
            self._waiting.append(request)

    def wait(self, request: AppendRequest) -> AppendResult:
        """The result of a queued request, leading a group's commit if none is under way."""
        with self._cond:
            while self._busy and id(request) not in self._done:
                self._cond.wait()
            if id(request) in self._done:  # a leader committed it
                return self._outcome(request)
            self._busy = True
            group, self._waiting = self._waiting, []
        error: BaseException | None = None
        try:
            self._commit(group)
        except BaseException as e:
            error = e
        finally:
            with self._cond:
                self._busy = False
                for r in group:
                    self._done[id(r)] = error
                self._cond.notify_all()
        with self._cond:
            return self._outcome(request)

    def _outcome(self, request: AppendRequest) -> AppendResult:
        error = self._done.pop(id(request)) or request.error
        if error is not None:
            raise error
        assert request.result is not None
        return request.result


def place(meta: LogMetadata, requests: Sequence[AppendRequest], now: int, where: str) -> list[AppendRequest]:
    """Decide each request's fate against ``meta``: a repeated idempotent append gets its
    original's result, a Kafka producer's batch out of sequence or fenced its error (alone), every
    other one the next offsets, in order. Returns the requests to write,
    and records their writers' sequences in ``meta``; their results are set once the caller has
    confirmed them in ``meta`` (``next_offset`` must not have moved in between)."""
    to_write, base = [], meta.next_offset
    for r in requests:
        r.result = r.error = None  # from an attempt whose CAS lost
        try:
            original = check_producers(meta.kafka_producers, r.batches, where, base, now)
        except (OutOfOrderSequenceError, InvalidProducerEpochError) as e:
            r.error = e
            continue
        if original is not None:
            r.result = AppendResult(original, r.count, True)
            continue
        if r.idempotence_key is not None:
            writer, seq = r.idempotence_key
            seen = meta.producers.get(writer)
            if seen is not None and seq <= seen.seq:
                same = seq == seen.seq
                r.result = (
                    AppendResult(seen.base_offset, seen.record_count, True) if same else AppendResult(-1, r.count, True)
                )
                continue
            meta.producers[writer] = WriterRecord(seq, base, r.count, now)
        r.result = AppendResult(base, r.count)
        to_write.append(r)
        base += r.count
    return to_write
