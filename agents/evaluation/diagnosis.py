"""Where a policy's completion time goes, against a baseline: the diagnosis on a results page.

A task's completion time is its wait (arrival to first start) plus its run (first start to
finish). :func:`time_split` splits the finished tasks of one scheduler's episodes that way, per
task type, with the resources the tasks held; :func:`diagnose` puts the learned policy (pooled over
its training seeds) beside the best non-oracle baseline of the same held-out evaluation, so no
episode is run again. A long wait points at placement (who waits for which cluster), a long run at
allocation (too few CPUs or GPUs per task).

Conflicts are the other half. Under the paper's Bayes rule an agent whose claim loses to another
cluster's places nothing that round (in single mode, for a whole real step), so the evaluation
counts *lost claims* per episode. :func:`conflict_counterfactual` measures what they cost: the same
weights, acting with conflicts resolved so that no claim is lost (``room``: agents choose in order
of free room, a task taken by an earlier agent masked for the later ones), compared per workload.
The difference is the lost claims' cost net of the other change that mode makes, who gets a
contested task. For a recipe whose agents already choose in turn (a labelled option beyond the
paper), the counterfactual runs the other way: the same weights under the paper's Bayes rule, so
the page shows what choosing in turn buys. Either way the counterfactual only measures; the
reported result is the recipe's own mode.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from agents.policy.modes import PAPER_CONFLICTS, SEQUENTIAL_MODES
from envs.scheduling import EpisodeResult

from .runner import EvaluationRun, run_evaluation
from .summary import coordination_stats, paired_from_means, per_seed_means, scheduler_stats

#: the conflict mode of the counterfactual of a policy acting under Bayes' rule: the same weights, no claim lost
NO_LOSS_CONFLICTS = "room"


def counterfactual_conflicts(conflicts: str) -> str | None:
    """The conflict mode :func:`conflict_counterfactual` runs a policy acting under ``conflicts`` with:
    :data:`NO_LOSS_CONFLICTS` for the paper's Bayes rule (what lost claims cost), the paper's rule for
    agents that choose in turn (what the order buys), None for any other mode."""
    if conflicts == PAPER_CONFLICTS:
        return NO_LOSS_CONFLICTS
    return PAPER_CONFLICTS if conflicts in SEQUENTIAL_MODES else None


def _row(name: str, total: int, wait: np.ndarray, run: np.ndarray, cpu: np.ndarray, gpu: np.ndarray) -> dict[str, Any]:
    n = int(wait.size)

    def mean(x: np.ndarray) -> float | None:
        return float(x.mean()) if n else None

    return {"type": name, "tasks": n, "share": n / total if total else None, "wait": mean(wait), "run": mean(run),
            "jct": mean(wait + run), "cpu": mean(cpu), "gpu": mean(gpu)}


def time_split(results: Sequence[EpisodeResult], type_names: Sequence[str], preemptive: bool,
               capacities: Sequence[Sequence[int]] | None = None) -> dict[str, Any]:
    """Mean wait, run and JCT (real steps) and mean CPUs and GPUs held of the finished tasks of
    ``results``, per task type (``rows``, one per name of ``type_names``, then ``all``), with the
    tasks that never finished (``unfinished``), the mean lost claims per episode (``lost_claims``) and,
    for a learned policy, its coordination (``coordination``, :func:`~.summary.coordination_stats`).
    The resources are those at start, or for a ``preemptive`` scheduler the mean over the steps a
    task ran (its allocation changes). With clusters of more than one size (``capacities``, one
    ``(cpu, gpu)`` per cluster), ``by_capacity`` splits each type by the size of the cluster its
    tasks started on (:func:`capacity_split`); else it is None."""
    cpu_key, gpu_key = ("avg_cpu", "avg_gpu") if preemptive else ("cpu", "gpu")
    types = np.concatenate([r.records["type"][r.finished] for r in results])
    wait = np.concatenate([r.wait for r in results]).astype(np.float64)
    run = np.concatenate([r.jct for r in results]).astype(np.float64) - wait
    cpu = np.concatenate([r.records[cpu_key][r.finished] for r in results]).astype(np.float64)
    gpu = np.concatenate([r.records[gpu_key][r.finished] for r in results]).astype(np.float64)
    total = int(types.size)
    rows = [_row(name, total, *(x[types == index] for x in (wait, run, cpu, gpu))) for index, name in enumerate(type_names)]
    rows.append(_row("all", total, wait, run, cpu, gpu))
    unfinished = sum(int((~r.finished).sum()) for r in results)
    by_capacity = None
    if capacities is not None and len({tuple(c) for c in capacities}) > 1:
        cluster = np.concatenate([r.records["cluster"][r.finished] for r in results]).astype(np.int64)
        by_capacity = capacity_split(np.asarray(capacities, dtype=np.int64)[cluster], types, type_names,
                                     wait, run, cpu, gpu)
    return {"rows": rows, "unfinished": unfinished,
            "lost_claims": float(np.mean([r.conflicts for r in results])) if results else None,
            "coordination": coordination_stats(results) if results else None,
            "by_capacity": by_capacity}


def capacity_split(size: np.ndarray, types: np.ndarray, type_names: Sequence[str], wait: np.ndarray,
                   run: np.ndarray, cpu: np.ndarray, gpu: np.ndarray) -> list[dict[str, Any]]:
    """Per cluster size (``size (T, 2)``: the capacity of the cluster each finished task started on,
    smallest first) and task type, the :func:`_row` of those tasks, ``share`` being their share of
    the type's tasks, with the size as ``capacity``."""
    of_type = [types == index for index in range(len(type_names))]
    out = []
    for cap in sorted({(int(c), int(g)) for c, g in size}):
        here = (size[:, 0] == cap[0]) & (size[:, 1] == cap[1])
        for name, mine in zip(type_names, of_type):
            sel = here & mine
            out.append({"capacity": list(cap), **_row(name, int(mine.sum()), wait[sel], run[sel], cpu[sel], gpu[sel])})
    return out


