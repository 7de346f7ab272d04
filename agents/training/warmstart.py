"""Warm starts of a fresh run: ``train.imitate`` (imitation, with its TensorBoard scalars) and
``train.init_from`` (the weights of a trained checkpoint)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from envs.config import ConfigError

from .config import TRAIN_SEED_MIN

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from .imitation import WarmStartResult
    from .tianshou_glue.algorithm import MultiAgentPPO
    from .run_spec import RunSpec


def warm_start(spec: RunSpec, algorithm: MultiAgentPPO, net: torch.nn.Module) -> WarmStartResult:
    """``train.imitate``: clone the teacher scheduler into ``net`` (behaviour cloning and DAgger,
    :mod:`agents.training.imitation`) and start PPO's return scaling from the returns it saw."""
    from .imitation import warm_start as clone_teacher  # imported on first use (loads the baselines)

    t = spec.train
    result = clone_teacher(
        net, spec.scenario, str(t.imitate), episodes=t.imitate_episodes, rounds=t.imitate_rounds,
        epochs=t.imitate_epochs, lr=t.imitate_lr, batch_size=t.batch_size,
        gamma=t.resolved_gamma(spec.scenario.mode), seed=t.seed, seed_low=TRAIN_SEED_MIN, vf_coef=t.vf_coef,
        log=lambda line: print(line, flush=True) if spec.eval_lines else None,
    )
    algorithm.return_scale.load_state(result.clones[-1].return_scaler_state())
    return result


def log_warm_start(writer: SummaryWriter, result: WarmStartResult) -> None:
    """The warm start's per-round losses and JCTs as TensorBoard scalars (``warmstart/...``)."""
    writer.add_scalar("warmstart/teacher_mean_jct", result.teacher_mean_jct, 0)
    for i, (jct, fit) in enumerate(zip(result.played_mean_jct, result.clones)):
        writer.add_scalar("warmstart/played_mean_jct", jct, i)
        if fit.actor_loss:
            writer.add_scalar("warmstart/actor_loss", fit.actor_loss[-1], i)
            writer.add_scalar("warmstart/critic_loss", fit.critic_loss[-1], i)


def init_from_checkpoint(spec: RunSpec, algorithm: MultiAgentPPO, net: torch.nn.Module) -> str:
    """``train.init_from``: copy a trained policy's weights into ``net`` (and, for a ``train.py``
    checkpoint, its return scaling); the optimizer, counters and RNG start fresh.

    The checkpoint may come from another scenario (that is the point: train at N = 3, fine-tune
    at N = 6) if the policy can act on this one (:func:`~agents.policy.checkpoint.load_policy_checkpoint`
    checks it) and its architecture equals this run's ``policy`` section (the fields of
    ``PolicyConfig.RUNTIME_FIELDS``, such as ``conflicts``, may differ: the run's apply); otherwise a
    :class:`~envs.config.ConfigError` names the fields to set. Returns (and with the run's
    progress lines prints) a one-line summary.
    """
    from agents.policy.checkpoint import load_policy_checkpoint

    path = str(spec.train.init_from)
    trained, meta = load_policy_checkpoint(path, device="cpu", scenario=spec.scenario)
    have, want = meta["policy_config"].to_dict(), net.cfg.to_dict()
    differ = [k for k in want if have.get(k) != want[k] and k not in net.cfg.RUNTIME_FIELDS]
    if differ:
        fix = " ".join(f"policy.{k}={have.get(k)}" for k in differ)
        raise ConfigError(f"init_from {path!r}: the checkpoint's policy differs from this run's in {differ}; "
                          f"to start from it, train with {fix}")
    net.load_state_dict(trained.state_dict())
    scaler = meta.get("return_scaler")
    if isinstance(scaler, dict):
        algorithm.return_scale.load_state(scaler)
    line = f"init_from: weights of {path} (trained on {meta['scenario'].name})"
    if spec.eval_lines:
        print(line, flush=True)
    return line
