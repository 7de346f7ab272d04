"""HAN encoder: torch-geometric ``HANConv`` with per-graph semantic attention.

Stock ``HANConv`` averages the semantic-attention keys over *every* node of a type in the
mini-batch, so a sample's embedding depends on the other samples batched with it. :class:`PerGraphHANConv` keeps HANConv's parameters and
node-level attention but averages per graph, which makes each sample's output independent
of the batch. It can also add the *self* relation (a node's own projected features as one more
semantic input, equal to a self-loop edge type whose attention softmax is 1), so a node's
own features always reach its output (without it, nodes of one type with the same
neighbours get identical embeddings).

:class:`HANEncoder` stacks such layers. Default: input projections, then ``layers`` x
(HANConv, residual, LayerNorm); the residual carries a node's own features, so the self
relation is optional there (off by default: it would add a semantic-attention pass over
every node). ``faithful=True``: the paper's plain stack (first layer maps the raw inputs,
no residual, no normalisation), always with the self relation.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

with warnings.catch_warnings():  # torch-geometric scripts functions on import, which torch deprecates: nothing to act on
    warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)
    from torch_geometric.nn import HANConv
    from torch_geometric.utils import softmax as pyg_softmax

from .gemm import apply_linear, linear, scale_heads
from .graph import (
    METADATA, NODE_TYPES, ONE_SOURCE_RELATIONS, EncoderOutput, HeteroBatch, build_hetero_batch, cluster_input_dim,
)
from .pyg_modules import install as install_module_cache


def attention_matrix(atts: list[Tensor], eye: Tensor) -> Tensor:
    """Attention vectors ``(1, H, D)`` of ``R`` relation halves -> the ``(R*H, H*D)`` block
    matrix ``A`` with ``(x @ A.T)[r*H + h] = sum_d x[h, d] * att_r[h, d]`` (``eye``: ``(H, H)``
    identity in the features' dtype)."""
    att = torch.cat(atts)  # (R, H, D)
    R, H, D = att.shape
    return (att.unsqueeze(1) * eye.view(1, H, H, 1).to(att.dtype)).reshape(R * H, H * D)


class PerGraphHANConv(HANConv):
    """``HANConv`` whose semantic attention is computed per graph (sample), plus a self relation."""

    def __init__(self, in_channels, out_channels: int, metadata=METADATA, heads: int = 4,
                 self_relation: bool = True, **kwargs) -> None:
        super().__init__(in_channels, out_channels, metadata, heads=heads, **kwargs)
        self.self_relation = bool(self_relation)

    def forward(  # type: ignore[override]
        self,
        x_dict: dict[str, Tensor],
        edge_index_dict: dict[tuple[str, str, str], Tensor],
        batch_dict: dict[str, Tensor],
        num_graphs: int,
        one_source: tuple[tuple[str, str, str], ...] = (),
    ) -> dict[str, Tensor]:
        """Node embeddings by type. ``one_source``: relations whose every destination node has
        exactly one incoming edge, edge ``i`` into node ``i`` (:data:`~networks.graph.ONE_SOURCE_RELATIONS`):
        their attention over one edge is exactly 1, so the message is the source's projected
        features, gathered without the attention pass (the same outputs; the relation's
        attention vectors get no gradient instead of an exactly zero one). Attention dropout
        would drop such messages at random, so ``one_source`` needs ``dropout == 0``."""
        if one_source and self.dropout:
            raise ValueError("one_source relations skip the attention pass: they need dropout == 0")
        H, D = self.heads, self.out_channels // self.heads
        xn = {t: apply_linear(self.proj[t], x) for t, x in x_dict.items()}  # (n, C) per type
        attended = [e for e in edge_index_dict if e not in one_source]
        logits = self._attention_logits(xn, attended)
        outs: dict[str, list[Tensor]] = {t: [] for t in x_dict}
        if self.self_relation:
            for t, h in xn.items():
                outs[t].append(F.relu(h))
        for edge_type, edge_index in edge_index_dict.items():
            src, _, dst = edge_type
            x_src = xn[src]
            if edge_type in one_source:
                outs[dst].append(F.relu(x_src.index_select(0, edge_index[0])))
                continue
            alpha_src, alpha_dst = logits[edge_type]
            out = self._relation(edge_index, x_src.view(-1, H, D), alpha_src, alpha_dst, xn[dst].shape[0])
            outs[dst].append(F.relu(out))
        return {t: self._group(o, batch_dict[t], num_graphs) for t, o in outs.items()}

    def _attention_logits(
        self, xn: dict[str, Tensor], edge_types: list[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], tuple[Tensor, Tensor]]:
        """Per relation, the source and destination halves of the node-level attention logit
        (``(x * att).sum(-1)`` per head, HANConv's ``lin_src``/``lin_dst``): every half a node
        type takes part in comes out of one thin matrix product on its features (fewer passes; and
        the backward of the product-and-sum form broadcasts over ``D``-value rows, the bfloat16
        slow path on CPU described at :func:`~networks.gemm.scale_heads`)."""
        H = self.heads
        parts: dict[str, list[tuple[tuple[str, str, str], int]]] = {}
        for e in edge_types:
            parts.setdefault(e[0], []).append((e, 0))
            parts.setdefault(e[2], []).append((e, 1))
        halves: dict[tuple[tuple[str, str, str], int], Tensor] = {}
        any_x = next(iter(xn.values()))
        eye = torch.eye(H, dtype=any_x.dtype, device=any_x.device)
        for t, needed in parts.items():
            atts = [(self.lin_src if side == 0 else self.lin_dst)["__".join(e)] for e, side in needed]
            a = linear(xn[t], attention_matrix(atts, eye)).view(-1, len(needed), H)
            for k, key in enumerate(needed):
                halves[key] = a[:, k]
        return {e: (halves[(e, 0)], halves[(e, 1)]) for e in edge_types}

    def _relation(self, edge_index: Tensor, x_src: Tensor, alpha_src: Tensor, alpha_dst: Tensor, n_dst: int) -> Tensor:
        """Node-level attention of one relation: exactly ``HANConv.message`` + sum aggregation,
        written with index ops (avoids ``MessagePassing.propagate``'s per-call overhead)."""
        src, dst = edge_index[0], edge_index[1]
        alpha = F.leaky_relu(alpha_src.index_select(0, src) + alpha_dst.index_select(0, dst), self.negative_slope)
        alpha = pyg_softmax(alpha, dst, None, n_dst)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        # the product in the features' dtype: under bfloat16 autocast a float32 ``alpha`` would
        # make it a mixed-dtype product, several times slower on CPU
        msg = scale_heads(x_src.index_select(0, src), alpha.to(x_src.dtype))  # (E, H, D)
        out = msg.new_zeros((n_dst,) + tuple(msg.shape[1:])).index_add_(0, dst, msg)
        return out.view(n_dst, self.out_channels)

    def _group(self, xs: list[Tensor], batch: Tensor, num_graphs: int) -> Tensor:
        """Semantic attention over relations, with the key mean taken per graph."""
        if len(xs) == 1:
            return xs[0]  # softmax over one relation is 1
        out = torch.stack(xs)  # (R, n, C)
        R, n, C = out.shape
        if n == 0:
            return out.new_zeros(0, C)
        keys = torch.tanh(apply_linear(self.k_lin, out))  # (R, n, C)
        sums = keys.new_zeros(R, num_graphs, C).index_add_(1, batch, keys)
        counts = torch.bincount(batch, minlength=num_graphs).clamp(min=1).to(out.dtype)
        score = (self.q * (sums / counts.view(1, -1, 1))).sum(-1)  # (R, G)
        attn = torch.softmax(score, dim=0).index_select(1, batch)  # (R, n)
        return (attn.unsqueeze(-1).to(out.dtype) * out).sum(0)


class HANEncoder(nn.Module):
    """Stack of :class:`PerGraphHANConv` over the four node types; returns node embeddings."""

    def __init__(self, in_dims: dict[str, int], hidden: int = 128, layers: int = 3, heads: int = 4,
                 faithful: bool = False, self_relation: bool = False) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        if layers < 1:
            raise ValueError(f"HAN layers must be >= 1, got {layers}")
        self.faithful = bool(faithful)
        self.hidden = hidden
        if self.faithful:
            self.inp = None
            dims = [dict(in_dims)] + [hidden] * (layers - 1)
            self.convs = nn.ModuleList(
                PerGraphHANConv(d, hidden, METADATA, heads=heads, self_relation=True) for d in dims
            )
            self.norms = None
        else:
            self.inp = nn.ModuleDict({t: nn.Linear(in_dims[t], hidden) for t in NODE_TYPES})
            self.convs = nn.ModuleList(
                PerGraphHANConv(hidden, hidden, METADATA, heads=heads, self_relation=self_relation)
                for _ in range(layers)
            )
            self.norms = nn.ModuleList(
                nn.ModuleDict({t: nn.LayerNorm(hidden) for t in NODE_TYPES}) for _ in range(layers)
            )

    def forward(self, g: HeteroBatch, one_source: bool = False) -> dict[str, Tensor]:
        """Node embeddings of ``g``; ``one_source``: gather the messages of the
        :data:`~networks.graph.ONE_SOURCE_RELATIONS` without their (trivial) attention pass (see
        :meth:`PerGraphHANConv.forward`)."""
        single = ONE_SOURCE_RELATIONS if one_source else ()
        if self.faithful:
            h = g.x
            for conv in self.convs:
                h = conv(h, g.edge_index, g.batch, g.num_graphs, single)
            return h
        h = {t: apply_linear(self.inp[t], x) for t, x in g.x.items()}
        for conv, norm in zip(self.convs, self.norms):
            o = conv(h, g.edge_index, g.batch, g.num_graphs, single)
            h = {t: norm[t](h[t] + o[t]) for t in h}
        return h


class GraphEncoder(nn.Module):
    """Observation tensors -> :class:`~networks.graph.EncoderOutput` through the HAN encoder."""

    def __init__(self, pending_features: int, running_features: int, cluster_features: int,
                 hidden: int = 128, layers: int = 3, heads: int = 4, faithful: bool = False,
                 self_relation: bool = False) -> None:
        super().__init__()
        in_dims = {
            "pending": pending_features,
            "running": running_features,
            "cluster": cluster_input_dim(cluster_features),
            "shortcut": 1,
        }
        self.han = HANEncoder(in_dims, hidden, layers, heads, faithful, self_relation)
        self.dummy = nn.Parameter(torch.zeros(hidden))
        #: skip the attention pass of one-source relations (False: the plain reference)
        self.one_source = False

    def forward(self, obs: dict[str, Tensor]) -> EncoderOutput:
        g = build_hetero_batch(obs)
        h = self.han(g, one_source=self.one_source)
        B, N, P = g.slot_node.shape
        table = torch.cat([h["pending"], self.dummy.unsqueeze(0).to(h["pending"].dtype)], dim=0)
        # index_select: much faster than advanced indexing (table[slot_node]) on CPU, backward included
        task = table.index_select(0, g.slot_node.reshape(-1)).view(B, N, P, -1)
        return EncoderOutput(task=task, cluster=h["cluster"].view(B, N, -1), glob=h["shortcut"])


install_module_cache()  # torch-geometric's generated propagate modules: one reused file per class
