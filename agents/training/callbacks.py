"""The state of one run shared by tianshou's trainer callbacks: counters, best score, saving.

* ``last.pt`` is written at the end of every epoch (:meth:`TrainerCallbacks.save_checkpoint_fn`), every
  ``save_every`` env steps (:meth:`TrainerCallbacks.training_fn`), and by the loop at the end of the run
  and on Ctrl-C; ``best.pt`` whenever the evaluation's score improves on the best of the run (its mean JCT; with
  ``train.also_validate_on``, its relative JCT, :mod:`~agents.training.validation_set`)
  (over resumes too); every checkpoint records the env step of the run's latest finished evaluation
  (:data:`~agents.training.checkpoints.EVALUATED`), so a run stopped before its final evaluation
  ended resumes into it;
* every evaluation prints one line ``step X: eval mean JCT Y (best Z at step S)``
  (:meth:`TrainerCallbacks.compute_score_fn`; tianshou's own ``test_reward`` line is off);
* ``usage/*`` scalars (throughput, :class:`~agents.training.monitor.SystemMonitor`) and
  ``test/best_mean_jct`` go straight to the writer, the validation baselines to
  their own TensorBoard runs (``baselines/<label>``) at the process's first env step and at every evaluation;
* between evaluations, :class:`~agents.training.progress.RunProgress` shows the run's progress: a
  bar (``train.progress``) or a plain line every ``status_every_s`` seconds.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch

from envs.config import ConfigError

from .checkpoints import (BEST, EVALUATED, LAST, final_evaluation_pending, load_checkpoint, save_checkpoint,
                          training_state)
from .envs import running_mean_jct
from .monitor import SystemMonitor
from .progress import RunProgress
from .rundir import CONFIG_FILE, RUN_ID
from .scenario_mix import TrainingMix
from .stats import SchedulingCollectStats, evaluation_score
from .tianshou_glue.trainer import trainer_env_step
from .validation_baselines import validation_rival
from .validation_set import RELATIVE_JCT_TAG, other_tag

if TYPE_CHECKING:
    from tianshou.algorithm import Algorithm
    from tianshou.data.collector import CollectActionBatchProtocol, RolloutBatchProtocol
    from tianshou.trainer import OnPolicyTrainer
    from torch.utils.tensorboard import SummaryWriter

    from .envs import VectorEnv
    from .logger import BaselineScalars
    from .tianshou_glue.algorithm import MultiAgentPPO
    from .run_spec import RunSpec
    from .validation_set import OtherValidation


def earlier_devices(spec: RunSpec) -> list[str]:
    """Device types (``cpu``, ``cuda``) the resumed run trained on before this process; empty for
    a fresh run. A checkpoint saved before ``devices`` was counted names none: its run directory's
    ``config.yaml`` (read before this process rewrites it) names the device of its last process."""
    counters = spec.resumed_counters
    if "devices" in counters:
        return [str(d) for d in counters["devices"]]
    if spec.resume is None or spec.fresh_dir:
        return []
    import yaml

    try:
        meta = (yaml.safe_load((spec.run_dir / CONFIG_FILE).read_text()) or {}).get("meta", {})
        return [torch.device(str(meta["device"])).type]
    except (OSError, yaml.YAMLError, AttributeError, KeyError, RuntimeError):
        return []


class TrainerCallbacks:
    """tianshou's trainer callbacks of one run and the state they share (:meth:`save_checkpoint_fn`,
    :meth:`training_fn`, :meth:`collect_step_fn`, :meth:`test_fn`, :meth:`compute_score_fn`,
    :meth:`save_best_fn`). ``baselines``: the validation baselines' scalars (None: none computed);
    ``train_envs``: the training vector env, read for ``training/running_mean_jct``; ``others``: the other
    validation scenarios (:mod:`~agents.training.validation_set`), whose relative JCT becomes the score."""

    def __init__(self, spec: RunSpec, algorithm: MultiAgentPPO, net: torch.nn.Module, writer: SummaryWriter,
                 started: float | None = None, devices_before: Sequence[str] = (),
                 baselines: BaselineScalars | None = None, train_envs: VectorEnv | None = None,
                 others: OtherValidation | None = None) -> None:
        self.spec = spec
        self.train_envs = train_envs  # its episodes in progress give training/running_mean_jct
        #: the collectors of several training scenarios (train.scenarios) and the switch between them; None: one
        self.mix: TrainingMix | None = None
        self.algorithm = algorithm
        self.net = net
        self.writer = writer
        self.trainer: OnPolicyTrainer | None = None  # set once the trainer exists
        counters = spec.resumed_counters
        self.completed_epochs = int(counters.get("epoch", 0))
        self.restarts = spec.restarts
        # a resumed run keeps its best; a checkpoint continued in a new directory starts a new best
        # there (best.pt is the best evaluation of the directory it is in)
        own = spec.resume is not None and not spec.fresh_dir
        self.best_score = float(counters.get("best_score", -math.inf)) if own else -math.inf
        self.best_mean_jct: float | None = counters.get("best_mean_jct") if own else None
        self.best_env_step: int | None = counters.get("best_env_step") if own else None
        #: env step of the run's latest finished evaluation (its score compared with the best, best.pt
        #: saved when it won); a last.pt at the run's end without it resumes into that evaluation
        self.evaluated_env_step: int | None = counters.get(EVALUATED)
        #: this process only runs the final evaluation its last.pt lacks (:func:`final_evaluation_pending`)
        self.final_evaluation_only = spec.resume is not None and final_evaluation_pending(spec.resume, spec.train)
        self.last_score = -math.inf
        self.last_mean_jct: float | None = None
        self.last_save_env_step = int(counters.get("env_step", 0))
        #: wall-clock seconds of the run's earlier processes (resumes add theirs up)
        self.wall_before = float(counters.get("wall_s", 0.0))
        self.started = time.perf_counter() if started is None else started  # this process's start
        #: device types the run has trained on, in order of first use (``devices_before``: the earlier
        #: processes', :func:`earlier_devices`; this process adds its own)
        self.devices = list(devices_before)
        here = next(net.parameters()).device.type
        if here not in self.devices:
            self.devices.append(here)
        self._tick: tuple[float, int] | None = None
        self.last_rate: float | None = None
        self.baselines = baselines
        self.others = others  # the other validation scenarios (train.also_validate_on); None: the run's own alone
        self.monitor = SystemMonitor()
        best = spec.run_dir / BEST
        if own and best.is_file():  # best.pt may be newer than last.pt; only this run's own counts
            try:
                bc = load_checkpoint(best).get("counters", {})
                if bc.get(RUN_ID) == spec.run_id and float(bc.get("best_score", -math.inf)) > self.best_score:
                    self.best_score = float(bc["best_score"])
                    self.best_mean_jct = bc.get("best_mean_jct")
                    self.best_env_step = bc.get("best_env_step", bc.get("env_step"))
            except ConfigError:  # an unreadable best.pt is replaced by the next best
                pass
        t = spec.train
        planned = spec.done_env_steps if self.final_evaluation_only else t.planned_env_steps(spec.done_env_steps)
        self.progress = RunProgress(spec.done_env_steps, planned, bar=t.progress,
                                    every_s=spec.status_every_s, best_jct=self.best_mean_jct,
                                    rival=None if baselines is None else validation_rival(baselines.means),
                                    best_label="best" if others is None else "best.pt")

    # ------------------------------------------------------------------ counters / saving
    def env_step(self) -> int:
        """The env steps trained so far: the trainer's count, or before it counts, the last save's."""
        counted = None if self.trainer is None else trainer_env_step(self.trainer)
        return self.last_save_env_step if counted is None else counted

    def counters(self, env_step: int | None = None, epoch: int | None = None) -> dict[str, Any]:
        return {
            "env_step": int(self.env_step() if env_step is None else env_step),
            "gradient_steps": int(self.algorithm.gradient_steps),
            "update_step": int(self.algorithm.update_count),
            "epoch": int(self.completed_epochs if epoch is None else epoch),
            "restarts": int(self.restarts),
            "best_score": float(self.best_score),
            "best_mean_jct": None if self.best_mean_jct is None else float(self.best_mean_jct),
            "best_env_step": None if self.best_env_step is None else int(self.best_env_step),
            EVALUATED: None if self.evaluated_env_step is None else int(self.evaluated_env_step),
            "wall_s": self.wall_s(),
            "devices": list(self.devices),
            RUN_ID: self.spec.run_id,
        }

    def wall_s(self) -> float:
        """Wall-clock seconds of the run so far, over all its processes (start-up included)."""
        return self.wall_before + time.perf_counter() - self.started

    def save(self, name: str, env_step: int | None = None, epoch: int | None = None) -> Path:
        path = self.spec.run_dir / name
        extra = training_state(self.algorithm, self.counters(env_step, epoch), self.spec.train)
        save_checkpoint(path, self.net, self.spec.scenario, extra)
        if name == LAST:
            self.last_save_env_step = extra["counters"]["env_step"]
        return path

    # ------------------------------------------------------------------ tianshou callbacks
    def save_checkpoint_fn(self, epoch: int, env_step: int, gradient_step: int) -> str:
        """End of an epoch (before its evaluation): ``last.pt``."""
        self.completed_epochs = int(epoch)
        return str(self.save(LAST, env_step=env_step, epoch=epoch))

    def training_fn(self, epoch: int, env_step: int) -> None:
        """Start of each training step: the learning rate of its update (``train.lr_schedule``),
        throughput / machine scalars, the training episodes' mean JCT so far, periodic ``last.pt``."""
        lr = self.spec.train.lr_at(env_step)
        self.algorithm.optim.set_lr(lr)
        self.writer.add_scalar("update/lr", lr, env_step)
        if self.mix is not None and self.trainer is not None:
            self.writer.add_scalar("training/scenario", self.mix.select(self.trainer.params, env_step), env_step)
            self.train_envs = self.mix.current_envs
        now = time.perf_counter()
        if self._tick is not None:
            t0, s0 = self._tick
            if now > t0 and env_step > s0:
                self.last_rate = (env_step - s0) / (now - t0)
                self.writer.add_scalar("usage/env_steps_per_s", self.last_rate, env_step)
        self._tick = (now, env_step)
        for key, value in self.monitor.sample().items():
            self.writer.add_scalar(f"usage/{key}", value, env_step)
        running = None if self.train_envs is None else running_mean_jct(self.train_envs)
        if running is not None:
            self.writer.add_scalar("training/running_mean_jct", running, env_step)
        self.progress.training_step(env_step)
        every = self.spec.train.save_every
        if every is not None and env_step - self.last_save_env_step >= every:
            self.save(LAST, env_step=env_step, epoch=epoch - 1)

    def collect_step_fn(self, action_batch: CollectActionBatchProtocol, rollout_batch: RolloutBatchProtocol) -> None:
        """The training collector's step hook: one env step of each stepped environment."""
        self.progress.collected(len(rollout_batch))

    def test_fn(self, epoch: int, env_step: int) -> None:
        """Start of an evaluation: the policy's evaluation generators start over (the same draws at every
        evaluation, ``train.eval_action=sample``)."""
        self.algorithm.policy.reset_eval_generators()
        self.progress.validation_started()

    def log_baselines(self, env_step: int) -> None:
        """The validation baselines' points at ``env_step`` (:class:`~agents.training.logger.BaselineScalars`)."""
        if self.baselines is not None:
            self.baselines.write(env_step)

    def compute_score_fn(self, stats: SchedulingCollectStats) -> float:
        """tianshou's score of an evaluation (with other validation scenarios: ``-`` their relative JCT,
        :mod:`~agents.training.validation_set`); prints our one-line evaluation summary."""
        self.last_score = evaluation_score(stats)
        self.last_mean_jct = stats.mean_jct
        step = self.env_step()
        point = None
        if self.others is not None:
            point = self.others.evaluate(stats)
            self.last_score = point.score
            for name, jct in point.others.items():
                if jct is not None:
                    self.writer.add_scalar(other_tag(name), jct, step)
            if point.relative_jct is not None:
                self.writer.add_scalar(RELATIVE_JCT_TAG, point.relative_jct, step)
        if self.last_score > self.best_score:
            best_jct, best_step = self.last_mean_jct, step
        else:  # not a new best: nothing is left to do for this evaluation (a new best is done once saved)
            best_jct, best_step = self.best_mean_jct, self.best_env_step
            self.evaluated_env_step = step
        self.log_baselines(step)
        self.progress.evaluated(self.last_mean_jct, best_jct)
        if self.spec.eval_lines:
            jct = "n/a" if stats.mean_jct is None else f"{stats.mean_jct:.3f}"
            trunc = f", {stats.truncated_episodes} episode(s) truncated" if stats.truncated_episodes else ""
            best = "n/a" if best_jct is None else f"{best_jct:.3f}"
            at = "" if best_step is None else f" at step {best_step}"
            also = "" if point is None else f"; {point.summary()}"
            self.progress.write(f"step {step}: eval mean JCT {jct}{trunc}{also} ({self.progress.best_label} {best}{at})")
        return self.last_score

    def save_best_fn(self, algorithm: Algorithm) -> None:
        """Called by tianshou on a new best test score; keeps the best over resumes too."""
        if self.last_score > self.best_score:
            # the new best is the run's only once best.pt holds it: a save cut short (Ctrl-C,
            # SIGTERM, a full disk) leaves the old best.pt and the old best in every later file
            before = self.best_score, self.best_mean_jct, self.best_env_step, self.evaluated_env_step
            self.best_score, self.best_mean_jct, self.best_env_step = (
                self.last_score, self.last_mean_jct, self.env_step())
            self.evaluated_env_step = self.best_env_step
            try:
                self.save(BEST)
            except BaseException:
                self.best_score, self.best_mean_jct, self.best_env_step, self.evaluated_env_step = before
                raise
        if self.best_mean_jct is not None:
            self.writer.add_scalar("test/best_mean_jct", self.best_mean_jct, self.env_step())
