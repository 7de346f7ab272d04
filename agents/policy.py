"""The TapFinger policy: encoder, pointer, Bayes conflict resolution, allocation head, critic.

One forward pass serves a whole batch of observations (padded tensors with a leading batch
dimension ``B``) and all ``N`` agents at once:

1. the encoder (HAN over the batched heterogeneous graph, or an MLP for the ablations) gives
   per-slot task embeddings and cluster embeddings;
2. every agent turns its ``P`` slots into agent-specific slot embeddings (task embedding
   plus its own cluster's embedding, so one set of weights serves any number of clusters);
3. task selection: pointer network over feasible slots (``tapfinger``, ``no-han``), uniform
   over feasible slots (``no-pointer``) or the earliest feasible slot (``vanilla``, FIFO);
   each variant's encoder and selector come from the registry :mod:`agents.variants`;
4. conflicts between agents that picked the same task: Bayes rule (eq. 11,
   :mod:`agents.conflict`);
5. allocation: 2-layer MLP on the selected slot's embedding, masked to
   ``[min requirement, min(free, per-task max)]`` plus the void action (eq. 12).

Log-probabilities and entropies follow eqs. 13-14: an agent with no feasible slot is
*skipped* (contributes 0); a conflict loser keeps the selection term and drops the
allocation term. :meth:`TapFingerPolicy.evaluate_actions` recomputes them from the stored
observation and action (slot, allocation, lost flag), never by re-sampling.

Under bfloat16 autocast (``train.precision``, :mod:`agents.precision`) the network passes run
with bfloat16 matrix products; the selection and allocation logits and the values are cast to
float32 before any distribution computation (log-softmax, sampling, conflicts, entropies).
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.config_section import ConfigSection, at_least, one_of, rule
from agents.conflict import (
    CONFLICT_MODES, PRIORS, SEQUENTIAL_MODES, TIE_TOLERANCE, Generators, resolve_conflicts, uniform,
)
from agents.train_config import COMPILE_MODES
from agents.variants import DEFAULT_VARIANT, VARIANT_NAMES, PolicyVariant, get_variant
from envs.observation import KEYS
from envs.observation import ObservationSpec
from networks.dense_han import DenseGraphEncoder
from networks.gemm import bucket_rows, buckets_rows, rows_prebucketed
from networks.graph import EncoderOutput, canonical_slots
from networks.han import GraphEncoder
from networks.heads import MASK_VALUE, AllocationHead, CentralCritic, SlotProjector, use_compact
from networks.mlp_encoder import MLPEncoder
from networks.pointer import PointerNet

#: variant names, in registry order (the registry, with encoder and selector, is agents/variants.py)
POLICY_VARIANTS = VARIANT_NAMES
ENCODERS = ("auto", "dense", "pyg")
#: compact pointer rows are split into up to this many slot widths (:func:`pointer_row_groups`)
POINTER_WIDTH_GROUPS = 2
#: dtypes :meth:`TapFingerPolicy.as_tensors` gives the mask and index arrays of the observation
_OBS_DTYPES = {
    "pending_mask": torch.bool, "feasible": torch.bool, "running_mask": torch.bool,
    "pending_where": torch.int64, "pending_min": torch.int64, "alloc_high": torch.int64,
}


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------
@dataclass
class PolicyConfig(ConfigSection):
    """Architecture of a :class:`TapFingerPolicy` (stored in every checkpoint).

    ``variant``: a variant name of :data:`agents.variants.VARIANTS`, the registry that gives its
    encoder (HAN or MLP) and task selector (pointer, uniform or FIFO); :attr:`variant_spec` is
    its entry. ``hidden``/``han_layers``/``heads``: HAN encoder size. ``faithful``: the paper's
    plain HANConv stack (no input projection, residual or LayerNorm; see :meth:`paper` for the
    paper's sizes). ``self_relation``: add the self relation to the residual stack too (always
    on when faithful). ``pointer_dim``/``pointer_ffn``/``pointer_layers``/``pointer_heads``:
    pointer transformer size. ``mlp_layers``: depth of the MLP encoder (``no-han``, ``vanilla``). ``shared_actors``: one
    set of actor/critic-head weights for any number of clusters (False: one per agent, the
    paper's layout, tied to the scenario's N). ``conflicts``: how agents that want the same
    task are reconciled (:data:`agents.conflict.CONFLICT_MODES`): ``bayes`` (default, paper
    eq. 11: independent choices, one winner per task, the others lose the step),
    ``sequential`` (agents choose in index order, each over the tasks no earlier agent started)
    or ``room`` (the same in order of decreasing free room, :func:`room_order`).
    ``prior``: the Bayes conflict prior, ``paper`` (eq. 11) or ``code`` (the reference code's
    softmax). ``encoder``: how the HAN runs, ``dense``
    (masked attention over the padded observation axes, static shapes, no host sync), ``pyg``
    (the reference: a torch-geometric heterogeneous graph built per forward) or ``auto``
    (default: ``pyg`` for CPU batches of 8 or more, where it measured faster, ``dense``
    otherwise: batch-1 scheduling rounds and accelerators); all hold the same parameters and
    compute the same function (to float round-off), so any checkpoint loads into any of them.
    """

    variant: str = DEFAULT_VARIANT  # tapfinger, no-han, no-pointer or vanilla (agents/variants.py)
    hidden: int = 128  # HAN encoder width
    han_layers: int = 3  # HAN layers
    heads: int = 4  # HAN attention heads
    faithful: bool = False  # the paper's plain HANConv stack (no input projection, residual or LayerNorm)
    self_relation: bool = False  # add the self relation to the residual stack (always on when faithful)
    shared_actors: bool = True  # one set of actor/critic-head weights for any N (false: one per agent, the paper's)
    prior: str = "paper"  # Bayes conflict prior: paper (eq. 11) or code (the reference code's softmax)
    conflicts: str = "bayes"  # bayes (the paper), sequential (index order) or room (decreasing free room)
    pointer_dim: int = 64  # pointer transformer width
    pointer_layers: int = 2  # pointer transformer layers
    pointer_heads: int = 4  # pointer attention heads
    pointer_ffn: int = 128  # pointer feed-forward width
    mlp_layers: int = 4  # depth of the MLP encoder (no-han, vanilla)
    alloc_head: str = "factorised"  # allocation head form (networks/heads.py AllocationHead.FORMS)
    encoder: str = "auto"  # how the HAN runs: dense, pyg, or auto (pyg for CPU batches of 8+, else dense)

    #: fields that choose how the parameters are run, not which parameters exist: a checkpoint
    #: trained with any value of them starts a run with any other (``train.init_from``)
    RUNTIME_FIELDS = ("encoder", "prior", "conflicts")

    # declared once (envs/config_section.py): built from a mapping with from_dict (typed,
    # unknown keys refused), validated on construction: field types, then these checks in order
    SECTION = "policy"
    CHECKS = (
        one_of("variant", VARIANT_NAMES),
        one_of("alloc_head", AllocationHead.FORMS),
        one_of("encoder", ENCODERS),
        one_of("prior", PRIORS),
        one_of("conflicts", CONFLICT_MODES),
        *(at_least(name, 1) for name in ("hidden", "han_layers", "heads", "pointer_dim", "pointer_layers",
                                         "pointer_heads", "pointer_ffn", "mlp_layers")),
        rule(lambda c: c.hidden % c.heads == 0, "hidden ({hidden}) must be divisible by heads ({heads})"),
        rule(lambda c: c.pointer_dim % c.pointer_heads == 0,
             "pointer_dim ({pointer_dim}) must be divisible by pointer_heads ({pointer_heads})"),
    )

    @classmethod
    def paper(cls, variant: str = DEFAULT_VARIANT, **overrides: Any) -> "PolicyConfig":
        """The paper's sizes: plain 6-layer HAN, 4 heads, hidden 256, unshared actors, and the
        reference pointer (d_model 256, feed-forward 2048)."""
        base = dict(variant=variant, hidden=256, han_layers=6, heads=4, faithful=True, shared_actors=False,
                    pointer_dim=256, pointer_ffn=2048, alloc_head="joint")
        base.update(overrides)
        return cls(**base)

    @property
    def variant_spec(self) -> PolicyVariant:
        """The registry entry of :attr:`variant` (its encoder and selector kinds)."""
        return get_variant(self.variant)


# ---------------------------------------------------------------------------------------
# Observation helpers
# ---------------------------------------------------------------------------------------
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


def _free_fraction(obs: Mapping[str, Tensor]) -> Tensor:
    """Free (CPU, GPU) per cluster over the scenario's largest capacity: ``cluster_x``'s first
    two features, ``(B, N, 2)``."""
    return obs["cluster_x"][..., :2]


def _free_resources(obs: dict[str, Tensor], scale: Tensor | None) -> Tensor:
    """Free (CPU, GPU) per cluster: de-normalised ``cluster_x`` if the scale is known."""
    if scale is None:
        return obs["alloc_high"].to(torch.float64)
    return torch.round(_free_fraction(obs).to(torch.float64) * scale.to(torch.float64))


def _first_argmax(logp: Tensor) -> Tensor:
    """Deterministic choice: the lowest index whose log-probability is within
    :data:`~agents.conflict.TIE_TOLERANCE` of the best. Choices that are equal in exact
    arithmetic (slots holding tasks of the same type and age) then resolve the same way whatever
    float round-off the encoder implementation or the batch size leaves on them."""
    near = logp >= logp.max(-1, keepdim=True).values - TIE_TOLERANCE
    return near.to(torch.uint8).argmax(-1)


@dataclass
class ActNoise:
    """Every random draw of one :meth:`TapFingerPolicy.act` call, made up front by
    :func:`draw_act_noise`, so that the sampling pass itself is a function of tensors only (no
    generator inside: ``torch.compile`` traces it whole, and an accelerator can replay it as one
    CUDA graph). Uniforms in ``[0, 1)``; ``None`` where the call draws nothing."""

    selection: Tensor | None  # (B, N, P) float32: the slot's Gumbel noise (sampling only)
    tie: Tensor | None  # (B, N) float64: Bayes conflict tie-breaks (``conflicts="bayes"`` only)
    allocation: Tensor | None  # (B, N, A) float32: the allocation's Gumbel noise (sampling only)


def draw_act_noise(
    shape: tuple[int, int, int, int], conflicts: str, deterministic: bool, generator: Generators,
    device: torch.device,
) -> ActNoise:
    """The draws of one ``act()`` on a batch ``shape = (B, N, P, A)``, from ``generator``
    (:data:`~agents.conflict.Generators`) in the order the pass uses them: selection noise,
    then (Bayes) the conflict tie-breaks, drawn even when acting deterministically so the
    stream advances alike, then the allocation noise."""
    B, N, P, A = shape
    sample = not deterministic
    return ActNoise(
        selection=uniform((B, N, P), generator, device, torch.float32) if sample else None,
        tie=None if conflicts in SEQUENTIAL_MODES else uniform((B, N), generator, device, torch.float64),
        allocation=uniform((B, N, A), generator, device, torch.float32) if sample else None,
    )


def _gumbel(u: Tensor) -> Tensor:
    """Gumbel noise from uniforms ``u``."""
    return -torch.log(-torch.log(u.clamp(min=1e-20, max=1.0 - 1e-7)))


def _gumbel_argmax(logits: Tensor, u: Tensor) -> Tensor:
    """A sample of ``softmax(logits)`` over the last axis by the Gumbel-max trick on uniforms ``u``."""
    return (logits + _gumbel(u)).argmax(-1)


def _needs(noise: ActNoise | None, name: str) -> Tensor:
    """``noise``'s draw ``name``; a clear error where the caller drew none."""
    u = None if noise is None else getattr(noise, name)
    if u is None:
        raise ValueError(f"this pass needs the {name} noise of draw_act_noise")
    return u


