"""What a run writes to TensorBoard: which scalars (:data:`TENSORBOARD_KEEP` of tianshou's logger, counters
resumed), what each means (:data:`TAG_DESCRIPTIONS`, stored with the tag by :class:`RunWriter`), each point
once (a resumed run never repeats a step, :func:`written_before`), the validation baselines as TensorBoard runs of
their own drawn on the validation chart (:class:`BaselineScalars`) and the custom-scalars layout whose first
charts are the validation curve beside the baselines and the best so far (:func:`custom_layout`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tianshou.utils import TensorboardLogger
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import custom_scalars, scalar

#: the TensorBoard scalars tianshou's logger may write, per scope (everything else it logs --
#: ``save/*``, ``info/*``, ``update/smoothed_loss/*`` copies, step counters, min/max/std
#: statistics -- is dropped); ``update`` is every ``update/*`` tag of :data:`TAG_DESCRIPTIONS` (set below it:
#: the update's statistics by name, a new one of the loss written once it is described); ``usage/*``,
#: ``update/lr`` and ``test/best_mean_jct`` are written directly
TENSORBOARD_KEEP: dict[str, tuple[str, ...]] = {
    "training": (
        "returns_stat/mean", "mean_jct", "episode_length", "cpu_util", "gpu_util", "conflict_rate", "void_rate",
        "invalid_rate", "placed_per_step", "truncated_episodes", "collect_speed", "n_collected_episodes",
    ),
    "test": (
        "returns_stat/mean", "mean_jct", "episode_length", "cpu_util", "gpu_util", "conflict_rate", "void_rate",
        "invalid_rate", "truncated_episodes",
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
    "training/scenario": "With train.scenarios only: the index, in that list, of the scenario this collection "
    "came from (a curriculum steps through them in order; a mixture draws one per collection).",
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
    "follows its lowest point; lower is better. Each validation baseline draws the same figure on this chart, "
    "as the run baselines/NAME.",
    "test/best_mean_jct": "The lowest validation mean JCT of the run so far: the one best.pt holds.",
    "test/relative_jct": "With train.also_validate_on only: the score best.pt is chosen on, the mean over the "
    "validation scenarios (the run's own and each of train.also_validate_on) of the validation mean JCT divided "
    "by that scenario's best validation baseline; below 1 where the policy beats the rivals on average.",
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
    "usage/env_steps_per_s": "Training throughput: env steps per second from one training step's start to the "
    "next (collection, update and any evaluation between them).",
    "usage/cpu_percent": "Machine-wide CPU utilisation (%) since the previous point.",
    "usage/process_cpu_percent": "This process's CPU utilisation (%) since the previous point (above 100 with "
    "several threads).",
    "usage/gpu_memory_gb": "Peak GPU memory torch allocated (GiB).",
    "usage/gpu_util_percent": "GPU utilisation (%).",
    # the warm start (train.imitate), before the first update
    "warmstart/teacher_mean_jct": "Warm start: the teacher scheduler's mean JCT on the recorded training episodes.",
    "warmstart/played_mean_jct": "Warm start: the cloned policy's own mean JCT after each round (step = round).",
    "warmstart/actor_loss": "Warm start: behaviour cloning's actor loss at the end of each round (step = round).",
    "warmstart/critic_loss": "Warm start: behaviour cloning's critic loss at the end of each round (step = round).",
}
TENSORBOARD_KEEP["update"] = tuple(tag.removeprefix("update/") for tag in TAG_DESCRIPTIONS if tag.startswith("update/"))
#: the folder of the run directory holding the validation baselines: each baseline is the TensorBoard run
#: ``baselines/<label>`` and writes its mean under the validation tag, so TensorBoard draws it on the run's
#: validation chart, in a colour of its own
BASELINES_RUN = "baselines"
#: the tag of the best validation mean JCT so far (written by the trainer callbacks at each evaluation)
BEST_MEAN_JCT_TAG = "test/best_mean_jct"
#: the title of the custom layout's chart of the best validation mean JCT so far (a chart of its own)
BEST_CHART = "best validation mean JCT so far: the one best.pt holds"
#: the tags ``<prefix><name>/mean_jct`` of the other validation scenarios (train.also_validate_on)
OTHER_VALIDATION_PREFIX = "test/also/"
#: the tag under which ``SummaryWriter.add_custom_scalars`` stores the layout
CUSTOM_SCALARS_TAG = "custom_scalars__config__"


def baseline_run(label: str) -> str:
    """The TensorBoard run (a folder of the run directory) of the validation baseline ``label``."""
    return f"{BASELINES_RUN}/{label}"


def baseline_description(label: str) -> str:
    """What the validation tag means in the run of the baseline ``label``."""
    return (f"The baseline {label} on the run's validation workloads: the mean over them of each workload's "
            "mean JCT, the figure test/mean_jct is for the policy; computed once per run, a flat line with a "
            "point at each evaluation.")


def tag_description(tag: str) -> str | None:
    """What the scalar ``tag`` of the run means (None: a tag the run does not write)."""
    if tag.startswith(OTHER_VALIDATION_PREFIX) and tag.endswith("/mean_jct"):
        name = tag.removeprefix(OTHER_VALIDATION_PREFIX).removesuffix("/mean_jct")
        return (f"With train.also_validate_on only: the validation mean JCT on {name}, the same workloads "
                "(train.eval_seed + j) replayed there right after the run's own at each evaluation.")
    return TAG_DESCRIPTIONS.get(tag)


def written_before(log_dir: str | Path) -> tuple[dict[str, int], set[bytes]]:
    """What the event files already in ``log_dir`` hold (a resumed run's earlier processes; a new run directory
    has none): the last step of every tag, and the custom-scalars layouts (serialised)."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

    last: dict[str, int] = {}
    layouts: set[bytes] = set()
    for path in sorted(Path(log_dir).glob("*tfevents*")):
        if not path.is_file():
            continue
        for record in RawEventFileLoader(str(path)).Load():
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                if value.tag == CUSTOM_SCALARS_TAG:
                    layouts.update(bytes(v) for v in value.tensor.string_val)
                else:
                    last[value.tag] = max(last.get(value.tag, event.step), event.step)
    return last, layouts


