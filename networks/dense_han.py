"""Dense HAN encoder: the per-graph HANConv stack run directly on the padded observation.

:class:`DenseGraphEncoder` holds exactly the parameters of :class:`~networks.han.GraphEncoder`
(it *is* one: same module tree, same state-dict names and shapes, so every checkpoint loads into
either) but never builds a graph. Every relation's neighbours are a fixed, masked axis of the
padded arrays, so a forward pass has static shapes, no data-dependent indexing and no host
synchronisation (GPU- and ``torch.compile``-friendly), and its cost is a few batched matmuls.

Node rows (per sample):

* ``pending``: one row per slot ``(i, p)`` (``N * P`` rows). Only *canonical* slots (the slot
  of a task in the lowest-index cluster where it is pending, :func:`~networks.graph.canonical_slots`)
  are nodes; the other rows are computed but never read (they carry finite filler values).
* ``running``: one row per running slot (``N * M``); occupied slots are the nodes.
* ``cluster``: ``N`` rows; ``shortcut``: one row.

Relations (node-level attention = masked softmax over a fixed axis, then a weighted sum; a
destination with no incoming edge gets zero, like PyG's sum aggregation over nothing):

* ``cluster -offers-> pending``: a canonical slot ``(i, p)`` attends over the ``N`` clusters,
  masked by ``pending_where[i, p, :] >= 0`` -- every cluster where the task is pending, which
  is exactly the set of clusters whose occupied slots map to this node in the graph version
  (one edge per occupied slot). So a task pending at several clusters receives messages from
  all of them, once each.
* ``pending -wants-> cluster``: cluster ``i`` attends over its ``P`` slots (masked by
  ``pending_mask``); slot ``(i, p)``'s message is the projected features of its *canonical* row
  (gathered with ``canon_flat``), so every slot showing the same task sends the same node.
* ``cluster -hosts-> running`` and ``shortcut -from_hub-> cluster``: one source per
  destination, so the attention weight is exactly 1 and the message is the source's projection.
* ``running -runs_on-> cluster``: cluster ``i`` over its ``M`` running slots (``running_mask``).
* ``cluster -to_hub-> shortcut``: the shortcut over all ``N`` clusters.

Row layouts (:class:`Rows`): the static layout computes every slot row (what accelerators and
``torch.compile`` want: fixed shapes, no host read); on the CPU, batches of 8+ samples use the
*compact* layout, which projects only node rows (``nonzero`` on the masks, free on the CPU)
and scatters them into the slot layout where a relation needs it; under load most pending
slots show a task already held by a lower cluster, so this halves the matmul work.

Semantic attention per sample: the key mean runs over the nodes of the type in that sample
(canonical pending slots, occupied running slots, all clusters, the shortcut); a type with one
relation skips it. The final task embedding of slot ``(i, p)`` is its canonical row's output
(the learned ``dummy`` vector for empty slots).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .gemm import apply_linear, linear
from .graph import EDGE_TYPES, EncoderOutput, canonical_slots, cluster_features
from .han import GraphEncoder, PerGraphHANConv, attention_matrix
from .heads import compact_pays, use_compact

_NEG = -1e30  # logit of a non-edge before the masked softmax (finite: no NaN when a row is empty)
_KEYS = {e[1]: "__".join(e) for e in EDGE_TYPES}  # relation name -> HANConv parameter key
_BLOCK_MAX_N = 8  # offers relation: block-diagonal bmm up to this many clusters, per-head product above


@dataclass
class Rows:
    """Which rows of a node type are computed, and how they map to the padded slots.

    Static layout (``index is None``): one row per slot, ``S = B * slots`` rows; the node mask
    ``nodes (B, slots)`` marks the rows that are nodes. Compact layout (CPU only, where reading
    the masks on the host is free): only the nodes, ``index (T,)`` their flat slot ids and
    ``batch (T,)`` their samples.
    """

    B: int
    slots: int
    nodes: Tensor  # (B, slots) float: 1 on nodes
    index: Tensor | None = None
    batch: Tensor | None = None

    def take(self, dense: Tensor) -> Tensor:
        """Per-slot values ``(B * slots, F)`` -> per-row values."""
        return dense if self.index is None else dense.index_select(0, self.index)

    def spread(self, rows: Tensor) -> Tensor:
        """Per-row values ``(rows, F)`` -> per-slot values ``(B * slots, F)`` (zeros elsewhere)."""
        if self.index is None:
            return rows
        return rows.new_zeros(self.B * self.slots, rows.shape[-1]).index_copy(0, self.index, rows)

    def mean(self, keys: Tensor) -> Tensor:
        """Per-sample mean over the nodes: ``(R, rows, C) -> (R, B, C)``."""
        counts = self.nodes.sum(1).clamp(min=1.0).view(1, -1, 1)  # node counts: exact in bfloat16 up to 256
        if self.index is None:
            sums = torch.einsum("rbsc,bs->rbc", keys.view(keys.shape[0], self.B, self.slots, -1), self.nodes)
        else:
            sums = keys.new_zeros(keys.shape[0], self.B, keys.shape[-1]).index_add_(1, self.batch, keys)
        return sums / counts.to(sums.dtype)

    def per_row(self, attn: Tensor) -> Tensor:
        """Per-sample weights ``(R, B)`` -> ``(R, rows, 1)``."""
        if self.index is None:
            return attn.unsqueeze(-1).expand(-1, -1, self.slots).reshape(attn.shape[0], -1, 1)
        return attn[:, self.batch].unsqueeze(-1)


@dataclass
class DenseStructure:
    """The fixed-shape structure of a batch of observations, shared by every layer."""

    B: int
    N: int
    P: int
    M: int
    occupied: Tensor  # (B, N, P) bool
    canon_flat: Tensor  # (B, N*P) long: slot (within the sample) of each slot's canonical node
    slot_row: Tensor  # (B*N*P,) long: pending row holding each slot's canonical node
    offers: Tensor  # (B, N*P, 1, N) bool: cluster j -> canonical slot s
    wants: Tensor  # (B, N, P, 1) bool: slot p -> cluster i (occupied)
    runs_on: Tensor  # (B, N, M, 1) bool
    pending: Rows
    running: Rows
    run_cluster: Tensor | None  # (running rows,) flat cluster of each running row (compact only)


def dense_structure(obs: dict[str, Tensor], compact: bool = False) -> DenseStructure:
    """Masks and index maps of a batch. ``compact``: node rows only (reads the masks on the
    host: meant for the CPU, where that costs nothing; the static layout has no host read)."""
    pm = obs["pending_mask"].bool()
    B, N, P = pm.shape
    M = obs["running_mask"].shape[-1]
    NP = N * P
    canon_flat, is_canon = canonical_slots(pm, obs["pending_where"])
    canon_flat = canon_flat.reshape(B, NP)
    is_canon = is_canon.reshape(B, NP)
    present = obs["pending_where"].reshape(B, NP, N) >= 0
    offers = (present & is_canon.unsqueeze(-1)).unsqueeze(2)  # (B, NP, 1, N)
    rm = obs["running_mask"].bool()
    pend_nodes = is_canon.float()
    run_nodes = rm.reshape(B, N * M).float()
    base = torch.arange(B, device=pm.device).view(B, 1)
    canon_global = (canon_flat + base * NP).reshape(-1)
    run_cluster = None
    p_index = is_canon.reshape(-1).nonzero().squeeze(1) if compact else None
    if p_index is not None and p_index.numel():  # (no pending node at all: static layout)
        rank = torch.cumsum(is_canon.reshape(-1).long(), 0) - 1
        slot_row = rank.index_select(0, canon_global).clamp(min=0)  # empty slots: any valid row
        pending = Rows(B, NP, pend_nodes, p_index, torch.div(p_index, NP, rounding_mode="floor"))
        r_index = rm.reshape(-1).nonzero().squeeze(1)
        running = Rows(B, N * M, run_nodes, r_index, torch.div(r_index, N * M, rounding_mode="floor"))
        run_cluster = torch.div(r_index, M, rounding_mode="floor")
    else:
        slot_row = canon_global
        pending = Rows(B, NP, pend_nodes)
        running = Rows(B, N * M, run_nodes)
    return DenseStructure(
        B=B, N=N, P=P, M=M, occupied=pm, canon_flat=canon_flat, slot_row=slot_row, offers=offers,
        wants=pm.unsqueeze(-1), runs_on=rm.unsqueeze(-1), pending=pending, running=running, run_cluster=run_cluster,
    )


def _masked_softmax(logits: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Softmax over the edges of a masked axis (PyG's ``softmax`` up to its ``1e-16`` guard in
    the denominator); a destination with no edge gets all-zero weights (finite throughout: a
    fully masked row is a uniform softmax over ``_NEG`` before the final mask)."""
    return torch.softmax(logits.masked_fill(~mask, _NEG), dim).masked_fill(~mask, 0.0)