def _sequential_choice(
    logits: Tensor,
    key: Tensor,
    feasible: Tensor,
    skip: Tensor,
    alloc_logp: Callable[[int | Tensor, Tensor], Tensor] | None = None,
    chosen: Tensor | None = None,
    deterministic: bool = False,
    noise: ActNoise | None = None,
    order: Tensor | None = None,
) -> tuple[Tensor, Tensor | None, Tensor, Tensor | None, Tensor]:
    """Choices with ``conflicts="sequential"`` or ``"room"``: agents choose one after another,
    and a task started by an earlier agent (``key (B, N, P)``: the task id of each slot) is
    masked for the later ones, so no two agents ever claim the same task. The order is the
    agents' index order, or per sample ``order (B, N)`` (position -> agent; :func:`room_order`
    for ``"room"``). An agent whose feasible tasks are all
    taken is *blocked*: it has no choice this step and, like a skipped agent, adds nothing to
    the loss. Only a start claims its task (a slot chosen with the void allocation does not),
    so later agents may still take a task an earlier one declined.

    Choosing: ``alloc_logp(i, slot)`` gives agent ``i``'s allocation log-probabilities ``(B, A)``
    at ``slot (B,)``, drawn right after the slot; sampling takes its ``(B, N, P)`` and
    ``(B, N, A)`` uniforms, indexed by agent, from ``noise`` (:func:`draw_act_noise`; required
    unless ``deterministic``). Re-evaluation: ``chosen (B, N, 2)`` are
    stored ``(slot, allocation)`` pairs, whose masks are rebuilt from them. Returns ``(slot
    (B, N), allocation (B, N), masked selection log-probabilities (B, N, P), allocation
    log-probabilities at the slot (B, N, A), blocked (B, N))``; the two allocation entries are
    ``None`` when re-evaluating.
    """
    B, N, P = logits.shape
    sampling = chosen is None and not deterministic
    # ordered: every per-agent input is put in choosing order once, the outputs back at the end
    to_pos = (lambda t: t) if order is None else (lambda t: _along_agents(t, order))
    logits, key, feasible, skip = to_pos(logits), to_pos(key), to_pos(feasible), to_pos(skip)
    noise_sel = _gumbel(to_pos(_needs(noise, "selection"))) if sampling else None
    noise_alloc = _gumbel(to_pos(_needs(noise, "allocation"))) if sampling else None  # (B, N, A), by agent
    stored = None if chosen is None else to_pos(chosen)
    claimed = torch.zeros(B, N * P, dtype=torch.bool, device=logits.device)
    slots, allocs, logps, alloc_logps, blocked = [], [], [], [], []
    for j in range(N):
        free = feasible[:, j] & ~claimed.gather(1, key[:, j])  # (B, P)
        block = ~skip[:, j] & ~free.any(-1)
        logp = F.log_softmax(logits[:, j].masked_fill(~free, MASK_VALUE), dim=-1)
        if stored is not None:
            slot, alloc = stored[:, j, 0], stored[:, j, 1]
        else:
            slot = _first_argmax(logp) if noise_sel is None else (logp + noise_sel[:, j]).argmax(-1)
            al = alloc_logp(j if order is None else order[:, j], slot)
            alloc = _first_argmax(al) if noise_alloc is None else (al + noise_alloc[:, j]).argmax(-1)
            allocs.append(alloc)
            alloc_logps.append(al)
        task = key[:, j].gather(1, slot.unsqueeze(1))  # (B, 1)
        starts = (~skip[:, j] & ~block & (alloc > 0)).unsqueeze(1)
        claimed = claimed.scatter(1, task, claimed.gather(1, task) | starts)
        slots.append(slot)
        logps.append(logp)
        blocked.append(block)
    out = [torch.stack(x, 1) if x else None for x in (slots, allocs, logps, alloc_logps, blocked)]
    if order is not None:  # position -> agent
        out = [None if x is None else _to_agents(x, order) for x in out]
    return out[0], out[1], out[2], out[3], out[4]


