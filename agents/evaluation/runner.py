"""Run every scheduler on the same seeded workloads (common random numbers), in parallel.

A *job* is one scheduler on one workload seed (``run_episode`` on a fresh
:class:`~envs.core.Simulator`), or a learned policy on a group of seeds run in lockstep with
one batched forward pass per decision round (``run_episodes_batched``; ``policy_batch`` seeds
per group, default all of them, as validation runs them). Every scheduler sees the same seeds,
hence the same tasks, arrivals, reachability and tie-break stream. Jobs run in ``workers``
spawned processes (``spawn``: safe with torch and CUDA) or in-process for ``workers=1``; the
result does not depend on the number of workers or the order in which jobs finish (nor, for
baselines and argmax policies, on the policy batch: :func:`seed_groups`). No worker outlives its evaluation: an error,
Ctrl-C or SIGTERM stops the pool, and a worker whose parent dies (SIGKILL) exits on its own.

Learned policies are imported lazily (:mod:`agents.policy.scheduler` only when a checkpoint is
given), so a baseline-only evaluation never imports torch.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agents.baselines import uses_oracle
from agents.policy.modes import CONFLICT_MODES, PAPER_CONFLICTS
from agents.policy.variants import VARIANT_NAMES
from envs.bound import fastest_durations
from envs.config import ConfigError, ScenarioConfig
from envs.core import Simulator
from envs.progress import ProgressFunction, build_progress_functions
from envs.scheduling import EpisodeResult, run_episode, run_episodes_batched

from .memory import check_evaluation_memory

#: first evaluation workload seed by default; training draws its workload seeds from
#: ``[1_000_000, 2**62)`` and its in-training validation uses ``10_000 + j``, so
#: ``100_000 .. 100_000 + K - 1`` never overlaps either for K < 900_000.
DEFAULT_SEED_OFFSET = 100_000
#: the held-out range of ``benchmarks/reproduce.py`` (``docs/results/``): workload seeds
#: ``REPORT_SEED_OFFSET .. + REPORT_SEEDS - 1``, fixed once and only ever reported, never used to
#: choose a checkpoint, a recipe or a setting (validation workloads ``10_000 + j`` choose)
REPORT_SEED_OFFSET = 500_000
REPORT_SEEDS = 30
#: torch threads per evaluating process: batch-1 inference of a small network gains nothing from
#: intra-op threads, and on a busy machine they cost up to 100x (spin-waiting); parallelism
#: comes from the worker processes instead
TORCH_THREADS = 1
#: seconds between a worker process's checks that the process that started it is alive
PARENT_POLL_S = 0.5
#: seconds a stopped pool's workers get to exit on SIGTERM before they are killed
STOP_GRACE_S = 5.0
#: name of a learned policy in ``--schedulers`` (stands for every ``--checkpoint``)
POLICY_NAME = "tapfinger"
#: names of checkpoints by policy variant (:mod:`agents.policy.variants`) and, beyond the paper's
#: Bayes rule, conflict mode (``tapfinger-room``), a repeat numbered ``-2``, ``-3`` (a single
#: checkpoint is named so, see :func:`checkpoint_names` and :func:`policy_label`)
POLICY_PATTERN = re.compile(f"({'|'.join(re.escape(name) for name in VARIANT_NAMES)})"
                            f"(-(?:{'|'.join(m for m in CONFLICT_MODES if m != PAPER_CONFLICTS)}))?(-[0-9]+)?")


def policy_label(variant: str, conflicts: str) -> str:
    """A policy's name: its variant (``tapfinger``: the paper's method), with the conflict mode
    appended when it is not the paper's Bayes rule (``tapfinger-room``), so a labelled option is
    never reported as the paper's method."""
    return variant if conflicts in ("", PAPER_CONFLICTS) else f"{variant}-{conflicts}"


