#!/usr/bin/env python
"""Train a TapFinger policy with multi-agent PPO (tianshou 2.0).

    python train.py --config configs/sjf-3.yaml --steps 200000 --envs 8 \\
        train.lr=3e-4 policy.hidden=64 num_tasks=96

``key=value`` overrides: ``train.<field>`` (see ``agents/training/config.py``), ``policy.<field>``
(``agents/policy/config.py``), ``scenario.<key>`` or a plain scenario key (dotted keys reach nested
fields); they may stand anywhere on the command line, before or after the flags. Writes
``<logdir>/<run-name>/`` with ``config.yaml``, TensorBoard events, ``last.pt`` and ``best.pt``.
Prints one line per evaluation (``step X: eval mean JCT Y (best Z at step S)``). Exit codes:
0 done, 2 bad input (one line on stderr), 74 an output could not be written (a full disk; one
line), 130 Ctrl-C and 143 SIGTERM (``last.pt`` saved once training started), 1 a vector env worker
died or an internal error. A new run stopped or failed before its first ``last.pt`` leaves no
run directory.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from agents.signals import TerminationSignals


def build_parser() -> argparse.ArgumentParser:
    # choices and defaults have one owner each: agents/training/config.py (TrainConfig, the vector
    # kinds and devices) and agents/policy/variants.py (the policy variants); neither imports torch
    from agents.policy.variants import DEFAULT_VARIANT, VARIANT_NAMES, VARIANTS
    from agents.training.config import DEVICE_HELP, DEVICES, VECTOR_KIND_HELP, VECTOR_KINDS, TrainConfig

    defaults = TrainConfig()
    p = argparse.ArgumentParser(
        prog="train.py",
        description="Train the TapFinger multi-agent policy with PPO (tianshou).",
        epilog="Overrides: train.<field>=v, policy.<field>=v, scenario.<key>=v or <scenario key>=v.",
    )
    p.add_argument("--config", help="scenario name (e.g. sjf-3) or YAML path (configs/<scenario>.yaml)")
    p.add_argument("--steps", type=int, help=f"total env steps (default {defaults.steps:,}); rounded up to whole "
                   "evaluation intervals (train.eval_every) of whole collection batches (train.collect_steps, "
                   "default 128 x envs)")
    p.add_argument("--device", choices=DEVICES,
                   help=_choices_help(DEVICE_HELP, defaults.device, "the learner's device"))
    p.add_argument("--envs", type=int, help=f"parallel training envs (default {defaults.envs})")
    p.add_argument("--seed", type=int, help=f"run seed (default {defaults.seed})")
    p.add_argument("--logdir", help=f"parent directory of the run directory (default {defaults.logdir}/)")
    p.add_argument("--resume", metavar="PATH", help="continue a run from its last.pt (or run directory)")
    p.add_argument("--variant", choices=VARIANT_NAMES,
                   help=_choices_help({v.name: v.description for v in VARIANTS}, DEFAULT_VARIANT,
                                      "policy variant, as policy.variant=v"))
    p.add_argument("--vector", choices=VECTOR_KINDS,
                   help=_choices_help(VECTOR_KIND_HELP, defaults.vector, "vector env"))
    p.add_argument("--quick", action="store_true",
                   help="train the scenario's quick recipe (the quick: section of its YAML, laid over the full "
                        "recipe): minutes on a laptop CPU, validated several times, for a first look")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved scenario, policy and train config as YAML and exit (nothing is trained)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars or status lines (bars are off anyway when stderr is not a terminal)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return p


def _choices_help(choices: dict[str, str], default: str, what: str) -> str:
    """``<what> (default D): a = ..., b = ...`` for a flag whose choices are described in ``choices``."""
    return f"{what} (default {default}): " + "; ".join(f"{k} = {v}" for k, v in choices.items())


#: seconds between plain status lines when the progress bars are off (stderr not a terminal)
STATUS_EVERY_S = 30.0


def check_arguments(args: argparse.Namespace) -> str | None:
    """Plain range checks, done before torch is imported; the error message or None."""
    from agents.limits import MAX_ENVS, MAX_STEPS, check_range
    from agents.training.config import MAX_SEED

    for name, low, high, why in (("steps", 1, MAX_STEPS, "env steps of one run"),
                                 ("envs", 1, MAX_ENVS, "training envs"),
                                 ("seed", 0, MAX_SEED, "")):
        problem = check_range(f"--{name}", getattr(args, name), low, high, why)
        if problem:
            return problem
    if args.quick and args.config is None:
        return "--quick needs --config: the scenario whose quick recipe trains"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)  # key=value overrides may stand between the flags
    problem = check_arguments(args)
    if problem:
        print(f"train.py: error: {problem}", file=sys.stderr)
        return 2
    from agents.output_dirs import EXIT_IO_ERROR
    from envs.config import ConfigError
    from envs.trace_table import TraceError

    signals: TerminationSignals | None = None  # installed once the run is about to start
    started: list[tuple] = []  # (run directory, new) once run_training has taken it
    try:
        from agents.training.loop import TrainingInterrupted, run_training
        from agents.training.prepare import check_environment, prepare_run
        from agents.training.vector_env import WorkerDied


        flags = {
            "steps": args.steps, "device": args.device, "envs": args.envs, "seed": args.seed,
            "logdir": args.logdir, "vector": args.vector,
        }
        terminal = sys.stderr.isatty()
        if args.quiet or not terminal:
            flags["progress"] = False  # tqdm bars leave escape codes in logs
        overrides = args.overrides
        if args.quick:
            from agents.training.recipe_file import quick_arguments

            flags, overrides = quick_arguments(args.config, flags, overrides)
        spec = prepare_run(args.config, overrides, flags=flags, variant=args.variant, resume=args.resume)
        if args.print_config:
            from agents.training.prepare import config_yaml

            print(config_yaml(spec), end="")
            return 0
        spec.eval_lines = True
        if not args.quiet and not terminal:
            spec.status_every_s = STATUS_EVERY_S
        device = check_environment(spec)
        print(_plan_line(spec), flush=True)
        signals = TerminationSignals()

        def on_start(run_dir) -> None:  # noqa: ANN001 - a Path
            started.append((run_dir, spec.fresh_dir))
            print(f"run directory: {run_dir}  (device {device})", flush=True)

        try:
            result = run_training(spec, device, on_start=on_start)
        except BaseException:
            _report_unstarted(started)
            raise
        finally:
            signals.restore()
    except (ConfigError, TraceError) as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, an I/O error: the work could not be written
        print(f"train.py: error: {exc}", file=sys.stderr)
        return EXIT_IO_ERROR
    except KeyboardInterrupt:  # before the trainer started: nothing to save
        name, code = (signals.name, signals.code) if signals is not None else ("interrupted", 130)
        print(f"\n{name} before training started; nothing saved", file=sys.stderr)
        return code
    except TrainingInterrupted as exc:
        r = exc.result
        print(f"\n{signals.name} at {r.env_steps} env steps; saved {r.last_path} (resume with --resume {r.last_path})",
              file=sys.stderr)
        return signals.code
    except WorkerDied as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 1
    print(
        f"done: {result.env_steps} env steps, {result.gradient_steps} gradient steps, "
        f"{result.wall_s:.0f} s; {_best_text(result)}; checkpoints in {result.run_dir}"
    )
    return 0


def _report_unstarted(started: list) -> None:
    """Say so when a new run's directory is gone: ``run_training`` removes one that holds no
    ``last.pt`` yet (nothing in it can be resumed)."""
    for run_dir, fresh in started:
        if fresh and not run_dir.exists():
            print(f"removed {run_dir}: the run stopped before its first last.pt", file=sys.stderr)


def _plan_line(spec) -> str:
    """How ``--steps`` was rounded: evaluation intervals of whole collection batches."""
    from agents.training.checkpoints import final_evaluation_pending

    t = spec.train
    done = spec.done_env_steps
    if spec.resume is not None and final_evaluation_pending(spec.resume, t):
        return f"plan: the final evaluation, at {done} env steps (the run stopped before it ended); no training"
    planned = t.planned_env_steps(done)
    first, epoch_len, epochs = t.interval_plan(done)
    rest = f"; the first finishes the interval the run stopped in, {first} steps" if first != epoch_len else ""
    return (f"plan: {planned} env steps ({epochs} evaluation interval(s) of {epoch_len} steps, each rounded up to "
            f"whole collection batches of {t.collection_batch()}{rest}; --steps was {t.steps})")


def _best_text(result) -> str:
    if result.best_mean_jct is None:
        return "no evaluation finished"
    text = f"best evaluation mean JCT {result.best_mean_jct:.3f}"
    if result.best_env_step is not None:  # None: resumed from a checkpoint older than the counter
        text += f" at env step {result.best_env_step}"
    if result.best_env_step == 0:
        text += (" (the untrained model: no later evaluation beat it; best.pt holds the initial weights. "
                 "Train longer: each recipe's train.steps in configs/<scenario>.yaml is its budget)")
    return text


if __name__ == "__main__":
    sys.exit(main())
