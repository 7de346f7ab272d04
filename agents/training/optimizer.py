"""The optimizer every trainer of the project uses: Adam with PyTorch's fused kernel (tianshou
builds it through its generic ``TorchOptimizerFactory(adam, lr=...)``).

The fused kernel updates every parameter tensor in one call, with no Python loop over tensors; on
CPU one step of the synthetic-3 recipe's policy (143 tensors) takes about a third of the time of
the default ``foreach`` implementation's.
"""

from __future__ import annotations

import torch
from tianshou.algorithm.optim import ParamsType


def adam(params: ParamsType, lr: float) -> torch.optim.Adam:
    """Adam with PyTorch's defaults (betas 0.9/0.999, eps 1e-8, no weight decay), fused.

    It stays fused when it loads a state saved by an unfused Adam (saved groups with ``fused``
    false or absent): ``load_state_dict`` would otherwise take the saved groups' ``fused``."""
    optim = torch.optim.Adam(params, lr=lr, fused=True)
    optim.register_load_state_dict_pre_hook(_keep_fused)
    return optim


def _keep_fused(optim: torch.optim.Optimizer, state_dict: dict) -> dict:
    """``state_dict`` with every parameter group marked fused, so that Adam's loader also puts
    each ``step`` count where the fused kernel reads it (a float32 tensor on the parameter's device)."""
    groups = [{**group, "fused": True} for group in state_dict["param_groups"]]
    return {**state_dict, "param_groups": groups}