@dataclass(frozen=True)
class SchedulerSpec:
    """One column of the evaluation: a registry baseline or a policy checkpoint.

    ``name`` is the label in every output; ``baseline`` the registry name and ``options`` its
    constructor options (baselines, ``optimus:oracle=true``); ``checkpoint`` the file,
    ``variant`` its policy variant, ``trained_on`` the scenario stored in it, ``action`` how
    it acts (:data:`~agents.policy.modes.EVAL_ACTIONS`),
    ``conflicts`` how its agents are reconciled (``bayes``, ``sequential`` or ``room``,
    :data:`~agents.policy.modes.CONFLICT_MODES`), ``start_floor`` where its start floor comes from
    (``scenario`` or ``online``, :data:`~agents.baselines.online_floor.START_FLOORS`) and ``untrained``
    whether its weights were never updated (policies).
    """

    name: str
    baseline: str = ""
    options: tuple[tuple[str, Any], ...] = ()
    checkpoint: str = ""
    variant: str = ""
    trained_on: str | None = None
    action: str = ""
    conflicts: str = ""
    start_floor: str = "scenario"
    untrained: bool = False

    @property
    def is_policy(self) -> bool:
        return bool(self.checkpoint)

    @property
    def is_oracle(self) -> bool:
        """A baseline informed by the true durations (:func:`agents.baselines.uses_oracle`)."""
        return not self.is_policy and uses_oracle(self.baseline, dict(self.options))


@dataclass
class EvaluationRun:
    """Everything an evaluation produced: per scheduler, one result per seed (seed order)."""

    cfg: ScenarioConfig
    seeds: list[int]
    specs: list[SchedulerSpec]
    results: dict[str, list[EpisodeResult]]
    bound: list[np.ndarray]  # per seed: every task's fastest possible JCT
    preemptive: dict[str, bool] = field(default_factory=dict)

    @property
    def policy_names(self) -> list[str]:
        return [s.name for s in self.specs if s.is_policy]


# ---------------------------------------------------------------------------------------
# Choosing schedulers
# ---------------------------------------------------------------------------------------
def policy_names(variants: Sequence[str]) -> list[str]:
    """Names of checkpoints by policy variant, a repeat getting ``-2``, ``-3`` (kept for callers
    that only know variants; :func:`checkpoint_names` names ``--checkpoint`` files)."""
    count: dict[str, int] = {}
    out = []
    for v in variants:
        count[v] = count.get(v, 0) + 1
        out.append(v if count[v] == 1 else f"{v}-{count[v]}")
    return out


def checkpoint_names(paths: Sequence[str | Path], variants: Sequence[str], taken: Sequence[str] = ()) -> list[str]:
    """Output names of the ``--checkpoint`` files.

    One checkpoint is named after its policy variant (``tapfinger``, ``no-han``, ...). Several
    are named after their files: the stem (``runs/a/best.pt`` -> ``best``), with parent
    folders added while two names are equal (``a/best``, ``b/best``), then ``-2``, ``-3`` for
    the same file given twice. A name equal to a baseline's (``taken``) gets ``.pt`` appended.
    """
    if len(paths) == 1:
        names = [variants[0]]
    else:
        parts = [Path(p).with_suffix("").parts or (str(p),) for p in paths]
        depth = [1] * len(paths)
        while True:
            names = ["/".join(pt[-d:]) for pt, d in zip(parts, depth)]
            clash = [i for i, n in enumerate(names) if names.count(n) > 1 and depth[i] < len(parts[i])]
            if not clash:
                break
            for i in clash:
                depth[i] += 1
        names = policy_names(names)
    return [f"{n}.pt" if n in taken else n for n in names]


def check_scheduler_list(selection: str) -> None:
    """ConfigError (one line) unless ``selection`` is ``all`` or a list of schedulers with no empty
    item (``random,,min``, a trailing comma) and none given twice (``min,min``, or the same options
    in another order)."""
    from agents.baselines import available_schedulers
    from agents.baselines.specs import parse_scheduler_spec, split_scheduler_list

    text = selection.strip()
    if not text:
        raise ConfigError(f"--schedulers is empty; give 'all' or some of: "
                          f"{', '.join(available_schedulers() + [POLICY_NAME])}")
    if text == "all":
        return
    if any(not item.strip() for item in text.split(",")):
        raise ConfigError(f"--schedulers {selection!r} has an empty item (two commas in a row, or a comma at "
                          "an end); list each scheduler once, separated by single commas")
    seen: dict[tuple[str, tuple[tuple[str, Any], ...]], str] = {}
    for item in split_scheduler_list(text):
        name, options = parse_scheduler_spec(item)
        key = (name, tuple(sorted(options.items())))
        if key in seen:
            same = "" if seen[key] == item else f" ({seen[key]!r} and {item!r}: the same options)"
            raise ConfigError(f"--schedulers names {name if options else item!r} twice{same}; list each scheduler once")
        seen[key] = item


