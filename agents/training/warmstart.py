"""The warm start of a fresh run: ``train.imitate`` (imitation, with its TensorBoard scalars)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

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

