"""PNG plots of an evaluation (matplotlib, Agg backend; no display needed).

* ``jct_cdf.png``: empirical CDF of task JCTs per scheduler (all seeds pooled), with the bound;
* ``tasks_in_system.png``: tasks arrived and not finished over real time, mean over seeds;
* ``utilisation.png``: mean CPU and GPU utilisation per scheduler;
* ``mean_jct.png``: mean JCT per scheduler with its 95% confidence interval, and the bound.

Each scheduler keeps one colour in every plot; the learned policies are drawn thicker (bold names,
hatched bars) and the oracle baselines carry the table's mark (:data:`~.summary.ORACLE_MARK`). The
axes span the contenders (:func:`contenders`): a scheduler far above them is drawn cut at the axis
edge, its value written on its bar (:func:`bar_top`); the CDF ends at a high percentile of the
contenders' JCTs (:func:`cdf_xmax`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

import numpy as np

from agents.output_dirs import temp_beside

from .formatting import counted
from .runner import EvaluationRun
from .summary import ORACLE_MARK

BOUND_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}
#: a scheduler whose mean JCT is within this multiple of the lowest one is a contender: the axes span the contenders
CONTENDER_FACTOR = 2.0
#: room above the highest contender (its CI and value label) on the bar and tasks-in-system axes
HEADROOM = 1.15
#: the CDF's x axis ends at this percentile of the contenders' pooled JCTs
CDF_PERCENTILE = 99


def contenders(means: Mapping[str, float | None], always: Collection[str] = (),
               factor: float = CONTENDER_FACTOR) -> list[str]:
    """The schedulers the axes span: a finite mean within ``factor`` times the lowest finite mean, and
    every name of ``always`` (the learned policies) that has one; in ``means`` order."""
    finite = {n: m for n, m in means.items() if m is not None and np.isfinite(m)}
    if not finite:
        return []
    low = min(finite.values())
    return [n for n, m in finite.items() if m <= factor * low or n in always]


def bar_top(highs: Mapping[str, float], shown: Collection[str], headroom: float = HEADROOM) -> float:
    """The top of a bar axis: ``headroom`` times the highest bar top (mean + CI) of the ``shown``
    schedulers (of every finite one when none is shown); 1.0 without any."""
    tops = [h for n, h in highs.items() if n in shown and np.isfinite(h)] or [
        h for h in highs.values() if np.isfinite(h)]
    return headroom * max(tops) if tops else 1.0


def cdf_xmax(pools: Mapping[str, np.ndarray], shown: Collection[str], q: float = CDF_PERCENTILE) -> float:
    """The CDF's right edge: the ``q``-th percentile of the ``shown`` schedulers' JCTs pooled (of every
    scheduler's when the shown ones have none); 1.0 without any JCT."""
    chosen = [x for n, x in pools.items() if n in shown and x.size]
    chosen = chosen or [x for x in pools.values() if x.size]
    return float(np.percentile(np.concatenate(chosen), q)) if chosen else 1.0


def scheduler_label(name: str, oracle: Collection[str]) -> str:
    """A scheduler's name as the tables print it: an oracle baseline carries :data:`ORACLE_MARK`."""
    return f"{name} {ORACLE_MARK}" if name in oracle else name


def marks_note(oracle: Collection[str], policies: Collection[str]) -> str:
    """What the marks of the scheduler names mean, for those present ('' for none)."""
    parts = [f"{ORACLE_MARK} oracle: reads the true task durations"] if oracle else []
    return "; ".join(parts + (["bold: the learned policy"] if policies else []))


def _means(summary: dict[str, Any]) -> dict[str, float | None]:
    return {n: st["mean_jct"] for n, st in summary["schedulers"].items()}


def _mark_ticks(ax: Any, names: Sequence[str], policies: Collection[str], oracle: Collection[str]) -> None:
    """x tick labels: the table's oracle mark, the learned policies in bold."""
    ax.set_xticks(np.arange(len(names)), [scheduler_label(n, oracle) for n in names], rotation=30, ha="right")
    for label, name in zip(ax.get_xticklabels(), names):
        if name in policies:
            label.set_fontweight("bold")


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
    return f"{run.cfg.name} ({run.cfg.mode}-task, N={run.cfg.num_clusters}), {counted(k, 'seed')}"


def save_figure(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` (tight layout, 120 dpi, no software stamp: the same bytes each run),
    atomically (a reader sees the old file or the new one, never a part), close it and return ``path``."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    fd, tmp = temp_beside(path)  # the mode open() gives, not mkstemp's 0600
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
    oracle = summary.get("oracle", ())
    for name in _order(summary):
        x = pools[name]
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        policy = name in run.policy_names
        ax.step(x, y, where="post", color=col[name], linewidth=2.8 if policy else 1.4, zorder=4 if policy else 2,
                label=f"{scheduler_label(name, oracle)} (mean {x.mean():.2f})")
    ax.step(bound, np.arange(1, bound.size + 1) / bound.size, where="post", label=f"bound (mean {bound.mean():.2f})",
            **BOUND_STYLE)
    xmax = cdf_xmax(pools, contenders(_means(summary), run.policy_names))
    ax.set_xlim(0, max(xmax, float(bound.max())) + 0.5)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel(f"job completion time (real steps)\naxis cut at {xmax:.1f}, the {CDF_PERCENTILE:g}th percentile "
                  f"of the JCTs of the schedulers within {CONTENDER_FACTOR:g}x the best mean", fontsize=9)
    ax.set_ylabel("fraction of tasks with JCT ≤ x")
    ax.set_title(f"JCT distribution: {_title(run)}")
    _legend(ax, oracle, run.policy_names)
    return save_figure(fig, path)


def _legend(ax: Any, oracle: Collection[str], policies: Collection[str]) -> None:
    """The scheduler legend right of the axes, the policies' entries in bold, the marks explained."""
    leg = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="scheduler", title_fontsize=8)
    for text in leg.get_texts():
        if text.get_text().split(" (")[0] in policies:
            text.set_fontweight("bold")
    if oracle:
        leg.set_title(f"scheduler ({ORACLE_MARK} oracle)")


def plot_tasks_in_system(run: EvaluationRun, summary: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    col = colours([s.name for s in run.specs])
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    oracle = summary.get("oracle", ())
    peaks: dict[str, float] = {}
    for name in _order(summary):
        series = [r.tasks_in_system.astype(np.float64) for r in run.results[name]]
        length = max(s.shape[0] for s in series)
        # after an episode ends no task is in the system: pad with zeros before averaging
        mean = np.mean([np.pad(s, (0, length - s.shape[0])) for s in series], axis=0)
        peaks[name] = float(mean.max()) if mean.size else 0.0
        policy = name in run.policy_names
        in_system = summary["schedulers"][name]["mean_tasks_in_system"]
        ax.plot(np.arange(length), mean, color=col[name], linewidth=2.6 if policy else 1.2, zorder=4 if policy else 2,
                label=f"{scheduler_label(name, oracle)} (mean {in_system:.1f})")
    top = bar_top(peaks, contenders(_means(summary), run.policy_names))
    cut = top < max(peaks.values(), default=0.0)
    ax.set_xlabel("real time step")
    ax.set_ylabel("tasks in system (arrived, not finished)" + (f"\n(axis cut at {top:.0f})" if cut else ""))
    ax.set_title(f"Tasks in system, mean over seeds: {_title(run)}")
    ax.set_ylim(0, top if cut else None)
    ax.set_xlim(left=0)
    _legend(ax, oracle, run.policy_names)
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
    oracle = summary.get("oracle", ())
    _mark_ticks(ax, names, run.policy_names, oracle)
    ax.set_ylim(0, 118)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("allocated share of all clusters (%)")
    note = marks_note(oracle, run.policy_names)
    ax.set_xlabel(f"scheduler (best mean JCT first{'; ' + note if note else ''})", fontsize=9)
    ax.set_title(f"Mean CPU / GPU utilisation: {_title(run)}")
    ax.legend(loc="upper left", ncol=2)
    ax.grid(axis="x", visible=False)
    return save_figure(fig, path)


def plot_mean_jct(run: EvaluationRun, summary: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    col = colours([s.name for s in run.specs])
    names = _order(summary)
    s = summary["schedulers"]
    oracle = summary.get("oracle", ())
    means = np.array([s[n]["mean_jct"] if s[n]["mean_jct"] is not None else np.nan for n in names])
    err = np.zeros((2, len(names)))
    for k, n in enumerate(names):
        lo, hi = s[n]["ci95"]
        if lo is not None and hi is not None:  # centred on the mean of per-seed means (= the bar
            err[:, k] = [max(means[k] - lo, 0.0), max(hi - means[k], 0.0)]  # unless an episode was truncated)
    top = bar_top(dict(zip(names, means + err[1])), contenders(_means(summary), run.policy_names))
    cut = np.isfinite(means) & (means > top)
    shown = np.where(cut, top, means)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(6.5, 0.85 * len(names) + 2.5), 4.6))
    bars = ax.bar(x, shown, 0.65, yerr=np.where(cut, 0.0, err), capsize=4, color=[col[n] for n in names],
                  edgecolor="black", linewidth=0.5)
    for bar, n in zip(bars, names):
        if n in run.policy_names:
            bar.set_hatch("//")
            bar.set_linewidth(1.8)
    pad = 0.01 * top
    for k, m in enumerate(means):
        if cut[k]:  # a break across the bar's top, its value written inside
            ax.plot([x[k] - 0.36, x[k] + 0.36], [0.93 * top, 0.95 * top], color="white", linewidth=3, zorder=3)
            ax.text(x[k], 0.91 * top, f"{m:.2f}", ha="center", va="top", fontsize=8, fontweight="bold",
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
        elif np.isfinite(m):  # above its error bar, or on the bar where the error bar leaves the axes
            above = m + err[1, k] + pad
            inside = above >= 0.95 * top
            ax.text(x[k], m + pad if inside else above, f"{m:.2f}", ha="center", va="bottom", fontsize=8,
                    fontweight="bold" if names[k] in run.policy_names else "normal",
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
                    if inside else None)
    ax.axhline(summary["bound"]["mean_jct"], label=f"bound ({summary['bound']['mean_jct']:.2f})", **BOUND_STYLE)
    _mark_ticks(ax, names, run.policy_names, oracle)
    ax.set_ylabel("mean JCT (real steps)" + (f"\nbars above {top:.1f} cut, value on the bar" if cut.any() else ""))
    note = marks_note(oracle, run.policy_names)
    ax.set_xlabel(f"scheduler ({note})" if note else "scheduler", fontsize=9)
    ax.set_title(f"Mean JCT with 95% CI over seeds: {_title(run)}", fontsize=10)
    ax.set_ylim(0, top)
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
