"""What a run writes to TensorBoard: which scalars (:data:`TENSORBOARD_KEEP` of tianshou's logger, counters
resumed), what each means (:data:`TAG_DESCRIPTIONS`, stored with the tag by :class:`RunWriter`) and the
custom-scalars layout whose first chart is the validation curve beside the baselines (:func:`custom_layout`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tianshou.utils import TensorboardLogger
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import scalar

from .validation_baselines import VALIDATION_BASELINE_SPECS

#: the TensorBoard scalars tianshou's logger may write, per scope (everything else it logs --
#: ``save/*``, ``info/*``, ``update/smoothed_loss/*`` copies, step counters, min/max/std
#: statistics -- is dropped); ``system/*`` and ``test/best_mean_jct`` are written directly
TENSORBOARD_KEEP: dict[str, tuple[str, ...]] = {
    "training": (
        "returns_stat/mean", "mean_jct", "episode_length", "cpu_util", "gpu_util", "conflict_rate", "void_rate",
        "invalid_rate", "placed_per_step", "truncated_episodes", "collect_speed", "n_collected_episodes",
    ),
    "test": (
        "returns_stat/mean", "mean_jct", "episode_length", "cpu_util", "gpu_util", "conflict_rate", "void_rate",
        "invalid_rate", "truncated_episodes",
    ),
    "update": (
        "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance",
        "return_scale", "return_std", "grad_norm", "logp_mismatch", "active_fraction",
    ),
}


#: what every scalar a run writes means, by tag (``baselines/<label>``: :func:`tag_description`); stored with
#: the tag's first point, so TensorBoard shows it beside the chart
TAG_DESCRIPTIONS: dict[str, str] = {
    # collection: the training episodes (the policy sampling its actions), one point per collection
    "training/returns_stat/mean": "Mean return (the env's reward summed over an episode) of the training episodes "
    "that ended in this collection; higher is better.",
    "training/mean_jct": "Mean JCT (real steps) of the training episodes that ended in this collection, each "
    "episode's mean over its finished tasks. No point for a collection in which no episode ended: the envs "
    "start their first episodes together (unless train.stagger_start), so the first point comes once episodes end.",
    "training/running_mean_jct": "Mean JCT so far (real steps) of the training episodes in progress at the start "
    "of this training step, mean over the training envs: each episode's finished tasks count their JCT and its "
    "arrived unfinished tasks the time they have spent until now (a partial episode, so below the JCT it will "
    "end with). One point per collection from the first, before any episode has ended.",
    "training/episode_length": "Mean length in decisions (logical steps) of the training episodes that ended in "
    "this collection.",
    "training/cpu_util": "Mean CPU utilisation (allocated share of all clusters' cores) of the training episodes "
    "that ended in this collection.",
    "training/gpu_util": "Mean GPU utilisation (allocated share of all clusters' GPUs) of the training episodes "
    "that ended in this collection.",
    "training/conflict_rate": "Share of the agents' decisions in this collection that lost a Bayes conflict "
    "(another agent got the task).",
    "training/void_rate": "Share of the agents' decisions in this collection that placed nothing (skipped agents "
    "included).",
    "training/invalid_rate": "Share of the agents' decisions in this collection that the env refused as invalid.",
    "training/placed_per_step": "Tasks placed per env step in this collection.",
    "training/truncated_episodes": "Training episodes of this collection cut at the step cap with tasks unfinished.",
    "training/collect_speed": "Env steps per second of this collection alone (collection time only).",
    "training/n_collected_episodes": "Training episodes that ended in this collection.",
    # validation: the policy acting by train.eval_action on the workloads eval_seed + j, one point per evaluation
    "test/returns_stat/mean": "Mean return of the validation episodes.",
    "test/mean_jct": "Validation mean JCT: the mean over the validation workloads (train.eval_seed + j, "
    "j < train.eval_episodes) of each workload's mean JCT, the policy acting by train.eval_action. best.pt "
    "follows its lowest point; lower is better. Compare it with baselines/*, the same figure for the baselines.",
    "test/best_mean_jct": "The lowest validation mean JCT of the run so far: the one best.pt holds.",
    "test/episode_length": "Mean length in decisions of the validation episodes.",
    "test/cpu_util": "Mean CPU utilisation of the validation episodes.",
    "test/gpu_util": "Mean GPU utilisation of the validation episodes.",
    "test/conflict_rate": "Share of the agents' decisions in the validation episodes that lost a Bayes conflict.",
    "test/void_rate": "Share of the agents' decisions in the validation episodes that placed nothing.",
    "test/invalid_rate": "Share of the agents' decisions in the validation episodes that the env refused.",
    "test/truncated_episodes": "Validation episodes cut at the step cap with tasks unfinished (such an "
    "evaluation never becomes best.pt).",
    # the PPO update, one point per update (means over its gradient steps)
    "update/loss": "PPO's total loss: policy loss + vf_coef x value loss - ent_coef x entropy.",
    "update/policy_loss": "PPO's clipped surrogate policy loss.",
    "update/value_loss": "The critic's loss on the (scaled) returns.",
    "update/entropy": "Mean entropy of the policy's action distributions; a collapse towards 0 means it stopped "
    "exploring.",
    "update/approx_kl": "Approximate KL divergence of the policy after each gradient step from the one that "
    "collected the data; large values mean too large steps.",
    "update/clip_fraction": "Share of the probability ratios clipped at 1 +/- eps_clip.",
    "update/explained_variance": "1 - Var(returns - values) / Var(returns): how much of the returns the critic "
    "predicts (1: all; 0 or less: no better than a constant).",
    "update/return_scale": "The running std of returns the value targets are divided by (1 without "
    "train.return_scaling).",
    "update/return_std": "The std of this update's own unscaled returns; a return_scale far above it is a stale "
    "scale (train.return_scaling_window).",
    "update/grad_norm": "Total gradient norm before clipping at train.max_grad_norm.",
    "update/logp_mismatch": "Mean |behaviour log-prob - recomputed log-prob| of the collected actions (0 when "
    "collection and update agree).",
    "update/active_fraction": "Share of (sample, agent) entries with a decision to learn from (not skipped).",
    "update/lr": "The learning rate of the update (train.lr, train.lr_schedule).",
    # the machine, one point per training step
    "system/env_steps_per_s": "Training throughput: env steps per second from one training step's start to the "
    "next (collection, update and any evaluation between them).",
    "system/cpu_percent": "Machine-wide CPU utilisation (%) since the previous point.",
    "system/process_cpu_percent": "This process's CPU utilisation (%) since the previous point (above 100 with "
    "several threads).",
    "system/gpu_memory_gb": "Peak GPU memory torch allocated (GiB).",
    "system/gpu_util_percent": "GPU utilisation (%).",
    # the warm start (train.imitate), before the first update
    "imitation/teacher_mean_jct": "Warm start: the teacher scheduler's mean JCT on the recorded training episodes.",
    "imitation/played_mean_jct": "Warm start: the cloned policy's own mean JCT after each round (step = round).",
    "imitation/actor_loss": "Warm start: behaviour cloning's actor loss at the end of each round (step = round).",
    "imitation/critic_loss": "Warm start: behaviour cloning's critic loss at the end of each round (step = round).",
}
#: the scope of the validation baselines' scalars (``baselines/optimus``)
BASELINE_SCOPE = "baselines"
#: the TensorBoard run (a folder of the run directory) the validation baselines are written to, so that
#: TensorBoard draws them in a colour of their own beside the run's curve
BASELINES_RUN = "baselines"


def baseline_tag(label: str) -> str:
    """The TensorBoard tag of a validation baseline (``baselines/optimus:preemptive=false``)."""
    return scalar_tag(BASELINE_SCOPE, label)


def tag_description(tag: str) -> str | None:
    """What the scalar ``tag`` means (None: a tag the run does not write)."""
    if tag in TAG_DESCRIPTIONS:
        return TAG_DESCRIPTIONS[tag]
    label = tag.removeprefix(f"{BASELINE_SCOPE}/")
    if label != tag and label in VALIDATION_BASELINE_SPECS:
        return (f"The baseline {label} on the run's validation workloads: the mean over them of each workload's "
                "mean JCT, as test/mean_jct; computed once per run, drawn flat at each evaluation.")
    return None


def custom_layout(baselines: Iterable[str]) -> dict[str, dict[str, list]]:
    """The custom-scalars layout (``SummaryWriter.add_custom_scalars``): first the validation mean JCT beside the
    ``baselines`` (labels) and the best so far, then the training episodes, PPO's health and the machine."""
    exact = [re.escape(t) + "$" for t in (EVAL_MEAN_JCT_TAG, "test/best_mean_jct", *map(baseline_tag, baselines))]

    def tags(*names: str) -> list[str]:
        return [re.escape(n) + "$" for n in names]

    return {
        "validation": {"validation mean JCT vs baselines (lower is better)": ["Multiline", exact]},
        "training episodes": {
            "mean JCT of the training episodes (ended; in progress, so far)": [
                "Multiline", tags("training/mean_jct", "training/running_mean_jct")],
            "return of the training episodes": ["Multiline", tags("training/returns_stat/mean")],
        },
        "PPO health": {
            "approx KL and clip fraction": ["Multiline", tags("update/approx_kl", "update/clip_fraction")],
            "entropy": ["Multiline", tags("update/entropy")],
            "explained variance": ["Multiline", tags("update/explained_variance")],
            "return scale vs this update's return std": ["Multiline", tags("update/return_scale", "update/return_std")],
        },
        "machine": {"env steps per second": ["Multiline", tags("system/env_steps_per_s")]},
    }


