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

Callers import each name from the module that owns it.
"""
