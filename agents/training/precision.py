"""Mixed precision of the policy's network passes during training (``train.precision``).

``float32`` runs everything in float32 (the default). ``bfloat16`` runs the network passes of
collection and of the PPO update (encoder, pointer, allocation head, critic) under
``torch.autocast`` with bfloat16 matrix products; the parameters, their gradients, the
optimiser state and every distribution computation (log-softmax, sampling, conflict
resolution, the loss) stay float32 (:class:`~agents.policy.network.TapFingerPolicy` casts its logits
and values to float32). Validation during training and ``evaluate.py`` run float32, so the
checkpoint chosen as ``best.pt`` is chosen by what evaluation will measure.

bfloat16 pays on a CPU with bfloat16 matrix instructions (AVX512-BF16, AMX), which run the
products faster than float32; without them oneDNN emulates bfloat16 and the passes are likely
slower, so float32 stays the default. On CUDA it is the usual bfloat16 autocast. bfloat16 needs no
loss scaling (float32's exponent range).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported on use: the config module that imports PRECISIONS stays light
    import torch

#: values of ``train.precision`` (and ``benchmarks/policy_latency.py --precision``)
PRECISIONS = ("float32", "bfloat16")
FLOAT32, BFLOAT16 = PRECISIONS


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a ``ValueError`` that lists them."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    return precision


def autocast(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """The context the network passes run in: ``torch.autocast`` to bfloat16, or nothing."""
    if check_precision(precision) == FLOAT32:
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
