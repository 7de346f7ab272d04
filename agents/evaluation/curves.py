"""Learning curves: a training run's validation mean JCT against env steps, next to the baselines.

``evaluate.py --curves RUN_DIR`` reads the run's TensorBoard scalar
:data:`~agents.training.logger.EVAL_MEAN_JCT_TAG` (one point per evaluation) and its
``config.yaml``, runs the baselines through :func:`~agents.evaluation.runner.run_evaluation`
on exactly the validation workloads the trainer evaluated on (the scenario of
:func:`~agents.training.envs.evaluation_scenario`, seeds ``eval_seed .. eval_seed +
eval_episodes - 1``) and draws one PNG: one curve per run (its best point marked, each run's
marker a size smaller than the one before, so coinciding best points all show), one horizontal line
per baseline and the ``bound`` (dashed black). The y-axis spans the baselines, the bound and the
curves after their first :data:`EARLY_FRACTION` of env steps (:func:`value_range`), so the end of
training, where runs and baselines are close, reads at a glance; an earlier point above it is drawn
as a triangle on the top edge, its value in the run's legend entry. An oracle baseline carries the
tables' mark (:func:`oracle_baselines`). A JSON file beside the PNG holds the merged curve points and
the baseline means.

Every horizontal line is the trainer's metric: the mean over the validation seeds of each
seed's mean JCT (finished tasks), so lines and curves are comparable. A resumed run directory
holds one event file per process; they are merged in the order they were started (first event's
wall time), a later file's point replacing an earlier one at the same step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml

from agents.training.validation_baselines import VALIDATION_BASELINES, finite_mean
from envs.config import ConfigError, ScenarioConfig

from .plots import BOUND_STYLE, colours, pyplot, save_figure, scheduler_label
from .runner import SchedulerSpec
from .summary import ORACLE_MARK

#: baselines drawn by default (``--schedulers`` replaces them): the validation baselines every run measures itself by
DEFAULT_BASELINES = VALIDATION_BASELINES
#: where the PNG goes by default: ``<CURVES_DIR>/<scenario>.png``
CURVES_DIR = Path("results") / "curves"
#: the ``train`` keys that define the validation workloads (the rest of the section is not read)
EVAL_KEYS = ("eval_seed", "eval_episodes", "eval_scenario")
#: the share of a run's env steps whose points may lie above the plot's y-range (the untrained start)
EARLY_FRACTION = 0.25
#: the margin above and below the plotted values, as a share of their span
Y_MARGIN = 0.08


@dataclass
class RunCurve:
    """The validation curve of one run directory: ``points`` are ``(env_step, mean_jct)``, by step."""

    name: str
    run_dir: Path
    points: list[tuple[int, float]]

    @property
    def best(self) -> tuple[int, float]:
        """``(step, mean_jct)`` of the lowest validation mean JCT (the earliest on ties)."""
        return min(self.points, key=lambda p: (p[1], p[0]))


@dataclass
class Validation:
    """The workloads a run was validated on: the scenario (eval variant applied or not) and seeds."""

    scenario: ScenarioConfig
    seeds: list[int]
    eval_scenario: str


@dataclass
class Curves:
    """Everything one plot shows: the runs' curves and the baselines on the same workloads."""

    validation: Validation
    runs: list[RunCurve]
    baselines: dict[str, float | None]  # mean over seeds of the per-seed mean JCT
    bound: float


def recipe_validation(spec: Any) -> Validation:
    """The validation workloads of the resolved recipe ``spec`` (a
    :class:`~agents.training.run_spec.RunSpec`), as :func:`read_validation` reads them from one of its
    run directories."""
    from agents.training.envs import evaluation_scenario

    train = spec.train
    return Validation(evaluation_scenario(spec.scenario, train),
                      [train.eval_seed + j for j in range(train.eval_episodes)], train.eval_scenario)


