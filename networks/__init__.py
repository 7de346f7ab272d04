"""Neural network modules of the TapFinger policy.

* :mod:`networks.graph`: batched heterogeneous graph built on the device from padded observations.
* :mod:`networks.han`: HAN encoder (``HANConv`` with per-graph semantic attention), the
  torch-geometric reference implementation (``PolicyConfig.encoder="pyg"``).
* :mod:`networks.dense_han`: the same encoder (same parameters) run as masked attention over the
  padded observation axes: static shapes, no graph building (``encoder="dense"``, the default).
* :mod:`networks.mlp_encoder`: per-slot MLP encoder for the ``no-han``/``vanilla`` ablations.
* :mod:`networks.pointer`: transformer + additive-attention pointer for task selection.
* :mod:`networks.heads`: per-agent layers, allocation head, centralised critic.
* :mod:`networks.gemm`: linear layers whose row counts are bucketed under bfloat16 on CPU.
"""

from .graph import EDGE_TYPES, METADATA, NODE_TYPES, EncoderOutput, HeteroBatch, build_hetero_batch
from .dense_han import DenseGraphEncoder
from .han import GraphEncoder, HANEncoder, PerGraphHANConv
from .heads import AgentLinear, AllocationHead, CentralCritic, allocation_mask
from .mlp_encoder import MLPEncoder
from .pointer import PointerNet

__all__ = [
    "EDGE_TYPES", "METADATA", "NODE_TYPES", "EncoderOutput", "HeteroBatch", "build_hetero_batch",
    "DenseGraphEncoder", "GraphEncoder", "HANEncoder", "PerGraphHANConv", "AgentLinear", "AllocationHead", "CentralCritic",
    "allocation_mask", "MLPEncoder", "PointerNet",
]