def _group(conv: PerGraphHANConv, outs: list[Tensor], rows: Rows | None) -> Tensor:
    """Semantic attention over relations; key mean over the sample's nodes (``rows``; ``None``:
    every row of the ``(B, S, C)`` outputs is a node)."""
    if len(outs) == 1:
        return outs[0]
    out = torch.stack(outs)  # (R, rows..., C)
    keys = torch.tanh(apply_linear(conv.k_lin, out))
    if rows is None:
        score = (conv.q * keys.mean(2)).sum(-1)  # (R, B)
        return torch.einsum("rb,rbsc->bsc", torch.softmax(score, dim=0), out)
    score = (conv.q * rows.mean(keys)).sum(-1)  # (R, B)
    return (rows.per_row(torch.softmax(score, dim=0)).to(out.dtype) * out).sum(0)


def dense_conv(
    conv: PerGraphHANConv, x: dict[str, Tensor], g: DenseStructure, last: bool = False
) -> dict[str, Tensor]:
    """One :class:`PerGraphHANConv` layer on rows ``x``: ``pending``/``running`` ``(rows, F)``
    (see :class:`Rows`), ``cluster (B, N, F)``, ``shortcut (B, 1, F)``.

    ``last``: the running-node outputs are not needed (nothing reads them after the last
    layer), so they are not computed (the key is absent from the result).
    """
    H = conv.heads
    C = conv.out_channels
    D = C // H
    B, N, P, M = g.B, g.N, g.P, g.M
    slope = conv.negative_slope
    ls, ld = conv.lin_src, conv.lin_dst
    xp = apply_linear(conv.proj["pending"], x["pending"])  # (pending rows, C)
    xr = apply_linear(conv.proj["running"], x["running"])  # (running rows, C)
    xc = apply_linear(conv.proj["cluster"], x["cluster"])  # (B, N, C)
    xs = apply_linear(conv.proj["shortcut"], x["shortcut"])  # (B, 1, C)
    xc4 = xc.view(B, N, H, D)
    eye = torch.eye(H, dtype=xc.dtype, device=xc.device)
    # every attention-logit part of a node type in one thin matmul (no (rows, H, D) temporary)
    a_c = linear(xc, attention_matrix([ls[_KEYS["offers"]], ld[_KEYS["wants"]], ld[_KEYS["runs_on"]],
                                        ls[_KEYS["to_hub"]]], eye)).view(B, N, 4, H)
    a_p = linear(xp, attention_matrix([ld[_KEYS["offers"]], ls[_KEYS["wants"]]], eye))  # (pending rows, 2H)

    # cluster -offers-> pending: canonical slot s over the N clusters holding its task
    # (layout (B, NP, H, N): the softmax runs over the last, contiguous axis)
    a_dst = g.pending.spread(a_p[:, :H]).view(B, N * P, H, 1)
    logit = F.leaky_relu(a_dst + a_c[:, :, 0].transpose(1, 2).unsqueeze(1), slope)  # (B, NP, H, N)
    attn = _masked_softmax(logit, g.offers, -1)
    if N <= _BLOCK_MAX_N:
        # one bmm against the clusters' projections laid out block-diagonally over heads
        # (B, H*N, C): no head-major copies; H times the (small) flops of the per-head product
        blocks = (xc4.transpose(1, 2).unsqueeze(3) * eye.view(1, H, 1, H, 1)).reshape(B, H * N, C)
        o = torch.bmm(attn.reshape(B, N * P, H * N), blocks)
    else:
        o = torch.einsum("bshn,bnhd->bshd", attn, xc4)
    o_offers = g.pending.take(o.reshape(B * N * P, C))

    # pending -wants-> cluster: cluster i over its P slots, each sending its canonical node
    src = xp.index_select(0, g.slot_row).view(B, N, P, H, D)
    a_src = a_p[:, H:].index_select(0, g.slot_row).view(B, N, P, H)
    logit = F.leaky_relu(a_src + a_c[:, :, 1].unsqueeze(2), slope)  # (B, N, P, H)
    attn = _masked_softmax(logit, g.wants, 2)
    o_wants = torch.einsum("bnph,bnphd->bnhd", attn, src).reshape(B, N, C)

    # running -runs_on-> cluster: cluster i over its M running slots
    xr_slots = g.running.spread(xr)
    src = xr_slots.view(B, N, M, H, D)
    a_r = linear(xr_slots, attention_matrix([ls[_KEYS["runs_on"]]], eye)).view(B, N, M, H)
    logit = F.leaky_relu(a_r + a_c[:, :, 2].unsqueeze(2), slope)  # (B, N, M, H)
    attn = _masked_softmax(logit, g.runs_on, 2)
    o_runs = torch.einsum("bnmh,bnmhd->bnhd", attn, src).reshape(B, N, C)

    # cluster -to_hub-> shortcut: over all N clusters
    a_s = linear(xs, attention_matrix([ld[_KEYS["to_hub"]]], eye))  # (B, 1, H)
    logit = F.leaky_relu(a_c[:, :, 3] + a_s, slope)  # (B, N, H)
    attn = torch.softmax(logit, dim=1)
    o_hub = torch.einsum("bnh,bnhd->bhd", attn, xc4).reshape(B, 1, C)

    # shortcut -from_hub-> cluster has one source per cluster: the softmax over one edge is 1
    o_from_hub = xs.expand(B, N, C)

    self_rel = conv.self_relation
    pend = [F.relu(xp)] if self_rel else []
    clus = [F.relu(xc)] if self_rel else []
    hub = [F.relu(xs)] if self_rel else []
    out = {
        "pending": _group(conv, pend + [F.relu(o_offers)], g.pending),
        "cluster": _group(conv, clus + [F.relu(o_wants), F.relu(o_runs), F.relu(o_from_hub)], None),
        "shortcut": _group(conv, hub + [F.relu(o_hub)], None),
    }
    if not last:
        # cluster -hosts-> running: one source (the running slot's cluster), weight 1
        rc = F.relu(xc)
        if g.run_cluster is None:
            o_hosts = rc.unsqueeze(2).expand(B, N, M, C).reshape(B * N * M, C)
        else:
            o_hosts = rc.reshape(B * N, C).index_select(0, g.run_cluster)
        run = [F.relu(xr), o_hosts] if self_rel else [o_hosts]
        out["running"] = _group(conv, run, g.running)
    return out


