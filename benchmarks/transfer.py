#!/usr/bin/env python
"""What carries across scenarios: every shipped checkpoint on the validation workloads of each other
scenario of its family, beside that scenario's own checkpoint and its validation rival.

    python benchmarks/transfer.py [--checkpoints checkpoints] [--out docs/results] [--workers W]

Each ``<checkpoints>/<name>.pt`` named after a recipe of ``configs/`` acts in every other shipped
scenario its policy can act in, as that scenario's recipe acts outside training, on that recipe's
validation workloads (:mod:`agents.evaluation.transfer`); the scenario's validation baselines run on the
same workloads. Writes ``<out>/transfer.json`` and ``<out>/transfer.md``. Validation workloads only:
held-out numbers are on the scenario pages. Exit codes: 0 done, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COMMAND = "python benchmarks/transfer.py"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoints", default="checkpoints", help="the shipped checkpoints (default checkpoints)")
    p.add_argument("--out", default="docs/results", help="results directory (default docs/results)")
    p.add_argument("--workers", type=int, default=None, help="evaluation processes (default min(2, CPUs))")
    return p


def run(args: argparse.Namespace) -> int:
    from agents.evaluation.runner import default_workers
    from agents.evaluation.transfer import PAGE, PAGE_JSON, render_transfer_page, shipped_sources, transfer_sections
    from agents.json_files import write_json
    from envs.config import ConfigError

    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    checkpoints = Path(args.checkpoints)
    if not shipped_sources(checkpoints):
        raise ConfigError(f"--checkpoints {checkpoints}: no <recipe>.pt file named after a recipe of configs/")
    sections = transfer_sections(checkpoints, workers=args.workers or default_workers(), progress=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = COMMAND + ("" if args.checkpoints == "checkpoints" else f" --checkpoints {args.checkpoints}")
    write_json(out / PAGE_JSON, {"command": command, "sections": sections})
    (out / PAGE).write_text(render_transfer_page(sections, command))
    print(f"wrote {out / PAGE_JSON}\nwrote {out / PAGE}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from agents.evaluation.seed_runs import run_command

    return run_command("transfer.py", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
