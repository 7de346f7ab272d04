#!/usr/bin/env python
"""Make a tuning candidate the recipe: write its values into the YAML and move the runs to match.

    python benchmarks/adopt.py --config multi-3 --candidate win64k:train.return_scaling_window=65536 \\
        --old-name nowindow [--runs runs/tuning] [--recipe-runs runs/reproduce] [--dry-run]

``--candidate`` is the one ``benchmarks/tune.py`` trained (same ``NAME:key=value,...``). Its
``train.``/``policy.`` values and learning keys (``reward``: :data:`envs.config.LEARNING_KEYS`) are
written into ``configs/<scenario>.yaml`` in place (a replaced
line's comment is dropped and shown, so that a new one can be written), and the edited file must
resolve to exactly the candidate's configuration. The old recipe's seeds move from
``<recipe-runs>/<scenario>/s<k>`` to ``<runs>/<scenario>/<old-name>/s<k>``, the candidate's to
``<recipe-runs>/<scenario>/s<k>``, logs with them. Everything is checked before anything changes;
``--dry-run`` only prints the plan. It then prints the two commands that finish the job, each with
``--restart`` (the stored seeds are the old recipe's): ``tune.py`` with the old recipe as a candidate
(nothing trains: every run is found finished) and the held-out page, ``reproduce.py`` or, for a family
recipe file, ``generalist.py`` (:mod:`agents.evaluation.adoption`). Exit codes: 0 done,
2 bad input, 1 a moved run does not match the new recipe.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="adopt.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="scenario name (configs/<name>.yaml) or YAML path: the recipe")
    p.add_argument("--candidate", required=True, metavar="NAME:key=value[,key=value...]",
                   help="the tuning candidate to adopt, as given to tune.py")
    p.add_argument("--old-name", required=True, help="the name the old recipe's runs keep, as a tuning candidate")
    p.add_argument("--runs", default="runs/tuning", help="parent of the candidates' run directories (default runs/tuning)")
    p.add_argument("--recipe-runs", default="runs/reproduce",
                   help="parent of the recipe's run directories (default runs/reproduce)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    return p


def run(args: argparse.Namespace) -> int:
    from agents.evaluation.adoption import apply_adoption, plan_adoption
    from agents.evaluation.tuning import parse_candidate

    plan = plan_adoption(args.config, parse_candidate(args.candidate), args.old_name, Path(args.runs),
                         Path(args.recipe_runs))
    print(f"{plan.yaml_path}: " + ", ".join(f"{k}: {v!r}" for k, v in plan.values.items()))
    for comment in plan.dropped_comments:
        print(f"  comment dropped from the replaced line, {comment}")
    for src, dst in (*plan.keep, *plan.promote):
        print(f"move {src} -> {dst}")
    follow = plan.follow_up()
    if args.dry_run:
        print("dry run: nothing changed; adopting would be followed by:\n  " + "\n  ".join(follow))
        return 0
    problems = apply_adoption(plan)
    if problems:
        print("adopt.py: the moved runs do not match the new recipe:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print("adopted; now run:\n  " + "\n  ".join(follow))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from agents.evaluation.seed_runs import run_command

    return run_command("adopt.py", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
