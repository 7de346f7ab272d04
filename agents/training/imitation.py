"""Warm start by imitation: behaviour cloning of a baseline scheduler into a policy.

PPO from a random policy spends most of its budget learning what any sensible scheduler does
(start the tasks that fit, at a useful size). A run with ``train.imitate=<scheduler spec>``
first records the decisions of that *teacher* on training workloads, then fits the policy's
actor to them by maximum likelihood and its critic to the teacher's discounted returns, and
only then starts PPO. Everything PPO learns afterwards is measured against the teacher, which
is one of the listed baselines, so the comparison stays honest.

The teacher must act inside the policy's action space: it may only *start* tasks (no
re-sizing or pausing of running tasks), e.g. ``optimus:preemptive=false`` or ``min``. It is
asked at every logical round, as the evaluation runner asks it, and each cluster's first start
in its answer becomes that agent's part of the round's joint action (:mod:`envs.joint_action`);
an agent it starts nothing on is void. Played through the env, these rounds reproduce the
teacher's own episodes exactly (tested); under a start floor (``max_start_slowdown``) a start on a
slot the observation does not offer becomes void (:func:`offered_only`). DAgger rounds then let
the cloned policy play and the teacher label the states the clone reaches, which corrects the
drift of plain cloning.

Loss (per agent with a feasible slot; agents with none are skipped as in eqs. 13-14):

* a start of slot ``s`` at allocation ``a``: ``-log p(s) - log p(a | s)``; for a variant whose
  selector has no weights (``uniform``, ``fifo``: the ablations ``no-pointer``, ``vanilla``)
  only ``-log p(a | s)``: its selection cannot learn, and ``p(s)`` is 0 whenever the teacher
  starts a slot the fixed rule would not pick;
* a void: ``-log sum_s p(s) p(void | s)``, the probability that the policy places nothing
  whichever slot it points at (the teacher names no slot, so none is imposed);
* the critic: squared error to the teacher's per-agent discounted return, divided by the
  returns' standard deviation (the scale PPO's ``return_scaling`` then starts from).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from agents.baselines import make_scheduler
from agents.baselines.specs import parse_scheduler_spec
from agents.policy.observations import obs_to_torch
from envs.config import ConfigError, ScenarioConfig
from envs.gym_env import EdgeClustersEnv
from envs.metrics import episode_metrics
from envs.observation import KEYS

from .gae import gae_advantages
from .optimizer import adam

#: a DAgger episode of the clone ends after this many times the teacher's mean rounds per episode
STUDENT_ROUNDS_FACTOR = 4
#: standard deviations below this are treated as 1 when scaling returns
_MIN_STD = 1e-6


@dataclass
class Demonstrations:
    """The teacher's decisions: stacked observations, joint actions and per-agent returns."""

    obs: dict[str, np.ndarray]  # KEYS -> (T, ...)
    action: np.ndarray  # (T, N, 3) int64
    returns: np.ndarray  # (T, N) float64 discounted per-agent returns from each step
    episodes: int
    mean_jct: float  # mean over the recorded episodes of each episode's mean JCT (of the player)

    def __len__(self) -> int:
        return int(self.action.shape[0])


def teacher_action(decision: Any, pending: np.ndarray, single: bool, gpu_axis: int, teacher: str) -> np.ndarray:
    """The joint action ``(N, 3)`` of one logical round that a teacher's decision asks for: each
    cluster's first start (in the teacher's order) whose task is in that cluster's pending set,
    void for the others."""
    if decision.allocations:
        raise ConfigError(
            f"train.imitate: teacher {teacher!r} re-sizes running tasks, which the policy cannot do; "
            "use a non-preemptive teacher, e.g. optimus:preemptive=false"
        )
    action = np.zeros((pending.shape[0], 3), dtype=np.int64)
    done = np.zeros(pending.shape[0], dtype=bool)
    for cluster, task, cpu, gpu in decision.placements:
        i = int(cluster)
        if done[i]:
            continue
        slots = np.flatnonzero(pending[i] == task)
        if slots.size:
            action[i] = (int(slots[0]), int(cpu) * gpu_axis + int(gpu), 0)
            done[i] = True
    return action


