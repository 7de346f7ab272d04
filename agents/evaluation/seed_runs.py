"""Training runs of a recipe's seeds as ``train.py`` processes, several side by side.

``benchmarks/reproduce.py``, ``benchmarks/ablations.py`` and ``benchmarks/tune.py`` train through
:func:`train_runs` and share their machine options (:func:`add_machine_arguments`, :func:`machine_device`):
each :class:`SeedRun` is ``python train.py --config X --seed s`` (plus a variant's overrides)
into its own run directory, with its output in ``<run_dir>.log`` beside it. A run whose
``result.json`` says it finished is not trained again; one that stopped resumes from its
``last.pt``. On the CPU the trainers get only machine settings (:func:`machine_settings`: torch
threads and row shards, the same update), never a recipe change. A run directory that holds a
run of another recipe (:func:`recipe_differences`) is refused before anything trains: a finished
run is reused, and a stopped one resumed, only when its saved config is what its command
resolves to now. :func:`recipe_fingerprint` is that comparison's side of a resolved recipe, stored
with a seed's results (:mod:`.seed_store`) and compared the same way (:func:`fingerprint_differences`).
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
from typing import IO, Any, Callable, Mapping, Sequence

#: the project root (train.py lives there)
ROOT = Path(__file__).resolve().parent.parent.parent
#: the run's summary file and checkpoints (agents.training writes them)
RESULT_FILE, LAST_FILE = "result.json", "last.pt"
#: the saved config of a run directory (agents.training writes it)
CONFIG_FILE = "config.yaml"
#: train keys that say where, how fast and under which name a run trains, not what it learns
PLACE_KEYS = frozenset({"device", "torch_threads", "shards", "logdir", "run_name", "progress"})


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
        """Where the trainer's output goes (:func:`log_path`)."""
        return log_path(self.run_dir)


def log_path(run_dir: Path) -> Path:
    """A training run's output: ``<run_dir>.log``, beside the run directory."""
    return run_dir.with_name(run_dir.name + ".log")


def add_machine_arguments(parser: Any) -> None:
    """The command-line options of where the runs train and how they are evaluated: ``--device``,
    ``--parallel``, ``--threads`` and ``--workers`` (checked and resolved by :func:`machine_device`)."""
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="the trainers' device")
    parser.add_argument("--parallel", type=int, default=1, help="training runs side by side (default 1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads per training run (default: the CPUs shared out between the --parallel runs)")
    parser.add_argument("--workers", type=int, default=None, help="evaluation processes (default min(2, CPUs))")


def machine_device(args: Any) -> str:
    """The trainers' device (``auto``: ``cuda`` where there is one), after checking ``--parallel``,
    ``--threads`` and ``--workers`` (:class:`ConfigError`, one line, for a value below 1)."""
    from envs.config import ConfigError

    for name in ("parallel", "threads", "workers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name} must be >= 1, got {value}")
    if args.device != "auto":
        return args.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


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


def recipe_fingerprint(spec: Any) -> dict[str, dict[str, Any]]:
    """What a resolved run (:class:`~agents.training.run_spec.RunSpec`) learns from: its scenario, policy
    and train sections as plain YAML values (lists, not tuples), the train :data:`PLACE_KEYS` left out."""
    import yaml

    out = {}
    for section, cfg in (("scenario", spec.scenario), ("policy", spec.policy), ("train", spec.train)):
        values = yaml.safe_load(yaml.safe_dump(cfg.to_dict()))
        out[section] = {k: v for k, v in values.items() if not (section == "train" and k in PLACE_KEYS)}
    return out


def fingerprint_differences(saved: Any, spec: Any, what: str = "run") -> list[str]:
    """``section.key: <what> X, recipe Y`` for every scenario, policy or train value (other than the
    :data:`PLACE_KEYS`) in which ``saved`` (a saved config or a stored :func:`recipe_fingerprint`)
    differs from the resolved ``spec``. A key ``saved`` lacks (added to the code after it was saved)
    agrees when the recipe keeps its default; one this version removed agrees at its old default."""
    import dataclasses

    import yaml

    saved = saved if isinstance(saved, dict) else {}
    configs = {"scenario": spec.scenario, "policy": spec.policy, "train": spec.train}
    out = []
    for section, expected in recipe_fingerprint(spec).items():
        have = saved.get(section)
        have = have if isinstance(have, dict) else {}
        cfg = configs[section]
        defaults = {f.name: f.default for f in dataclasses.fields(cfg) if f.default is not dataclasses.MISSING}
        for key, value in expected.items():
            if key not in have:
                if key in defaults and yaml.safe_load(yaml.safe_dump(defaults[key])) == value:
                    continue
                out.append(f"{section}.{key}: {what} (not saved), recipe {value!r}")
            elif have[key] != value:
                out.append(f"{section}.{key}: {what} {have[key]!r}, recipe {value!r}")
        for key, old in getattr(cfg, "REMOVED", {}).items():  # an option since removed counts when it was set
            if key in have and have[key] != old:
                out.append(f"{section}.{key}: {what} {have[key]!r}, an option this version removed")
    return out


def resolve_recipe(run: SeedRun) -> Any:
    """The :class:`~agents.training.run_spec.RunSpec` that ``run``'s command resolves to now."""
    from agents.training.prepare import prepare_run

    return prepare_run(run.config, list(run.overrides), flags={"seed": run.seed})


def recipe_differences(run: SeedRun) -> list[str]:
    """:func:`fingerprint_differences` of ``run.run_dir``'s saved config against what ``run``'s
    command resolves to now; empty when they agree or nothing is saved there."""
    import yaml

    from envs.config import ConfigError

    path = run.run_dir / CONFIG_FILE
    if not path.is_file():
        return []
    try:
        saved = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not readable YAML ({exc})") from None
    return fingerprint_differences(saved, resolve_recipe(run))


