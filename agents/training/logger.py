"""What reaches TensorBoard from tianshou's logger: :data:`TENSORBOARD_KEEP` only, counters resumed."""

from __future__ import annotations

from typing import Any

import numpy as np
from tianshou.utils import TensorboardLogger
from torch.utils.tensorboard import SummaryWriter

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
