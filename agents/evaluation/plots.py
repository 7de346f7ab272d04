"""PNG plots of an evaluation (matplotlib, Agg backend; no display needed).

* ``jct_cdf.png``: empirical CDF of task JCTs per scheduler (all seeds pooled), with the bound;
* ``tasks_in_system.png``: tasks arrived and not finished over real time, mean over seeds;
* ``utilisation.png``: mean CPU and GPU utilisation per scheduler;
* ``mean_jct.png``: mean JCT per scheduler with its 95% confidence interval, and the bound.

Each scheduler keeps one colour in every plot; the learned policies are drawn thicker.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .runner import EvaluationRun

BOUND_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed) with the project's plot style."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.grid": True, "grid.alpha": 0.3, "svg.hashsalt": "tapfinger"})
    return plt


def colours(names: list[str]) -> dict[str, Any]:
    """A stable colour per scheduler (spec order), from tab10 or tab20 when there are many."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def _order(summary: dict[str, Any]) -> list[str]:
    """Scheduler names best (lowest mean JCT) first."""
    s = summary["schedulers"]
    return sorted(s, key=lambda n: (s[n]["mean_jct"] is None, s[n]["mean_jct"] or 0.0))


def _title(run: EvaluationRun) -> str:
    k = len(run.seeds)
    return f"{run.cfg.name} ({run.cfg.mode}-task, N={run.cfg.num_clusters}), {k} seed{'s' if k > 1 else ''}"


def save_figure(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` (tight layout, 120 dpi, no software stamp: the same bytes each run),
    atomically (a reader sees the old file or the new one, never a part), close it and return ``path``."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, metadata={"Software": None}, format=path.suffix.lstrip(".") or None)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def plot_jct_cdf(run: EvaluationRun, summary: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    col = colours([s.name for s in run.specs])
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    pools = {n: np.sort(np.concatenate([r.jct for r in run.results[n]])) for n in run.results}
    bound = np.sort(np.concatenate(run.bound))
    for name in _order(summary):
        x = pools[name]
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        lw = 2.4 if name in run.policy_names else 1.5
        ax.step(x, y, where="post", color=col[name], linewidth=lw, label=f"{name} (mean {x.mean():.2f})")
    ax.step(bound, np.arange(1, bound.size + 1) / bound.size, where="post", label=f"bound (mean {bound.mean():.2f})",
            **BOUND_STYLE)
    hi = max([float(np.percentile(x, 99)) for x in pools.values() if x.size] + [float(bound.max())])
    ax.set_xlim(0, hi * 1.05 + 1)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("job completion time (real steps)")
    ax.set_ylabel("fraction of tasks with JCT ≤ x")
    ax.set_title(f"JCT distribution: {_title(run)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="scheduler", title_fontsize=8)
    return save_figure(fig, path)


def plot_tasks_in_system(run: EvaluationRun, summary: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    col = colours([s.name for s in run.specs])
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    for name in _order(summary):
        series = [r.tasks_in_system.astype(np.float64) for r in run.results[name]]
        length = max(s.shape[0] for s in series)
        # after an episode ends no task is in the system: pad with zeros before averaging
        mean = np.mean([np.pad(s, (0, length - s.shape[0])) for s in series], axis=0)
        lw = 2.2 if name in run.policy_names else 1.2
        ax.plot(np.arange(length), mean, color=col[name], linewidth=lw,
                label=f"{name} (mean {summary['schedulers'][name]['mean_tasks_in_system']:.1f})")
    ax.set_xlabel("real time step")
    ax.set_ylabel("tasks in system (arrived, not finished)")
    ax.set_title(f"Tasks in system, mean over seeds: {_title(run)}")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="scheduler", title_fontsize=8)
    return save_figure(fig, path)


def plot_utilisation(run: EvaluationRun, summary: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    names = _order(summary)
    s = summary["schedulers"]
    cpu = [100.0 * (s[n]["cpu_util"] or 0.0) for n in names]
    gpu = [100.0 * (s[n]["gpu_util"] or 0.0) for n in names]
    x = np.arange(len(names))
    w = 0.38
    fig, ax = plt.subplots(figsize=(max(6.5, 0.85 * len(names) + 2.5), 4.6))
    b1 = ax.bar(x - w / 2, cpu, w, label="CPU", color="tab:blue")
    b2 = ax.bar(x + w / 2, gpu, w, label="GPU", color="tab:orange")
    ax.bar_label(b1, fmt="%.0f", fontsize=7, padding=1)
    ax.bar_label(b2, fmt="%.0f", fontsize=7, padding=1)
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylim(0, 118)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("allocated share of all clusters (%)")
    ax.set_xlabel("scheduler (best mean JCT first)")
    ax.set_title(f"Mean CPU / GPU utilisation: {_title(run)}")
    ax.legend(loc="upper left", ncol=2)
    ax.grid(axis="x", visible=False)
    return save_figure(fig, path)


def plot_mean_jct(run: EvaluationRun, summary: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    col = colours([s.name for s in run.specs])
    names = _order(summary)
    s = summary["schedulers"]
    means = np.array([s[n]["mean_jct"] if s[n]["mean_jct"] is not None else np.nan for n in names])
    err = np.zeros((2, len(names)))
    for k, n in enumerate(names):
        lo, hi = s[n]["ci95"]
        if lo is not None and hi is not None:  # centred on the mean of per-seed means (= the bar
            err[:, k] = [max(means[k] - lo, 0.0), max(hi - means[k], 0.0)]  # unless an episode was truncated)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(6.5, 0.85 * len(names) + 2.5), 4.6))
    ax.bar(x, means, 0.65, yerr=err, capsize=4, color=[col[n] for n in names], edgecolor="black", linewidth=0.5)
    pad = 0.01 * float(np.nanmax(means + err[1])) if np.isfinite(means).any() else 0.0
    for k, m in enumerate(means):
        if np.isfinite(m):
            ax.text(x[k], m + err[1, k] + pad, f"{m:.2f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(summary["bound"]["mean_jct"], label=f"bound ({summary['bound']['mean_jct']:.2f})", **BOUND_STYLE)
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylabel("mean JCT (real steps)")
    ax.set_xlabel("scheduler")
    ax.set_title(f"Mean JCT with 95% CI over seeds: {_title(run)}", fontsize=10)
    ax.set_ylim(0, np.nanmax(means + err[1]) * 1.12 if np.isfinite(means).any() else 1)
    ax.legend(loc="upper left")
    ax.grid(axis="x", visible=False)
    return save_figure(fig, path)


def write_plots(run: EvaluationRun, summary: dict[str, Any], out: Path) -> list[Path]:
    """Write the four PNGs into ``out``; returns their paths."""
    return [
        plot_jct_cdf(run, summary, out / "jct_cdf.png"),
        plot_tasks_in_system(run, summary, out / "tasks_in_system.png"),
        plot_utilisation(run, summary, out / "utilisation.png"),
        plot_mean_jct(run, summary, out / "mean_jct.png"),
    ]