# ---------------------------------------------------------------------------------------
# Reading a run directory
# ---------------------------------------------------------------------------------------
def check_run_dir(run_dir: Path) -> None:
    """ConfigError unless ``run_dir`` is a directory with a ``config.yaml``."""
    from agents.training.rundir import CONFIG_FILE

    if not run_dir.is_dir():
        raise ConfigError(f"--curves {run_dir}: not a directory (give a training run directory, e.g. runs/<run>)")
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(f"--curves {run_dir}: no {CONFIG_FILE} (not a training run directory written by train.py)")


def read_validation(run_dir: Path) -> Validation:
    """The validation workloads of a run, from its ``config.yaml`` (as the trainer built them)."""
    from agents.training.config import TrainConfig
    from agents.training.envs import evaluation_scenario
    from agents.training.rundir import CONFIG_FILE

    path = run_dir / CONFIG_FILE
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed YAML ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("scenario"), dict):
        raise ConfigError(f"{path}: no 'scenario' section (not a config.yaml written by train.py)")
    raw_train = doc.get("train") or {}
    if not isinstance(raw_train, dict):
        raise ConfigError(f"{path}: 'train' must be a mapping")
    try:
        scenario = ScenarioConfig.from_dict(doc["scenario"])
        train = TrainConfig.from_dict({k: raw_train[k] for k in EVAL_KEYS if k in raw_train})
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    seeds = [train.eval_seed + j for j in range(train.eval_episodes)]
    return Validation(evaluation_scenario(scenario, train), seeds, train.eval_scenario)


def event_files(run_dir: Path) -> list[Path]:
    """The TensorBoard event files directly in ``run_dir`` (one per training process)."""
    return sorted(p for p in run_dir.glob("*tfevents*") if p.is_file())


def read_event_tags(path: Path, tags: Sequence[str]) -> tuple[float, dict[str, list[tuple[int, float]]]]:
    """``(wall time of the first event, {tag: [(step, value), ...] in file order})`` for each of ``tags``
    (one read of the file); a tag never logged gives ``[]``, an empty file ``(inf, {tag: []})``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0}, purge_orphaned_data=False)
    acc.Reload()
    try:
        started = float(acc.FirstEventTimestamp())
    except ValueError:  # no event at all
        return math.inf, {tag: [] for tag in tags}
    logged = set(acc.Tags().get("scalars", []))
    return started, {tag: [(int(e.step), float(e.value)) for e in acc.Scalars(tag)] if tag in logged else []
                     for tag in tags}


def read_event_file(path: Path, tag: str) -> tuple[float, list[tuple[int, float]]]:
    """``(wall time of the first event, [(step, value), ...] of tag in file order)``; an empty
    file gives ``(inf, [])``."""
    started, points = read_event_tags(path, [tag])
    return started, points[tag]


def read_scalars(run_dir: Path, tags: Sequence[str]) -> dict[str, list[tuple[int, float]]]:
    """Each of ``tags``' points over the event files of ``run_dir``, merged (:func:`merge_points`)."""
    files = [read_event_tags(f, tags) for f in event_files(run_dir)]
    return {tag: merge_points([(started, points[tag]) for started, points in files]) for tag in tags}


def merge_points(files: Sequence[tuple[float, list[tuple[int, float]]]]) -> list[tuple[int, float]]:
    """Merge per-file points: files by start time, a later point replacing an earlier one at
    the same step; sorted by step."""
    merged: dict[int, float] = {}
    for _, points in sorted(files, key=lambda f: f[0]):  # stable: equal start times keep file order
        merged.update(points)
    return sorted(merged.items())


def read_curve(run_dir: Path, name: str | None = None, max_steps: int | None = None) -> RunCurve:
    """The merged validation curve of ``run_dir`` (ConfigError without event files or the tag),
    cut at ``max_steps`` env steps when given (runs compared at an equal budget)."""
    from agents.training.logger import EVAL_MEAN_JCT_TAG

    files = event_files(run_dir)
    if not files:
        raise ConfigError(f"--curves {run_dir}: no TensorBoard event files (events.out.tfevents.*); "
                          "has the run started training?")
    points = merge_points([read_event_file(f, EVAL_MEAN_JCT_TAG) for f in files])
    if max_steps is not None:
        points = [p for p in points if p[0] <= max_steps]
    if not points:
        raise ConfigError(f"--curves {run_dir}: no {EVAL_MEAN_JCT_TAG!r} scalars in {len(files)} event file(s); "
                          "the run has not finished an evaluation yet")
    return RunCurve(name or run_dir.name, run_dir, points)


