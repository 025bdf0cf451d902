"""Orphans: ledger files of a partition that no metadata refers to (left by writers that crashed
between writing a file and the CAS that would refer to it). They are condemned by a CAS before
they are deleted, so a writer's CAS that would refer to one fails instead of losing its data."""

from __future__ import annotations

from collections.abc import Iterable

from .ledger_metadata import LogMetadata
from .managed_ledger import Change, ManagedLedger


def remove_orphans(ml: ManagedLedger, files: Iterable[tuple[str, float]], grace_ms: int) -> list[str]:
    """Delete ``files`` (path, modification time in s) of this partition that no metadata
    refers to and that are older than ``grace_ms``. They are condemned first, by a CAS that
    checks they are still unreferenced; a writer's CAS that would refer to a condemned file
    fails. So a file a writer is about to confirm is never deleted, whatever the grace."""
    files = list(files)

    def condemn(meta: LogMetadata, now: int) -> LogMetadata | None:
        known = meta.referenced() | set(meta.condemned)
        new = [f for f, mtime in files if f not in known and now - mtime * 1000 >= grace_ms]
        if not new:
            return None
        meta.condemned = sorted(set(meta.condemned) | set(new))
        return meta

    def acquit(done: list[str]) -> Change:
        def change(meta: LogMetadata, now: int) -> LogMetadata | None:
            left = [f for f in meta.condemned if f not in done]
            if left == meta.condemned:
                return None
            meta.condemned = left
            return meta

        return change

    with ml.lock:
        ml.apply(condemn, allow_deleted=True)
        condemned = list(ml.last_known.condemned) if ml.last_known else []
        for f in condemned:
            ml.fileio.delete(f)
        if condemned:
            ml.apply(acquit(condemned), allow_deleted=True)
        return condemned
