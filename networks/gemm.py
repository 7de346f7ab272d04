"""Linear layers whose row count is bucketed under bfloat16 autocast on CPU.

On CPU, PyTorch runs bfloat16 matrix products through oneDNN, which builds (and caches) a
kernel per problem shape. The compact row layouts (only the rows a mask selects, see
:func:`networks.heads.compact_pays`) make the row count of most products data-dependent, so
without padding nearly every bfloat16 call would build a new kernel, many times slower than a
product at a repeated shape. :func:`linear` pads the rows up to one of
:data:`BUCKETS_PER_OCTAVE` sizes per power of two (at most 1/8 extra rows, at least
:data:`MIN_ROW_STEP`), so shapes repeat and kernels are reused. Float32, accelerators and
compiled graphs take the plain ``F.linear`` (bit for bit what ``nn.Linear`` gives).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: row counts are rounded up to one of this many sizes per power of two (a power of two itself)
BUCKETS_PER_OCTAVE = 8
#: the smallest rounding step (small batches pad to a multiple of it)
MIN_ROW_STEP = 16

#: innermost length from which a broadcast bfloat16 product on CPU is as fast as a plain one: one
#: AVX-512 vector of bfloat16 values (shorter rows leave the vector partly empty and take a slow path)
BROADCAST_MIN_INNER = 32

_local = threading.local()  # per thread: the learner's shards run in threads of their own


@contextmanager
def rows_prebucketed() -> Iterator[None]:
    """Inside this block (on this thread) :func:`linear` does not pad: the caller has already
    padded its rows so that their counts repeat (e.g. pointer rows bucketed per group, each
    ``w`` slots wide), and a second padding of the flattened rows would only add copies and
    wasted products."""
    before = getattr(_local, "prebucketed", False)
    _local.prebucketed = True
    try:
        yield
    finally:
        _local.prebucketed = before


def bucket_rows(m: int) -> int:
    """``m`` rounded up to its bucket: a multiple of ``max(MIN_ROW_STEP, 2**k / BUCKETS_PER_OCTAVE)``
    where ``2**k <= m < 2**(k+1)`` (so at most ``1 / BUCKETS_PER_OCTAVE`` extra rows)."""
    step = max(MIN_ROW_STEP, (1 << max(m.bit_length() - 1, 0)) // BUCKETS_PER_OCTAVE)
    return -(-m // step) * step


def buckets_rows(x: Tensor) -> bool:
    """Whether products on ``x`` pad their rows: a CPU tensor under bfloat16 autocast, outside
    ``torch.compile``."""
    return (
        x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not torch.compiler.is_compiling()
    )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``; under :func:`buckets_rows` the leading dimensions are
    flattened into rows, cast to bfloat16 and zero-padded to a bucket (the padded rows are
    sliced off again)."""
    if not buckets_rows(x):
        return F.linear(x, weight, bias)
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
    m = flat.shape[0]
    padded = m if getattr(_local, "prebucketed", False) else bucket_rows(m)
    if padded == m:  # no slice then: even a full-length slice's backward zero-fills and copies the gradient
        return F.linear(flat, weight, bias).reshape(*lead, weight.shape[0])
    out = F.linear(F.pad(flat, (0, 0, 0, padded - m)), weight, bias)
    return out[:m].reshape(*lead, weight.shape[0])


def apply_linear(module: nn.Module, x: Tensor) -> Tensor:
    """:func:`linear` with a linear module's ``weight`` and ``bias`` (``nn.Linear`` or
    torch-geometric's ``Linear``)."""
    return linear(x, module.weight, module.bias)


def scale_heads(x: Tensor, weight: Tensor) -> Tensor:
    """``x (..., H, D) * weight (..., H)[..., None]``: per-head weights applied to ``D`` features.

    On CPU a bfloat16 product whose innermost operand is broadcast (stride 0) and shorter than
    :data:`BROADCAST_MIN_INNER` takes a slow path, many times the time of an elementwise product
    of the same size, so there the weights are expanded to ``x``'s shape first."""
    w = weight.unsqueeze(-1)
    if (x.dtype == torch.bfloat16 and x.device.type == "cpu" and x.shape[-1] < BROADCAST_MIN_INNER
            and not torch.compiler.is_compiling()):
        w = w.expand(x.shape).contiguous()
    return x * w
