"""Multi-agent PPO as a tianshou algorithm: the policy adapter and :class:`MultiAgentPPO`.

The Gymnasium env (:mod:`envs.gym_env`) is one joint agent whose action is ``(N, 3)``: per
cluster ``[slot, allocation, lost flag]``. This module connects the
:class:`~agents.policy.network.TapFingerPolicy` network to tianshou; the learning rule itself
lives in :mod:`agents.training.loss` (the loss), :mod:`agents.training.gae` (per-agent GAE) and
:mod:`agents.training.return_scale` (the value targets' scale).

* :class:`TianshouJointPolicy` -- the network as a tianshou ``Policy``: samples the joint action (Bayes
  conflict resolution included) with ``TapFingerPolicy.act``; outside training steps
  (evaluation) deterministic, or sampled with ``deterministic_eval=False``
  (``train.eval_action=sample``; ``sample-slot`` also sets ``argmax_allocation_eval``) from a
  generator seeded per workload. It stores the behaviour
  log-probabilities (``policy.logp``), and with ``train.old_stats=behaviour`` also the skip
  flags and critic values (``policy.skip`` / ``policy.value``), which the update then uses.
* :class:`MultiAgentPPO` -- tianshou's ``PPO`` with three of its private steps replaced
  (tianshou 2.0.1): ``_preprocess_batch`` (old log-probs, skip flags and values),
  ``_add_returns_and_advantages`` (per-agent GAE and return scaling) and
  ``_update_with_batch`` (minibatches through :func:`~agents.training.loss.mappo_loss`, on row
  shards in parallel threads with ``train.shards``, under ``train.precision``).
"""

from __future__ import annotations

from collections import deque
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, make_dataclass, replace
from functools import lru_cache
from typing import Any, Iterator, Mapping, Protocol, cast

import numpy as np
import torch
from torch import nn

from tianshou.algorithm import PPO
from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
from tianshou.algorithm.optim import OptimizerFactory
from tianshou.data import Batch, ReplayBuffer, to_torch
from tianshou.data.types import (
    ActBatchProtocol,
    BatchWithAdvantagesProtocol,
    LogpOldProtocol,
    ObsBatchProtocol,
    RolloutBatchProtocol,
)

from agents.policy.modes import acting_flags
from agents.policy.noise import episode_generator
from agents.policy.observations import obs_to_torch
from envs.workload import rng_streams

from ..config import BEHAVIOUR
from ..gae import gae_advantages, monte_carlo_returns, penalise_lost_claims
from ..loss import LossSettings, masked_mean, mappo_loss, normalise_advantages
from ..precision import FLOAT32, autocast, check_precision
from ..return_scale import ReturnScale
from ..shards import run_sharded


#: updates the end-of-run critic health averages over (:meth:`MultiAgentPPO.critic_health`)
CRITIC_WINDOW = 8


class MAPPOBatchProtocol(LogpOldProtocol, Protocol):
    """A collected batch after :meth:`MultiAgentPPO._preprocess_batch`: per-agent ``(B, N)``
    tensors ``logp_old``, ``v_s``, ``returns``, ``adv`` and the STORED ``skip`` flags, actions
    ``act (B, N, 3)`` as a long tensor."""

    skip: torch.Tensor
    v_s: torch.Tensor


def module_device(module: nn.Module) -> torch.device:
    """Device of a module's first parameter (CPU for a parameterless module)."""
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


class ActorAdapter(nn.Module):
    """The actor view of the network: ``forward(obs) -> (act output, state)``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[Any, Any]:
        return self.net.act(obs_to_torch(obs, module_device(self.net))), state


class CriticAdapter(nn.Module):
    """The critic view of the network: ``forward(obs) -> (B, N)`` per-agent values."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: Any) -> torch.Tensor:
        return self.net.value(obs_to_torch(obs, module_device(self.net)))


def _no_distribution(_: Any) -> None:  # pragma: no cover - TianshouJointPolicy.forward does not call it
    raise RuntimeError("TianshouJointPolicy samples through TapFingerPolicy.act, not a torch distribution")


