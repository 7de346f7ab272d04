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
4. conflicts between agents that picked the same task: the rule of ``conflicts``
   (:mod:`agents.policy.conflict_rules`; the paper's is Bayes' rule, eq. 11);
5. allocation: 2-layer MLP on the selected slot's embedding, masked to
   ``[min requirement, min(free, per-task max)]`` plus the void action (eq. 12).

Log-probabilities and entropies (:class:`~agents.policy.distribution.JointDistribution`)
follow eqs. 13-14: an agent with no feasible slot is *skipped* (contributes 0); a conflict
loser keeps the selection term and drops the allocation term. :meth:`TapFingerPolicy.evaluate_actions` recomputes them from the stored
observation and action (slot, allocation, lost flag), never by re-sampling.

Under bfloat16 autocast (``train.precision``, :mod:`agents.training.precision`) the network passes run
with bfloat16 matrix products; the selection and allocation logits and the values are cast to
float32 before any distribution computation (log-softmax, sampling, conflicts, entropies).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.observation import KEYS
from networks.graph import EncoderOutput, canonical_slots
from networks.heads import AllocationHead, CentralCritic

from .config import PolicyConfig
from .conflict import Generators
from .conflict_rules import PassInputs, conflict_rule
from .modes import COMPILE_MODES
from .noise import ActNoise, draw_act_noise
from .observations import OBS_DTYPES, free_resources, spec_dims, with_mode_feature
from .outputs import ActOutput, PolicyDistributions
from .selectors import TaskSelector
from .sequential import agent_entries


@dataclass
class JointPass:
    """What :meth:`TapFingerPolicy._joint_pass` returns, per agent ``(B, N)``: the chosen (or
    stored) ``slot`` and ``allocation``, the ``lost`` flag, the joint action's ``log_prob`` and
    ``entropy`` (eqs. 13-14), ``skip`` (no decision) and the Bayes conflict ``posterior`` (when a
    Bayes rule samples, else ``None``)."""

    slot: Tensor
    allocation: Tensor
    lost: Tensor
    log_prob: Tensor
    entropy: Tensor
    skip: Tensor
    posterior: Tensor | None


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
        # observe_mode: the multi_mode flag is one more cluster feature (with_mode_feature)
        enc_dims = {**d, "cluster_features": d["cluster_features"] + int(c.observe_mode)}
        self.encoder: nn.Module = self.variant.build_encoder(c, enc_dims)
        n_act = 1 if c.shared_actors else d["N"]
        self.n_actor_sets = n_act
        #: the variant's task selector (:mod:`agents.policy.selectors`) and the modules it learns
        self.selector: TaskSelector = self.variant.build_selector()
        self.slot_proj, self.pointer = self.selector.modules(n_act, c)
        self.alloc_head = AllocationHead(n_act, H, self.alloc_dims, c.alloc_head)
        self.critic = CentralCritic(n_act, H)
        #: ``agent_id``: each agent's learned index embedding ``(N, H)``, added to its cluster embedding
        self.agent_embed = nn.Parameter(0.1 * torch.randn(d["N"], H)) if c.agent_id else None
        #: pointer rows: "auto" = only agents with a feasible slot on CPU batches
        #: (:class:`~agents.policy.selectors.PointerSelector`)
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
        if self.cfg.observe_mode:
            obs = with_mode_feature(obs)
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
        return self.selector.logits(self, obs, enc)

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
        keep_busy: bool = False,
    ) -> JointPass:
        """The one path for sampling and re-evaluation (CleanRL's ``get_action_and_value``).

        ``action is None``: the conflict rule of ``cfg.conflicts`` (:mod:`agents.policy.conflict_rules`)
        samples (or, deterministic, takes the most likely) joint action, on the random draws
        ``noise`` (:func:`draw_act_noise`: nothing is drawn here, so the pass is a function of
        tensors). Otherwise the rule scores the stored ``action (B, N, 3)`` = (slot, allocation, lost).
        ``keep_busy``: a most likely allocation never leaves an idle cluster idle (``argmax-busy``).
        """
        feasible = obs["feasible"].bool()
        inputs = PassInputs(
            obs=obs, logits=self._selection_logits(obs, enc), feasible=feasible, skip=~feasible.any(-1),
            task_ids=lambda: enc.canon if enc.canon is not None
            else canonical_slots(obs["pending_mask"], obs["pending_where"])[0],
            alloc_logits=lambda slot: self._alloc_logits(obs, enc, slot),
            agent_alloc_logp=lambda: self._agent_alloc_logp(obs, enc),
            free=lambda: self._free(obs),
            keep_busy=keep_busy,
        )
        rule = conflict_rule(self.cfg)
        if action is None:
            choice = rule.choose(inputs, deterministic, noise)
        else:
            choice = rule.score(inputs, torch.as_tensor(action, device=self.device).long())
        log_prob, entropy = choice.dist.log_prob_and_entropy(choice.slot, choice.allocation)
        return JointPass(slot=choice.slot, allocation=choice.allocation, lost=choice.dist.lost, log_prob=log_prob,
                         entropy=entropy, skip=choice.dist.skip, posterior=choice.posterior)

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
        keep_busy: bool = False,
    ) -> ActOutput:
        """Sample (or, deterministic, take the argmax of) a joint action for every sample;
        ``argmax_allocation``: sample the slots but take each agent's most likely allocation;
        ``keep_busy``: a most likely allocation of an agent whose cluster runs nothing starts its
        task when it can (``argmax-busy`` with ``deterministic``).

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
            out = (fn or self._act)(obs, noise, deterministic, with_value, keep_busy)
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

    def _act(self, obs: dict[str, Tensor], noise: ActNoise, deterministic: bool, with_value: bool,
             keep_busy: bool = False) -> ActOutput:
        """The acting pass on :meth:`as_tensors` output and pre-drawn ``noise``: tensors in,
        tensors out (compiled whole by :meth:`compile_passes`)."""
        enc = self.encode(obs)
        out = self._joint_pass(obs, enc, deterministic=deterministic, noise=noise, keep_busy=keep_busy)
        skip, lost = out.skip, out.lost
        sel = torch.where(skip, torch.zeros_like(out.slot), out.slot)
        alloc = torch.where(skip | lost, torch.zeros_like(out.allocation), out.allocation)
        action = torch.stack([sel, alloc, lost.long()], dim=-1)
        value = self._critic(enc) if with_value else None
        return ActOutput(action=action, log_prob=out.log_prob, entropy=out.entropy, skip=skip, value=value,
                         extra={"posterior": out.posterior})

    def evaluate(self, obs: Mapping[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(log_prob, entropy, skip, value)`` of stored actions with one encoder pass."""
        obs = self.as_tensors(obs)
        enc = self.encode(obs)
        out = self._joint_pass(obs, enc, action)
        return out.log_prob, out.entropy, out.skip, self._critic(enc)

    def evaluate_actions(self, obs: Mapping[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per-agent ``(log_prob, entropy, skip)`` of stored joint actions (eqs. 12-14); differentiable."""
        obs = self.as_tensors(obs)
        out = self._joint_pass(obs, self.encode(obs), action)
        return out.log_prob, out.entropy, out.skip

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
