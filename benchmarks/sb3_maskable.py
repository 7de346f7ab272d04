"""A reference point from the field's trainer: sb3-contrib MaskablePPO through the masked view.

Trains ``MaskablePPO("MultiInputPolicy")`` (Stable-Baselines3's default network, two layers of 64)
on ``TapFinger/EdgeClustersMasked-v0`` (``envs/wrappers.py``, ``docs/sb3.md``) for ``--steps``
decisions with ``--envs`` environments made by ``make_vec_env``, rewards normalised by
``VecNormalize`` (observations are already scaled into [-1, 1]). Training episodes play workload
seeds drawn from ``[1_000_000, 2**62)`` (the project's training range), never a held-out one.

It then plays the deterministic (argmax over the masked choices) policy on the held-out workloads
``500_000 + k`` of ``benchmarks/reproduce.py`` (:data:`agents.evaluation.runner.REPORT_SEED_OFFSET`)
beside ``random`` (a uniformly random valid task and allocation), ``optimus`` and, when
``--checkpoint`` fits the scenario, the project's TapFinger checkpoint, all through
:func:`agents.evaluation.runner.run_evaluation` on the same seeds. Writes ``<out>/<scenario>.md`` and
``.json`` (mean JCT per scheduler over the seeds with a 95% half-width, paired per-seed
differences, the budget and the wall times). A reference point, not a target. Usage::

    python benchmarks/sb3_maskable.py [--config synthetic-3] [--steps 300000] [--envs 8] [--seed 0]
        [--eval-seeds 30] [--checkpoint checkpoints/<config>.pt] [--out docs/results/sb3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from envs.registration import MAX_EPISODE_STEPS

ROOT = Path(__file__).resolve().parents[1]
#: training workload seeds (``agents.training``'s range): disjoint from the held-out 500_000 + k
TRAIN_SEEDS = (1_000_000, 2**62)
#: MaskablePPO settings beside its defaults (lr 3e-4, gamma 0.99, GAE 0.95, clip 0.2, no entropy bonus)
HYPER = {"n_steps": 512, "batch_size": 256, "n_epochs": 5}
BASELINES = "random,optimus"
SB3_NAME = "maskable-ppo"


class TrainingWorkloads(gymnasium.Wrapper):
    """Every reset plays a workload seed drawn from :data:`TRAIN_SEEDS` (seeded by the reset seed)."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self._rng = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:
            self._rng = np.random.default_rng([TRAIN_SEEDS[0], seed])
        workload = int(self._rng.integers(*TRAIN_SEEDS))
        return self.env.reset(options={**(options or {}), "workload_seed": workload})


def build_parser() -> argparse.ArgumentParser:
    from agents.evaluation.runner import REPORT_SEEDS

    p = argparse.ArgumentParser(prog="sb3_maskable.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="synthetic-3", help="scenario name (default synthetic-3)")
    p.add_argument("--steps", type=int, default=300_000, help="training decisions (default 300,000)")
    p.add_argument("--envs", type=int, default=8, help="environments of make_vec_env (default 8)")
    p.add_argument("--seed", type=int, default=0, help="SB3 seed (default 0)")
    p.add_argument("--eval-seeds", type=int, default=REPORT_SEEDS, help=f"held-out workloads (default {REPORT_SEEDS})")
    p.add_argument("--checkpoint", help="TapFinger checkpoint to compare (default checkpoints/<config>.pt if present)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results" / "sb3"), help="output folder")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    return p


def command(args: argparse.Namespace) -> str:
    """The command line that regenerates the files."""
    parts = ["python benchmarks/sb3_maskable.py", f"--config {args.config}", f"--steps {args.steps}",
             f"--envs {args.envs}", f"--seed {args.seed}", f"--eval-seeds {args.eval_seeds}"]
    if args.checkpoint:
        parts.append(f"--checkpoint {args.checkpoint}")
    return " ".join(parts)


