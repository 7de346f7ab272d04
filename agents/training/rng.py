"""Global RNG state (Python, numpy, torch, CUDA): seeding, and saving/restoring it in checkpoints."""

from __future__ import annotations

import random
from typing import Any, Mapping

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Python, numpy, torch (and CUDA) RNG states as tensors / plain values."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": list(random.getstate()[1]),
        "python_version": random.getstate()[0],
        "python_gauss": random.getstate()[2],
        "numpy": {
            "key": torch.from_numpy(np.asarray(np_state["state"]["key"], dtype=np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate((state["python_version"], tuple(int(x) for x in state["python"]), state["python_gauss"]))
    npst = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "state": {"key": npst["key"].numpy().astype(np.uint32), "pos": int(npst["pos"])},
            "has_gauss": int(npst["has_gauss"]),
            "gauss": float(npst["gauss"]),
        }
    )
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
