"""Ablation encoder (``no-han`` and ``vanilla``): a per-slot MLP instead of the graph network.

Each slot's input is its pending features concatenated with its cluster's features (the
authors' code's stacked observation); 4 x (Linear, ReLU). Running tasks are seen only
through the cluster features (running count). Cluster embeddings (for the critic and to
tell agents apart) are an MLP of the cluster features plus the mean of the occupied slots.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .graph import EncoderOutput, cluster_features, cluster_input_dim


class MLPEncoder(nn.Module):
    """Per-slot 4-layer MLP encoder producing :class:`~networks.graph.EncoderOutput`."""

    def __init__(self, pending_features: int, cluster_features_dim: int, hidden: int = 128, layers: int = 4) -> None:
        super().__init__()
        cdim = cluster_input_dim(cluster_features_dim)
        dims = [pending_features + cdim] + [hidden] * layers
        mods: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            mods += [nn.Linear(a, b), nn.ReLU()]
        self.slot_mlp = nn.Sequential(*mods)
        self.cluster_mlp = nn.Sequential(nn.Linear(cdim, hidden), nn.ReLU())

    def forward(self, obs: dict[str, Tensor]) -> EncoderOutput:
        cf = cluster_features(obs)  # (B, N, Fc)
        px = obs["pending_x"].float()
        P = px.shape[2]
        task = self.slot_mlp(torch.cat([px, cf.unsqueeze(2).expand(-1, -1, P, -1)], dim=-1))
        occ = obs["pending_mask"].bool().unsqueeze(-1).to(task.dtype)
        slot_mean = (task * occ).sum(2) / occ.sum(2).clamp(min=1.0)
        cluster = self.cluster_mlp(cf) + slot_mean
        return EncoderOutput(task=task, cluster=cluster, glob=cluster.mean(1))