# ---------------------------------------------------------------------------------------
# Several runs, baselines
# ---------------------------------------------------------------------------------------
def run_labels(run_dirs: Sequence[Path]) -> list[str]:
    """The run directory names, or the paths as given where two names are equal."""
    names = [p.name or str(p) for p in run_dirs]
    return [str(p) if names.count(n) > 1 else n for p, n in zip(run_dirs, names)]


def common_validation(run_dirs: Sequence[Path], validations: Sequence[Validation]) -> Validation:
    """The validation workloads every run shares; ConfigError when two runs differ."""
    first = validations[0]
    ref = first.scenario.to_dict()
    for run_dir, v in zip(run_dirs[1:], validations[1:]):
        other = v.scenario.to_dict()
        keys = sorted(k for k in set(ref) | set(other) if ref.get(k) != other.get(k))
        if keys or v.seeds != first.seeds:
            why = f"scenario keys {', '.join(keys)}" if keys else "validation seeds"
            raise ConfigError(
                f"--curves: {run_dirs[0]} ({first.scenario.name}) and {run_dir} ({v.scenario.name}) were validated "
                f"on different workloads ({why} differ); plot runs of one scenario together"
            )
    return first


def per_seed_mean(values: Sequence[float]) -> float | None:
    """The mean of the finite per-seed means (None when there is none), as the trainer computes its
    validation baselines (:func:`~agents.training.validation_baselines.finite_mean`)."""
    return finite_mean(values)


def baseline_specs(selection: str, validation: Validation) -> list[SchedulerSpec]:
    """The baselines of ``--schedulers`` (no policy: the curves are the policies)."""
    from .runner import resolve_schedulers

    try:
        return resolve_schedulers(selection, (), validation.scenario)
    except ConfigError as exc:
        raise ConfigError(f"--curves --schedulers takes baselines only: {exc}") from None


def validation_run(validation: Validation, specs: Sequence[SchedulerSpec], workers: int = 1,
                   progress: bool = False) -> Any:
    """Every scheduler of ``specs`` (baselines; policies too, given as checkpoint specs) on the validation
    workloads: the :class:`~.runner.EvaluationRun`."""
    from .runner import run_evaluation

    return run_evaluation(validation.scenario, specs, validation.seeds, workers=workers, progress=progress)


def run_means(run: Any) -> tuple[dict[str, float | None], float]:
    """Mean over the seeds of an evaluation run of each scheduler's per-seed mean JCT, and of the bound's."""
    means = {name: per_seed_mean([r.mean_jct for r in results]) for name, results in run.results.items()}
    bound = per_seed_mean([float(np.mean(b)) if len(b) else math.nan for b in run.bound])
    return means, float(bound) if bound is not None else math.nan


def baseline_means(
    validation: Validation, specs: Sequence[SchedulerSpec], workers: int = 1, progress: bool = False
) -> tuple[dict[str, float | None], float]:
    """Mean over the validation seeds of each scheduler's per-seed mean JCT (baselines; policies too,
    given as checkpoint specs), and of the bound's."""
    return run_means(validation_run(validation, specs, workers=workers, progress=progress))


