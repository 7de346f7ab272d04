#!/usr/bin/env python
"""Evaluate policy checkpoints against the baselines on identical workloads.

    python evaluate.py --scenario synthetic-3 --checkpoint checkpoints/synthetic-3.pt \\
        --schedulers all --seeds 5 --out results/synthetic-3
    python evaluate.py --report --seeds 5          # every scenario -> results/REPORT.md
    python evaluate.py --curves runs/<run> [--curves runs/<other>]   # -> results/curves/<scenario>.png

Every scheduler runs on the same workload seeds ``S .. S+K-1`` (``--seed-offset S``, default
100000: training uses seeds >= 1,000,000 and in-training validation 10,000 + j, so the two
never overlap). Writes ``summary.json``, ``tasks.csv``, ``run.json``, ``scenario.yaml`` and PNG
plots to ``--out`` (default a new ``results/<scenario>/<checkpoint stem or baselines>-<time>``),
whole or not at all: an ``--out`` holding an evaluation is replaced only with ``--overwrite``, and
two evaluations never write one ``--out`` at once (:mod:`agents.evaluation.outputs`); then prints a
table. ``--curves RUN_DIR`` plots a training run's validation mean JCT against env steps with the
baselines' mean JCT on the same validation workloads (:mod:`agents.evaluation.curves`).
``--checkpoint`` without ``--scenario`` evaluates on the scenario stored in the checkpoint.
``key=value`` scenario overrides may stand anywhere on the command line. Exit codes: 0 success,
2 bad input (one line on stderr), 74 the outputs could not be written (a full disk; one line, the
previous outputs untouched), 1 internal error, 130 Ctrl-C, 143 SIGTERM (one line each; the worker
processes end with the command, and on their own if it is killed).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from envs.config import ScenarioConfig


def build_parser() -> argparse.ArgumentParser:
    from agents.evaluation.runner import DEFAULT_SEED_OFFSET, default_workers
    from agents.policy.modes import CONFLICT_MODES
    from agents.baselines.online_floor import START_FLOORS
    from agents.policy.variants import VARIANT_NAMES
    from agents.policy.modes import EVAL_ACTIONS
    from agents.training.config import DEVICES

    p = argparse.ArgumentParser(
        prog="evaluate.py",
        description="Evaluate TapFinger checkpoints and the baselines on the same seeded workloads.",
        epilog="key=value overrides apply to the scenario (e.g. num_tasks=50 trace.params=fit.json).",
    )
    p.add_argument("--scenario", help="scenario name or YAML path (with --report: comma-separated subset; with "
                                      "--checkpoint: default the scenario stored in the checkpoint)")
    p.add_argument("--checkpoint", action="append", default=[], metavar="PATH",
                   help="policy checkpoint; repeat for several. One checkpoint is named after its policy variant "
                        f"({', '.join(VARIANT_NAMES)}); several are named after their files "
                        "(runs/a/best.pt -> best, or a/best when two stems are equal)")
    p.add_argument("--schedulers", default=None,
                   help="'all' (every available baseline) or a,b,... (default all; with --curves "
                        "optimus,optimus:preemptive=false); options after a colon, "
                        "as in benchmarks/baselines.py: optimus:preemptive=false,oracle=true")
    p.add_argument("--seeds", type=int, default=5, help="number of workload seeds K (default 5)")
    p.add_argument("--seed-offset", type=int, default=DEFAULT_SEED_OFFSET,
                   help=f"first workload seed S (default {DEFAULT_SEED_OFFSET}, disjoint from training seeds)")
    p.add_argument("--out", help="output directory (default a new results/<scenario>/<checkpoint stem or baselines>-"
                                 "<time>; with --report: a new results/report-<time>; with --curves: the PNG path, "
                                 "default results/curves/<scenario>.png)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the evaluation (or report) an existing --out holds (refused without it); the "
                        "old outputs stay in place until the new ones are written")
    p.add_argument("--device", default="cpu", choices=DEVICES,
                   help="device of the policy network (default cpu; auto = cuda when available)")
    p.add_argument("--policy-action", default=None, choices=EVAL_ACTIONS,
                   help="how checkpoints act: the most likely joint action (argmax), a (seeded) sample, or a "
                        "sampled slot with its most likely allocation (sample-slot), or argmax with an idle "
                        "cluster's agent starting its task when it can (argmax-busy) (default: as each "
                        "checkpoint's training run validated it, train.eval_action)")
    p.add_argument("--policy-conflicts", default=None, choices=CONFLICT_MODES,
                   help="how checkpoints' agents that want the same task are reconciled: Bayes' rule (the "
                        "paper), choosing in index order, or in order of decreasing free room (default: as each "
                        "checkpoint's training run validated it, train.eval_conflicts, else its policy.conflicts)")
    p.add_argument("--policy-floor", default=None, choices=START_FLOORS,
                   help="where checkpoints' start floor (the scenario's max_start_slowdown) comes from: the "
                        "true durations, as the env builds it (scenario, default: an oracle-informed "
                        "policy) or durations the scheduler estimates in the episode from observed progress "
                        "(online: not an oracle)")
    p.add_argument("--policy-batch", type=int, default=None, metavar="K",
                   help="episodes (seeds) a checkpoint runs in lockstep, one batched forward pass per decision "
                        "round (default: every seed in one batch, as training validates, so best.pt on its "
                        "validation seeds gives its validation figure; 1: one episode at a time); other sizes "
                        "can change a rare sampled decision (float round-off of the batched pass)")
    p.add_argument("--workers", type=int, default=default_workers(),
                   help=f"parallel processes (default min(2, cpu count) = {default_workers()})")
    p.add_argument("--report", action="store_true",
                   help="run every scenario with checkpoints/<scenario>.pt when present; write <out>/REPORT.md")
    p.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help="with --report: where <scenario>.pt checkpoints are looked up (default checkpoints/)")
    p.add_argument("--curves", action="append", default=[], metavar="RUN_DIR",
                   help="plot a training run's validation mean JCT against env steps, with the baselines' mean "
                        "JCT on the run's validation workloads; repeat for several runs of one scenario")
    p.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="with --curves: only the evaluations at or before N env steps (runs at an equal budget)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (off anyway when stderr is not a terminal)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="scenario overrides")
    return p


#: fewer seeds than this give wide confidence intervals (t with K - 1 degrees of freedom): warn
MIN_SEEDS_FOR_CI = 5


def _device(name: str) -> str:
    from envs.config import ConfigError

    if name == "cpu":
        return "cpu"
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    return "cuda"


def check_counts(args: argparse.Namespace) -> None:
    """ConfigError (one line) for an integer flag outside its range (:mod:`agents.limits`)."""
    from agents.limits import MAX_EPISODES, MAX_STEPS, MAX_WORKERS, MAX_WORKLOAD_SEED, check_range
    from envs.config import ConfigError

    seeds = args.seeds if 1 <= args.seeds <= MAX_EPISODES else 1
    for flag, value, low, high, why in (
        ("--seeds", args.seeds, 1, MAX_EPISODES, "workload seeds of one evaluation"),
        ("--seed-offset", args.seed_offset, 0, MAX_WORKLOAD_SEED + 1 - seeds, "workload seeds end at 2**62 - 1"),
        ("--workers", args.workers, 1, MAX_WORKERS, "parallel processes"),
        ("--policy-batch", args.policy_batch, 1, MAX_EPISODES, "episodes in lockstep"),
        ("--max-steps", args.max_steps, 0, MAX_STEPS, "env steps of one run"),
    ):
        problem = check_range(flag, value, low, high, why)
        if problem:
            raise ConfigError(problem)


def _seeds(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """The workload seeds and the warnings they deserve (printed once the input is checked, so a
    fatal error is never preceded by a warning)."""
    from agents.training.config import TRAIN_SEED_MIN

    seeds = list(range(args.seed_offset, args.seed_offset + args.seeds))
    warnings = []
    if args.seeds < MIN_SEEDS_FOR_CI:
        why = ("1 seed gives no confidence interval" if args.seeds == 1 else
               f"{args.seeds} seeds give wide 95% intervals (Student t with {args.seeds - 1} degree(s) of freedom)")
        warnings.append(f"warning: {why}; use --seeds {MIN_SEEDS_FOR_CI} or more to compare schedulers")
    if seeds[-1] >= TRAIN_SEED_MIN:
        warnings.append(f"warning: seeds reach {seeds[-1]} >= {TRAIN_SEED_MIN}: they may overlap training workloads")
    return seeds, warnings


def _warn(lines: Sequence[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def _given(args: argparse.Namespace, *names: str) -> list[str]:
    """The options among ``names`` whose value differs from the parser's default."""
    parser = build_parser()
    return [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) != parser.get_default(n)]


