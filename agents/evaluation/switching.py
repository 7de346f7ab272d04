"""Why the preemptive LAS baseline is slow: ``tiresias`` measured against its own variants.

On a scenario's held-out workloads, :func:`measure_switching` runs ``tiresias`` as configured,
the same scheduler on the scenario without the switching overhead (``switch_overhead: 1``, only
where the scenario has one), ``tiresias:preemptive=false`` and ``min`` (every task at its minimum
requirement). Per variant it keeps the mean JCT, how often running tasks were re-sized
(:func:`~agents.evaluation.summary.switching_stats`) and the time-averaged allocation of the started
tasks. :func:`switching_sentence` turns that into the results page's sentence; the file is
``<results>/switching/<scenario>.json``, written by ``benchmarks/switching.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from agents.json_files import json_safe, write_json
from envs.config import ScenarioConfig
from envs.scheduling import EpisodeResult

from .runner import resolve_schedulers, run_evaluation
from .summary import scheduler_stats

#: the results subdirectory of the measurements (one JSON file per scenario)
SWITCHING_DIR = "switching"
#: the measured variants, by the key each has in the file: (scheduler spec, overhead removed)
VARIANTS = {
    "tiresias": ("tiresias", False),
    "tiresias_no_overhead": ("tiresias", True),
    "tiresias_non_preemptive": ("tiresias:preemptive=false", False),
    "min": ("min", False),
}


def mean_allocation(results: Sequence[EpisodeResult]) -> tuple[float, float] | None:
    """Mean over the started tasks of every episode of their time-averaged (CPU, GPU) allocation."""
    cpu = np.concatenate([r.records["avg_cpu"][r.records["start"] >= 0] for r in results])
    gpu = np.concatenate([r.records["avg_gpu"][r.records["start"] >= 0] for r in results])
    return (float(cpu.mean()), float(gpu.mean())) if cpu.size else None


def measure_switching(cfg: ScenarioConfig, seeds: Sequence[int], workers: int = 1) -> dict[str, Any]:
    """The measurements of the module docstring on the evaluation variant of ``cfg`` over ``seeds``."""
    base = cfg.for_evaluation()
    free = base.from_dict(base.to_dict(), {"switch_overhead": 1.0}) if base.switch_overhead < 1.0 else None
    doc: dict[str, Any] = {"scenario": cfg.name, "seeds": [int(s) for s in seeds],
                           "switch_overhead": float(base.switch_overhead), "variants": {}}
    for key, (spec_text, no_overhead) in VARIANTS.items():
        run_cfg = free if no_overhead else base
        if run_cfg is None:
            continue
        spec = resolve_schedulers(spec_text)[0]
        results = run_evaluation(run_cfg, [spec], seeds, workers=workers, progress=False).results[spec.name]
        stats = scheduler_stats(results)
        doc["variants"][key] = {
            "scheduler": spec.name, "switch_overhead": float(run_cfg.switch_overhead),
            "mean_jct": stats["mean_jct"], "ci95": stats["ci95"],
            "switches": stats["switches"], "switch_share": stats["switch_share"],
            "mean_allocation": mean_allocation(results),
        }
    return doc


def switching_command(scenario: str) -> str:
    """The command that regenerates a scenario's file."""
    return f"python benchmarks/switching.py --config {scenario}"


def read_switching(out: Path, scenario: str) -> dict[str, Any] | None:
    """``<out>/switching/<scenario>.json``, or None where it was never measured."""
    path = out / SWITCHING_DIR / f"{scenario}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def write_switching(out: Path, doc: Mapping[str, Any]) -> Path:
    """``<out>/switching/<scenario>.json``."""
    (out / SWITCHING_DIR).mkdir(parents=True, exist_ok=True)
    return write_json(out / SWITCHING_DIR / f"{doc['scenario']}.json", json_safe(dict(doc)))


def _alloc(v: Mapping[str, Any]) -> str:
    a = v.get("mean_allocation")
    return "n/a" if a is None else f"{a[0]:.1f} CPUs and {a[1]:.1f} GPUs"


def switching_sentence(doc: Mapping[str, Any], command: str) -> str:
    """The results page's sentence on why ``tiresias`` is slow, from a :func:`measure_switching` file."""
    v = doc["variants"]
    t, mn, non = v["tiresias"], v["min"], v["tiresias_non_preemptive"]
    seeds = doc["seeds"]
    share = t["switch_share"] or 0.0
    text = (f"Why tiresias is slow here (held-out workloads {seeds[0]}..{seeds[-1]}, `{command}`): it grants a "
            "job it serves its minimum requirement plus an even share of the spare CPUs, so its GPUs stay at the "
            f"minimum as with `min` (time-averaged {_alloc(t)} per started task against min's {_alloc(mn)}), and "
            "it re-sizes running tasks as their attained service crosses the median, so jobs of alike service take "
            f"turns: a started task ran {t['switches'] or 0:.1f} real steps at a new allocation ({100 * share:.0f}% "
            "of its steps after starting)")
    free = v.get("tiresias_no_overhead")
    if free is not None:
        text += (f", each at {doc['switch_overhead']:g}x its progress; mean JCT {t['mean_jct']:.2f} as configured, "
                 f"{free['mean_jct']:.2f} without the switching overhead")
    else:
        text += f" (this scenario has no switching overhead); mean JCT {t['mean_jct']:.2f}"
    return text + f", {non['mean_jct']:.2f} non-preemptive, against min's {mn['mean_jct']:.2f}."