class TianshouJointPolicy(ProbabilisticActorPolicy):
    """tianshou policy over the joint action of all agents (see the module docstring)."""

    def __init__(
        self,
        net: nn.Module,
        action_space: Any,
        observation_space: Any = None,
        deterministic_eval: bool = True,
        precision: str = FLOAT32,
        argmax_allocation_eval: bool = False,
        eval_conflicts: str | None = None,
        keep_busy_eval: bool = False,
    ) -> None:
        super().__init__(
            actor=ActorAdapter(net),
            dist_fn=_no_distribution,
            deterministic_eval=deterministic_eval,
            action_space=action_space,
            observation_space=observation_space,
            action_scaling=False,
            action_bound_method=None,
        )
        self.episode_generators: dict[int, torch.Generator] = {}  # evaluation episodes' (by workload seed)
        #: outside training steps, sample the slots but take the most likely allocations (``sample-slot``)
        self.argmax_allocation_eval = argmax_allocation_eval
        #: outside training steps, an idle cluster's agent starts its chosen task when it can (``argmax-busy``)
        self.keep_busy_eval = keep_busy_eval
        #: outside training steps, the agents' conflict mode (``train.eval_conflicts``; None: the net's own)
        self.eval_conflicts = eval_conflicts
        #: precision of the network passes when collecting (``train.precision``); evaluation
        #: outside training steps always runs float32
        self.precision = check_precision(precision)
        #: training steps also store the skip flags and critic values (set by
        #: :class:`MultiAgentPPO` for ``old_stats="behaviour"``)
        self.store_behaviour = False

    @property
    def net(self) -> nn.Module:
        return self.actor.net

    @contextmanager
    def acting_as(self, action: str, conflicts: str) -> Iterator[None]:
        """Outside training steps, act by ``action`` (``train.eval_action``) with conflicts resolved by
        ``conflicts`` until the block ends (another scenario's own rule, :mod:`~agents.training.validation_set`)."""
        flags = acting_flags(action)
        before = self.deterministic_eval, self.argmax_allocation_eval, self.keep_busy_eval, self.eval_conflicts
        self.deterministic_eval, self.argmax_allocation_eval = flags.deterministic, flags.argmax_allocation
        self.keep_busy_eval, self.eval_conflicts = flags.keep_busy, conflicts
        try:
            yield
        finally:
            self.deterministic_eval, self.argmax_allocation_eval, self.keep_busy_eval, self.eval_conflicts = before

    def reset_eval_generators(self) -> None:
        """Forget the evaluation episodes' generators: every evaluation replays each workload
        with a generator seeded afresh, whatever the training RNG state."""
        self.episode_generators = {}

    def eval_generators(self, info: Any) -> list[torch.Generator]:
        """The generator of each row's episode outside training steps (samples, conflict
        tie-breaks), keyed by the row's ``info["workload_seed"]`` and seeded as the evaluation
        runner seeds it (:func:`~agents.policy.noise.episode_generator`), so validation takes the
        decisions ``evaluate.py`` takes on the same workloads."""
        seeds = info.get("workload_seed") if isinstance(info, Batch) else None
        if seeds is None:
            raise RuntimeError("TianshouJointPolicy evaluates on envs whose info carries workload_seed "
                               "(agents.training.envs.evaluation_envs)")
        device = module_device(self.net)
        generators = []
        for seed in np.asarray(seeds).tolist():
            if seed not in self.episode_generators:
                self.episode_generators[seed] = episode_generator(rng_streams(seed)["tiebreak"], device)
            generators.append(self.episode_generators[seed])
        return generators

    def forward(self, batch: ObsBatchProtocol, state: Any = None) -> ActBatchProtocol:  # type: ignore[override]
        evaluating = not self.is_within_training_step
        deterministic = self.deterministic_eval and evaluating
        device = module_device(self.net)
        with torch.no_grad(), autocast(FLOAT32 if evaluating else self.precision, device):
            obs = obs_to_torch(batch.obs, device)
            store = self.store_behaviour and not evaluating
            generator = self.eval_generators(batch.info) if evaluating else None
            swap = evaluating and self.eval_conflicts is not None
            with self.net.conflicts_as(self.eval_conflicts) if swap else nullcontext():
                out = self.net.act(obs, deterministic=deterministic, generator=generator, with_value=store,
                                   argmax_allocation=evaluating and self.argmax_allocation_eval,
                                   keep_busy=evaluating and self.keep_busy_eval)
        stored = Batch(logp=out.log_prob.float().cpu().numpy())
        if store:
            stored.skip = out.skip.cpu().numpy()
            stored.value = out.value.cpu().numpy()  # float32 (TapFingerPolicy._critic)
        return cast(ActBatchProtocol, Batch(act=out.action.cpu().numpy(), state=state, dist=None, policy=stored))