def resolve_schedulers(
    selection: str, checkpoints: Sequence[str | Path] = (), cfg: ScenarioConfig | None = None,
    policy_action: str | None = None,
    policy_conflicts: str | None = None,
    policy_floor: str | None = None,
) -> list[SchedulerSpec]:
    """Turn ``all`` or ``a,b,...`` (:func:`check_scheduler_list`) plus the checkpoints into scheduler
    specs (baselines first).

    ``all`` is every available baseline plus the option variants of
    :func:`.schedulers.all_schedulers` (``optimus:preemptive=false``). A baseline may carry options
    (``optimus:preemptive=false,oracle=true``, :mod:`.schedulers`); it is then labelled by that
    text. Every given checkpoint is loaded, checked against ``cfg`` (:func:`check_checkpoint`)
    and evaluated, named by :func:`checkpoint_names`, whether or not the list names it; the
    list may name ``tapfinger`` (or a checkpoint's name) only when a checkpoint is given.
    Policies act by ``policy_action`` (:data:`~agents.policy.modes.EVAL_ACTIONS`), or None: each as its
    checkpoint says (:func:`~agents.policy.checkpoint.checkpoint_eval_action`); their agents are
    reconciled by ``policy_conflicts`` (a mode of :data:`~agents.policy.modes.CONFLICT_MODES`), or None: as each
    checkpoint's run validated it (:func:`~agents.policy.checkpoint.checkpoint_eval_conflicts`); their start
    floor is ``policy_floor`` (:data:`~agents.baselines.online_floor.START_FLOORS`; None: ``scenario``, the one
    the env builds).
    Unknown names, bad options and bad checkpoints raise :class:`ConfigError`.
    """
    from agents.baselines import available_schedulers, make_scheduler
    from agents.policy.modes import EVAL_ACTIONS

    from agents.baselines.specs import all_schedulers, parse_scheduler_spec, split_scheduler_list

    if policy_action is not None and policy_action not in EVAL_ACTIONS:
        raise ConfigError(f"policy action must be one of {list(EVAL_ACTIONS)}, got {policy_action!r}")
    if policy_conflicts is not None and policy_conflicts not in CONFLICT_MODES:
        raise ConfigError(f"policy conflicts must be one of {list(CONFLICT_MODES)}, got {policy_conflicts!r}")
    if policy_floor is not None:
        from agents.baselines.online_floor import check_start_floor

        check_start_floor(policy_floor)
    known = available_schedulers()
    check_scheduler_list(selection)
    text = selection.strip()
    items = all_schedulers() if text == "all" else split_scheduler_list(text)
    parsed = [(item, *parse_scheduler_spec(item)) for item in items]
    specs: list[SchedulerSpec] = []
    policy_items = []
    unknown = []
    for item, name, options in parsed:
        if name in known:
            make_scheduler(name, **options)  # bad options: ConfigError naming them
            spec = SchedulerSpec(name=item if options else name, baseline=name, options=tuple(options.items()))
            specs.append(spec)
        elif options:
            unknown.append(item)
        else:
            policy_items.append(name)
    if checkpoints:
        if cfg is None:
            raise ValueError("resolve_schedulers needs the scenario to check checkpoints")
        infos = [check_checkpoint(p, cfg) for p in checkpoints]
        labels = [policy_label(i["variant"], policy_conflicts or i["conflicts"]) for i in infos]
        names = checkpoint_names(checkpoints, labels, taken=[s.name for s in specs])
        unknown += [n for n in policy_items if n not in names and not POLICY_PATTERN.fullmatch(n)]
        policies = [SchedulerSpec(name=name, checkpoint=str(path), variant=info["variant"],
                                  trained_on=info["trained_on"], action=policy_action or info["action"],
                                  conflicts=policy_conflicts or info["conflicts"],
                                  start_floor=policy_floor or SchedulerSpec.start_floor, untrained=info["untrained"])
                    for name, path, info in zip(names, checkpoints, infos)]
    else:
        unknown += [n for n in policy_items if not POLICY_PATTERN.fullmatch(n)]
        policies = []
    if unknown:
        raise ConfigError(
            f"unknown scheduler(s) {unknown}; valid: {', '.join(known)}, and {POLICY_NAME} (needs --checkpoint)"
        )
    if policy_items and not checkpoints:
        raise ConfigError(f"scheduler {POLICY_NAME!r} needs a policy checkpoint (--checkpoint PATH)")
    specs += policies
    if not specs:
        raise ConfigError("no scheduler to evaluate")
    return specs