def build_curves(
    run_dirs: Sequence[str | Path], selection: str = DEFAULT_BASELINES, workers: int = 1, progress: bool = False,
    max_steps: int | None = None,
) -> Curves:
    """Read every run directory, check they share their validation workloads, run the baselines once.

    ``max_steps``: only the evaluations at or before that many env steps (an equal budget)."""
    paths = [Path(p) for p in run_dirs]
    if not paths:
        raise ConfigError("--curves needs at least one run directory")
    if max_steps is not None and max_steps < 0:
        raise ConfigError(f"--max-steps must be >= 0, got {max_steps}")
    seen: set[Path] = set()
    for p in paths:
        check_run_dir(p)
        if p.resolve() in seen:
            raise ConfigError(f"--curves {p}: run directory given twice")
        seen.add(p.resolve())
    validation = common_validation(paths, [read_validation(p) for p in paths])
    from envs.progress import build_progress_functions

    build_progress_functions(validation.scenario)  # a missing trace file is bad input: fail before any run
    specs = baseline_specs(selection, validation)
    runs = [read_curve(p, name, max_steps) for p, name in zip(paths, run_labels(paths))]
    means, bound = baseline_means(validation, specs, workers=workers, progress=progress)
    return Curves(validation, runs, means, bound)


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------
def default_path(curves: Curves) -> Path:
    return CURVES_DIR / f"{curves.validation.scenario.name}.png"


def output_path(out: str | Path | None, curves: Curves) -> Path:
    """``--out``: a ``.png`` path as given, any other path a directory for ``<scenario>.png``."""
    if out is None:
        return default_path(curves)
    out = Path(out)
    return out if out.suffix.lower() == ".png" else out / f"{curves.validation.scenario.name}.png"


def _seed_range(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"


def steps_label(x: float) -> str:
    """A compact tick label for an env-step count: 500, 64k, 1.5M."""
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.4g}{unit}"
    return f"{x:.0f}"


def late_points(run: RunCurve) -> list[tuple[int, float]]:
    """The run's points after its first :data:`EARLY_FRACTION` of env steps (all of them when fewer than two are)."""
    last = run.points[-1][0]
    late = [p for p in run.points if p[0] >= EARLY_FRACTION * last]
    return late if len(late) >= 2 else list(run.points)


def value_range(curves: Curves) -> tuple[float, float]:
    """The plot's y-range: every finite baseline, the bound, every run's lowest point and its
    :func:`late_points`, with a margin of :data:`Y_MARGIN`."""
    values = [m for m in curves.baselines.values() if m is not None and math.isfinite(m)]
    if math.isfinite(curves.bound):
        values.append(curves.bound)
    for run in curves.runs:
        values += [v for _, v in late_points(run)] + [run.best[1]]
    lo, hi = min(values), max(values)
    pad = Y_MARGIN * (hi - lo) or 0.05 * abs(hi) or 1.0
    return lo - pad, hi + pad


def oracle_baselines(names: Sequence[str]) -> list[str]:
    """The baselines of ``names`` (scheduler specs, ``optimus:oracle=true``) that read the true durations, as
    :attr:`~agents.evaluation.runner.SchedulerSpec.is_oracle` decides (a name that is no spec: not one)."""
    from agents.baselines import uses_oracle
    from agents.baselines.specs import parse_scheduler_spec

    oracle = []
    for name in names:
        try:
            baseline, options = parse_scheduler_spec(name)
        except ConfigError:
            continue
        if uses_oracle(baseline, options):
            oracle.append(name)
    return oracle


def best_marker_sizes(count: int) -> list[float]:
    """The best-point star of each run, largest first: a later run's star drawn on an earlier one stays inside it."""
    return [max(20.0 - 6.0 * k, 6.0) for k in range(count)]


