"""The one retry loop for optimistic concurrency: read, decide, and write only if nothing changed
meanwhile (a compare-and-set, or an append conditional on the log end); on losing, decide again
from a fresh read."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .errors import BadVersionError, StorageError

CAS_ATTEMPTS = 10_000
T = TypeVar("T")


def retry_cas(
    what: str,
    attempt: Callable[[], T],
    *,
    lost: tuple[type[BaseException], ...] = (BadVersionError,),
    attempts: int = CAS_ATTEMPTS,
) -> T:
    """Run ``attempt`` again whenever another writer got there first (it raises one of ``lost``);
    a bounded number of times, so a livelock is an error naming ``what``."""
    for _ in range(attempts):
        try:
            return attempt()
        except lost:
            continue
    raise StorageError(f"{what}: gave up after {attempts} lost compare-and-sets")
