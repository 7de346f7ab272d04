"""Batched heterogeneous graph built on the device from padded observation tensors.

The observation (``envs/observation.py``) holds fixed-shape arrays with a leading batch
dimension ``B``; this module turns them into the node-feature and edge-index dictionaries a
torch-geometric heterogeneous layer consumes, for all ``B`` samples at once (pure tensor ops:
``cumsum``, boolean indexing, ``nonzero``; no Python loop over samples, no ``HeteroData``).

Node types:

* ``pending``: one node per *distinct* pending task. A task pending at several clusters is
  a single node, identified through ``pending_where``: its canonical slot is the one in the
  lowest-index cluster where it is pending. Empty slots have no node (the actor uses a
  learned dummy vector for them; they are masked anyway).
* ``running``: one node per running slot in use.
* ``cluster``: one node per cluster (features ``cluster_x`` plus two derived ones:
  occupied and feasible pending slots as fractions of ``P``).
* ``shortcut``: one node per sample, connected to all of its clusters (constant input 1).

Edges come in both directions (cluster<->pending for every occupied slot, cluster<->running,
cluster<->shortcut), so every node type receives messages; a node's own features reach its
output through the residual connection or the optional self relation (:mod:`networks.han`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

NODE_TYPES = ("pending", "running", "cluster", "shortcut")
EDGE_TYPES = (
    ("cluster", "offers", "pending"),
    ("pending", "wants", "cluster"),
    ("cluster", "hosts", "running"),
    ("running", "runs_on", "cluster"),
    ("cluster", "to_hub", "shortcut"),
    ("shortcut", "from_hub", "cluster"),
)
METADATA = (list(NODE_TYPES), list(EDGE_TYPES))
#: relations in which every destination node has exactly one incoming edge, edge ``i`` going
#: into node ``i`` (hosts: a running slot's cluster; from_hub: a cluster's shortcut), so their
#: node-level attention is exactly 1 (networks/han.py, networks/dense_han.py)
ONE_SOURCE_RELATIONS = (EDGE_TYPES[2], EDGE_TYPES[5])
CLUSTER_EXTRA_FEATURES = 2  # occupied / feasible pending slots, as fractions of P


@dataclass
class HeteroBatch:
    """A disjoint union of ``B`` observation graphs, plus the maps back to padded slots.

    ``slot_node[b, i, p]`` is the pending-node id of slot ``p`` of cluster ``i`` in sample
    ``b`` (``num_pending`` for empty slots, i.e. one past the last node, so a table with an
    appended dummy row can be gathered without masking).
    """

    x: dict[str, Tensor]
    edge_index: dict[tuple[str, str, str], Tensor]
    batch: dict[str, Tensor]  # graph (sample) id of every node, per node type
    num_graphs: int
    slot_node: Tensor  # (B, N, P) long
    num_pending: int


def cluster_input_dim(obs_cluster_features: int) -> int:
    """Width of the cluster node input: the observation's features plus the derived ones."""
    return obs_cluster_features + CLUSTER_EXTRA_FEATURES


def cluster_features(obs: dict[str, Tensor]) -> Tensor:
    """``(B, N, F_c + 2)``: ``cluster_x`` with the occupied and feasible pending fractions."""
    pm = obs["pending_mask"]
    P = pm.shape[-1]
    cx = obs["cluster_x"].float()
    occ = pm.float().sum(-1, keepdim=True) / P
    feas = obs["feasible"].float().sum(-1, keepdim=True) / P
    return torch.cat([cx, occ, feas], dim=-1)