def _agent(t: Tensor, i: int | Tensor) -> Tensor:
    """Agent ``i``'s entries of ``t (B, N, ...)``: one agent for all samples, or ``i (B,)`` per sample."""
    if isinstance(i, int):
        return t[:, i]
    return t[torch.arange(t.shape[0], device=t.device), i]


def _order_index(order: Tensor, like: Tensor) -> Tensor:
    return order.view(*order.shape, *([1] * (like.dim() - 2))).expand_as(like)


def _along_agents(t: Tensor, order: Tensor) -> Tensor:
    """``t (B, N, ...)`` in choosing order: position ``j`` holds agent ``order[:, j]``'s entries."""
    return t.gather(1, _order_index(order, t))


def _to_agents(by_position: Tensor, order: Tensor) -> Tensor:
    """Put ``by_position (B, N, ...)``, indexed by choosing position, back in agent order."""
    return torch.empty_like(by_position).scatter(1, _order_index(order, by_position), by_position)


def room_order(free_fraction: Tensor) -> Tensor:
    """``conflicts="room"``: the agents' choosing order, ``(B, N)`` position -> agent, by
    decreasing free room (``free_fraction (B, N, K)``: each cluster's free resources over the
    scenario's largest capacity, summed over the resources); equal room keeps index order."""
    return torch.argsort(-free_fraction.sum(-1), dim=1, stable=True)


