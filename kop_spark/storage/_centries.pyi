# The compiled twin of ledger_entry.verify_entries_reference.
from array import array
from collections.abc import Sequence

from ..record.codec import Buffer
from .ledger_entry import EntryInfo

def verify_entries(data: Buffer, rows: Sequence[EntryInfo], start: int, spans: array, /) -> tuple[int, int]: ...