def check_checkpoint(path: str | Path, cfg: ScenarioConfig) -> dict[str, Any]:
    """Load a checkpoint once (CPU) and check it can act on ``cfg``.

    Returns ``{"variant", "trained_on", "action", "conflicts", "untrained"}``; ``untrained``: the file
    holds weights no update has touched (a ``best.pt`` whose run never beat its step-0 validation,
    or a checkpoint saved before the first update). Every problem (missing, corrupt, other
    architecture, incompatible scenario) raises :class:`ConfigError`. A checkpoint trained on
    another scenario whose shapes fit is accepted (evaluation across scenarios, e.g. N=3 -> 6).
    """
    # CheckpointError: a ConfigError
    from agents.policy.checkpoint import checkpoint_eval_action, checkpoint_eval_conflicts, load_policy_checkpoint

    policy, meta = load_policy_checkpoint(path, "cpu", scenario=cfg)
    counters = meta.get("counters") or {}
    return {"variant": policy.cfg.variant, "trained_on": getattr(meta.get("scenario"), "name", None),
            "action": checkpoint_eval_action(meta, path),
            "conflicts": checkpoint_eval_conflicts(meta, policy.cfg.conflicts, path),
            "untrained": counters.get("update_step") == 0}


def checkpoint_spec(name: str, path: str | Path, cfg: ScenarioConfig, **acting: Any) -> SchedulerSpec:
    """A checkpoint as a scheduler named ``name``, checked against ``cfg`` (:func:`check_checkpoint`), acting
    as its run validated it unless ``acting`` says otherwise (``action``, ``conflicts``, ``start_floor``)."""
    info = check_checkpoint(path, cfg)
    return SchedulerSpec(name=name, checkpoint=str(path), variant=info["variant"], trained_on=info["trained_on"],
                         **{"action": info["action"], "conflicts": info["conflicts"], **acting})


# ---------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------
class Worker:
    """What one evaluating process needs for its jobs: the scenario, the specs, the device, the
    progress functions (built once) and the policies loaded so far (each checkpoint once)."""

    def __init__(self, cfg: ScenarioConfig, specs: Sequence[SchedulerSpec], device: str) -> None:
        self.cfg = cfg
        self.specs = list(specs)
        self.device = device
        self.functions = build_progress_functions(cfg)
        self.policies: dict[str, Any] = {}

    def make_scheduler(self, spec: SchedulerSpec, batched: bool = False) -> Any:
        """A fresh scheduler for one episode (a policy's weights are loaded once per worker;
        ``batched``: it will run interleaved with others, so it owns its observation builder)."""
        if not spec.is_policy:
            from agents.baselines import make_scheduler

            return make_scheduler(spec.baseline, **dict(spec.options))
        from agents.policy.modes import acting_flags
        from agents.policy.scheduler import TapFingerScheduler

        if spec.name not in self.policies:  # CheckpointError (a ConfigError) on a bad file
            self.policies[spec.name] = TapFingerScheduler(checkpoint=spec.checkpoint, device=self.device).policy
        return TapFingerScheduler(policy=self.policies[spec.name], device=self.device,
                                  **acting_flags(spec.action)._asdict(), conflicts=spec.conflicts,
                                  start_floor=spec.start_floor, own_builder=batched)

    def run_job(self, index: int, seeds: tuple[int, ...]) -> tuple[int, list[EpisodeResult], bool | None]:
        """Run scheduler ``index`` on the workloads ``seeds`` (several: a policy in lockstep,
        :meth:`TapFingerScheduler.decide_batch`); returns the results and its ``preemptive`` flag."""
        spec = self.specs[index]
        if len(seeds) == 1:
            schedulers = [self.make_scheduler(spec)]
            results = [run_episode(self.cfg, schedulers[0], seeds[0], self.functions)]  # CheckpointError: misfit
        else:
            if not spec.is_policy:
                raise ValueError(f"{spec.name}: only policies run several seeds in one job")
            schedulers = [self.make_scheduler(spec, batched=True) for _ in seeds]
            results = run_episodes_batched(self.cfg, schedulers, seeds, type(schedulers[0]).decide_batch,
                                           self.functions)
        for result in results:
            result.scheduler = spec.name
        flag = getattr(schedulers[0], "preemptive", None)
        return index, results, (bool(flag) if flag is not None else None)


