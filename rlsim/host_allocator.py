"""Keep the CPU's memory allocator steady, the way a GPU's caching allocator is.

On a GPU, PyTorch's caching allocator keeps freed blocks and hands them back without asking the
driver again, so an operator costs the same whatever ran before it. On Linux/glibc a CPU
tensor of more than the *dynamic* mmap threshold (128 KiB at start, raised whenever a larger
mmapped block is freed) is mmapped and unmapped per allocation, paying fresh page faults each
time: the same prefill of the validation policy ran ~45% slower in a generator process that
never trains (threshold still low) than in the synchronous trainer (threshold raised by its
backward passes), and calibration timings moved with whatever ran before them. Fixing the
threshold high and never trimming the heap makes every process reuse its memory, so the
trainer's pools and the calibration kernels see the same per-operator costs.

Called by `rlsim calibrate` on the CPU and by both trainer loops (every process). A no-op where
the C library has no `mallopt` (macOS, musl).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD_BYTES = 1 << 30  # keep up to 1 GiB of freed heap instead of returning it


@cache
def steady_allocator() -> bool:
    """Pin glibc's mmap and trim thresholds for this process; True if the C library took them."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
