"""Row access to a binary column as the codec's twins take it, for the pure-Python twins."""

from __future__ import annotations

from .codec import BinaryColumn


class BinaryRows:
    """Row access to a binary column tuple: ``get(i)`` is the row's bytes, or None when null."""

    def __init__(self, column: BinaryColumn | None):
        self.present = column is not None
        if column is not None:
            validity, offsets, data, self.offset = column
            self.validity = memoryview(validity).cast("B") if validity is not None else None
            self.ends = memoryview(offsets).cast("B").cast("i")
            self.data = memoryview(data).cast("B")

    def get(self, i: int) -> bytes | None:
        if not self.present:
            return None
        j = self.offset + i
        if self.validity is not None and not self.validity[j >> 3] >> (j & 7) & 1:
            return None
        return bytes(self.data[self.ends[j] : self.ends[j + 1]])