def run_curves(args: argparse.Namespace) -> int:
    """``--curves``: the learning-curve PNG (+ JSON) of one or more run directories."""
    from agents.evaluation.curves import DEFAULT_BASELINES, build_curves, output_path, summary_lines, write_curves
    from agents.output_dirs import check_output_dir
    from envs.config import ConfigError

    clash = _given(args, "checkpoint", "report", "checkpoint_dir", "scenario", "seeds", "seed_offset", "device",
                   "policy_action", "policy_conflicts", "policy_floor", "policy_batch")
    if clash or args.overrides:
        what = ", ".join(clash + (["key=value overrides"] if args.overrides else []))
        raise ConfigError(f"--curves cannot be combined with {what}: it plots training runs on the scenario and "
                          "validation seeds of their config.yaml (options: --schedulers, --out, --workers, --quiet)")
    progress = not args.quiet and sys.stderr.isatty()
    if args.out is not None:  # before the baselines run: a file in the way, or no permission
        target = Path(args.out)
        check_output_dir(target.parent if target.suffix.lower() == ".png" else target, "--out")
    curves = build_curves(args.curves, args.schedulers or DEFAULT_BASELINES, workers=args.workers,
                          progress=progress, max_steps=args.max_steps)
    png, doc = write_curves(curves, output_path(args.out, curves))
    print("\n".join(summary_lines(curves)), flush=True)
    print(f"wrote {png} and {doc}", file=sys.stderr)
    return 0


