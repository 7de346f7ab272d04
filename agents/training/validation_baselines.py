"""The baselines a run is measured against on its own validation workloads, once per run.

The validation workloads are ``train.eval_seed + j`` (``j < train.eval_episodes``) on the variant of
``train.eval_scenario`` (:func:`~agents.training.envs.evaluation_scenario`): the workloads the trainer
scores every evaluation on. Each baseline of :data:`VALIDATION_BASELINES` runs once on each of them
(:func:`envs.scheduling.run_episode`, as ``evaluate.py`` runs a baseline); its figure is the mean over
the workloads of each workload's mean JCT, the trainer's validation metric. A new run computes them
at start-up and saves them in its directory (:data:`BASELINES_FILE`); a resumed run reads them back.
TensorBoard draws them beside ``test/mean_jct`` (:mod:`agents.training.logger`), the progress line
names the best of them (:func:`validation_rival`), and ``benchmarks/reproduce.py`` takes the same list
for its pages (:mod:`agents.evaluation.results`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from agents.baselines import make_scheduler, uses_oracle
from agents.json_files import write_json
from agents.output_dirs import OutputWriteError
from envs.config import ScenarioConfig
from envs.progress import build_progress_functions
from envs.scheduling import run_episode

from .config import TrainConfig

#: the validation baselines: label (the ``--schedulers`` spelling) -> (registry name, options). The best
#: non-oracle one on the validation workloads is the rival a run must beat (:func:`validation_rival`)
VALIDATION_BASELINE_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "optimus": ("optimus", {}),
    "optimus:preemptive=false": ("optimus", {"preemptive": False}),
}
#: the same list as a ``--schedulers`` text
VALIDATION_BASELINES = ",".join(VALIDATION_BASELINE_SPECS)
#: the run directory's record of its validation baselines
BASELINES_FILE = "validation_baselines.json"


def validation_seeds(train: TrainConfig) -> list[int]:
    """The run's validation workload seeds ``eval_seed + j``, ``j < eval_episodes``."""
    return [train.eval_seed + j for j in range(train.eval_episodes)]


def best_baseline(
    means: Mapping[str, float | None], candidates: Iterable[tuple[str, str, Mapping[str, Any]]]
) -> tuple[str, float] | None:
    """``(label, mean)`` of the lowest finite mean among the non-oracle ``candidates`` (``(label, registry
    name, options)``); ties go to the first listed; a label missing from ``means`` is ignored; None when none is left."""
    best: tuple[str, float] | None = None
    for label, name, options in candidates:
        mean = means.get(label)
        if uses_oracle(name, dict(options)) or mean is None or not math.isfinite(mean):
            continue
        if best is None or mean < best[1]:
            best = (label, float(mean))
    return best


def validation_rival(means: Mapping[str, float | None]) -> tuple[str, float] | None:
    """The best non-oracle baseline of :data:`VALIDATION_BASELINE_SPECS` by its validation mean JCT."""
    return best_baseline(means, ((label, *spec) for label, spec in VALIDATION_BASELINE_SPECS.items()))


def finite_mean(values: Sequence[float | None]) -> float | None:
    """The mean of the finite values (None when there is none): a run's figure from its per-workload means."""
    x = np.asarray([math.nan if v is None else v for v in values], dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def figures_text(values: Mapping[str, float | None]) -> str:
    """``name X, name Y`` (3 decimals, ``n/a`` for None): the figures the evaluation lines print."""
    return ", ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in values.items())


def run_baselines(scenario: ScenarioConfig, seeds: Sequence[int]) -> dict[str, float | None]:
    """Each validation baseline's mean over ``seeds`` of its per-workload mean JCT on ``scenario``."""
    functions = build_progress_functions(scenario)
    out: dict[str, float | None] = {}
    for label, (name, options) in VALIDATION_BASELINE_SPECS.items():
        out[label] = finite_mean([run_episode(scenario, make_scheduler(name, **options), seed, functions).mean_jct
                                  for seed in seeds])
    return out


def baselines_file(scenario: str | None = None) -> str:
    """The run directory's record of the validation baselines on its own scenario (``None``), or on the
    other validation scenario ``scenario`` (``train.also_validate_on``)."""
    return BASELINES_FILE if scenario is None else f"validation_baselines.{scenario}.json"


def read_baselines(run_dir: Path, train: TrainConfig, other: str | None = None) -> dict[str, float | None] | None:
    """The means saved in ``run_dir`` (:func:`baselines_file` of ``other``) when they were computed for
    these validation workloads and baselines; None otherwise (no file, an unreadable one, or other workloads)."""
    try:
        doc = json.loads((run_dir / baselines_file(other)).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    means = doc.get("mean_jct")
    same = (doc.get("seeds") == validation_seeds(train) and doc.get("eval_scenario") == train.eval_scenario
            and isinstance(means, dict) and list(means) == list(VALIDATION_BASELINE_SPECS))
    numbers = same and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in means.values())
    return {k: None if v is None else float(v) for k, v in means.items()} if numbers else None


def write_baselines(run_dir: Path, train: TrainConfig, means: Mapping[str, float | None],
                    other: str | None = None) -> Path:
    """Save ``means`` in ``run_dir`` (:func:`baselines_file` of ``other``; written whole,
    :func:`agents.json_files.write_json`)."""
    path = run_dir / baselines_file(other)
    doc = {"eval_scenario": train.eval_scenario, "seeds": validation_seeds(train), "mean_jct": dict(means),
           "metric": "mean over the validation workloads of each workload's mean JCT (real steps)"}
    try:
        return write_json(path, doc)
    except OSError as exc:
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None


def run_validation_baselines(run_dir: Path, scenario: ScenarioConfig, train: TrainConfig,
                             other: str | None = None) -> dict[str, float | None]:
    """The run's validation baselines: read from ``run_dir``, else computed on ``scenario`` (the
    validation variant) and saved there; ``other``: the name of one of ``train.also_validate_on``, recorded
    in a file of its own (:func:`baselines_file`)."""
    means = read_baselines(run_dir, train, other)
    if means is None:
        means = run_baselines(scenario, validation_seeds(train))
        write_baselines(run_dir, train, means, other)
    return means