def validation_chart(baselines: Iterable[str]) -> str:
    """The title of the custom layout's first chart: the validation mean JCT at each evaluation, with the
    ``baselines`` (labels) it is drawn with."""
    labels = list(baselines)
    return "validation mean JCT at each evaluation" + (f" vs the baselines {', '.join(labels)}" if labels else "") \
        + " (lower is better)"


def custom_layout(baselines: Iterable[str]) -> dict[str, dict[str, list]]:
    """The custom-scalars layout (``SummaryWriter.add_custom_scalars``): first the validation mean JCT at each
    evaluation, drawn with the ``baselines`` (labels; their runs write the same tag), then the best so far on a
    chart of its own (:data:`BEST_CHART`), then the training episodes, PPO's health and the machine."""

    def tags(*names: str) -> list[str]:
        return [re.escape(n) + "$" for n in names]

    return {
        "validation": {validation_chart(baselines): ["Multiline", tags(EVAL_MEAN_JCT_TAG)],
                       BEST_CHART: ["Multiline", tags(BEST_MEAN_JCT_TAG)]},
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
        "machine": {"env steps per second": ["Multiline", tags("usage/env_steps_per_s")]},
    }


class RunWriter(SummaryWriter):
    """The run's TensorBoard writer: each point is written once, the tag's first one carrying its
    description, and a tag's step never repeats or goes back.

    The description (``descriptions`` by tag, else :func:`tag_description`) rides as the metadata of the
    tag's first plain (``simple_value``) point, marked as a scalar of the scalars plugin, which both
    TensorBoard loaders and ``EventAccumulator.SummaryMetadata`` read. A point at or before the last step
    its tag has in this directory -- this process's points, or on a resume the earlier processes' event
    files (:func:`written_before`), such as the evaluation ``last.pt`` was saved after, which the trainer
    repeats -- is not written; the custom-scalars layout is written only when the directory lacks it.
    """

    def __init__(self, log_dir: str, descriptions: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        # read before this process's own event file exists
        self._last, self._layouts = written_before(log_dir) if Path(log_dir).is_dir() else ({}, set())
        super().__init__(log_dir=log_dir, **kwargs)
        self._descriptions = dict(descriptions or {})
        self._described: set[str] = set(self._last)  # an earlier process stored their descriptions

    def add_custom_scalars(self, layout: dict[str, dict[str, list]]) -> None:
        """Store ``layout`` unless this directory holds the same one already."""
        summary = custom_scalars(layout)
        serialised = bytes(summary.value[0].tensor.string_val[0])
        if serialised not in self._layouts:
            self._layouts.add(serialised)
            self._get_file_writer().add_summary(summary)

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None, walltime: float | None = None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        step = 0 if global_step is None else int(global_step)
        if tag in self._last and step <= self._last[tag]:
            return
        self._last[tag] = step
        description = None if tag in self._described else self._descriptions.get(tag) or tag_description(tag)
        if description is None:
            super().add_scalar(tag, scalar_value, global_step, walltime, new_style, double_precision)
            return
        self._described.add(tag)
        summary = scalar(tag, scalar_value)
        metadata = scalar_metadata.create_summary_metadata(display_name=tag, description=description)
        metadata.data_class = summary_pb2.DATA_CLASS_SCALAR  # TensorBoard's fast loader keeps it as given
        summary.value[0].metadata.CopyFrom(metadata)
        self._get_file_writer().add_summary(summary, global_step, walltime)


class BaselineScalars:
    """The validation baselines' mean JCTs (label -> mean) as flat lines: each baseline with a finite mean
    writes :data:`EVAL_MEAN_JCT_TAG` in its own TensorBoard run, :func:`baseline_run` of the run directory."""

    def __init__(self, run_dir: Path, means: Mapping[str, float | None]) -> None:
        self.means = dict(means)
        self._writers = {
            label: RunWriter(log_dir=str(run_dir / baseline_run(label)),
                             descriptions={EVAL_MEAN_JCT_TAG: baseline_description(label)})
            for label, mean in self.means.items() if mean is not None
        }

    def write(self, env_step: int) -> None:
        """One point of every baseline at ``env_step`` (a step already written is not written again)."""
        for label, writer in self._writers.items():
            writer.add_scalar(EVAL_MEAN_JCT_TAG, self.means[label], env_step)
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


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
