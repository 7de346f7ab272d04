"""Observations as the policy reads them: the spec numbers it is built for, observations as
tensors, and the free resources per cluster."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch
from torch import Tensor

from envs.observation import KEYS, FeatureColumns, ObservationSpec

#: dtypes :meth:`~agents.policy.network.TapFingerPolicy.as_tensors` gives the mask and index arrays of the observation
OBS_DTYPES = {
    "pending_mask": torch.bool, "feasible": torch.bool, "running_mask": torch.bool,
    "pending_where": torch.int64, "pending_min": torch.int64, "alloc_high": torch.int64,
}


def spec_dims(spec: ObservationSpec) -> dict[str, Any]:
    """The spec numbers the policy depends on, as a plain dict (all read from the spec)."""
    return {
        "N": int(spec.N),
        "P": int(spec.P),
        "K": int(spec.K),
        "alloc_dims": tuple(int(a) for a in spec.alloc_dims),
        "pending_features": int(spec.Fp),
        "running_features": int(spec.Fr),
        "cluster_features": int(spec.Fc),
    }


def spec_to_dict(spec: Any) -> dict[str, Any]:
    """Plain dict of an observation spec's fields (dataclass or simple object)."""
    if dataclasses.is_dataclass(spec):
        out = {}
        for f in dataclasses.fields(spec):
            if f.name.startswith("_"):
                continue
            v = getattr(spec, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(spec).items() if not k.startswith("_")}


def obs_to_torch(
    obs: Any, device: torch.device | str = "cpu", add_batch: bool | None = None
) -> dict[str, Tensor]:
    """Observation (dict, tianshou ``Batch`` or any mapping of numpy arrays or tensors with the
    contract's keys :data:`envs.observation.KEYS`) -> dict of tensors on ``device``.

    ``add_batch`` (default: when ``pending_mask`` is 2-D) adds a leading batch dimension to a
    single observation. Tensors already on ``device`` are not copied.
    """
    out = {}
    for k in KEYS:
        v = obs[k]
        out[k] = v.to(device) if isinstance(v, Tensor) else torch.as_tensor(v, device=device)
    if add_batch is None:
        add_batch = out["pending_mask"].dim() == 2
    if add_batch:
        out = {k: v.unsqueeze(0) for k, v in out.items()}
    return out


def with_mode_feature(obs: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``obs`` with the ``multi_mode`` flag appended to every cluster's ``cluster_x`` row
    (``(B, N, Fc + 1)``), the encoder input of a ``policy.observe_mode`` policy."""
    cx = obs["cluster_x"]
    flag = obs["multi_mode"].to(cx.dtype).reshape(cx.shape[0], 1, 1).expand(-1, cx.shape[1], 1)
    return {**obs, "cluster_x": torch.cat([cx, flag], dim=-1)}


def free_fraction(obs: Mapping[str, Tensor]) -> Tensor:
    """Free (CPU, GPU) per cluster over the scenario's largest capacity: ``cluster_x``'s
    :attr:`~envs.observation.FeatureColumns.free` features, ``(B, N, 2)``."""
    return obs["cluster_x"][..., FeatureColumns.free]


def free_resources(obs: dict[str, Tensor], scale: Tensor | None) -> Tensor:
    """Free (CPU, GPU) per cluster: de-normalised ``cluster_x`` if the scale is known."""
    if scale is None:
        return obs["alloc_high"].to(torch.float64)
    return torch.round(free_fraction(obs).to(torch.float64) * scale.to(torch.float64))