@dataclass(kw_only=True)
class MAPPOTrainingStats(TrainingStats):
    """One update's statistics (logged under ``update/`` where described,
    :data:`agents.training.logger.TAG_DESCRIPTIONS`): the fields below, and every statistic of
    the loss (:attr:`agents.training.loss.MAPPOLoss.stats`, by name: ``loss``, ``policy_loss``,
    ...) as a field of its own, the mean over the update's gradient steps
    (:meth:`with_loss_stats`; tianshou logs ``dataclasses.asdict`` of the stats)."""

    explained_variance: float
    return_scale: float  # the divisor of this update's value targets (running return std; 1 without return_scaling)
    return_std: float  # std of this update's unscaled returns; return_scale far above it: a stale scale
    grad_norm: float = 0.0  # total gradient norm before clipping (mean over the gradient steps)
    logp_mismatch: float  # mean |behaviour log-prob - recomputed log-prob| (0 when consistent); with
    # old_stats="behaviour": over the first minibatch, before its gradient step
    active_fraction: float  # share of (sample, agent) entries that are not skipped
    gradient_steps: int

    @classmethod
    def with_loss_stats(cls, loss_stats: Mapping[str, float], **values: Any) -> MAPPOTrainingStats:
        """The stats of ``values`` (the fields) plus ``loss_stats`` by name, each a dataclass field
        (tianshou logs ``dataclasses.asdict`` of the stats)."""
        extra = tuple(name for name in loss_stats if name not in cls.__dataclass_fields__)
        return _training_stats_class(cls, extra)(**values, **loss_stats)


@lru_cache(maxsize=None)
def _training_stats_class(base: type[MAPPOTrainingStats], names: tuple[str, ...]) -> type[MAPPOTrainingStats]:
    """``base`` with a float field per name of ``names`` (the loss's statistics)."""
    if not names:
        return base
    return cast(type[MAPPOTrainingStats], make_dataclass(
        base.__name__, [(name, float) for name in names], bases=(base,), kw_only=True))


