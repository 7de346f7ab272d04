"""Training checkpoints: ``last.pt``/``best.pt``, what they hold, and restoring a run from one.

Written with :func:`agents.policy.checkpoint.save_policy_checkpoint` (keys ``model``,
``policy_config``, ``scenario``, ``obs_spec``) plus :data:`CKPT_KEYS`: ``optimizer``,
``counters``, ``rng``, ``train_config`` and ``return_scaler``; every value is a tensor or a
plain Python value, and every read goes through :func:`agents.policy.checkpoint.read_checkpoint`
(``weights_only=True``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import torch

from agents.policy.checkpoint import (
    POLICY_KEYS,
    TRAINING_KEYS,
    CheckpointError,
    map_tensors,
    read_checkpoint,
    save_policy_checkpoint,
    validate_checkpoint,
)
from envs.config import ConfigError, ScenarioConfig

from .config import TrainConfig
from .rng import rng_state

if TYPE_CHECKING:
    from .tianshou_glue.algorithm import MultiAgentPPO
    from .run_spec import RunSpec

LAST = "last.pt"
BEST = "best.pt"
#: the run's summary (env steps, wall time, device, best validation), written when a process ends
RESULT_FILE = "result.json"
#: keys this package adds to the policy checkpoint (named, and checked on every read, by the policy's reader)
CKPT_KEYS = TRAINING_KEYS
#: the counter holding the env step of the run's latest finished evaluation (None before the first; a file
#: without it comes from a version that did not record it)
EVALUATED = "evaluated_env_step"


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a training checkpoint (a file, or a run directory holding ``last.pt``).

    Reads with :func:`agents.policy.checkpoint.read_checkpoint` (safe loading: tensors and plain
    values only) and checks every key (:func:`~agents.policy.checkpoint.validate_checkpoint`); its
    ``train_config`` comes without the options this version removed (``TrainConfig.REMOVED``: one at
    its old default is dropped, another value refused, naming it, since a resume cannot honour it); every
    problem raises :class:`~agents.policy.checkpoint.CheckpointError` (a :class:`ConfigError`).
    """
    path = Path(path)
    if path.is_dir():
        path = path / LAST
    ckpt = read_checkpoint(path, map_location, required=())
    missing = [k for k in (*POLICY_KEYS, *CKPT_KEYS) if k not in ckpt]
    if missing:
        raise CheckpointError(
            f"{path} is not a training checkpoint (missing {missing}); resume needs a last.pt written by train.py"
        )
    validate_checkpoint(ckpt, path, (*POLICY_KEYS, *CKPT_KEYS))
    try:  # the train options this version removed: dropped at their old defaults, refused otherwise
        ckpt["train_config"] = TrainConfig.without_removed(ckpt["train_config"])
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint {str(path)!r}: {exc}") from None
    ckpt["_path"] = str(path)
    return ckpt


def final_evaluation_pending(ckpt: Mapping[str, Any], train: TrainConfig) -> bool:
    """``ckpt`` is at the end of the run ``train`` plans (its planned env steps) but lacks the
    evaluation at its last step: the process stopped (SIGTERM, Ctrl-C, a kill) after that ``last.pt``
    and before the final evaluation ended. Resuming it runs that evaluation and nothing else. False
    for a file that does not record its evaluations."""
    counters = ckpt["counters"]
    if EVALUATED not in counters:
        return False
    done, evaluated = int(counters["env_step"]), counters[EVALUATED]
    return done == train.planned_env_steps() and (evaluated is None or int(evaluated) < done)


def save_checkpoint(path: Path, net: torch.nn.Module, scenario: ScenarioConfig, extra: Mapping[str, Any]) -> None:
    """Write ``path`` (atomically) through the policy helper's ``save_policy_checkpoint``."""
    save_policy_checkpoint(path, net, scenario, extra=dict(extra))


def training_state(algorithm: MultiAgentPPO, counters: dict[str, Any], train: TrainConfig) -> dict[str, Any]:
    """The :data:`CKPT_KEYS` part of a checkpoint (the RNG states are the current ones)."""
    return {
        "optimizer": algorithm.optim.state_dict(),
        "counters": counters,
        "rng": rng_state(),
        "train_config": train.to_dict(),
        "return_scaler": algorithm.return_scale.state(),
    }


def learner_state(algorithm: MultiAgentPPO) -> dict[str, Any]:
    """A copy of everything one PPO update changes: the weights, the optimizer, the return
    scaling and the update counters (:func:`load_learner_state` puts it back)."""
    return {
        "model": _copied(algorithm.policy.net.state_dict()),
        "optimizer": _copied(algorithm.optim.state_dict()),
        "return_scaler": algorithm.return_scale.state(),
        "gradient_steps": int(algorithm.gradient_steps),
        "update_step": int(algorithm.update_count),
    }


def _copied(value: Any) -> Any:
    """A copy of nested dicts, lists and tuples of tensors and plain values (``copy.deepcopy``
    is 20-30x slower on an optimizer's many small state tensors)."""
    return map_tensors(value, lambda t: t.detach().clone())


def load_learner_state(algorithm: MultiAgentPPO, state: Mapping[str, Any]) -> None:
    """Put back a :func:`learner_state` (or the same keys read from a checkpoint)."""
    algorithm.policy.net.load_state_dict(state["model"])
    algorithm.optim.load_state_dict(state["optimizer"])
    algorithm.return_scale.load_state(state["return_scaler"])
    algorithm.gradient_steps = int(state["gradient_steps"])
    algorithm.update_count = int(state["update_step"])


def restore(spec: RunSpec, algorithm: MultiAgentPPO) -> None:
    """Load the resumed checkpoint's model, optimizer, return scaling and update counters."""
    ckpt = spec.resume
    assert ckpt is not None
    counters = ckpt["counters"]
    try:
        load_learner_state(algorithm, {**ckpt, "gradient_steps": counters["gradient_steps"],
                                       "update_step": counters["update_step"]})
    except RuntimeError as exc:
        raise ConfigError(f"cannot resume {ckpt['_path']}: the model does not match the architecture: {exc}") from None