def _check_overrides_are_not_schedulers(overrides: Sequence[str]) -> None:
    """A scheduler name left among the ``key=value`` overrides (``--schedulers a b``) gets a hint."""
    from agents.baselines import available_schedulers
    from agents.baselines.specs import is_scheduler_spec
    from envs.config import ConfigError

    for token in overrides:
        if is_scheduler_spec(token) or token in available_schedulers():
            raise ConfigError(f"{token!r} looks like a scheduler, not a key=value scenario override: --schedulers "
                              "takes one comma-separated list, e.g. --schedulers optimus,optimus:preemptive=false")


def checkpoint_scenario(paths: Sequence[str], overrides: Sequence[str]) -> ScenarioConfig:
    """The scenario stored in the checkpoints (every one must store the same), with ``overrides``
    applied; ConfigError (one line) for an unreadable checkpoint or checkpoints that disagree."""
    import copy

    from agents.policy.checkpoint import read_checkpoint
    from envs.config import ConfigError, ScenarioConfig, apply_overrides

    stored = [read_checkpoint(path, required=("scenario",))["scenario"] for path in paths]
    names = [str(raw.get("name", "?")) for raw in stored]
    if any(raw != stored[0] for raw in stored[1:]):
        raise ConfigError(f"the checkpoints store different scenarios ({', '.join(names)}); give --scenario to "
                          "choose the one to evaluate on")
    raw = apply_overrides(copy.deepcopy(dict(stored[0])), overrides)
    try:
        return ScenarioConfig.from_dict(raw)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"checkpoint {str(paths[0])!r}: bad scenario: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Execute the parsed command; raises ConfigError on bad input."""
    from agents.evaluation import evaluate_scenario
    from agents.evaluation.outputs import RESULTS_DIR, StagedOutput, evaluation_name, output_bytes
    from agents.evaluation.runner import check_scheduler_list, resolve_schedulers
    from agents.evaluation.summary import format_table
    from envs.config import ConfigError, load_scenario

    check_counts(args)
    if args.schedulers is not None:
        check_scheduler_list(args.schedulers)
    if args.curves:
        if args.overwrite:
            raise ConfigError("--overwrite applies to evaluation directories, not to --curves (its PNG is rewritten)")
        return run_curves(args)
    if args.max_steps is not None:
        raise ConfigError("--max-steps only applies to --curves RUN_DIR")
    _check_overrides_are_not_schedulers(args.overrides)
    if args.schedulers is None:
        args.schedulers = "all"
    if args.device != "cpu" and not (args.checkpoint or args.report):
        raise ConfigError(f"--device {args.device} only applies to a policy: give --checkpoint PATH (baselines run "
                          "on the CPU)")
    seeds, warnings = _seeds(args)
    device = _device(args.device) if (args.checkpoint or args.report) else "cpu"
    progress = not args.quiet and sys.stderr.isatty()  # a bar in a log file is escape-code noise
    if args.report:
        from agents.evaluation.report import CHECKPOINT_DIR, run_report

        if args.checkpoint:
            raise ConfigError("--report uses checkpoints/<scenario>.pt; do not combine it with --checkpoint")
        names = [s.strip() for s in args.scenario.split(",") if s.strip()] if args.scenario else None
        path = run_report(names, seeds, Path(args.out) if args.out else None, selection=args.schedulers,
                          overrides=args.overrides, workers=args.workers, device=device, progress=progress,
                          checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else CHECKPOINT_DIR,
                          command=getattr(args, "command", ""), policy_action=args.policy_action,
                          policy_conflicts=args.policy_conflicts, policy_floor=args.policy_floor,
                          policy_batch=args.policy_batch, overwrite=args.overwrite,
                          on_checked=lambda: _warn(warnings))
        print(f"wrote {path}", file=sys.stderr)
        return 0
    if args.checkpoint_dir:
        raise ConfigError("--checkpoint-dir only applies to --report; use --checkpoint PATH")
    if args.scenario:
        cfg = load_scenario(args.scenario, args.overrides).for_evaluation()
    elif args.checkpoint:
        cfg = checkpoint_scenario(args.checkpoint, args.overrides).for_evaluation()
    else:
        raise ConfigError("--scenario is required (or --checkpoint, or --report); e.g. --scenario synthetic-3")
    from envs.progress import build_progress_functions

    build_progress_functions(cfg)  # a missing trace file is bad input: fail before any run
    for flag, value in (("--policy-action", args.policy_action), ("--policy-conflicts", args.policy_conflicts),
                        ("--policy-floor", args.policy_floor), ("--policy-batch", args.policy_batch)):
        if value and not args.checkpoint:
            raise ConfigError(f"{flag} applies to checkpoints: give --checkpoint PATH (or --report)")
    specs = resolve_schedulers(args.schedulers, args.checkpoint, cfg, policy_action=args.policy_action,
                               policy_conflicts=args.policy_conflicts, policy_floor=args.policy_floor)
    warnings += [f"warning: {s.checkpoint} holds an untrained model (its run never beat the validation score of its "
                 "step-0 weights, or it was saved before the first update): train longer" for s in specs if s.untrained]
    # --out is checked, locked and given room before any episode runs; written whole at the end
    need = output_bytes(len(specs), len(seeds), cfg.num_tasks)
    target = (StagedOutput(args.out, overwrite=args.overwrite, need=need) if args.out else
              StagedOutput.fresh(evaluation_name(args.checkpoint), RESULTS_DIR / cfg.name, need=need))
    with target:
        _warn(warnings)
        run_, summary = evaluate_scenario(cfg, specs, seeds, target.staging, workers=args.workers, device=device,
                                          progress=progress, extra={"overrides": list(args.overrides)},
                                          policy_batch=args.policy_batch)
        out = target.publish()
    print(format_table(summary, run_), flush=True)
    print(f"wrote {out}/: {' '.join(sorted(p.name for p in out.iterdir()))}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_intermixed_args(argv)  # key=value overrides may stand between the flags
    args.command = "python evaluate.py " + shlex.join(argv)
    from agents.output_dirs import EXIT_IO_ERROR
    from agents.signals import TerminationSignals
    from envs.config import ConfigError
    from envs.trace_table import TraceError

    signals = TerminationSignals()  # SIGTERM stops the evaluation as Ctrl-C does (its workers included)
    try:
        return run(args)
    except (ConfigError, TraceError) as exc:  # bad input: scenario, scheduler, checkpoint, trace file
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, an I/O error: nothing was published, the previous outputs stand
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"evaluate.py: error: {exc.strerror or exc}{where}; no output was written (the previous outputs, "
              "if any, are unchanged)", file=sys.stderr)
        return EXIT_IO_ERROR
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the worker processes are stopped, nothing was published
        print(f"evaluate.py: {signals.name}", file=sys.stderr)
        return signals.code
    except Exception:  # noqa: BLE001 - anything else is a bug: show where
        traceback.print_exc()
        print("evaluate.py: internal error (the traceback above)", file=sys.stderr)
        return 1
    finally:
        signals.restore()


if __name__ == "__main__":
    sys.exit(main())
