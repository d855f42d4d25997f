"""Keep a worker's freed memory for reuse instead of handing it back to the kernel.

A learner allocates and frees the same large tensors at every step (a minibatch of
images as floats, its activations: tens of MB on Atari). glibc's malloc serves blocks
above its mmap threshold with fresh pages and returns a free heap top past its trim
threshold, so each step faults its whole working set in again as zeroed pages. Raising
both thresholds keeps that memory in the heap; a worker's resident size stays at its
peak: ~14% more agent steps/s on Pong (docs/benchmarks.md, "Per-step costs"). PyTorch's
CPU tuning guide preloads jemalloc or tcmalloc for the same reason; this needs nothing
installed.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)
#: Freed blocks up to this size stay in the heap, and so much free heap top is kept.
KEEP_BYTES = 1 << 30
#: glibc's own environment settings: a user who set one keeps malloc as they chose.
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_memory() -> bool:
    """Tune this process's malloc (glibc on Linux only); whether it did."""
    if not sys.platform.startswith("linux") or any(v in os.environ for v in _USER_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # another C library (musl's has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, KEEP_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES)
    )