def plot_curves(curves: Curves, path: Path) -> Path:
    """The learning-curve PNG: curves with their best points, baseline lines, the bound (y-range: :func:`value_range`)."""
    from matplotlib.ticker import FuncFormatter

    plt = pyplot()
    v = curves.validation
    col = colours([*curves.baselines, *(r.name for r in curves.runs)])
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    lo, hi = value_range(curves)
    for k, (run, size) in enumerate(zip(curves.runs, best_marker_sizes(len(curves.runs)))):
        steps, values = zip(*run.points)
        best_step, best = run.best
        above = [(s, x) for s, x in run.points if x > hi]
        off = "" if not above else f"; ▲ up to {max(x for _, x in above):.1f}"
        ax.plot(steps, values, color=col[run.name], linewidth=2.2, marker="o", markersize=3,
                label=f"{run.name} (best {best:.2f} at {steps_label(best_step)}{off})")
        if above:
            ax.plot([s for s, _ in above], [hi] * len(above), marker="^", markersize=0.6 * size, color=col[run.name],
                    markeredgecolor="black", linestyle="none", clip_on=False, zorder=5 + k)
        ax.plot([best_step], [best], marker="*", markersize=size, color=col[run.name], markeredgecolor="black",
                markeredgewidth=0.7, linestyle="none", zorder=5 + k)
    ax.plot([], [], marker="*", markersize=11, color="lightgrey", markeredgecolor="black", linestyle="none",
            label="best point of a run")
    if any(x > hi for run in curves.runs for _, x in run.points):
        ax.plot([], [], marker="^", markersize=8, color="lightgrey", markeredgecolor="black", linestyle="none",
                label="a point above the axis")
    oracle = oracle_baselines(list(curves.baselines))
    for name, mean in curves.baselines.items():
        if mean is not None:
            ax.axhline(mean, color=col[name], linewidth=1.5, linestyle="-.",
                       label=f"{scheduler_label(name, oracle)} ({mean:.2f})")
    if math.isfinite(curves.bound):
        ax.axhline(curves.bound, label=f"bound ({curves.bound:.2f})", **BOUND_STYLE)
    ax.set_ylim(lo, hi)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: steps_label(x)))
    ax.set_xlabel("env steps")
    ax.set_ylabel("validation mean JCT (real steps)")
    k = len(v.seeds)
    ax.set_title(f"Learning curve: {v.scenario.name} ({v.scenario.mode}-task, N={v.scenario.num_clusters})\n"
                 f"{v.eval_scenario} scenario, validation seed{'s' if k > 1 else ''} {_seed_range(v.seeds)}",
                 fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              title=f"{ORACLE_MARK} oracle: reads the true durations" if oracle else None, title_fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path)


def curves_document(curves: Curves) -> dict[str, Any]:
    """The JSON beside the PNG: merged curve points, best points, baseline and bound means."""
    from agents.training.logger import EVAL_MEAN_JCT_TAG

    v = curves.validation
    return {
        "scenario": v.scenario.name,
        "eval_scenario": v.eval_scenario,
        "seeds": list(v.seeds),
        "tag": EVAL_MEAN_JCT_TAG,
        "metric": "mean over the validation seeds of each seed's mean JCT (real steps)",
        "runs": {
            r.name: {"run_dir": str(r.run_dir), "best": {"step": r.best[0], "mean_jct": r.best[1]},
                     "points": [[s, x] for s, x in r.points]}
            for r in curves.runs
        },
        "baselines": dict(curves.baselines),
        "bound": curves.bound,
    }


def write_curves(curves: Curves, png: Path) -> tuple[Path, Path]:
    """Write the PNG and ``<same name>.json``; returns both paths."""
    from agents.json_files import write_json

    plot_curves(curves, png)
    return png, write_json(png.with_suffix(".json"), curves_document(curves))


def summary_lines(curves: Curves) -> list[str]:
    """One line per run (best validation mean JCT and its step) and per baseline."""
    seeds = _seed_range(curves.validation.seeds)
    lines = []
    for r in curves.runs:
        step, best = r.best
        last_step, last = r.points[-1]
        lines.append(f"{r.name}: best validation mean JCT {best:.3f} at env step {step} "
                     f"({len(r.points)} evaluations; last {last:.3f} at step {last_step})")
    for name, mean in curves.baselines.items():
        shown = "n/a (no task finished)" if mean is None else f"{mean:.3f}"
        lines.append(f"{name}: mean JCT {shown} on validation seeds {seeds}")
    lines.append(f"bound: mean JCT {curves.bound:.3f} on validation seeds {seeds}")
    return lines
