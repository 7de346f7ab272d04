"""Evaluation of policy checkpoints against the baselines on identical seeded workloads.

:func:`evaluate_scenario` is the whole pipeline behind ``evaluate.py``: run every scheduler
on the same seeds (:mod:`.runner`), summarise (:mod:`.summary`), plot (:mod:`.plots`) and
write the output directory (``evaluate.py`` gives it a staging directory that :mod:`.outputs`
publishes whole). :mod:`.report` compares every scenario with the paper's numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from envs.config import ScenarioConfig

from .runner import EvaluationRun, SchedulerSpec, run_evaluation
from .summary import build_summary


def write_outputs(run: EvaluationRun, out: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``summary.json``, ``tasks.csv``, ``run.json``, ``scenario.yaml`` and the PNGs; returns the summary."""
    from agents.json_files import write_json

    from .plots import write_plots
    from .summary import run_metadata, write_tasks_csv

    out.mkdir(parents=True, exist_ok=True)
    summary = build_summary(run)
    write_json(out / "summary.json", summary)
    write_tasks_csv(out / "tasks.csv", run)
    write_json(out / "run.json", run_metadata(run, extra))
    (out / "scenario.yaml").write_text(run.cfg.to_yaml())
    write_plots(run, summary, out)
    return summary


def evaluate_scenario(
    cfg: ScenarioConfig,
    specs: Sequence[SchedulerSpec],
    seeds: Sequence[int],
    out: Path,
    workers: int = 1,
    device: str = "cpu",
    progress: bool = True,
    extra: dict[str, Any] | None = None,
    policy_batch: int | None = None,
) -> tuple[EvaluationRun, dict[str, Any]]:
    """Run every scheduler on every seed and write ``out``; returns (run, summary).

    ``cfg`` should already be the evaluation variant (:meth:`ScenarioConfig.for_evaluation`)
    and ``specs`` come from :func:`.runner.resolve_schedulers` (which checks the checkpoints).
    ``policy_batch``: episodes a policy runs in lockstep (:func:`.runner.run_evaluation`).
    """
    checkpoints = {}
    for spec in specs:
        if spec.is_policy:
            if spec.trained_on is not None and spec.trained_on != cfg.name:
                print(f"warning: checkpoint {spec.checkpoint!r} was trained on {spec.trained_on!r}; "
                      f"evaluating it on {cfg.name!r}", file=sys.stderr)
            checkpoints[spec.name] = {"path": spec.checkpoint, "variant": spec.variant,
                                      "trained_on": spec.trained_on, "action": spec.action,
                                      "conflicts": spec.conflicts, "start_floor": spec.start_floor}
    run = run_evaluation(cfg, specs, seeds, workers=workers, device=device, progress=progress,
                         policy_batch=policy_batch)
    meta = dict(extra or {})
    if checkpoints:
        meta["checkpoints"] = checkpoints
    return run, write_outputs(run, out, meta)