#: the :class:`Worker` of a spawned evaluation process (set by :func:`_init_worker`)
_PROCESS_WORKER: Worker | None = None


def _torch_threads(specs: Sequence[SchedulerSpec]) -> int:
    """The caller's torch thread count when policies will run (to restore it), else 0."""
    if not any(s.is_policy for s in specs):
        return 0
    import torch

    return torch.get_num_threads()


def _set_torch_threads(specs: Sequence[SchedulerSpec], torch_threads: int) -> None:
    if torch_threads > 0 and any(s.is_policy for s in specs):
        import torch

        torch.set_num_threads(torch_threads)


def _init_worker(cfg: ScenarioConfig, specs: list[SchedulerSpec], device: str, torch_threads: int,
                 parent: int) -> None:
    """Spawned-process set-up: the process ends with ``parent`` (:func:`watch_parent`) and leaves
    Ctrl-C to it (the parent stops the pool), then its :class:`Worker` and the torch thread budget
    for policies."""
    global _PROCESS_WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent)
    _PROCESS_WORKER = Worker(cfg, specs, device)
    _set_torch_threads(specs, torch_threads)


def watch_parent(parent: int, interval: float = PARENT_POLL_S) -> threading.Thread:
    """End this process (``os._exit``) once ``parent`` is no longer its parent process: the parent
    died, however (SIGKILL included), and this process was handed to another one. A daemon thread
    checks ``os.getppid()`` every ``interval`` seconds, and once before returning."""
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    thread = threading.Thread(target=watch, name="watch-parent", daemon=True)
    thread.start()
    return thread


