"""Learning benchmark: train PPO for a fixed CPU budget, then compare with the baselines.

Trains ``train.py``'s pipeline (same code path: :func:`agents.training.prepare.prepare_run` and
:func:`agents.training.loop.run_training`) for ``--steps`` env steps on CPU with ``--envs``
environments (``--vector``, any of ``train.py``'s kinds, default ``subproc``). The default scenario is *sjf-small*:
``sjf-3`` (the paper's SJF toy, 1-step and 10-step tasks, minimum (3, 3), multi-task mode)
shrunk to clusters of (6, 6) with a per-task maximum of (6, 6), arrival rate 1 and 96 tasks,
so each agent chooses among 16 allocations instead of 196 and only the minimum lets two tasks
share a cluster; ``--full`` trains on the unmodified ``--config`` instead (it needs millions of
steps, as the recipes' budget in ``configs/<scenario>.yaml`` shows). The PPO settings are
:class:`agents.training.config.TrainConfig`'s defaults except lr 1e-3, 4 passes per batch,
hidden size 64, collection batches of 1,024 env steps and a validation every 4,096
(``DEFAULTS``). It then evaluates the best checkpoint (chosen by the in-training validation on
seeds 10_000+) and the last one with the deterministic policy on held-out workload seeds
``100_000 + k``, against ``random``, ``min`` and ``optimus`` (skipped with a message if
unavailable) on the same seeds, through the evaluation runner of ``evaluate.py``
(:func:`agents.evaluation.runner.run_evaluation`; in-process, or in ``--workers`` processes: the numbers
do not depend on the worker count). Usage::

    python benchmarks/learning.py [--config sjf-3] [--full] [--steps 50000] [--envs 2]
                                  [--eval-seeds 10] [--workers 1] [--logdir DIR] [--json] [key=value ...]

``key=value`` overrides follow ``train.py`` (``train.lr=3e-4``, ``policy.hidden=64``,
``num_tasks=96``). Prints a table; the last stdout line is one JSON object with the step
budget, wall times, training throughput (env steps/s), mean JCT per scheduler (mean over
seeds, with a 95% confidence half-width) and, per baseline, the paired (same seeds)
difference learned - baseline with its 95% half-width (``beats``: negative difference;
``significant``: the half-width is smaller than the difference).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents.evaluation.runner import SchedulerSpec, check_checkpoint, resolve_schedulers, run_evaluation
from agents.evaluation.summary import mean_halfwidth, paired_from_means
from agents.training.config import VECTOR_KINDS

#: benchmark defaults (the run's own defaults are TrainConfig's); overridable with key=value
DEFAULTS = [
    "train.torch_threads=1",  # 2 cores: one for the learner, the env processes take the rest
    "train.lr=1e-3",
    "train.repeat=4",
    "policy.hidden=64",
    "train.collect_steps=1024",
    "train.eval_every=4096",
    "train.eval_episodes=4",
    "train.progress=false",
]
#: the sjf-small scenario (applied to --config unless --full)
SMALL = ["capacities=[[6,6]]", "per_task_max=[6,6]", "arrival_rate=1", "num_tasks=96"]
BASELINES = ("random", "min", "optimus")
TEST_SEED = 100_000


def evaluate(cfg: Any, specs: list[SchedulerSpec], seeds: list[int], workers: int = 1) -> dict[str, dict[str, Any]]:
    """Mean JCT of every scheduler on the same seeds (:func:`agents.evaluation.runner.run_evaluation`)."""
    run = run_evaluation(cfg, specs, seeds, workers=workers, device="cpu", progress=False)
    out = {}
    for name, results in run.results.items():
        jcts = [r.mean_jct for r in results]
        mean, ci = mean_halfwidth(jcts)
        out[name] = {"mean_jct": mean, "ci95": ci, "per_seed": [round(j, 4) for j in jcts],
                     "truncated": sum(int(r.truncated) for r in results)}
    return out


def policy_spec(name: str, checkpoint: Path, cfg: Any) -> SchedulerSpec:
    """The runner's spec of a checkpoint, labelled ``name`` (checked against ``cfg``)."""
    return SchedulerSpec(name=name, checkpoint=str(checkpoint), **check_checkpoint(checkpoint, cfg))