def _entropy(logp: Tensor) -> Tensor:
    """Entropy of normalised log-probabilities over the last axis. The probabilities come from
    a softmax of ``logp`` (equal to ``exp(logp)``, the same gradient with respect to the logits):
    on CPU ``exp`` of the masked entries (~-1e9) takes a slow path, ~10x the time of the
    softmax's own vectorised exponential."""
    return -(torch.softmax(logp, dim=-1) * logp).sum(-1)


def _masked_terms(
    skip: Tensor, lost: Tensor, sel_logp: Tensor, lp_sel: Tensor, al_logp: Tensor, lp_alloc: Tensor
) -> tuple[Tensor, Tensor]:
    """Eqs. 13-14 per agent: skipped -> 0; conflict loser -> selection term only; else both."""
    zero = torch.zeros_like(lp_sel)
    log_prob = torch.where(skip, zero, lp_sel + torch.where(lost, zero, lp_alloc))
    entropy = torch.where(skip, zero, _entropy(sel_logp) + torch.where(lost, zero, _entropy(al_logp)))
    return log_prob, entropy


@dataclass
class PointerRowGroup:
    """Agents whose needed slots fit one width (:func:`pointer_row_groups`).

    ``rows (R',)``: flat agent ids ``b * N + i`` (padded to a bucket under bfloat16 on CPU by
    repeating the first); ``slots (R', w)``: flat slot ids ``row * P + p``, each agent's needed
    slots first (in slot order); ``count``: the number of real rows (the first ``count``).
    """

    rows: Tensor
    slots: Tensor
    count: int


