"""Training runs of a recipe's seeds as ``train.py`` processes, several side by side.

``benchmarks/reproduce.py`` and ``benchmarks/ablations.py`` train through :func:`train_runs`:
each :class:`SeedRun` is ``python train.py --config X --seed s`` (plus a variant's overrides)
into its own run directory, with its output in ``<run_dir>.log`` beside it. A run whose
``result.json`` says it finished is not trained again; one that stopped resumes from its
``last.pt``. On the CPU the trainers get only machine settings (:func:`machine_settings`: torch
threads and row shards, the same update), never a recipe change.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Sequence

#: the project root (train.py lives there)
ROOT = Path(__file__).resolve().parent.parent.parent
#: the run's summary file and checkpoints (agents.training writes them)
RESULT_FILE, LAST_FILE = "result.json", "last.pt"


@dataclass(frozen=True)
class SeedRun:
    """One training run: ``train.py --config <config> --seed <seed> <overrides>`` into ``run_dir``."""

    label: str
    config: str
    seed: int
    run_dir: Path
    overrides: tuple[str, ...] = ()

    @property
    def log(self) -> Path:
        """Where the trainer's output goes: ``<run_dir>.log``, beside the run directory."""
        return self.run_dir.with_name(self.run_dir.name + ".log")


def machine_settings(device: str, parallel: int, threads: int | None = None) -> list[str]:
    """``train.*`` settings of the machine, not of the recipe: CPU threads and row shards per run."""
    if device != "cpu":
        return []
    threads = threads or max(1, (os.cpu_count() or 1) // parallel)
    return [f"train.torch_threads={threads}", f"train.shards={threads}"]


def finished(run_dir: Path) -> bool:
    """The run's ``result.json`` says it did its planned steps."""
    path = run_dir / RESULT_FILE
    if not path.is_file():
        return False
    try:
        return bool(json.loads(path.read_text()).get("finished"))
    except ValueError:
        return False


def train_command(run: SeedRun, device: str, parallel: int, threads: int | None = None) -> list[str]:
    """The ``train.py`` command of one run: a fresh one, or the resume of a stopped one."""
    base = [sys.executable, str(ROOT / "train.py")]
    machine = ["--device", device, *machine_settings(device, parallel, threads)]
    if (run.run_dir / LAST_FILE).is_file():
        return [*base, "--resume", str(run.run_dir / LAST_FILE), *machine]
    return [*base, "--config", run.config, "--seed", str(run.seed), "--logdir", str(run.run_dir.parent),
            f"train.run_name={run.run_dir.name}", *run.overrides, *machine]


def _start(run: SeedRun, device: str, parallel: int, threads: int | None) -> tuple[subprocess.Popen, IO[str]]:
    if run.run_dir.is_dir() and not (run.run_dir / LAST_FILE).is_file():
        # a run saves last.pt right after start-up: without one it died before training began
        print(f"{run.label}: removing {run.run_dir} (no last.pt: the run stopped before it started training)",
              flush=True)
        shutil.rmtree(run.run_dir)
    cmd = train_command(run, device, parallel, threads)
    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run.log.open("a")
    print(f"{run.label}: {shlex.join(cmd[1:])}  (log {run.log})", flush=True)
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT), log


def train_runs(runs: Sequence[SeedRun], device: str, parallel: int = 1, threads: int | None = None,
               poll_s: float = 2.0) -> list[SeedRun]:
    """Train every unfinished run, ``parallel`` at a time; returns the runs that failed."""
    todo = [r for r in runs if not finished(r.run_dir)]
    for r in runs:
        if r not in todo:
            print(f"{r.label}: finished run in {r.run_dir}, not trained again", flush=True)
    running: list[tuple[SeedRun, subprocess.Popen, IO[str]]] = []
    failed = []
    while todo or running:
        while todo and len(running) < parallel:
            run = todo.pop(0)
            running.append((run, *_start(run, device, parallel, threads)))
        time.sleep(poll_s)
        for entry in list(running):
            run, proc, log = entry
            if proc.poll() is None:
                continue
            running.remove(entry)
            log.close()
            if proc.returncode != 0 or not finished(run.run_dir):
                failed.append(run)
                print(f"{run.label}: train.py exited {proc.returncode}; see {run.log}", flush=True)
            else:
                print(f"{run.label}: done", flush=True)
    return failed


def run_command(prog: str, run: Callable[[Any], int], args: Any) -> int:
    """The shell of a reproduction command line: ``run(args)``, bad input as one line and exit 2."""
    import warnings

    from envs.config import ConfigError
    from envs.trace_fit import TraceError

    # torch-geometric warns about torch.jit.script when it is imported; nothing to act on here
    warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)
    try:
        return run(args)
    except (ConfigError, TraceError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