class MultiAgentPPO(PPO):
    """tianshou PPO with per-agent GAE, per-agent ratios and the paper's masked loss."""

    class Optimizer(PPO.Optimizer):
        """tianshou's optimizer wrapper that also records the gradient norm before clipping."""

        #: gradient norm of the last step as a tensor (read it with ``float()`` only when needed:
        #: on an accelerator that is a host synchronisation)
        last_grad_norm_tensor: torch.Tensor | None = None

        def set_lr(self, lr: float) -> None:
            """Set the learning rate of every parameter group (the run's ``train.lr_schedule``)."""
            for group in self._optim.param_groups:
                group["lr"] = lr

        def step(self, loss: torch.Tensor, retain_graph: bool | None = None, create_graph: bool = False) -> None:
            self.zero_grad()
            loss.backward(retain_graph=retain_graph, create_graph=create_graph)
            self.step_gradients()

        def zero_grad(self) -> None:
            self._optim.zero_grad()

        def step_gradients(self) -> None:
            """Clip and apply the gradients already in the parameters' ``.grad``."""
            max_norm = self._max_grad_norm if self._max_grad_norm is not None else float("inf")
            self.last_grad_norm_tensor = nn.utils.clip_grad_norm_(self._module.parameters(), max_norm=max_norm).detach()
            self._optim.step()

    def __init__(
        self,
        *,
        policy: TianshouJointPolicy,
        optim: OptimizerFactory,
        settings: LossSettings | None = None,
        **overrides: Any,
    ) -> None:
        """``settings`` (default :class:`~agents.training.loss.LossSettings`'s defaults), with
        any of its fields replaced by ``overrides`` (``MultiAgentPPO(..., eps_clip=0.1)``)."""
        settings = replace(settings or LossSettings(), **overrides) if overrides else (settings or LossSettings())
        super().__init__(
            policy=policy,
            critic=CriticAdapter(policy.net),
            optim=optim,
            eps_clip=settings.eps_clip,
            dual_clip=None,
            value_clip=settings.value_clip,
            advantage_normalization=settings.advantage_normalization,
            recompute_advantage=False,
            vf_coef=settings.vf_coef,
            ent_coef=settings.ent_coef,
            max_grad_norm=settings.max_grad_norm,
            gae_lambda=settings.gae_lambda,
            max_batchsize=settings.max_batchsize,
            gamma=settings.gamma,
            return_scaling=settings.return_scaling,
        )
        #: everything the update reads from ``train:`` (:meth:`LossSettings.from_train`); the loss
        #: reads its coefficients from here
        self.settings = settings
        #: the value targets' divisor (``train.return_scaling_window``); used with ``return_scaling``
        self.return_scale = ReturnScale(settings.return_scaling_window)
        #: subtracted from an agent's reward at each step its claim lost a conflict (``train.lost_claim_penalty``)
        self.lost_claim_penalty = float(settings.lost_claim_penalty)
        self.gradient_steps = 0  # total minibatch steps (checkpointed)
        self.update_count = 0  # total updates = tianshou trainer "update steps" (checkpointed)
        self.batch_stats: dict[str, float] = {}  # this update's statistics measured before its first step
        #: the critic's health over the last :data:`CRITIC_WINDOW` updates: (explained variance,
        #: return scale, return sd) each (``result.json``'s ``critic``, :meth:`critic_health`)
        self.critic_history: deque[tuple[float, float, float]] = deque(maxlen=CRITIC_WINDOW)
        self._mismatch_pending = False  # logp_mismatch still to measure on the first minibatch
        #: precision of the network passes of the update (``train.precision``, agents/training/precision.py)
        self.precision = check_precision(settings.precision)
        #: where logp_old / skip / v_s come from (``train.old_stats``, agents/training/config.py)
        self.old_stats = settings.old_stats
        policy.store_behaviour = settings.old_stats == BEHAVIOUR
        #: row shards of each minibatch's forward + backward pass, in parallel CPU threads with
        #: one intra-op thread each (``train.shards``, :mod:`agents.training.shards`)
        self.shards = int(settings.shards)
        #: the names of the entries of :meth:`_minibatch_step`'s row (the loss's statistics, then
        #: ``grad_norm``), set by its first call
        self.step_stat_names: tuple[str, ...] = ()

    @property
    def net(self) -> nn.Module:
        return cast(TianshouJointPolicy, self.policy).net

    @property
    def device(self) -> torch.device:
        return module_device(self.net)

    def critic_health(self) -> dict[str, float] | None:
        """Means over the last updates (:attr:`critic_history`) of the explained variance of the
        returns by the critic's values, the return scale and the returns' sd; None before any update."""
        if not self.critic_history:
            return None
        ev, scale, sd = (float(np.mean(column)) for column in zip(*self.critic_history))
        return {"explained_variance": ev, "return_scale": scale, "return_std": sd, "updates": len(self.critic_history)}

    # ------------------------------------------------------------------ network calls
    def evaluate(self, obs: dict[str, torch.Tensor], act: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(log_prob, entropy, skip, value)`` per agent of stored actions, one encoder pass
        (network passes in ``precision``; the net returns float32 log-probs and values)."""
        with autocast(self.precision, self.device):
            return self.net.evaluate(obs, act)

    def _evaluate_sharded(self, obs: dict[str, torch.Tensor], act: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
        """``(log_prob, skip, value)`` without gradients, per row shard (:attr:`shards`, in order)."""

        def shard(lo: int, hi: int) -> tuple[torch.Tensor, ...]:
            with torch.no_grad():  # grad mode is thread-local: each shard sets its own
                lp, _, sk, v = self.evaluate({k: x[lo:hi] for k, x in obs.items()}, act[lo:hi])
            return lp.float(), sk.bool(), v.float()

        return run_sharded(shard, len(act), self.shards)

    def _values(self, obs: Batch) -> torch.Tensor:
        out = []
        with torch.no_grad(), autocast(self.precision, self.device):
            for chunk in obs.split(self.max_batchsize, shuffle=False, merge_last=True):
                out.append(self.net.value(obs_to_torch(chunk, self.device)).float())
        return torch.cat(out, dim=0)

    def _next_values(self, batch: RolloutBatchProtocol, buffer: ReplayBuffer, indices: np.ndarray, v_s: torch.Tensor) -> torch.Tensor:
        """Critic values of ``batch.obs_next``, reusing ``v_s`` where the next observation is stored.

        Inside an episode the collector stores ``obs_next`` of step ``i`` as ``obs`` of step
        ``buffer.next(i)``; only transitions whose successor is not in the batch (episode ends,
        the last step of each env's ring) need a forward pass of their own.
        """
        nxt = np.asarray(buffer.next(indices))
        position = np.full(buffer.maxsize, -1, dtype=np.int64)
        position[indices] = np.arange(len(indices))
        j = position[nxt]
        reuse = np.flatnonzero((nxt != indices) & (j >= 0))
        rest = np.flatnonzero((nxt == indices) | (j < 0))
        out = torch.empty_like(v_s)
        device = v_s.device
        out[torch.as_tensor(reuse, device=device)] = v_s[torch.as_tensor(j[reuse], device=device)]
        if rest.size:
            out[torch.as_tensor(rest, device=device)] = self._values(batch.obs_next[rest])
        return out

    # ------------------------------------------------------------------ returns
    def episode_structure(
        self, batch: RolloutBatchProtocol, buffer: ReplayBuffer, indices: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(bootstrap, end_flag)`` of the sampled steps, as tianshou's ``compute_episodic_return``
        sees them: whether the next state's value counts (not terminal), and whether the step
        ends its sequence (``terminated | truncated``, or the buffer's unfinished indices)."""
        bootstrap = self.value_mask(buffer, indices).astype(bool)
        end_flag = np.logical_or(np.asarray(batch.terminated), np.asarray(batch.truncated))
        end_flag[np.isin(indices, buffer.unfinished_index())] = True
        return bootstrap, end_flag

    def _add_returns_and_advantages(  # type: ignore[override]
        self, batch: RolloutBatchProtocol, buffer: ReplayBuffer, indices: np.ndarray
    ) -> BatchWithAdvantagesProtocol:
        """Per-agent GAE: ``batch.v_s``, ``batch.returns``, ``batch.adv`` all ``(B, N)`` tensors.

        Uses ``batch.v_s`` when :meth:`_preprocess_batch` already computed it. With return
        scaling the critic's outputs are in units of :attr:`return_scale`: multiplied by it for
        GAE, and the returns divided by it as the value targets.
        """
        v_s = batch.v_s if "v_s" in batch else self._values(batch.obs)
        v_next = self._next_values(batch, buffer, indices, v_s)
        v_s_np = v_s.cpu().numpy().astype(np.float64)
        v_next_np = v_next.cpu().numpy().astype(np.float64)
        rew = np.asarray(batch.info.agent_rewards, dtype=np.float64)
        if rew.ndim != 2 or rew.shape != v_s_np.shape:
            raise ValueError(f"info['agent_rewards'] has shape {rew.shape}, critic values have {v_s_np.shape}")
        if self.lost_claim_penalty:
            rew = penalise_lost_claims(rew, act_array(batch.act)[..., 2] == 1, self.lost_claim_penalty)
        bootstrap, end_flag = self.episode_structure(batch, buffer, indices)
        if self.return_scaling and not self.return_scale.started:
            # the first batch starts the statistics from its Monte-Carlo returns (tianshou's
            # start, std 1, would make the first value loss huge for returns ~ -1000)
            self.return_scale.update(monte_carlo_returns(rew, end_flag, self.gamma))
        scale = self.return_scale.value if self.return_scaling else 1.0
        v_s_np *= scale
        v_next_np *= scale
        adv = gae_advantages(v_s_np, v_next_np * bootstrap[:, None], rew, end_flag, self.gamma, self.gae_lambda)
        returns = adv + v_s_np
        if self.return_scaling:
            scaled = returns / scale
            self.return_scale.update(returns)
        else:
            scaled = returns
        device = self.device
        batch.v_s = v_s.to(device)
        batch.returns = torch.as_tensor(scaled, dtype=torch.float32, device=device)
        batch.adv = torch.as_tensor(adv, dtype=torch.float32, device=device)
        flat_ret, flat_v = scaled.reshape(-1), v_s_np.reshape(-1) / scale
        var_ret = float(np.var(flat_ret))
        self.batch_stats["return_scale"] = scale
        self.batch_stats["return_std"] = float(np.std(returns))
        self.batch_stats["explained_variance"] = (
            float(1.0 - np.var(flat_ret - flat_v) / var_ret) if var_ret > 1e-12 else 0.0
        )
        return cast(BatchWithAdvantagesProtocol, batch)

    # ------------------------------------------------------------------ preprocessing
    def _preprocess_batch(  # type: ignore[override]
        self, batch: RolloutBatchProtocol, buffer: ReplayBuffer, indices: np.ndarray
    ) -> MAPPOBatchProtocol:
        """Old log-probs, STORED skip flags and values, then per-agent GAE.

        ``old_stats="recompute"``: one pass without gradients over the stored obs/actions;
        ``"behaviour"``: the collection step's (``policy.logp/skip/value``), when every stored
        transition has them (else recomputed).
        """
        device = self.device
        batch.obs = to_torch(batch.obs, device=device)
        batch.act = torch.as_tensor(np.asarray(batch.act), dtype=torch.long, device=device)
        policy_entry = batch.get("policy", None)
        stored = policy_entry if isinstance(policy_entry, Batch) else Batch()
        n = len(batch.act)
        self._mismatch_pending = self.old_stats == BEHAVIOUR and all(
            len(stored.get(k, ())) == n for k in ("logp", "skip", "value"))
        if self._mismatch_pending:  # the mismatch is measured on the update's first minibatch
            batch.logp_old = torch.as_tensor(np.asarray(stored.logp), dtype=torch.float32, device=device)
            batch.skip = torch.as_tensor(np.asarray(stored.skip), dtype=torch.bool, device=device)
            batch.v_s = torch.as_tensor(np.asarray(stored.value), dtype=torch.float32, device=device)
            self.batch_stats["logp_mismatch"] = float("nan")  # until then: not measured
        else:
            logp, skip, values = [], [], []
            for mb in batch.split(self.max_batchsize, shuffle=False, merge_last=True):
                for lp, sk, v in self._evaluate_sharded(obs_to_torch(mb.obs, device), mb.act):
                    logp.append(lp)
                    skip.append(sk)
                    values.append(v)
            batch.logp_old = torch.cat(logp, dim=0)
            batch.skip = torch.cat(skip, dim=0)
            batch.v_s = torch.cat(values, dim=0)
            behaviour = stored.get("logp", None)
            mismatch = 0.0
            if behaviour is not None and len(behaviour) == n:
                diff = torch.as_tensor(np.asarray(behaviour), dtype=torch.float32, device=device) - batch.logp_old
                mismatch = float(masked_mean(diff.abs(), ~batch.skip))
            self.batch_stats["logp_mismatch"] = mismatch
        batch = self._add_returns_and_advantages(batch, buffer, indices)
        batch.pop("obs_next", None)  # only needed for the bootstrap values
        return cast(MAPPOBatchProtocol, batch)

    # ------------------------------------------------------------------ update
    def _minibatch_step(self, mb: MAPPOBatchProtocol) -> torch.Tensor:
        """One gradient step on a minibatch; returns its statistics as one tensor on the device
        (host reads are left to the end of the update), entries named by
        :attr:`step_stat_names`: the loss's statistics (summed over the shards), then the
        gradient norm.

        The minibatch's rows run in :attr:`shards` parallel threads, each through
        :func:`~agents.training.loss.mappo_loss` with the whole minibatch's denominators, so
        their gradients and statistics add up to the whole minibatch's (one shard: the plain loss)."""
        active = ~mb.skip  # the STORED skip flags (eq. 14)
        adv = normalise_advantages(mb.adv, active) if self.advantage_normalization else mb.adv
        n_active = active.to(torch.float32).sum().clamp(min=1.0)
        n_values = float(mb.returns.numel())
        obs = obs_to_torch(mb.obs, self.device)

        def shard(lo: int, hi: int) -> dict[str, torch.Tensor]:
            """Forward + backward of rows ``lo:hi``; their loss statistics (detached)."""
            logp, entropy, _, value = self.evaluate({k: v[lo:hi] for k, v in obs.items()}, mb.act[lo:hi])
            out = mappo_loss(
                logp, entropy, value, log_prob_old=mb.logp_old[lo:hi], advantages=adv[lo:hi],
                returns=mb.returns[lo:hi], value_old=mb.v_s[lo:hi], active=active[lo:hi],
                settings=self.settings, n_active=n_active, n_values=n_values,
            )
            out.loss.backward()
            return out.stats

        self.optim.zero_grad()
        parts = run_sharded(shard, len(mb.act), self.shards)
        self.optim.step_gradients()
        names = tuple(parts[0])
        total = torch.stack([torch.stack(list(p.values())) for p in parts]).sum(0)
        if self._mismatch_pending:  # behaviour stats: measured before the first step moved the network
            self.batch_stats["logp_mismatch"] = float(total[names.index("abs_log_ratio")])
            self._mismatch_pending = False
        grad = self.optim.last_grad_norm_tensor
        grad = total.new_tensor(float("nan")) if grad is None else grad.to(total.device, total.dtype)
        self.step_stat_names = (*names, "grad_norm")
        return torch.cat([total, grad.reshape(1)])

    def _update_with_batch(  # type: ignore[override]
        self, batch: MAPPOBatchProtocol, batch_size: int | None, repeat: int
    ) -> MAPPOTrainingStats:
        # per-step statistics stay on the device; one host read at the end of the update
        rows: list[torch.Tensor] = []
        steps = 0
        for _ in range(repeat):
            for mb in batch.split(batch_size or -1, merge_last=True):
                steps += 1
                rows.append(self._minibatch_step(mb))
        self.gradient_steps += steps
        self.update_count += 1
        means = dict(zip(self.step_stat_names, torch.stack(rows).double().mean(0).tolist())) if rows else {}
        self.critic_history.append((self.batch_stats.get("explained_variance", 0.0),
                                    self.batch_stats.get("return_scale", 1.0), self.batch_stats.get("return_std", 0.0)))
        return MAPPOTrainingStats.with_loss_stats(
            means,
            explained_variance=self.batch_stats.get("explained_variance", 0.0),
            return_scale=self.batch_stats.get("return_scale", 1.0),
            return_std=self.batch_stats.get("return_std", 0.0),
            logp_mismatch=self.batch_stats.get("logp_mismatch", 0.0),
            active_fraction=float((~batch.skip).float().mean().item()) if len(batch.skip) else 0.0,
            gradient_steps=steps,
        )


def act_array(act: Any) -> np.ndarray:
    """Stored joint actions ``(B, N, 3)`` as a numpy array (from a tensor or an array)."""
    return act.detach().cpu().numpy() if isinstance(act, torch.Tensor) else np.asarray(act)
