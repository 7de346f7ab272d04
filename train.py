#!/usr/bin/env python
"""Train a TapFinger policy with multi-agent PPO (tianshou 2.0).

    python train.py --config configs/sjf-3.yaml --steps 200000 --envs 8 \\
        train.lr=3e-4 policy.hidden=64 num_tasks=96

``key=value`` overrides: ``train.<field>`` (see ``agents/train_config.py``), ``policy.<field>``
(``agents/policy.py``), ``scenario.<key>`` or a plain scenario key (dotted keys reach nested
fields). Writes ``<logdir>/<run-name>/`` with ``config.yaml``, TensorBoard events, ``last.pt``
and ``best.pt``. Exit codes: 0 done, 2 bad input, 130 interrupted (``last.pt`` saved),
1 internal error.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Sequence


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train.py",
        description="Train the TapFinger multi-agent policy with PPO (tianshou).",
        epilog="Overrides: train.<field>=v, policy.<field>=v, scenario.<key>=v or <scenario key>=v.",
    )
    p.add_argument("--config", help="scenario name (e.g. sjf-3) or YAML path (configs/<scenario>.yaml)")
    p.add_argument("--steps", type=int, help="total env steps (default 2,000,000; rounded up to whole evaluations)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help="auto (default) picks CUDA when present")
    p.add_argument("--envs", type=int, help="parallel training envs (default 32)")
    p.add_argument("--seed", type=int, help="run seed (default 0)")
    p.add_argument("--logdir", help="parent directory of the run directory (default runs/)")
    p.add_argument("--resume", metavar="PATH", help="continue a run from its last.pt (or run directory)")
    p.add_argument("--variant", choices=("tapfinger", "no-han", "no-pointer", "vanilla"), help="policy variant")
    p.add_argument("--vector", choices=("dummy", "subproc", "ray"), help="vector env (default: dummy for 1 env, else subproc)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from envs.config import ConfigError

    try:
        from agents.training import TrainingInterrupted, check_environment, prepare_run, run_training

        # torch-geometric 2.8 warns about torch.jit.script on import (harmless, ecosystem.md
        # §2.1); set after importing tianshou, whose import puts its own DeprecationWarning filter first
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)

        flags = {
            "steps": args.steps, "device": args.device, "envs": args.envs, "seed": args.seed,
            "logdir": args.logdir, "vector": args.vector,
        }
        if args.quiet:
            flags["progress"] = False
        spec = prepare_run(args.config, args.overrides, flags=flags, variant=args.variant, resume=args.resume)
        device = check_environment(spec)
        print(f"run directory: {spec.run_dir}  (device {device})", flush=True)
        result = run_training(spec, device)
    except ConfigError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the trainer started: nothing to save
        print("\ninterrupted before training started; nothing saved", file=sys.stderr)
        return 130
    except TrainingInterrupted as exc:
        r = exc.result
        print(f"\ninterrupted at {r.env_steps} env steps; saved {r.last_path} (resume with --resume {r.last_path})",
              file=sys.stderr)
        return 130
    jct = "n/a" if result.best_mean_jct is None else f"{result.best_mean_jct:.3f}"
    print(
        f"done: {result.env_steps} env steps, {result.gradient_steps} gradient steps, "
        f"{result.wall_s:.0f} s; best evaluation mean JCT {jct}; checkpoints in {result.run_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