def collect_speed(run_dir: Path) -> float | None:
    """Mean collection-only throughput (env steps/s) logged by tianshou."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    if "training/collect_speed" not in ea.Tags()["scalars"]:
        return None
    return float(np.mean([e.value for e in ea.Scalars("training/collect_speed")]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="sjf-3")
    p.add_argument("--full", action="store_true", help="train on --config as is (not sjf-small)")
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--envs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-seeds", type=int, default=10)
    p.add_argument("--workers", type=int, default=1,
                   help="evaluation worker processes (default 1, in-process: a spawned worker first loads torch "
                        "and the checkpoints, which costs more than it saves on a small evaluation)")
    p.add_argument("--vector", default="subproc", choices=VECTOR_KINDS,
                   help="vector env, as train.py --vector (default subproc)")
    p.add_argument("--logdir", default=None, help="keep the run here (default: a temporary directory)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)

    import torch

    from agents.baselines import available_schedulers
    from agents.training.checkpoints import BEST, LAST
    from agents.training.loop import run_training
    from agents.training.prepare import prepare_run
    from envs.config import ConfigError

    torch.set_num_threads(1)
    tmp = None
    logdir = args.logdir
    if logdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="learning-bench-")
        logdir = tmp.name
    try:
        spec = prepare_run(
            args.config, [*([] if args.full else SMALL), *DEFAULTS, *args.overrides, "train.run_name=learning"],
            flags={"steps": args.steps, "envs": args.envs, "seed": args.seed, "logdir": logdir,
                   "vector": args.vector, "device": "cpu"},
        )
    except ConfigError as exc:
        print(f"learning.py: error: {exc}", file=sys.stderr)
        return 2
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    label = spec.scenario.name if args.full else f"{spec.scenario.name} as sjf-small"
    log(f"training {label} ({spec.scenario.num_tasks} tasks, {spec.scenario.mode} mode) for "
        f"{spec.train.steps} env steps on CPU with {spec.train.envs} {args.vector} envs ...")
    result = run_training(spec, torch.device("cpu"))
    speed = result.env_steps / result.wall_s
    log(f"trained {result.env_steps} env steps in {result.wall_s:.0f} s ({speed:.1f} env steps/s overall); "
        f"best validation mean JCT {result.best_mean_jct}")

    seeds = [TEST_SEED + k for k in range(args.eval_seeds)]
    specs = [policy_spec("tapfinger(best)", spec.run_dir / BEST, spec.scenario),
             policy_spec("tapfinger(last)", spec.run_dir / LAST, spec.scenario)]
    known = available_schedulers()
    present = [name for name in BASELINES if name in known]
    skipped = [name for name in BASELINES if name not in known]
    for name in skipped:
        log(f"skipping {name}: not available in agents.baselines")
    if present:
        specs += resolve_schedulers(",".join(present))
    t0 = time.perf_counter()
    table = evaluate(spec.scenario, specs, seeds, workers=args.workers)
    eval_s = time.perf_counter() - t0

    # paired over seeds (common random numbers): learned - baseline, negative = learned is better
    learned = np.asarray(table["tapfinger(best)"]["per_seed"])
    paired = {}
    for name in BASELINES:
        if name in table:
            pair = paired_from_means(learned, table[name]["per_seed"])
            diff = pair["mean_diff"]
            lo, hi = pair["ci95"]
            ci = (hi - lo) / 2.0 if lo is not None else float("nan")
            paired[name] = {"diff": round(diff, 4), "ci95": round(ci, 4), "significant": bool(abs(diff) > ci)}
    beats = {name: bool(p["diff"] < 0) for name, p in paired.items()}
    if not args.json:
        print(f"\n{'scheduler':<18}{'mean JCT':>10}{'±95%':>8}  (held-out seeds {seeds[0]}..{seeds[-1]})")
        for name, row in table.items():
            print(f"{name:<18}{row['mean_jct']:>10.3f}{row['ci95']:>8.3f}")
        for name, p in paired.items():
            verdict = "better than" if p["diff"] < 0 else "worse than"
            sig = "significant" if p["significant"] else "within noise"
            print(f"learned (best.pt) {verdict} {name}: paired difference {p['diff']:+.3f} ± {p['ci95']:.3f} ({sig})")
    summary = {
        "scenario": spec.scenario.name if args.full else f"{spec.scenario.name} as sjf-small",
        "num_tasks": spec.scenario.num_tasks,
        "overrides": [*([] if args.full else SMALL), *DEFAULTS, *args.overrides],
        "steps": result.env_steps,
        "gradient_steps": result.gradient_steps,
        "envs": spec.train.envs,
        "vector": args.vector,
        "train_wall_s": round(result.wall_s, 1),
        "eval_wall_s": round(eval_s, 1),
        "env_steps_per_s": round(speed, 2),
        "collect_env_steps_per_s": None if (cs := collect_speed(spec.run_dir)) is None else round(cs, 2),
        "best_validation_mean_jct": result.best_mean_jct,
        "test_seeds": [seeds[0], seeds[-1]],
        "mean_jct": {k: round(v["mean_jct"], 4) for k, v in table.items()},
        "ci95": {k: round(v["ci95"], 4) for k, v in table.items()},
        "beats": beats,
        "paired_vs_baseline": paired,
        "skipped": skipped,
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(summary))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
