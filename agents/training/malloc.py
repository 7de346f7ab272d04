"""Keep freed memory in the process: glibc ``malloc`` settings for training (``train.malloc``).

A PPO update allocates and frees tensors of tens of megabytes every minibatch. glibc returns
such blocks to the operating system as soon as they are freed (blocks above its ``mmap``
threshold are unmapped, the heap's top is trimmed), so the next minibatch faults the same pages
in again: a minor page fault and the kernel's zeroing for every page, every minibatch.
:func:`configure_allocator` with ``"keep"`` raises the ``mmap`` threshold to glibc's maximum,
maps no block on its own (glibc's largest threshold is 32 MB, below the largest tensors of a
minibatch at six clusters and hidden 128, which would otherwise still be mapped and unmapped
every time) and stops trimming, so freed memory is reused; the process then keeps its peak
footprint. The setting is process-wide (it cannot be compared within one process) and a no-op
where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

#: ``train.malloc`` values: ``keep`` freed memory in the process, or the ``system`` defaults
MALLOC_MODES = ("keep", "system")
# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -2, -3, -4
#: largest mmap threshold glibc accepts on 64-bit systems (HEAP_MAX_SIZE / 2)
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
#: blocks glibc may map on their own: none, so blocks above the threshold come from the heap too
#: (glibc still maps one where a heap cannot hold it, e.g. above a thread arena's 64 MB)
MMAP_MAX = 0
#: grow the heap in steps of this much (fewer brk calls)
TOP_PAD = 64 * 1024 * 1024
#: trim the heap's top only when this much of it is free (mallopt's largest value: "never", in practice)
TRIM_THRESHOLD = 2**31 - 1


@functools.lru_cache(maxsize=1)
def _mallopt():
    """glibc's ``mallopt``, or ``None`` where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallopt
        libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def configure_allocator(mode: str) -> bool:
    """Apply a ``train.malloc`` mode (:data:`MALLOC_MODES`) to this process.

    ``"keep"``: glibc keeps freed memory for reuse (see the module docstring); ``"system"``: leave
    the allocator as it is. Returns whether the settings were applied (``False`` for ``"system"``
    and where the C library is not glibc). Process-wide and not undone.
    """
    if mode not in MALLOC_MODES:
        raise ValueError(f"malloc mode must be one of {MALLOC_MODES}, got {mode!r}")
    mallopt = _mallopt()
    if mode == "system" or mallopt is None:
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1
    ok = mallopt(_M_MMAP_MAX, MMAP_MAX) == 1 and ok
    ok = mallopt(_M_TOP_PAD, TOP_PAD) == 1 and ok
    ok = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    return ok