def canonical_slots(pending_mask: Tensor, pending_where: Tensor) -> tuple[Tensor, Tensor]:
    """Per slot, the canonical (cluster, slot) of its task: the lowest cluster holding it.

    Returns ``(canon_flat, is_canonical)``: ``canon_flat[b, i, p] = j0 * P + slot_in_j0``
    (0 on empty slots) and a bool mask of the slots that *are* their task's canonical slot.
    """
    B, N, P = pending_mask.shape
    occupied = pending_mask.bool()
    where = pending_where.long()
    present = where >= 0  # (B, N, P, N)
    j0 = present.to(torch.uint8).argmax(dim=-1)  # first cluster holding the task (0 if none)
    slot0 = where.gather(-1, j0.unsqueeze(-1)).squeeze(-1).clamp(min=0)
    canon_flat = torch.where(occupied, j0 * P + slot0, torch.zeros_like(slot0))
    own = torch.arange(N, device=pending_mask.device).view(1, N, 1)
    is_canonical = occupied & (j0 == own)
    return canon_flat, is_canonical


def build_hetero_batch(obs: dict[str, Tensor]) -> HeteroBatch:
    """Build the batched heterogeneous graph from padded observation tensors (leading dim B)."""
    pm = obs["pending_mask"].bool()
    B, N, P = pm.shape
    device = pm.device
    canon_flat, is_canon = canonical_slots(pm, obs["pending_where"])

    # pending nodes: canonical slots, numbered in (b, i, p) order
    canon_ids = torch.cumsum(is_canon.view(-1).long(), 0).view(B, N * P) - 1
    num_pending = int(canon_ids[-1, -1].item()) + 1 if canon_ids.numel() else 0
    slot_node = canon_ids.gather(1, canon_flat.view(B, N * P)).view(B, N, P)
    slot_node = torch.where(pm, slot_node, torch.full_like(slot_node, num_pending))
    x_pending = obs["pending_x"].float()[is_canon]
    b_idx = torch.arange(B, device=device).view(B, 1, 1)
    pending_batch = b_idx.expand(B, N, P)[is_canon]

    # cluster <-> pending: one edge per occupied slot
    ob, oi, op = pm.nonzero(as_tuple=True)
    src_c = ob * N + oi
    dst_p = slot_node[ob, oi, op]
    e_offer = torch.stack([src_c, dst_p])

    # running nodes: every running slot in use
    rm = obs["running_mask"].bool()
    x_running = obs["running_x"].float()[rm]
    rb, ri, _ = rm.nonzero(as_tuple=True)
    e_host = torch.stack([rb * N + ri, torch.arange(rb.numel(), device=device)])

    # clusters and shortcut
    x_cluster = cluster_features(obs).reshape(B * N, -1)
    cluster_batch = torch.arange(B, device=device).repeat_interleave(N)
    cc = torch.arange(B * N, device=device)
    e_hub = torch.stack([cc, cluster_batch])
    x_shortcut = torch.ones(B, 1, device=device)

    x = {"pending": x_pending, "running": x_running, "cluster": x_cluster, "shortcut": x_shortcut}
    edge_index = {
        EDGE_TYPES[0]: e_offer,
        EDGE_TYPES[1]: e_offer.flip(0),
        EDGE_TYPES[2]: e_host,
        EDGE_TYPES[3]: e_host.flip(0),
        EDGE_TYPES[4]: e_hub,
        EDGE_TYPES[5]: e_hub.flip(0),
    }
    batch = {
        "pending": pending_batch,
        "running": rb,
        "cluster": cluster_batch,
        "shortcut": torch.arange(B, device=device),
    }
    return HeteroBatch(x, edge_index, batch, B, slot_node, num_pending)


@dataclass
class EncoderOutput:
    """What every encoder returns: padded per-slot task embeddings and cluster summaries.

    ``task (B, N, P, H)``: embedding of the task in slot ``p`` of cluster ``i`` (a learned
    dummy vector for empty slots); ``cluster (B, N, H)``; ``glob (B, H)``: a whole-sample summary.
    ``canon (B, N, P)``: optional, the first output of :func:`canonical_slots` when the encoder
    computed it anyway (the policy reuses it to identify conflicting agents).
    """

    task: Tensor
    cluster: Tensor
    glob: Tensor
    canon: Tensor | None = None
