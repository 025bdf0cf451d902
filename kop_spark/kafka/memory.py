"""Keep the server's large buffers in the heap.

Every produce brings a request of up to a megabyte or more, and every fetch answer is as large;
they live for milliseconds. glibc serves such sizes with fresh ``mmap``s (or trims its heap after
them), so the kernel zeroes and faults in every page of every request again: measured, a third
of ``kop serve``'s CPU at 1 MB batches, on machines where the Kafka client shares the cores.
Raising the thresholds keeps freed buffers for reuse. Other C libraries are left as they are."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 << 20  # larger than any batch max.message.bytes allows by default
TRIM_THRESHOLD = 512 << 20  # free heap kept before it is given back to the system


def keep_large_buffers() -> bool:
    """Tune glibc's allocator for the server's buffer sizes; whether it could be."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    log.debug("malloc thresholds %s", "raised" if done else "left as they were")
    return done