def shown_differences(diffs: Sequence[str], limit: int = 4) -> str:
    """The first ``limit`` differences, ``; ``-joined, and how many more there are."""
    return "; ".join(diffs[:limit]) + (f"; and {len(diffs) - limit} more" if len(diffs) > limit else "")


def check_recipes(runs: Sequence[SeedRun]) -> None:
    """:class:`ConfigError` naming the first run directory that holds a run of another recipe."""
    from envs.config import ConfigError

    for run in runs:
        diffs = recipe_differences(run)
        if diffs:
            raise ConfigError(f"{run.label}: {run.run_dir} holds a run of another recipe ({shown_differences(diffs)}); "
                              "move it away, or give --runs another directory")


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
               poll_s: float = 2.0, on_finished: Callable[[SeedRun], None] | None = None) -> list[SeedRun]:
    """Train every unfinished run, ``parallel`` at a time; returns the runs that failed.

    Every run directory that already holds a run must hold one of the run's recipe
    (:func:`check_recipes`, a :class:`ConfigError` before anything starts). ``on_finished(run)`` is
    called for each run found finished, then for each run as soon as it finishes, while the others
    go on training; should it raise, the runs still training are stopped (they resume later)."""
    check_recipes(runs)
    todo = [r for r in runs if not finished(r.run_dir)]
    running: list[tuple[SeedRun, subprocess.Popen, IO[str]]] = []
    failed = []
    try:
        for r in runs:
            if r not in todo:
                print(f"{r.label}: finished run in {r.run_dir}, not trained again", flush=True)
                if on_finished is not None:
                    on_finished(r)
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
                    if on_finished is not None:
                        on_finished(run)
    finally:
        for run, proc, log in running:
            if proc.poll() is None:
                print(f"{run.label}: stopping train.py (it resumes from {run.run_dir / LAST_FILE})", flush=True)
                proc.terminate()
                proc.wait()
            log.close()
    return failed


def seed_range(args: Any) -> list[int]:
    """The training seeds of ``--seeds K --first-seed F`` (:class:`ConfigError`, one line, below 1 or 0)."""
    from envs.config import ConfigError

    for name, low in (("seeds", 1), ("first_seed", 0)):
        if getattr(args, name) < low:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    return list(range(args.first_seed, args.first_seed + args.seeds))


def seeds_command(script: str, args: Any) -> str:
    """The command line of ``benchmarks/<script>`` that regenerates a page over ``args``'s seeds, as a
    user types it (``--first-seed`` and ``--heldout`` only when not their defaults)."""
    from .results import REPORT_SEEDS

    parts = [f"python benchmarks/{script}", f"--config {args.config}", f"--seeds {args.seeds}"]
    if args.first_seed:
        parts.append(f"--first-seed {args.first_seed}")
    if args.heldout != REPORT_SEEDS:
        parts.append(f"--heldout {args.heldout}")
    return " ".join(parts)


def train_then_evaluate(prog: str, runs: Sequence[SeedRun], args: Any, device: str,
                        evaluate: Callable[[SeedRun], None], stored_in: Path) -> int | None:
    """Train ``runs`` (those not stored yet) with the machine options of ``args``, calling ``evaluate``
    on each as soon as it has finished, unless ``--train-only``. Returns the exit code to end the
    command with (1: a run failed, named on stderr; 0: ``--train-only``), or None to go on to the page."""
    failed = train_runs(runs, device, args.parallel, args.threads, on_finished=None if args.train_only else evaluate)
    if failed:
        print(f"{prog}: training failed for {', '.join(r.label for r in failed)}; the seeds that finished "
              f"are stored in {stored_in}, no page written", file=sys.stderr)
        return 1
    return 0 if args.train_only else None


def run_command(prog: str, run: Callable[[Any], int], args: Any) -> int:
    """The shell of a reproduction command line: ``run(args)``, bad input as one line and exit 2."""
    from envs.config import ConfigError
    from envs.trace_table import TraceError

    try:
        return run(args)
    except (ConfigError, TraceError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2


def check_ship(args: Any, runs: Mapping[int, SeedRun], stored: Mapping[int, Mapping[str, Any]]) -> None:
    """``--ship`` copies seed 0's ``best.pt``: :class:`ConfigError` without seed 0, or when seed 0 is
    stored and its run directory lacks the very ``best.pt`` it was evaluated with."""
    from agents.training.checkpoints import BEST
    from envs.config import ConfigError

    from .results import file_sha256

    if not args.ship:
        return
    if 0 not in runs:
        raise ConfigError("--ship copies seed 0's best.pt: include seed 0 (--first-seed 0)")
    if 0 in stored:
        best = runs[0].run_dir / BEST
        if not best.is_file():
            raise ConfigError(f"--ship copies seed 0's best.pt, and {best} is gone (seed 0's results are stored "
                              "without its weights): ship from the machine that trained it, or leave out --ship")
        if file_sha256(best) != stored[0]["best_sha256"]:
            raise ConfigError(f"--ship: {best} is not the best.pt stored seed 0 was evaluated with; "
                              "rerun with --restart to evaluate it again, or leave out --ship")


def ship_seed0(ship: str | Path, runs: Mapping[int, SeedRun], name: str) -> Path:
    """Copy seed 0's ``best.pt`` (:func:`check_ship` passed) to ``<ship>/<name>.pt``."""
    from agents.training.checkpoints import BEST

    source, target = runs[0].run_dir / BEST, Path(ship) / f"{name}.pt"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    print(f"shipped {source} as {target}", flush=True)
    return target