def offered_only(action: np.ndarray, feasible: np.ndarray) -> np.ndarray:
    """``action`` with every start of a slot the observation does not offer (``feasible`` 0:
    the scenario's start floor holds it back) made void: the agent's choices are the
    offered slots, so that is the label it can follow."""
    held = (action[:, 1] > 0) & (feasible[np.arange(action.shape[0]), action[:, 0]] == 0)
    if not held.any():
        return action
    out = action.copy()
    out[held] = 0
    return out


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Per-column discounted return-to-go of one episode's rewards ``(T, N)``: GAE with zero
    values and lambda 1 (:func:`agents.training.gae.gae_advantages`)."""
    zeros = np.zeros(rewards.shape)
    return gae_advantages(zeros, zeros, rewards.astype(np.float64), np.zeros(len(rewards), dtype=bool), gamma, 1.0)


def record_teacher(
    scenario: ScenarioConfig,
    teacher: str,
    seeds: list[int],
    gamma: float,
    student: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
    max_rounds: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Demonstrations:
    """Record the decisions of ``teacher`` (a scheduler spec such as ``optimus:preemptive=false``)
    on the workloads ``seeds``, one labelled joint action per logical round.

    The teacher is asked at every round (as the evaluation runner asks it) and its answer,
    turned into the round's joint action by :func:`teacher_action`, is the label. Without
    ``student`` the labels are also the actions played. With ``student`` (observation -> joint
    action) the student's actions are played and the teacher only labels the states the student
    reaches (DAgger); the returns and the reported mean JCT are then the student's.
    ``max_rounds`` ends an episode early (a poor student can take the scenario's whole step
    cap); the mean JCT is over the tasks that finished.
    """
    name, options = parse_scheduler_spec(teacher)
    env = EdgeClustersEnv(scenario)
    gpu_axis = int(env.obs_spec.alloc_dims[1])
    obs_rows: dict[str, list[np.ndarray]] = {k: [] for k in KEYS}
    actions: list[np.ndarray] = []
    returns: list[np.ndarray] = []
    jcts: list[float] = []
    for done, seed in enumerate(seeds):
        scheduler = make_scheduler(name, **options)
        obs, _ = env.reset(seed=int(seed))
        sim = env.sim
        scheduler.reset(sim)
        rewards: list[np.ndarray] = []
        while True:
            label = teacher_action(scheduler.decide(sim), sim.pending, sim.single, gpu_axis, teacher)
            label = offered_only(label, obs["feasible"])
            for k in KEYS:
                obs_rows[k].append(obs[k])
            actions.append(label)
            played = label if student is None else student(obs)
            obs, _, terminated, truncated, info = env.step(played)
            rewards.append(np.asarray(info["agent_rewards"], dtype=np.float64))
            if terminated or truncated or (max_rounds is not None and len(rewards) >= max_rounds):
                break
        returns.append(discounted_returns(np.stack(rewards), gamma))
        jcts.append(episode_metrics(sim)["mean_jct"])
        if progress is not None:
            progress(done + 1)
    return Demonstrations(
        obs={k: np.stack(v) for k, v in obs_rows.items()},
        action=np.stack(actions),
        returns=np.concatenate(returns),
        episodes=len(seeds),
        mean_jct=float(np.nanmean(jcts)) if not np.isnan(jcts).all() else float("nan"),
    )


def merge(a: Demonstrations, b: Demonstrations) -> Demonstrations:
    """Both sets of demonstrations in one (DAgger's aggregation)."""
    return Demonstrations(
        obs={k: np.concatenate([a.obs[k], b.obs[k]]) for k in KEYS},
        action=np.concatenate([a.action, b.action]),
        returns=np.concatenate([a.returns, b.returns]),
        episodes=a.episodes + b.episodes,
        mean_jct=(a.mean_jct * a.episodes + b.mean_jct * b.episodes) / (a.episodes + b.episodes),
    )


def imitation_losses(
    policy: Any, obs: dict[str, torch.Tensor], action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-agent negative log-likelihood of the teacher's actions ``(B, N)``, the active mask and
    the critic's values ``(B, N)``.

    See the module docstring for the start and void terms; skipped agents give 0.
    """
    dist = policy.distributions(obs)
    sel_logp, alloc_logp, skip = dist.selection, dist.allocation, dist.skip  # (B,N,P), (B,N,P,A), (B,N)
    slot, alloc = action[..., 0], action[..., 1]
    at_slot = alloc_logp.gather(2, slot.view(*slot.shape, 1, 1).expand(-1, -1, 1, alloc_logp.shape[-1])).squeeze(2)
    start_lp = at_slot.gather(-1, alloc.unsqueeze(-1)).squeeze(-1)
    if policy.pointer is not None:  # a learned selection
        start_lp = start_lp + sel_logp.gather(-1, slot.unsqueeze(-1)).squeeze(-1)
    void_lp = torch.logsumexp(sel_logp + alloc_logp[..., 0], dim=-1)
    nll = -torch.where(alloc > 0, start_lp, void_lp)
    active = ~skip
    return torch.where(active, nll, torch.zeros_like(nll)), active, dist.value


@dataclass
class CloneResult:
    """What :func:`clone` did: per-epoch losses and the statistics of the returns it fitted,
    which PPO's return scaling should start from."""

    samples: int
    actor_loss: list[float] = field(default_factory=list)  # mean NLL per active agent, per epoch
    critic_loss: list[float] = field(default_factory=list)
    return_mean: float = 0.0
    return_var: float = 1.0
    return_count: int = 0
    wall_s: float = 0.0

    def return_scaler_state(self) -> dict[str, float | int]:
        """The returns' statistics in the form of :meth:`agents.training.return_scale.ReturnScale.load_state`."""
        return {"mean": self.return_mean, "var": self.return_var, "count": self.return_count}


def clone(
    policy: Any,
    demos: Demonstrations,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    vf_coef: float = 0.5,
    log: Callable[[int, float, float], None] | None = None,
) -> CloneResult:
    """Fit ``policy`` (a :class:`~agents.policy.network.TapFingerPolicy`) to the demonstrations.

    Adam on every parameter; minibatches drawn by a generator seeded with ``seed``.
    ``log(epoch, actor_loss, critic_loss)`` is called after each epoch.
    """
    start = time.perf_counter()
    flat = demos.returns.reshape(-1)
    mean, var = float(flat.mean()), float(flat.var())
    std = math.sqrt(var) if var > _MIN_STD**2 else 1.0
    result = CloneResult(samples=len(demos), return_mean=mean, return_var=var, return_count=int(flat.size))
    if len(demos) == 0 or epochs == 0:
        result.wall_s = time.perf_counter() - start
        return result
    device = policy.device
    obs_all = {k: torch.as_tensor(v) for k, v in demos.obs.items()}
    act_all = torch.as_tensor(demos.action, dtype=torch.long)
    target_all = torch.as_tensor(demos.returns / std, dtype=torch.float32)
    optim = adam(policy.parameters(), lr)
    gen = torch.Generator().manual_seed(int(seed))
    was_training = policy.training
    policy.train()
    try:
        for epoch in range(epochs):
            order = torch.randperm(len(demos), generator=gen)
            actor_sum = critic_sum = 0.0
            batches = 0
            for lo in range(0, len(demos), batch_size):
                idx = order[lo:lo + batch_size]
                obs = {k: v[idx] for k, v in obs_all.items()}  # policy.distributions moves and converts it
                nll, active, value = imitation_losses(policy, obs, act_all[idx].to(device))
                actor = nll.sum() / active.sum().clamp(min=1)
                critic = F.mse_loss(value.float(), target_all[idx].to(device))
                optim.zero_grad(set_to_none=True)
                (actor + vf_coef * critic).backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
                optim.step()
                actor_sum += float(actor.detach())
                critic_sum += float(critic.detach())
                batches += 1
            result.actor_loss.append(actor_sum / batches)
            result.critic_loss.append(critic_sum / batches)
            if log is not None:
                log(epoch + 1, result.actor_loss[-1], result.critic_loss[-1])
    finally:
        policy.train(was_training)
    result.wall_s = time.perf_counter() - start
    return result


def teacher_seeds(run_seed: int, round_index: int, count: int, low: int) -> list[int]:
    """Training workloads of one imitation round, drawn from the run seed (>= ``low``, disjoint
    from the evaluation seeds below it)."""
    rng = np.random.default_rng([int(run_seed), 0x1417, int(round_index)])
    return [int(s) for s in rng.integers(low, 2**62, size=count)]


@dataclass
class WarmStartResult:
    """Per imitation round ``i``: ``played_mean_jct[i]``, the mean JCT of the episodes recorded
    before clone ``i`` (the teacher's for ``i = 0``, then the clone of round ``i - 1`` playing),
    and ``clones[i]``, what that clone did (the last one's return statistics start PPO)."""

    played_mean_jct: list[float] = field(default_factory=list)
    clones: list[CloneResult] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def teacher_mean_jct(self) -> float:
        return self.played_mean_jct[0]


def warm_start(
    policy: Any,
    scenario: ScenarioConfig,
    teacher: str,
    *,
    episodes: int,
    rounds: int,
    epochs: int,
    lr: float,
    batch_size: int,
    gamma: float,
    seed: int,
    seed_low: int,
    vf_coef: float = 0.5,
    log: Callable[[str], None] | None = None,
) -> WarmStartResult:
    """Behaviour cloning with DAgger: ``episodes`` teacher episodes, clone, then ``rounds`` times
    play the cloned policy (deterministic) on ``episodes`` new workloads with the teacher
    labelling the states it reaches, aggregate and clone again."""
    def student(obs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return policy.act(obs_to_torch(obs, policy.device), deterministic=True).action[0].cpu().numpy()

    start = time.perf_counter()
    say = log or (lambda _msg: None)
    demos = record_teacher(scenario, teacher, teacher_seeds(seed, 0, episodes, seed_low), gamma)
    out = WarmStartResult(played_mean_jct=[demos.mean_jct])
    limit = STUDENT_ROUNDS_FACTOR * math.ceil(len(demos) / episodes)  # a clone that stalls is cut off
    say(f"imitation: teacher {teacher} mean JCT {demos.mean_jct:.3f} over {episodes} training workloads, "
        f"{len(demos)} decisions")
    for r in range(rounds + 1):
        result = clone(policy, demos, epochs, lr, batch_size, seed + r, vf_coef)
        out.clones.append(result)
        if result.actor_loss:
            say(f"imitation round {r}: {len(demos)} decisions, actor loss {result.actor_loss[-1]:.3f}, "
                f"critic loss {result.critic_loss[-1]:.3f} ({time.perf_counter() - start:.0f} s)")
        if r < rounds:
            played = record_teacher(scenario, teacher, teacher_seeds(seed, r + 1, episodes, seed_low), gamma,
                                    student=student, max_rounds=limit)
            out.played_mean_jct.append(played.mean_jct)
            say(f"imitation round {r + 1}: the clone's mean JCT {played.mean_jct:.3f} on new training workloads")
            demos = merge(demos, played)
    out.wall_s = time.perf_counter() - start
    return out
