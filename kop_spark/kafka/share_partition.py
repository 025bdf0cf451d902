"""One partition as a share group consumes it (KIP-932, Kafka's ``SharePartition``): the records
from the share-partition start offset (SPSO) up to the next offset not yet handed out are in
flight, each Available, Acquired by a member until its lock expires, Acknowledged, or Archived.

A fetch acquires Available records (released ones first, then records never delivered), each
delivery counted; a member acknowledges the records it holds: accepted (done), released (to be
delivered again), rejected (never again); a record delivered ``delivery_limit`` times is archived
instead of released, and so is one whose lock expired. The SPSO moves past every record at its
front that is done (Acknowledged or Archived), so what is in flight stays a window.

A snapshot keeps the SPSO and the in-flight records' states and delivery counts (Kafka's
share-group state records); taken up after a restart, acquired records are Available again, their
locks being gone, so at-least-once delivery holds through a restart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..broker import SHARE_DONE, ShareRecordState

# Acknowledge types (ShareFetch / ShareAcknowledge)
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3


@dataclass
class InFlight:
    state: ShareRecordState = ShareRecordState.AVAILABLE
    delivery_count: int = 0
    member: str | None = None
    deadline_ms: int = 0  # when an acquired record's lock expires


@dataclass
class SharePartition:
    start_offset: int  # the SPSO: every record before it is done
    next_offset: int = -1  # the first record never handed out (-1: the SPSO)
    records: dict[int, InFlight] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.next_offset < self.start_offset:
            self.next_offset = self.start_offset

    def fetch_position(self, log_start: int, now_ms: int, limit: int) -> int:
        """Where a fetch for this share partition reads from: its first Available record, else the
        first never handed out. Records deleted from the log (retention) leave the window first."""
        self.expire(now_ms, limit)
        self._skip_to(log_start)
        available = (o for o, r in sorted(self.records.items()) if r.state == ShareRecordState.AVAILABLE)
        return next(available, self.next_offset)

    def acquire(
        self, member: str, upto: int, max_records: int, now_ms: int, lock_ms: int, max_in_flight: int
    ) -> list[tuple[int, int, int]]:
        """Acquire up to ``max_records`` below ``upto`` (the end of what a fetch read) for
        ``member``: released records first, then records never delivered, while fewer than
        ``max_in_flight`` are in flight (Kafka's group.share.partition.max.record.locks: records
        nobody acknowledges do not pile up). Returns the ranges acquired: (first, last, delivery
        count)."""
        taken = [o for o, r in sorted(self.records.items()) if r.state == ShareRecordState.AVAILABLE and o < upto]
        taken = taken[:max_records]
        while len(taken) < max_records and self.next_offset < upto and len(self.records) < max_in_flight:
            taken.append(self.next_offset)
            self.records[self.next_offset] = InFlight()
            self.next_offset += 1
        ranges: list[tuple[int, int, int]] = []
        for offset in taken:
            r = self.records[offset]
            r.state, r.member, r.deadline_ms = ShareRecordState.ACQUIRED, member, now_ms + lock_ms
            r.delivery_count += 1
            if ranges and ranges[-1][1] == offset - 1 and ranges[-1][2] == r.delivery_count:
                ranges[-1] = (ranges[-1][0], offset, r.delivery_count)
            else:
                ranges.append((offset, offset, r.delivery_count))
        return ranges

    def acknowledge(self, member: str, first: int, last: int, types: tuple[int, ...], limit: int) -> ErrorCode:
        """Apply a member's acknowledgement of ``first``..``last`` (one type for all, or one for
        each offset; GAP for an offset with no record to give, such as a transaction marker's);
        INVALID_RECORD_STATE, changing nothing, unless it holds them all."""
        if last < first or len(types) not in (1, last - first + 1) or any(t not in (0, 1, 2, 3) for t in types):
            return ErrorCode.invalid_request
        if first < self.start_offset or last >= self.next_offset:  # also bounds the work to the window
            return ErrorCode.invalid_record_state
        held = [self.records[o] for o in range(first, last + 1)]
        if any(r.state != ShareRecordState.ACQUIRED or r.member != member for r in held):
            return ErrorCode.invalid_record_state
        for r, kind in zip(held, types * len(held) if len(types) == 1 else types, strict=True):
            if kind == ACCEPT:
                r.state = ShareRecordState.ACKNOWLEDGED
            elif kind == RELEASE:
                self._release(r, limit)
            else:
                r.state = ShareRecordState.ARCHIVED
            r.member = None
        self._advance()
        return ErrorCode.none

    def release_member(self, member: str, limit: int) -> None:
        """What ``member`` holds goes back (its share session closed, or it left the group)."""
        for r in self.records.values():
            if r.state == ShareRecordState.ACQUIRED and r.member == member:
                self._release(r, limit)
        self._advance()

    def expire(self, now_ms: int, limit: int) -> None:
        """Records whose lock expired go back, as if released; so do those a restart found held
        (Available, their deliveries counted), archived once at the limit."""
        for r in self.records.values():
            expired = r.state == ShareRecordState.ACQUIRED and r.deadline_ms <= now_ms
            if expired or (r.state == ShareRecordState.AVAILABLE and r.delivery_count >= limit):
                self._release(r, limit)
        self._advance()

    def _release(self, r: InFlight, limit: int) -> None:
        r.state = ShareRecordState.ARCHIVED if r.delivery_count >= limit else ShareRecordState.AVAILABLE
        r.member = None

    def _skip_to(self, log_start: int) -> None:
        """Records deleted from the log (retention) are gone from the window too."""
        if log_start > self.start_offset:
            for offset in [o for o in self.records if o < log_start]:
                del self.records[offset]
            self.start_offset = log_start
            self.next_offset = max(self.next_offset, log_start)

    def _advance(self) -> None:
        while self.start_offset < self.next_offset:
            r = self.records.get(self.start_offset)
            if r is None or r.state not in SHARE_DONE:
                break
            del self.records[self.start_offset]
            self.start_offset += 1

    def to_json(self) -> dict[str, Any]:
        """The SPSO, the next offset and each in-flight record's state and delivery count."""
        states = [[o, int(r.state), r.delivery_count] for o, r in sorted(self.records.items())]
        return {"start_offset": self.start_offset, "next_offset": self.next_offset, "records": states}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> SharePartition:
        """As ``to_json`` left it, acquired records Available again (their locks are gone)."""
        records = {}
        for offset, state, count in value["records"]:
            kept = ShareRecordState(state)
            records[offset] = InFlight(ShareRecordState.AVAILABLE if kept == ShareRecordState.ACQUIRED else kept, count)
        return cls(value["start_offset"], value["next_offset"], records)
