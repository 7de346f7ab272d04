"""The TapFinger policy: encoder, pointer, Bayes conflict resolution, allocation head, critic.

One forward pass serves a whole batch of observations (padded tensors with a leading batch
dimension ``B``) and all ``N`` agents at once:

1. the encoder (HAN over the batched heterogeneous graph, or an MLP for the ablations) gives
   per-slot task embeddings and cluster embeddings;
2. every agent turns its ``P`` slots into agent-specific slot embeddings (task embedding
   plus its own cluster's embedding, so one set of weights serves any number of clusters;
   with ``agent_id`` a learned embedding of the agent's index is added to the cluster's);
3. task selection: pointer network over feasible slots (``tapfinger``, ``no-han``), uniform
   over feasible slots (``no-pointer``) or the earliest feasible slot (``vanilla``, FIFO);
   each variant's encoder and selector come from the registry :mod:`agents.policy.variants`;
4. conflicts between agents that picked the same task: Bayes rule (eq. 11,
   :mod:`agents.policy.conflict`);
5. allocation: 2-layer MLP on the selected slot's embedding, masked to
   ``[min requirement, min(free, per-task max)]`` plus the void action (eq. 12).

Log-probabilities and entropies follow eqs. 13-14: an agent with no feasible slot is
*skipped* (contributes 0); a conflict loser keeps the selection term and drops the
allocation term. :meth:`TapFingerPolicy.evaluate_actions` recomputes them from the stored
observation and action (slot, allocation, lost flag), never by re-sampling.

Under bfloat16 autocast (``train.precision``, :mod:`agents.training.precision`) the network passes run
with bfloat16 matrix products; the selection and allocation logits and the values are cast to
float32 before any distribution computation (log-softmax, sampling, conflicts, entropies).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.observation import KEYS
from networks.dense_han import DenseGraphEncoder
from networks.graph import EncoderOutput, canonical_slots
from networks.han import GraphEncoder
from networks.heads import MASK_VALUE, AllocationHead, CentralCritic, SlotProjector, use_compact
from networks.mlp_encoder import MLPEncoder
from networks.pointer import PointerNet

from .config import PolicyConfig
from .conflict import Generators, resolve_conflicts
from .modes import BAYES_START, COMPILE_MODES, SEQUENTIAL_MODES
from .noise import ActNoise, draw_act_noise, first_argmax, gumbel_argmax, required_noise
from .observations import OBS_DTYPES, free_fraction, free_resources, spec_dims
from .outputs import ActOutput, PolicyDistributions, masked_joint_terms
from .pointer_rows import compact_pointer_logits
from .sequential import agent_entries, room_order, sequential_choice


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
        #: ``agent_id``: each agent's learned index embedding ``(N, H)``, added to its cluster embedding
        self.agent_embed = nn.Parameter(0.1 * torch.randn(d["N"], H)) if c.agent_id else None
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
        for k, dtype in OBS_DTYPES.items():
            out[k] = out[k].to(dtype)
        shape = out["pending_mask"].shape
        if len(shape) != 3:
            raise ValueError(f"pending_mask must be (B, N, P) with a batch dimension, got shape {tuple(shape)}")
        B, N, P = shape
        if P != self.dims["P"]:
            raise ValueError(f"observation has {P} pending slots, the policy was built for {self.dims['P']}")
        if self.cfg.tied_to_n and N != self.dims["N"]:
            raise ValueError(f"observation has {N} clusters, the per-agent parameters were built for {self.dims['N']}")
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
        enc = fn(obs) if fn is not None else self.encoder(obs)
        if self.agent_embed is not None:
            enc = replace(enc, cluster=enc.cluster + self.agent_embed.to(enc.cluster.dtype))
        return enc

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
        the agents that have a feasible slot are computed, grouped by the slots they need
        (:func:`~agents.policy.pointer_rows.compact_pointer_logits`); :attr:`pointer_compact`
        (``"auto"``, ``"never"``, ``"always"``) overrides the choice. Both layouts compute the
        same function (to float round-off).
        """
        compact = use_compact(self.pointer_compact, feasible, "pointer_compact")
        if not compact or self.n_actor_sets > 1:  # per-agent weights need the agent axis: full rows
            return self.pointer(self.slot_proj(enc.task, enc.cluster), occupied, feasible)
        return compact_pointer_logits(self.pointer, self.slot_proj, enc, occupied, feasible)

    def _alloc_logits_eager(self, obs: Mapping[str, Tensor], enc: EncoderOutput, slot: Tensor) -> Tensor:
        B, N, P, H = enc.task.shape
        idx = slot.view(*slot.shape, 1, 1)
        # each agent's slot row by index_select: in the update's backward its index_add is
        # faster on CPU than the scatter_add of a gather along the slot axis
        rows = torch.arange(B * N, device=slot.device).view(B, N) * P + slot
        task = enc.task.reshape(B * N * P, H).index_select(0, rows.view(-1)).view(B, N, H)
        low = obs["pending_min"].long().gather(2, idx.expand(-1, -1, 1, 2)).squeeze(2)
        return self.alloc_head(task, enc.cluster, low, obs["alloc_high"].long())

    def _critic(self, enc: EncoderOutput) -> Tensor:
        """Per-agent values ``(B, N)``, float32 (also under bfloat16 autocast)."""
        return self.critic(enc.cluster, enc.glob).float()

    def _free(self, obs: Mapping[str, Tensor]) -> Tensor:
        return free_resources(obs, self.free_scale if self.free_scale.numel() == 2 else None)

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
        resolve conflicts between agents that picked the same task, then sample the allocation
        (``conflicts="bayes-start"``: the allocation first, and a void claim does not compete);
        the random draws (selection, conflict ties, allocation) are ``noise``
        (:func:`draw_act_noise`: nothing is drawn here, so the pass is a function of tensors).
        With ``conflicts="sequential"`` or ``"room"`` the slots are chosen agent by agent
        (:func:`sequential_choice`, each agent's allocation right after its slot; no conflict,
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
            order = room_order(free_fraction(obs)) if self.cfg.conflicts == "room" else None
            sel, alloc, sel_logp, al_logp, blocked = sequential_choice(
                logits, canon, feasible, skip, self._agent_alloc_logp(obs, enc) if action is None else None,
                None if action is None else action[..., :2], deterministic, noise, order)
            skip = skip | blocked
        else:
            sel_logp = F.log_softmax(logits, dim=-1)
            if action is None:
                sel = (first_argmax(sel_logp) if deterministic
                       else gumbel_argmax(sel_logp, required_noise(noise, "selection")))
            else:
                sel = action[..., 0]
        lp_sel = sel_logp.gather(-1, sel.unsqueeze(-1)).squeeze(-1)
        if sequential:
            lost = torch.zeros_like(skip)
        elif action is None:
            low = obs["pending_min"].long().gather(2, sel.view(*sel.shape, 1, 1).expand(-1, -1, 1, 2)).squeeze(2)
            key = canon.gather(-1, sel.unsqueeze(-1)).squeeze(-1)
            active = ~skip & feasible.gather(-1, sel.unsqueeze(-1)).squeeze(-1)
            if self.cfg.conflicts == BAYES_START:  # allocations first: a void claim does not compete
                al_logp, alloc = self._draw_allocation(obs, enc, sel, deterministic, noise)
                active = active & (alloc > 0)
            conflict = resolve_conflicts(key, lp_sel.exp(), self._free(obs), low, active, self.cfg.prior,
                                         tie=required_noise(noise, "tie"))
            lost, posterior = conflict.lost, conflict.posterior
        else:
            lost = action[..., 2].bool()
        if alloc is None:
            if action is None:
                al_logp, alloc = self._draw_allocation(obs, enc, sel, deterministic, noise)
            else:
                al_logp = F.log_softmax(self._alloc_logits(obs, enc, sel), dim=-1)
                alloc = action[..., 1]
        lp_alloc = al_logp.gather(-1, alloc.unsqueeze(-1)).squeeze(-1)
        log_prob, entropy = masked_joint_terms(skip, lost, sel_logp, lp_sel, al_logp, lp_alloc)
        return sel, alloc, lost, log_prob, entropy, skip, posterior

    def _draw_allocation(self, obs: Mapping[str, Tensor], enc: EncoderOutput, sel: Tensor, deterministic: bool,
                         noise: ActNoise | None) -> tuple[Tensor, Tensor]:
        """Each agent's allocation log-probabilities ``(B, N, A)`` at its slot ``sel`` and the
        allocation drawn from them: the argmax when acting deterministically or without allocation
        noise (``sample-slot``), else a sample by the noise's allocation draws."""
        al_logp = F.log_softmax(self._alloc_logits(obs, enc, sel), dim=-1)
        argmax = deterministic or (noise is not None and noise.allocation is None)
        return al_logp, first_argmax(al_logp) if argmax else gumbel_argmax(al_logp, required_noise(noise, "allocation"))

    # ------------------------------------------------------------------ public API
    @contextmanager
    def conflicts_as(self, conflicts: str) -> Iterator[None]:
        """Inside the block the same weights act with agents reconciled by ``conflicts``
        (:data:`~agents.policy.modes.CONFLICT_MODES`, a runtime field of the config)."""
        if conflicts == self.cfg.conflicts:
            yield
            return
        own = self.cfg
        self.cfg = replace(own, conflicts=conflicts)
        try:
            yield
        finally:
            self.cfg = own

    def act(
        self,
        obs: Mapping[str, Tensor],
        deterministic: bool = False,
        generator: Generators = None,
        with_value: bool = False,
        argmax_allocation: bool = False,
    ) -> ActOutput:
        """Sample (or, deterministic, take the argmax of) a joint action for every sample;
        ``argmax_allocation``: sample the slots but take each agent's most likely allocation.

        Random draws (selection, conflict ties, allocation) all come from ``generator`` (one for
        the batch or one per sample, :data:`~agents.policy.conflict.Generators`), drawn up front
        (:func:`draw_act_noise`) for :meth:`_act`, the pass itself. Runs under
        ``torch.inference_mode`` (cheaper per op than ``no_grad``, which counts in a batch-1
        round); the results are copied out as ordinary tensors, so callers may store them, write
        into them and use them as constants in a later loss.
        """
        with torch.inference_mode():
            obs = self.as_tensors(obs)
            noise = self.draw_noise(obs, deterministic, generator, argmax_allocation)
            fn = self._compiled.get("act")
            out = (fn or self._act)(obs, noise, deterministic, with_value)
        return ActOutput(
            action=out.action.clone(), log_prob=out.log_prob.clone(), entropy=out.entropy.clone(),
            skip=out.skip.clone(), value=None if out.value is None else out.value.clone(),
            extra={k: None if v is None else v.clone() for k, v in out.extra.items()},
        )

    def draw_noise(self, obs: Mapping[str, Tensor], deterministic: bool, generator: Generators,
                   argmax_allocation: bool = False) -> ActNoise:
        """:func:`draw_act_noise` for one :meth:`act` on the batch ``obs`` (:meth:`as_tensors`
        output) in this policy's conflict mode."""
        B, N, P = obs["pending_mask"].shape
        C1, G1 = self.alloc_dims
        return draw_act_noise((B, N, P, C1 * G1), self.cfg.conflicts, deterministic, generator, self.device,
                              argmax_allocation)

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

        def alloc_logp_at(i: int | Tensor, slot: Tensor) -> Tensor:
            idx = slot.view(-1, 1, 1)
            f = agent_entries(feats, i).gather(1, idx.expand(-1, 1, feats.shape[-1])).squeeze(1)
            lo = agent_entries(low, i).gather(1, idx.expand(-1, 1, 2)).squeeze(1)
            return F.log_softmax(self.alloc_head.logits(f, lo, agent_entries(high, i)), dim=-1)

        return alloc_logp_at

    @torch.no_grad()
    def probabilities(self, obs: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Selection probabilities ``(B, N, P)`` and allocation probabilities for every slot ``(B, N, P, A)``."""
        dist = self.distributions(obs)
        return dist.selection.exp(), dist.allocation.exp()