def train(args: argparse.Namespace) -> tuple[Any, float]:
    """MaskablePPO on the masked view; returns (model, wall seconds)."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from envs.registration import MASKED_ENV_ID

    venv = make_vec_env(MASKED_ENV_ID, n_envs=args.envs, seed=args.seed, env_kwargs={"scenario": args.config},
                        wrapper_class=TrainingWorkloads, monitor_kwargs={"info_keywords": ("mean_jct",)})
    venv = VecNormalize(venv, norm_obs=False, norm_reward=True)
    model = MaskablePPO("MultiInputPolicy", venv, seed=args.seed, device="cpu", verbose=0, **HYPER)
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    return model, time.perf_counter() - start


def play(model: Any, cfg: Any, seeds: list[int]) -> list[dict[str, Any]]:
    """The deterministic masked policy on each seed's workload: its ``episode_metrics``."""
    from sb3_contrib.common.maskable.utils import get_action_masks

    from envs.wrappers import make_masked_env

    env = make_masked_env(cfg)
    out = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        while True:
            action, _ = model.predict(obs, action_masks=get_action_masks(env), deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                out.append(info["episode_metrics"])
                break
    return out


def baseline_specs(cfg: Any, checkpoint: Path | None) -> tuple[list[Any], str | None]:
    """Specs of the baselines and (if it fits ``cfg``) the checkpoint; the reason it was skipped."""
    from agents.evaluation.runner import resolve_schedulers
    from envs.config import ConfigError

    if checkpoint is not None:
        try:
            return resolve_schedulers(BASELINES, [checkpoint], cfg), None
        except ConfigError as exc:
            return resolve_schedulers(BASELINES, cfg=cfg), f"checkpoint {checkpoint} skipped: {exc}"
    return resolve_schedulers(BASELINES, cfg=cfg), "no checkpoint given or found"


def summarise(per_seed: list[float], truncated: int) -> dict[str, Any]:
    from agents.evaluation.summary import mean_halfwidth

    mean, half = mean_halfwidth(per_seed)
    return {"mean_jct": mean, "ci95": half, "truncated": truncated, "per_seed": [round(x, 4) for x in per_seed]}


def markdown(report: dict[str, Any]) -> str:
    """The page: the command first, then the budget and the table."""
    b = report["budget"]
    lines = [
        f"`{report['command']}` regenerates this page and `{report['scenario']}.json`.",
        "",
        f"# {report['scenario']}: sb3-contrib MaskablePPO through TapFinger/EdgeClustersMasked-v0",
        "",
        (f"Trained for {b['steps']:,} decisions ({b['envs']} envs, `make_vec_env`, `VecNormalize` rewards; "
        f"MaskablePPO defaults with {', '.join(f'{k}={v}' for k, v in b['hyper'].items())}; "
        f"`MultiInputPolicy`, net_arch [64, 64]) in {report['train_wall_s']:.0f} s on {b['threads']} torch "
        f"thread(s) ({report['train_steps_per_s']:.0f} decisions/s, stable-baselines3 {report['versions']['sb3']}, "
        f"sb3-contrib {report['versions']['sb3_contrib']}). Evaluated with the deterministic masked policy on "
        f"the held-out workloads {report['seeds'][0]}..{report['seeds'][-1]} ({len(report['seeds'])} seeds), "
        "the same seeds for every scheduler. Mean JCT in real steps: the mean over seeds of each "
        "seed's mean, with the 95% half-width; paired Δ = MaskablePPO − scheduler per seed (below zero: "
         "MaskablePPO is faster). A reference point, not a target."),
        "",
        "| scheduler | mean JCT | ± 95% | truncated episodes | paired Δ (95% interval) |",
        "|---|---|---|---|---|",
    ]
    for name, s in report["schedulers"].items():
        p = report["paired"].get(name)
        delta = f"{p['mean_diff']:+.3f} ({p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f})" if p else "–"
        lines.append(f"| {name} | {s['mean_jct']:.3f} | {s['ci95']:.3f} | {s['truncated']} | {delta} |")
    if report.get("note"):
        lines += ["", f"Note: {report['note']}"]
    lines += ["", ("`random`: a uniformly random valid task and allocation per cluster (`agents.baselines`); "
                   "`optimus`: the Optimus baseline; `tapfinger`: the project's shipped checkpoint "
                   "(`agents.evaluation.runner.run_evaluation`). MaskablePPO episodes are capped at "
                   f"{MAX_EPISODE_STEPS:,} joint steps (a capped episode's mean JCT counts its unfinished tasks at "
                   "their time in system, "
                   "`envs/metrics.py`); the others run to the scenario's `max_steps`."), ""]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import sb3_contrib
    import stable_baselines3
    import torch

    from agents.evaluation.runner import run_evaluation
    from agents.evaluation.runner import REPORT_SEED_OFFSET
    from agents.evaluation.summary import paired_from_means
    from envs.gym_env import resolve_scenario

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*renders nothing")
    cfg = resolve_scenario(args.config, evaluation=True)
    seeds = list(range(REPORT_SEED_OFFSET, REPORT_SEED_OFFSET + args.eval_seeds))
    default_ckpt = ROOT / "checkpoints" / f"{args.config}.pt"
    checkpoint = Path(args.checkpoint) if args.checkpoint else (default_ckpt if default_ckpt.exists() else None)
    specs, note = baseline_specs(cfg, checkpoint)  # checked before the training, not after

    print(f"training MaskablePPO on {args.config} for {args.steps:,} decisions ...", flush=True)
    model, train_wall = train(args)
    print(f"trained in {train_wall:.0f} s; evaluating on {len(seeds)} held-out workloads ...", flush=True)
    start = time.perf_counter()
    ours = play(model, cfg, seeds)
    run_ = run_evaluation(cfg, specs, seeds, workers=1, device="cpu", progress=False)
    torch.set_num_threads(args.threads)
    eval_wall = time.perf_counter() - start

    schedulers = {SB3_NAME: summarise([m["mean_jct"] for m in ours], sum(m["truncated"] for m in ours))}
    for name, results in run_.results.items():
        schedulers[name] = summarise([r.mean_jct for r in results], sum(int(r.truncated) for r in results))
    paired = {name: paired_from_means(schedulers[SB3_NAME]["per_seed"], s["per_seed"])
              for name, s in schedulers.items() if name != SB3_NAME}
    report = {
        "command": command(args), "scenario": args.config, "seeds": seeds,
        "budget": {"steps": args.steps, "envs": args.envs, "seed": args.seed, "threads": args.threads, "hyper": HYPER},
        "train_wall_s": round(train_wall, 1), "train_steps_per_s": round(args.steps / train_wall, 1),
        "eval_wall_s": round(eval_wall, 1), "schedulers": schedulers, "paired": paired, "note": note,
        "versions": {"sb3": stable_baselines3.__version__, "sb3_contrib": sb3_contrib.__version__,
                     "torch": torch.__version__},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.config}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{args.config}.md").write_text(markdown(report))
    for name, s in schedulers.items():
        print(f"{name:>14}  mean JCT {s['mean_jct']:.3f} ± {s['ci95']:.3f}  truncated {s['truncated']}")
    print(f"wrote {out / args.config}.md and .json", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    from envs.config import ConfigError

    args = build_parser().parse_args(argv)
    try:
        if args.steps < 1 or args.envs < 1 or args.eval_seeds < 1 or args.threads < 1:
            raise ConfigError("--steps, --envs, --eval-seeds and --threads must be >= 1")
        return run(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
