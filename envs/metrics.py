"""Episode metrics: the one definition of an episode's mean JCT, finished and unfinished counts.

Used by the Gymnasium env (:func:`episode_metrics`, ``info["episode_metrics"]``), the wrappers of
:mod:`envs.wrappers` and the batched simulator (:meth:`envs.batched.BatchedEdgeClusters.episode_metrics`,
the ``ep_*`` info arrays), so every path reports the same numbers.

Definition (:func:`jct_terms`), over the tasks that *arrived* by the episode's last real step ``t``:

* ``num_finished``: tasks that completed; each counts its JCT, completion step - arrival step;
* ``num_unfinished``: tasks that arrived and had not completed when the episode ended (cut off
  by a step cap); each counts its time in system so far, ``t - arrival`` (a lower bound on its JCT);
* ``mean_jct``: the sum of those times over ``num_finished + num_unfinished`` (NaN when no task
  arrived). An episode that ran to the end has no unfinished task, so this is the plain mean JCT;
* ``truncated``: ``num_finished < num_tasks``, the episode was cut off before every task of its
  workload completed, and ``mean_jct`` then includes the unfinished tasks as above.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def jct_terms(
    arrival: np.ndarray, finish: np.ndarray, num_arrived: Any, t: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(time_sum, num_finished, num_unfinished)`` of episodes, vectorised over leading axes.

    ``arrival``, ``finish``: ``(..., T)`` integer arrays over the workload's tasks in arrival order
    (``finish < 0``: not completed); ``num_arrived`` ``(...)``: the first tasks that arrived;
    ``t`` ``(...)``: the episode's real time. Integer results (exact sums).
    """
    arrival = np.asarray(arrival, dtype=np.int64)
    finish = np.asarray(finish, dtype=np.int64)
    arrived = np.arange(arrival.shape[-1]) < np.asarray(num_arrived, dtype=np.int64)[..., None]
    done = arrived & (finish >= 0)
    open_ = arrived & (finish < 0)
    now = np.asarray(t, dtype=np.int64)[..., None]
    time = np.where(done, finish - arrival, np.where(open_, now - arrival, 0))
    return time.sum(axis=-1), done.sum(axis=-1), open_.sum(axis=-1)


def mean_jct(time_sum: np.ndarray, num_finished: np.ndarray, num_unfinished: np.ndarray) -> np.ndarray:
    """``time_sum / (num_finished + num_unfinished)`` as float64, NaN where no task arrived."""
    count = np.asarray(num_finished) + np.asarray(num_unfinished)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.asarray(time_sum, dtype=np.float64) / np.maximum(count, 1), np.nan)


def episode_metrics(sim: Any) -> dict[str, Any]:
    """Summary of a simulator's episode so far (module definition), as ``info["episode_metrics"]``.

    Keys: ``mean_jct``, ``num_finished``, ``num_unfinished``, ``truncated``, ``steps`` (real steps),
    ``conflicts``, ``invalid``, ``cpu_util``, ``gpu_util``.
    """
    time_sum, fin, unfin = jct_terms(sim.arrival, sim.finish, sim.next_arrival, sim.t)
    usage = sim.usage_series()
    if usage.shape[0]:
        frac = usage.sum(axis=1) / sim.capacity.sum(axis=0)
        cpu_util, gpu_util = float(frac[:, 0].mean()), float(frac[:, 1].mean())
    else:
        cpu_util = gpu_util = 0.0
    return {
        "mean_jct": float(mean_jct(time_sum, fin, unfin)),
        "num_finished": int(fin),
        "num_unfinished": int(unfin),
        "truncated": bool(int(fin) < sim.workload.num_tasks),
        "steps": int(sim.t),
        "conflicts": int(sim.conflicts),
        "invalid": int(sim.invalid),
        "cpu_util": cpu_util,
        "gpu_util": gpu_util,
    }


def episode_info(sim: Any) -> dict[str, Any]:
    """The ``info`` entries of an episode's last step: ``episode_metrics`` and, top level for loggers
    such as Stable-Baselines3's ``Monitor(info_keywords=("mean_jct",))``, its ``mean_jct``."""
    metrics = episode_metrics(sim)
    return {"episode_metrics": metrics, "mean_jct": metrics["mean_jct"]}