class RunWriter(SummaryWriter):
    """The run's TensorBoard writer: every scalar tag's description (:func:`tag_description`) is stored once,
    with the tag's first point.

    TensorBoard takes a tag's metadata (its description) from the tag's first summary, and its default
    (fast) loader keeps it only from a new-style (tensor) scalar. So the first point of a tag is written
    twice at the same step: a new-style copy carrying the description, then the plain (``simple_value``)
    point every point is. TensorBoard's loader keeps one point per step; readers of plain scalars
    (``EventAccumulator.Scalars``) see only the plain points.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._described: set[str] = set()

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None, walltime: float | None = None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        description = None if tag in self._described else tag_description(tag)
        if description is not None:
            self._described.add(tag)
            summary = scalar(tag, scalar_value, new_style=True)
            summary.value[0].metadata.CopyFrom(scalar_metadata.create_summary_metadata(display_name=tag,
                                                                                       description=description))
            self._get_file_writer().add_summary(summary, global_step, walltime)
        super().add_scalar(tag, scalar_value, global_step, walltime, new_style, double_precision)


class BaselineScalars:
    """The validation baselines' mean JCTs (label -> mean) as flat ``baselines/<label>`` lines, written to
    the run's TensorBoard sub-run :data:`BASELINES_RUN` (nothing when there is no finite mean)."""

    def __init__(self, run_dir: Path, means: Mapping[str, float | None]) -> None:
        self.means = dict(means)
        self._writer = RunWriter(log_dir=str(run_dir / BASELINES_RUN)) if any(
            v is not None for v in self.means.values()) else None
        self._step: int | None = None  # the env step last written at

    def write(self, env_step: int) -> None:
        """One point of every baseline at ``env_step`` (once per step)."""
        if self._writer is None or env_step == self._step:
            return
        self._step = env_step
        for label, mean in self.means.items():
            if mean is not None:
                self._writer.add_scalar(baseline_tag(label), mean, env_step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def scalar_tag(scope: str, key: str) -> str:
    """The TensorBoard tag :class:`RunLogger` writes ``key`` of ``scope`` under (``test/mean_jct``)."""
    return f"{scope}/{key}"


#: TensorBoard tag of the validation mean JCT (the policy acting by ``train.eval_action`` on the held-out workloads
#: ``eval_seed + j``), one point per evaluation, step = env steps; read by
#: :mod:`agents.evaluation.curves`
EVAL_MEAN_JCT_TAG = scalar_tag("test", "mean_jct")


class RunLogger(TensorboardLogger):
    """tianshou's TensorBoard logger: resume counters from the checkpoint, only the scalars of
    :data:`TENSORBOARD_KEEP`.

    ``restored`` is ``(epoch, env_step, update_step)`` of the resumed checkpoint, or None for a
    fresh run; tianshou reads it through :meth:`restore_data` when ``resume_from_log`` is set.
    """

    def __init__(self, writer: SummaryWriter, restored: tuple[int, int, int] | None) -> None:
        super().__init__(writer, training_interval=1, test_interval=1, update_interval=1, info_interval=1,
                         save_interval=1)
        self.restored = restored

    def restore_data(self) -> tuple[int, int, int]:
        if self.restored is None:
            return 0, 0, 0
        epoch, env_step, update_step = self.restored
        self.last_save_step = epoch
        return epoch, env_step, update_step

    def write(self, step_type: str, step: int, data: dict[str, Any]) -> None:
        keep = TENSORBOARD_KEEP.get(step_type.split("/")[0], ())
        scope = step_type.split("/")[0]
        for key in keep:
            value = data.get(key)
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                self.writer.add_scalar(scalar_tag(scope, key), value, global_step=step)
        if self.write_flush:
            self.writer.flush()