class DenseGraphEncoder(GraphEncoder):
    """:class:`~networks.han.GraphEncoder` (same parameters) with the dense forward pass.

    ``compact``: ``"auto"`` (default) computes only node rows (canonical pending slots,
    occupied running slots) on the CPU for batches of at least :data:`~networks.heads.COMPACT_MIN_BATCH`
    samples -- the masks are read on the host, free there, and duplicate/empty slots are most
    of the rows under load -- and the fully static layout everywhere else (accelerators,
    small CPU batches, ``torch.compile``); ``"never"``/``"always"`` force one layout. Both
    compute the same function.
    """

    def __init__(self, *args, auto_pyg: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for conv in self.han.convs:
            if conv.dropout:
                raise ValueError("the dense HAN encoder does not implement attention dropout")
        self.compact = "auto"
        #: run the torch-geometric reference (:meth:`GraphEncoder.forward`, same parameters) on
        #: CPU batches of at least COMPACT_MIN_BATCH samples, where it is the faster of the two; like
        #: this class's own pass, without the attention pass of the one-source relations
        self.auto_pyg = bool(auto_pyg)
        self.one_source = True

    def uses_pyg(self, obs: dict[str, Tensor]) -> bool:
        """Whether :meth:`forward` hands this batch to the torch-geometric reference."""
        return self.auto_pyg and compact_pays(obs["pending_mask"])

    def _use_compact(self, obs: dict[str, Tensor]) -> bool:
        return use_compact(self.compact, obs["pending_mask"])

    def forward(self, obs: dict[str, Tensor]) -> EncoderOutput:
        if self.uses_pyg(obs):
            return GraphEncoder.forward(self, obs)
        g = dense_structure(obs, compact=self._use_compact(obs))
        B, N, P, M = g.B, g.N, g.P, g.M
        x = {
            "pending": g.pending.take(obs["pending_x"].float().reshape(B * N * P, -1)),
            "running": g.running.take(obs["running_x"].float().reshape(B * N * M, -1)),
            "cluster": cluster_features(obs),
            "shortcut": obs["cluster_x"].new_ones(B, 1, 1, dtype=torch.float32),
        }
        han = self.han
        L = len(han.convs)
        if han.faithful:
            h = x
            for layer, conv in enumerate(han.convs):
                h = dense_conv(conv, h, g, last=layer == L - 1)
        else:
            h = {t: apply_linear(han.inp[t], v) for t, v in x.items()}
            for layer, (conv, norm) in enumerate(zip(han.convs, han.norms)):
                o = dense_conv(conv, h, g, last=layer == L - 1)
                h = {t: norm[t](h[t] + o[t]) for t in o}
        C = h["cluster"].shape[-1]
        task = h["pending"].index_select(0, g.slot_row).view(B, N, P, C)
        task = torch.where(g.occupied.unsqueeze(-1), task, self.dummy.to(task.dtype))
        return EncoderOutput(task=task, cluster=h["cluster"], glob=h["shortcut"].view(B, C),
                             canon=g.canon_flat.view(B, N, P))