def diagnose(run: EvaluationRun, policies: Sequence[str], baseline: str, label: str = "tapfinger") -> dict[str, Any]:
    """The time split of the learned policy (``policies``: its training seeds' names in ``run``,
    pooled under ``label``) beside that of ``baseline``, from the same evaluation."""
    names = [t.name for t in run.cfg.task_types]
    pooled = [res for name in policies for res in run.results[name]]
    return {
        "policy": label,
        "baseline": baseline,
        "splits": {
            label: time_split(pooled, names, preemptive=any(run.preemptive.get(p, False) for p in policies),
                              capacities=run.cfg.capacities),
            baseline: time_split(run.results[baseline], names, preemptive=run.preemptive.get(baseline, False),
                                 capacities=run.cfg.capacities),
        },
    }


def conflict_counterfactual(run: EvaluationRun, policy: str, baseline: str, workers: int = 1) -> dict[str, Any] | None:
    """The checkpoint of ``run``'s policy ``policy`` evaluated again on ``run``'s workloads under
    :func:`counterfactual_conflicts` of the mode it acted in (``acted``), compared per workload with
    itself as it acted in ``run`` and with ``baseline``. None when that mode has no counterfactual."""
    spec = next(s for s in run.specs if s.name == policy)
    conflicts = counterfactual_conflicts(spec.conflicts)
    if conflicts is None:
        return None
    name = f"{policy}-{conflicts}"
    again = run_evaluation(run.cfg, [replace(spec, name=name, conflicts=conflicts)], run.seeds,
                           workers=workers, progress=False)
    stats = scheduler_stats(again.results[name])
    means = per_seed_means(again.results[name])
    return {
        "policy": policy,
        "acted": spec.conflicts,
        "conflicts": conflicts,
        "mean_jct": stats["mean_jct"],
        "lost_claims": stats["conflicts"],
        "vs_trained": paired_from_means(means, per_seed_means(run.results[policy])),
        "baseline": baseline,
        "vs_baseline": paired_from_means(means, per_seed_means(run.results[baseline])),
    }