def stop_pool(pool: ProcessPoolExecutor, grace: float = STOP_GRACE_S) -> None:
    """Stop ``pool`` now: cancel its queued jobs, SIGTERM its worker processes (a running job is
    abandoned), SIGKILL any still alive after ``grace`` seconds, and reap them all. Then close this
    process's end of the result pipe: a worker stopped halfway through sending a result leaves a part
    of a message there, which the pool's manager thread would otherwise wait on for ever (and the
    interpreter's exit waits on that thread)."""
    # concurrent.futures has no public handle on the processes or the result pipe before Python 3.14
    processes = list((getattr(pool, "_processes", None) or {}).values())
    results = getattr(pool, "_result_queue", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
    writer = getattr(results, "_writer", None)
    if writer is not None:
        writer.close()  # no worker writes any more: a half-read message now ends in EOF, and the pool is broken


def _run_job(index: int, seeds: tuple[int, ...]) -> tuple[int, list[EpisodeResult], bool | None]:
    """Entry point of a job in a spawned process."""
    assert _PROCESS_WORKER is not None, "_init_worker did not run"
    return _PROCESS_WORKER.run_job(index, seeds)


def bound_durations(cfg: ScenarioConfig, seeds: Sequence[int], functions: list[ProgressFunction]) -> list[np.ndarray]:
    """Per seed, every task's fastest possible JCT (the ``bound`` row, :mod:`envs.bound`)."""
    sim = Simulator(cfg, seeds[0], functions)
    out = []
    for seed in seeds:
        sim.reset(seed)
        out.append(fastest_durations(sim).astype(np.int64))
    return out


def is_preemptive(flag: bool | None, results: Sequence[EpisodeResult]) -> bool:
    """The scheduler's ``preemptive`` attribute, else whether any task's allocation changed.

    Without the attribute a scheduler counts as preemptive when some task's time-averaged
    allocation (``avg_cpu``/``avg_gpu``) differs from its allocation at start.
    """
    if flag is not None:
        return flag
    for r in results:
        rec = r.records
        ran = rec["start"] >= 0
        if np.any(np.abs(rec["avg_cpu"][ran] - rec["cpu"][ran]) > 1e-9) or np.any(
            np.abs(rec["avg_gpu"][ran] - rec["gpu"][ran]) > 1e-9
        ):
            return True
    return False


def default_workers() -> int:
    """``min(2, cpu count)``."""
    return max(1, min(2, os.cpu_count() or 1))


def seed_groups(seeds: Sequence[int], batch: int | None) -> list[tuple[int, ...]]:
    """The seeds of a policy in groups of ``batch`` consecutive seeds (each group one job, run in
    lockstep); ``None``: one group of every seed.

    One group is how training validates (one batched forward pass over all its validation
    episodes), so a checkpoint evaluated on its validation seeds gets its validation figure. The
    batched pass's float round-off depends on the batch size; argmax decisions absorb it (a tie
    tolerance), but a sampled decision whose draw lies within round-off of a boundary can differ
    between batch sizes, so other groupings may change a sampled policy's figure slightly."""
    if batch is None:
        batch = max(1, len(seeds))
    if batch < 1:
        raise ConfigError(f"the policy batch must be >= 1 seed, got {batch}")
    return [tuple(seeds[i:i + batch]) for i in range(0, len(seeds), batch)]


def run_evaluation(
    cfg: ScenarioConfig,
    specs: Sequence[SchedulerSpec],
    seeds: Sequence[int],
    workers: int = 1,
    device: str = "cpu",
    progress: bool = True,
    policy_batch: int | None = None,
) -> EvaluationRun:
    """Run every spec on every seed and collect the results (plus the bound).

    ``workers`` > 1 runs jobs in that many spawned processes; every process runs policies with
    :data:`TORCH_THREADS` torch threads. A policy runs its seeds in groups of ``policy_batch``
    episodes, one batched forward pass per decision round (:func:`seed_groups`; ``None``: all seeds
    in one group, as validation runs them; 1: one episode at a time); baselines run one seed per
    job. ``progress`` shows a tqdm bar on stderr.
    Errors in a job (e.g. :class:`ConfigError`) propagate once the pool's processes are stopped, and
    so do Ctrl-C and SIGTERM (:func:`stop_pool`); a worker process whose parent dies ends too
    (:func:`watch_parent`). A plan beyond the machine's memory is refused before any job starts
    (:mod:`.memory`).
    """
    specs, seeds = list(specs), [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("need at least one seed")
    if len(set(s.name for s in specs)) != len(specs):
        raise ConfigError(f"scheduler names must be unique, got {[s.name for s in specs]}")
    workers = max(1, int(workers))
    groups = seed_groups(seeds, policy_batch)
    jobs = [(i, group) for i, spec in enumerate(specs) for group in (groups if spec.is_policy else [(s,) for s in seeds])]
    workers = min(workers, len(jobs))
    check_evaluation_memory(cfg, [len(g) for g in groups], any(s.is_policy for s in specs), workers)
    from tqdm import tqdm

    bar = tqdm(total=len(specs) * len(seeds), desc=f"{cfg.name}", unit="run", disable=not progress, leave=False)
    done: dict[tuple[int, int], tuple[EpisodeResult, bool | None]] = {}

    def collect(index: int, results: list[EpisodeResult], flag: bool | None) -> None:
        for result in results:
            done[(index, result.seed)] = (result, flag)
        bar.set_postfix_str(f"{specs[index].name} seed {results[-1].seed}", refresh=False)
        bar.update(len(results))

    try:
        if workers == 1:
            threads = _torch_threads(specs)
            try:
                worker = Worker(cfg, specs, device)
                _set_torch_threads(specs, TORCH_THREADS)
                for i, group in jobs:
                    collect(*worker.run_job(i, group))
            finally:
                if threads:
                    import torch

                    torch.set_num_threads(threads)
        else:
            ctx = multiprocessing.get_context("spawn")
            pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                       initargs=(cfg, specs, device, TORCH_THREADS, os.getpid()))
            try:
                pending = {pool.submit(_run_job, i, group) for i, group in jobs}
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for fut in finished:
                        if fut.exception() is not None:
                            raise fut.exception()
                        collect(*fut.result())
            except BaseException:  # a failed job, Ctrl-C, SIGTERM: no worker outlives the evaluation
                stop_pool(pool)
                raise
            pool.shutdown(wait=True)
    finally:
        bar.close()

    results = {s.name: [done[(i, seed)][0] for seed in seeds] for i, s in enumerate(specs)}
    flags = {s.name: done[(i, seeds[0])][1] for i, s in enumerate(specs)}
    preemptive = {name: is_preemptive(flags[name], res) for name, res in results.items()}
    functions = build_progress_functions(cfg)
    return EvaluationRun(cfg=cfg, seeds=seeds, specs=specs, results=results,
                         bound=bound_durations(cfg, seeds, functions), preemptive=preemptive)