def pointer_widths(P: int, groups: int = POINTER_WIDTH_GROUPS) -> tuple[int, ...]:
    """The slot widths compact pointer rows run at: ``ceil(P * k / groups)`` for ``k = 1..groups``
    (distinct, ascending, the last ``P``)."""
    return tuple(sorted({-(-P * k // groups) for k in range(1, groups + 1)}))


def pointer_row_groups(occupied: Tensor, feasible: Tensor, pad: bool = False) -> list[PointerRowGroup]:
    """Split the agents with a feasible slot by the slots they need (occupied or feasible).

    ``occupied``, ``feasible``: ``(R, P)`` bool, one row per agent. Each agent joins the group of
    the smallest width of :func:`pointer_widths` that holds its needed slots; agents with no
    feasible slot join none. The pointer is permutation-equivariant over slots and never lets an
    unneeded slot reach a needed one (masked keys, masked logits), so running each group at
    its width gives the needed slots the full rows' logits. ``pad``: pad each group's rows to a
    bucket (:func:`networks.gemm.bucket_rows`). Groups with no agent are left out.
    """
    P = feasible.shape[-1]
    need_mask = occupied | feasible
    need = need_mask.sum(-1).masked_fill_(~feasible.any(-1), 0)
    out, below = [], 0
    for w in pointer_widths(P):
        rows = ((need > below) & (need <= w)).nonzero().squeeze(1)
        below = w
        count = rows.numel()
        if not count:
            continue
        if pad:
            rows = torch.cat([rows, rows[:1].expand(bucket_rows(count) - count)])
        # needed slots first, each agent's slot order kept (stable); the first w hold them all
        order = torch.argsort((~need_mask.index_select(0, rows)).to(torch.uint8), dim=1, stable=True)[:, :w]
        out.append(PointerRowGroup(rows, rows.unsqueeze(1) * P + order, count))
    return out


@dataclass
class ActOutput:
    """Result of :meth:`TapFingerPolicy.act` (all tensors have leading dims ``(B, N)``)."""

    action: Tensor  # (B, N, 3) long: slot, allocation index, lost flag
    log_prob: Tensor  # (B, N)
    entropy: Tensor  # (B, N)
    skip: Tensor  # (B, N) bool
    value: Tensor | None = None  # (B, N) when requested
    extra: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class PolicyDistributions:
    """Result of :meth:`TapFingerPolicy.distributions` (leading dims ``(B, N)``)."""

    selection: Tensor  # (B, N, P) log-probabilities of the pending slots
    allocation: Tensor  # (B, N, P, A) log-probabilities of the allocations, for every slot
    skip: Tensor  # (B, N) bool: the agent has no feasible slot
    value: Tensor  # (B, N) critic values


# ---------------------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------------------
class TapFingerPolicy(nn.Module):
    """Actor-critic for all agents of a scenario; see the module docstring."""

    def __init__(self, spec: Any, cfg: PolicyConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg or PolicyConfig()
        self.spec = spec
        d = spec_dims(spec)
        self.dims = d
        self.alloc_dims = d["alloc_dims"]
        c = self.cfg
        H = c.hidden
        #: the variant's registry entry: which encoder (HAN or MLP) and task selector it builds
        self.variant = c.variant_spec
        if self.variant.encoder == "han":
            sizes = dict(hidden=H, layers=c.han_layers, heads=c.heads, faithful=c.faithful,
                         self_relation=c.self_relation)
            dims = (d["pending_features"], d["running_features"], d["cluster_features"])
            if c.encoder == "pyg":
                self.encoder: nn.Module = GraphEncoder(*dims, **sizes)
            else:
                self.encoder = DenseGraphEncoder(*dims, auto_pyg=c.encoder == "auto", **sizes)
        else:
            self.encoder = MLPEncoder(d["pending_features"], d["cluster_features"], hidden=H, layers=c.mlp_layers)
        n_act = 1 if c.shared_actors else d["N"]
        self.n_actor_sets = n_act
        uses_pointer = self.variant.selector == "pointer"
        self.slot_proj = SlotProjector(n_act, H, c.pointer_dim) if uses_pointer else None
        self.pointer = (
            PointerNet(n_act, c.pointer_dim, c.pointer_layers, c.pointer_heads, c.pointer_ffn) if uses_pointer else None
        )
        self.alloc_head = AllocationHead(n_act, H, self.alloc_dims, c.alloc_head)
        self.critic = CentralCritic(n_act, H)
        #: pointer rows: "auto" = only agents with a feasible slot on CPU batches (see _pointer_logits)
        self.pointer_compact = "auto"
        #: compiled passes by name (empty: eager); see :meth:`compile_passes`
        self._compiled: dict[str, Callable[..., Any]] = {}
        scale = getattr(spec, "scale", None)
        self.register_buffer(
            "free_scale", torch.tensor(scale, dtype=torch.float64) if scale is not None else torch.zeros(0),
            persistent=False,
        )

    # ------------------------------------------------------------------ building blocks
    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def as_tensors(self, obs: Mapping[str, Any]) -> dict[str, Tensor]:
        """The observation's arrays as tensors on the policy's device (numpy, tensors or any
        mapping-like batch with the contract's keys and a leading batch dimension).

        Masks become ``bool`` and index arrays ``int64`` once here, so the layers after it do
        not convert them again (float features keep their dtype)."""
        device = self.device
        try:
            out = {k: torch.as_tensor(obs[k], device=device) for k in KEYS}
        except (KeyError, AttributeError):
            missing = [k for k in KEYS if k not in obs]
            raise ValueError(f"observation lacks key(s) {missing}") from None
        for k, dtype in _OBS_DTYPES.items():
            out[k] = out[k].to(dtype)
        shape = out["pending_mask"].shape
        if len(shape) != 3:
            raise ValueError(f"pending_mask must be (B, N, P) with a batch dimension, got shape {tuple(shape)}")
        B, N, P = shape
        if P != self.dims["P"]:
            raise ValueError(f"observation has {P} pending slots, the policy was built for {self.dims['P']}")
        if self.n_actor_sets > 1 and N != self.n_actor_sets:
            raise ValueError(f"observation has {N} clusters, the unshared actors were built for {self.n_actor_sets}")
        return out

    def compile_passes(self, mode: str = "default") -> "TapFingerPolicy":
        """``torch.compile`` the policy's passes in place: acting whole (:meth:`act`: encoder,
        selection, sampling, conflict resolution and allocation, on noise drawn up front by
        :func:`draw_act_noise`; one graph without breaks in the static layout, so
        ``reduce-overhead`` can replay it as one CUDA graph), and for the update the encoder,
        the selection logits and the allocation logits (the loss terms stay eager).

        Parameters, state-dict names and outputs are unchanged (to float round-off), so
        checkpoints stay interchangeable with eager policies. Under compilation the dense HAN
        encoder takes its static layout. ``mode`` is a ``torch.compile`` mode (:data:`COMPILE_MODES`;
        ``reduce-overhead`` replays CUDA graphs on a GPU). The first calls of each new batch shape
        compile (tens of seconds on a small CPU). Returns ``self``.
        """
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile mode must be one of {COMPILE_MODES}, got {mode!r}")
        self._compiled = {
            "encode": torch.compile(self.encoder.forward, mode=mode),
            "selection": torch.compile(self._selection_logits_eager, mode=mode),
            "allocation": torch.compile(self._alloc_logits_eager, mode=mode),
        }
        # acting whole, sampling and conflicts included: its draws come in as tensors
        # (draw_act_noise), so the pass has no generator, no data-dependent shape and no
        # host synchronisation in the static layout, and traces as one graph
        self._compiled["act"] = torch.compile(self._act, mode=mode)
        return self

    def encode(self, obs: Mapping[str, Tensor]) -> EncoderOutput:
        """Run the encoder (graph building included) on tensors from :meth:`as_tensors`."""
        fn = self._compiled.get("encode")
        return fn(obs) if fn is not None else self.encoder(obs)

    def _selection_logits(self, obs: Mapping[str, Tensor], enc: EncoderOutput) -> Tensor:
        """Masked selection logits ``(B, N, P)`` (compiled by :meth:`compile_passes`)."""
        fn = self._compiled.get("selection")
        return (fn(obs, enc) if fn is not None else self._selection_logits_eager(obs, enc)).float()

    def _alloc_logits(self, obs: Mapping[str, Tensor], enc: EncoderOutput, slot: Tensor) -> Tensor:
        """Masked allocation logits ``(B, N, A)`` of each agent's slot ``slot (B, N)``."""
        fn = self._compiled.get("allocation")
        return (fn(obs, enc, slot) if fn is not None else self._alloc_logits_eager(obs, enc, slot)).float()

    def _selection_logits_eager(self, obs: Mapping[str, Tensor], enc: EncoderOutput) -> Tensor:
        feasible = obs["feasible"].bool()
        if self.pointer is not None:
            return self._pointer_logits(enc, obs["pending_mask"].bool(), feasible)
        zeros = torch.zeros(feasible.shape, device=enc.task.device, dtype=enc.task.dtype)
        if self.variant.selector == "uniform":
            return zeros.masked_fill(~feasible, MASK_VALUE)
        first = feasible.to(torch.uint8).argmax(-1, keepdim=True)  # earliest feasible slot (FIFO)
        pick = torch.zeros_like(feasible).scatter_(-1, first, True)
        return zeros.masked_fill(~pick, MASK_VALUE)

    def _pointer_logits(self, enc: EncoderOutput, occupied: Tensor, feasible: Tensor) -> Tensor:
        """Slot projection + pointer network -> masked selection logits ``(B, N, P)``.

        On CPU batches (:func:`~networks.heads.compact_pays`) with shared actor weights only
        the agents that have a feasible slot are computed (25-60% of them are skipped in
        training data) and the others get :data:`MASK_VALUE` everywhere, which is
        exactly what the full computation gives them; :attr:`pointer_compact` (``"auto"``,
        ``"never"``, ``"always"``) overrides the choice. The computed agents are split further
        by the slots they need (occupied or feasible; :func:`pointer_row_groups`): each group
        runs at its own slot width, so the empty slots past an agent's queue, which cannot
        change its logits (they are masked keys and masked choices), are mostly not computed.
        Both layouts compute the same function (to float round-off). Under bfloat16 autocast
        each group's rows are padded to a bucket (:mod:`networks.gemm`).
        """
        compact = use_compact(self.pointer_compact, feasible, "pointer_compact")
        if not compact or self.n_actor_sets > 1:  # per-agent weights need the agent axis: full rows
            return self.pointer(self.slot_proj(enc.task, enc.cluster), occupied, feasible)
        B, N, P = feasible.shape
        H = enc.task.shape[-1]
        occ, feas = occupied.reshape(B * N, P), feasible.reshape(B * N, P)
        pad = buckets_rows(enc.task)
        groups = pointer_row_groups(occ, feas, pad=pad)
        if not groups:
            return enc.task.new_full((B, N, P), MASK_VALUE)
        # one gather for all groups (one scatter in the backward), then a view per group
        slots = torch.cat([g.slots.reshape(-1) for g in groups])
        sizes = [g.slots.numel() for g in groups]
        task = enc.task.reshape(B * N * P, H).index_select(0, slots).split(sizes)
        cluster = enc.cluster.reshape(B * N, H).index_select(0, torch.cat([g.rows for g in groups]))
        cluster = cluster.split([g.rows.numel() for g in groups])
        occ_g = occ.reshape(-1).index_select(0, slots).split(sizes)
        feas_g = feas.reshape(-1).index_select(0, slots).split(sizes)
        logits = []
        with rows_prebucketed() if pad else nullcontext():  # each group's rows are bucketed already
            for g, t, c, o, f in zip(groups, task, cluster, occ_g, feas_g):
                n, w = g.slots.shape
                sub = self.pointer(self.slot_proj(t.view(n, 1, w, H), c.unsqueeze(1)), o.view(n, 1, w), f.view(n, 1, w))
                logits.append(sub[: g.count].reshape(-1))  # the padding rows dropped
        kept = torch.cat([g.slots[: g.count].reshape(-1) for g in groups])
        values = torch.cat(logits)
        return values.new_full((B * N * P,), MASK_VALUE).index_copy(0, kept, values).view(B, N, P)

    def _alloc_logits_eager(self, obs: Mapping[str, Tensor], enc: EncoderOutput, slot: Tensor) -> Tensor:
        B, N, P, H = enc.task.shape
        idx = slot.view(*slot.shape, 1, 1)
        # each agent's slot row by index_select: in the update's backward its index_add is ~4x
        # faster on CPU than the scatter_add of a gather along the slot axis
        rows = torch.arange(B * N, device=slot.device).view(B, N) * P + slot
        task = enc.task.reshape(B * N * P, H).index_select(0, rows.view(-1)).view(B, N, H)
        low = obs["pending_min"].long().gather(2, idx.expand(-1, -1, 1, 2)).squeeze(2)
        return self.alloc_head(task, enc.cluster, low, obs["alloc_high"].long())

    def _critic(self, enc: EncoderOutput) -> Tensor:
        """Per-agent values ``(B, N)``, float32 (also under bfloat16 autocast)."""
        return self.critic(enc.cluster, enc.glob).float()

    def _free(self, obs: Mapping[str, Tensor]) -> Tensor:
        return _free_resources(obs, self.free_scale if self.free_scale.numel() == 2 else None)

    def _joint_pass(
        self,
        obs: Mapping[str, Tensor],
        enc: EncoderOutput,
        action: Tensor | None = None,
        deterministic: bool = False,
        noise: ActNoise | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """The one path for sampling and re-evaluation (CleanRL's ``get_action_and_value``).

        ``action is None``: sample (or, deterministic, take the argmax of) each agent's slot,
        resolve conflicts between agents that picked the same task, then sample the allocation;
        the random draws (selection, conflict ties, allocation) are ``noise``
        (:func:`draw_act_noise`: nothing is drawn here, so the pass is a function of tensors).
        With ``conflicts="sequential"`` or ``"room"`` the slots are chosen agent by agent
        (:func:`_sequential_choice`, each agent's allocation right after its slot; no conflict,
        no tie draw) and blocked agents join the skipped ones. Otherwise score the stored ``action (B, N, 3)`` = (slot, allocation, lost).
        Returns ``(slot, allocation, lost, log_prob, entropy, skip, posterior)`` per agent
        (``posterior``: the conflict posterior when sampling, else ``None``).
        """
        feasible = obs["feasible"].bool()
        skip = ~feasible.any(-1)
        logits = self._selection_logits(obs, enc)
        sequential = self.cfg.conflicts in SEQUENTIAL_MODES
        canon = enc.canon
        if canon is None and (sequential or action is None):
            canon = canonical_slots(obs["pending_mask"], obs["pending_where"])[0]  # each slot's task id
        if action is not None:
            action = torch.as_tensor(action, device=self.device).long()
        posterior = None
        alloc = al_logp = None  # drawn agent by agent, right after each slot, when choosing sequentially
        if sequential:
            order = room_order(_free_fraction(obs)) if self.cfg.conflicts == "room" else None
            sel, alloc, sel_logp, al_logp, blocked = _sequential_choice(
                logits, canon, feasible, skip, self._agent_alloc_logp(obs, enc) if action is None else None,
                None if action is None else action[..., :2], deterministic, noise, order)
            skip = skip | blocked
        else:
            sel_logp = F.log_softmax(logits, dim=-1)
            if action is None:
                sel = _first_argmax(sel_logp) if deterministic else _gumbel_argmax(sel_logp, _needs(noise, "selection"))
            else:
                sel = action[..., 0]
        lp_sel = sel_logp.gather(-1, sel.unsqueeze(-1)).squeeze(-1)
        if sequential:
            lost = torch.zeros_like(skip)
        elif action is None:
            low = obs["pending_min"].long().gather(2, sel.view(*sel.shape, 1, 1).expand(-1, -1, 1, 2)).squeeze(2)
            key = canon.gather(-1, sel.unsqueeze(-1)).squeeze(-1)
            active = ~skip & feasible.gather(-1, sel.unsqueeze(-1)).squeeze(-1)
            conflict = resolve_conflicts(key, lp_sel.exp(), self._free(obs), low, active, self.cfg.prior,
                                         tie=_needs(noise, "tie"))
            lost, posterior = conflict.lost, conflict.posterior
        else:
            lost = action[..., 2].bool()
        if alloc is None:
            al_logp = F.log_softmax(self._alloc_logits(obs, enc, sel), dim=-1)
            if action is None:
                alloc = _first_argmax(al_logp) if deterministic else _gumbel_argmax(al_logp, _needs(noise, "allocation"))
            else:
                alloc = action[..., 1]
        lp_alloc = al_logp.gather(-1, alloc.unsqueeze(-1)).squeeze(-1)
        log_prob, entropy = _masked_terms(skip, lost, sel_logp, lp_sel, al_logp, lp_alloc)
        return sel, alloc, lost, log_prob, entropy, skip, posterior

    # ------------------------------------------------------------------ public API
    def act(
        self,
        obs: Mapping[str, Tensor],
        deterministic: bool = False,
        generator: Generators = None,
        with_value: bool = False,
    ) -> ActOutput:
        """Sample (or, deterministic, take the argmax of) a joint action for every sample.

        Random draws (selection, conflict ties, allocation) all come from ``generator`` (one for
        the batch or one per sample, :data:`~agents.conflict.Generators`), drawn up front
        (:func:`draw_act_noise`) for :meth:`_act`, the pass itself. Runs
        under ``torch.inference_mode`` (cheaper per op than ``no_grad``: a batch-1 round is
        ~15% faster on the CPU); the results are copied out as ordinary tensors, so callers may
        store them, write into them and use them as constants in a later loss.
        """
        with torch.inference_mode():
            obs = self.as_tensors(obs)
            noise = self.draw_noise(obs, deterministic, generator)
            fn = self._compiled.get("act")
            out = (fn or self._act)(obs, noise, deterministic, with_value)
        return ActOutput(
            action=out.action.clone(), log_prob=out.log_prob.clone(), entropy=out.entropy.clone(),
            skip=out.skip.clone(), value=None if out.value is None else out.value.clone(),
            extra={k: None if v is None else v.clone() for k, v in out.extra.items()},
        )

    def draw_noise(self, obs: Mapping[str, Tensor], deterministic: bool, generator: Generators) -> ActNoise:
        """:func:`draw_act_noise` for one :meth:`act` on the batch ``obs`` (:meth:`as_tensors`
        output) in this policy's conflict mode."""
        B, N, P = obs["pending_mask"].shape
        C1, G1 = self.alloc_dims
        return draw_act_noise((B, N, P, C1 * G1), self.cfg.conflicts, deterministic, generator, self.device)

    def _act(self, obs: dict[str, Tensor], noise: ActNoise, deterministic: bool, with_value: bool) -> ActOutput:
        """The acting pass on :meth:`as_tensors` output and pre-drawn ``noise``: tensors in,
        tensors out (compiled whole by :meth:`compile_passes`)."""
        enc = self.encode(obs)
        sel, alloc, lost, log_prob, entropy, skip, posterior = self._joint_pass(
            obs, enc, deterministic=deterministic, noise=noise)
        sel = torch.where(skip, torch.zeros_like(sel), sel)
        alloc = torch.where(skip | lost, torch.zeros_like(alloc), alloc)
        action = torch.stack([sel, alloc, lost.long()], dim=-1)
        value = self._critic(enc) if with_value else None
        return ActOutput(action=action, log_prob=log_prob, entropy=entropy, skip=skip, value=value,
                         extra={"posterior": posterior})

    def evaluate(self, obs: Mapping[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(log_prob, entropy, skip, value)`` of stored actions with one encoder pass."""
        obs = self.as_tensors(obs)
        enc = self.encode(obs)
        _, _, _, log_prob, entropy, skip, _ = self._joint_pass(obs, enc, action)
        return log_prob, entropy, skip, self._critic(enc)

    def evaluate_actions(self, obs: Mapping[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per-agent ``(log_prob, entropy, skip)`` of stored joint actions (eqs. 12-14); differentiable."""
        obs = self.as_tensors(obs)
        _, _, _, log_prob, entropy, skip, _ = self._joint_pass(obs, self.encode(obs), action)
        return log_prob, entropy, skip

    def value(self, obs: Mapping[str, Tensor]) -> Tensor:
        """Centralised critic: ``(B, N)`` values (one head per agent, shared weights by default)."""
        obs = self.as_tensors(obs)
        return self._critic(self.encode(obs))

    def distributions(self, obs: Mapping[str, Tensor]) -> PolicyDistributions:
        """Every agent's full action distribution and value with one encoder pass; differentiable."""
        obs = self.as_tensors(obs)
        enc = self.encode(obs)
        sel = F.log_softmax(self._selection_logits(obs, enc), dim=-1)
        P = enc.task.shape[2]
        low = obs["pending_min"].long()
        high = obs["alloc_high"].long().unsqueeze(2).expand(-1, -1, P, -1)
        alloc = F.log_softmax(self.alloc_head(enc.task, enc.cluster, low, high).float(), dim=-1)
        skip = ~obs["feasible"].bool().any(-1)
        return PolicyDistributions(sel, alloc, skip, self._critic(enc))

    def _agent_alloc_logp(self, obs: Mapping[str, Tensor], enc: EncoderOutput) -> Callable[[int | Tensor, Tensor], Tensor]:
        """``f(i, slot (B,)) -> (B, A)``: agent ``i``'s allocation log-probabilities at ``slot``
        (the head's MLP runs once for every slot; the masked joint logits only for the slot asked)."""
        feats = self.alloc_head.features(enc.task, enc.cluster).float()  # (B, N, P, F)
        low, high = obs["pending_min"].long(), obs["alloc_high"].long()

        def at(i: int | Tensor, slot: Tensor) -> Tensor:
            idx = slot.view(-1, 1, 1)
            f = _agent(feats, i).gather(1, idx.expand(-1, 1, feats.shape[-1])).squeeze(1)
            lo = _agent(low, i).gather(1, idx.expand(-1, 1, 2)).squeeze(1)
            return F.log_softmax(self.alloc_head.logits(f, lo, _agent(high, i)), dim=-1)

        return at

    @torch.no_grad()
    def probabilities(self, obs: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Selection probabilities ``(B, N, P)`` and allocation probabilities for every slot ``(B, N, P, A)``."""
        dist = self.distributions(obs)
        return dist.selection.exp(), dist.allocation.exp()


# ---------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------
# one reader (safe loading only), the writer and CheckpointError live in agents/checkpoint.py
from agents.checkpoint import CheckpointError, check_compatible, load_policy_checkpoint, save_policy_checkpoint  # noqa: E402,F401
