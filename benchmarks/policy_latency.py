"""Policy latency: milliseconds per scheduling round and batched throughput.

Keys (CPU always, CUDA too when available):
  ``<dev>-N<n>``        median ms of one ``act()`` at batch 1 (one scheduling round), after warm-up
  ``<dev>-N<n>-b64``    samples per second of ``act()`` on batches of 64 observations
  ``<dev>-N6-b1024``    samples per second of ``act()`` at batch 1024 (and ``cuda-N6-b4096``)
  ``<dev>-N6-train-b256`` samples per second of ``evaluate()`` forward + backward (a PPO minibatch)
  ``<dev>-N6-train-b<big>`` the same at the large training batch (1024 on CPU, 4096 on CUDA)
Observations come from a simulator driven by random placements (realistic pending/running
load). Under ``flops`` the JSON gives the matrix-product work per sample of the large-batch keys
(MFLOP, counted by ``torch.utils.flop_counter.FlopCounterMode``: matmuls only, elementwise work
not counted) and, under ``gflops``, the rate they ran at (MFLOP/sample x samples/s): set
against the machine's matmul peak, that says whether a key is bound by arithmetic or by overhead. Usage::

    python benchmarks/policy_latency.py [--json] [--threads 1] [--repeats 50] [--variant tapfinger]
        [--encoder auto|dense|pyg] [--conflicts bayes|sequential|room] [--faithful] [--big-threads 2] [--compile MODE]
        [--precision float32|bfloat16] [--shards K] [policy.<field>=<value> ...]

``--encoder`` picks the HAN implementation (``auto``, the default, ``dense`` or the
torch-geometric reference ``pyg``; see ``agents.policy.config.PolicyConfig``), so comparisons are one
command each. ``--faithful`` measures the paper-size
model (``PolicyConfig.paper()``: plain 6-layer HAN, hidden 256, with shared actors so the same
weights serve every N). ``--big-threads`` sets the torch threads of the large-batch keys
(default: ``--threads``). ``--compile MODE`` runs the policy with
:meth:`~agents.policy.network.TapFingerPolicy.compile_passes` (``torch.compile``; ``reduce-overhead``
adds CUDA-graph replay on a GPU); the warm-up calls absorb the compilation. ``--precision
bfloat16`` runs every call under bfloat16 autocast (``train.precision``, :mod:`agents.training.precision`).
``--shards K`` runs the forward + backward keys on K row shards in parallel threads, one intra-op
thread each (``train.shards``, :mod:`agents.training.shards`). ``policy.<field>=<value>`` overrides are
train.py's policy keys, applied last (``policy.hidden=64`` measures the size the shipped
checkpoints use); the scenarios are fixed, so scenario and ``train.`` keys are refused.

The last stdout line is one JSON object with every number, the same keys measured in process
CPU time under ``cpu_time`` (robust to other processes competing for the cores; for CUDA
keys it is only the host side), and the settings used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from agents.policy.config import ENCODERS, POLICY_VARIANTS, PolicyConfig
from agents.policy.modes import COMPILE_MODES, CONFLICT_MODES
from agents.policy.network import TapFingerPolicy
from agents.policy.observations import obs_to_torch
from agents.training.config import split_overrides
from agents.training.precision import FLOAT32, PRECISIONS, autocast
from agents.training.shards import run_sharded
from envs import Simulator, load_scenario
from envs.config import ConfigError
from envs.observation import ObservationSpec, build_observation

SIZES = {3: ("synthetic-3", []), 6: ("synthetic-6", []), 24: ("synthetic-6", ["num_clusters=24", "arrival_rate=16"])}


def loaded_observations(n: int, count: int, seed: int = 0) -> tuple[ObservationSpec, list[dict]]:
    """``count`` observations of an ``n``-cluster scenario under random placements."""
    name, overrides = SIZES[n]
    cfg = load_scenario(name, overrides + ["num_tasks=100000"])
    spec = ObservationSpec.from_config(cfg)
    sim = Simulator(cfg, seed)
    rng = np.random.default_rng(seed)
    out = []
    for step in range(30 + count):
        for i in range(sim.num_clusters):
            tasks = sim.pending_tasks(i)
            if tasks.size and rng.random() < 0.5:
                task = int(rng.choice(tasks))
                lo = sim.min_req[sim.task_type[task]]
                sim.place(i, task, int(lo[0]), int(lo[1]))
        sim.advance()
        if step >= 30:
            out.append(build_observation(sim, spec))
    return spec, out


def _batch(obs: list[dict], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(np.stack([o[k] for o in obs]), device=device) for k in obs[0]}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_calls(fn, repeats: int, warmup: int, device: torch.device) -> tuple[float, float]:
    """Median wall-clock and median process-CPU seconds of ``fn()`` after ``warmup`` calls.

    The CPU time is what the call costs without competition from other processes (with one
    torch thread it is close to the wall time on an idle machine).
    """
    for _ in range(warmup):
        fn()
    _sync(device)
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        _sync(device)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def mflop_per_sample(fn, batch: int) -> float:
    """Matrix-product MFLOP per sample of one call ``fn()`` on a batch of ``batch`` samples."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return round(counter.get_total_flops() / batch / 1e6, 3)


def big_batch(device: torch.device) -> int:
    """The large training batch: 1024 on CPU, 4096 on an accelerator."""
    return 1024 if device.type == "cpu" else 4096


def act_batches(device: torch.device) -> tuple[int, ...]:
    """The large ``act()`` batches: 1024 everywhere, and 4096 on an accelerator."""
    return (1024,) if device.type == "cpu" else (1024, 4096)


def bench_device(
    device: torch.device, cfg: PolicyConfig, repeats: int, warmup: int, train: bool, big_threads: int | None = None,
    compile_mode: str | None = None, precision: str = FLOAT32, shards: int = 1,
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """``(wall-clock results, process-CPU-time results, MFLOP per sample)``: the first two with
    the same keys, the third for the large-batch keys (see :func:`mflop_per_sample`).

    ``big_threads``: torch threads for the large-batch keys (default: unchanged).
    ``compile_mode``: :meth:`TapFingerPolicy.compile_passes` first (the warm-up calls compile).
    ``precision``: every call runs in :func:`agents.training.precision.autocast` (``train.precision``).
    ``shards``: the forward + backward keys run on that many row shards in parallel threads
    (``train.shards``, :func:`agents.training.shards.run_sharded`).
    """
    res: dict[str, float] = {}
    cpu: dict[str, float] = {}
    flops: dict[str, float] = {}
    tag = device.type
    big = big_batch(device)
    for n in SIZES:
        spec, obs = loaded_observations(n, 64)
        torch.manual_seed(0)
        pol = TapFingerPolicy(spec, cfg).to(device).eval()
        if compile_mode:
            # compiled code is cached per function, across policies: without a reset this size
            # would start from the last size's graphs, made dynamic in N and the batch (slower)
            torch._dynamo.reset()
            pol.compile_passes(compile_mode)
        gen = torch.Generator(device=device).manual_seed(0)
        singles = [obs_to_torch(o, device) for o in obs]
        it = iter(range(10**9))

        def act(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            with autocast(precision, device):
                return pol.act(batch, generator=gen).action

        def one() -> None:
            act(singles[next(it) % len(singles)])

        w, c = time_calls(one, repeats, warmup, device)
        res[f"{tag}-N{n}"], cpu[f"{tag}-N{n}"] = round(1000.0 * w, 3), round(1000.0 * c, 3)
        b64 = _batch(obs, device)
        w, c = time_calls(lambda: act(b64), max(5, repeats // 5), 2, device)
        res[f"{tag}-N{n}-b64"], cpu[f"{tag}-N{n}-b64"] = round(64 / w, 1), round(64 / max(c, 1e-9), 1)
        if n != 6:
            continue
        largest = max(big, *act_batches(device))
        many = _batch((obs * (largest // len(obs) + 1))[:largest], device)
        action = act(many)
        threads = torch.get_num_threads()
        for size in (256, big) if train else ():
            if size == big and big_threads:
                torch.set_num_threads(big_threads)
            sub, sub_action = {k: v[:size] for k, v in many.items()}, action[:size]
            pol.train()

            def rows(lo: int, hi: int) -> None:
                with autocast(precision, device):
                    logp, ent, _, value = pol.evaluate({k: v[lo:hi] for k, v in sub.items()}, sub_action[lo:hi])
                (logp.sum() + ent.sum() + value.sum()).backward()

            def step(shards: int = shards) -> None:
                run_sharded(rows, size, shards)  # train.shards (agents/training/shards.py); 1: the whole batch

            w, c = time_calls(step, max(2, repeats // (10 if size == 256 else 20)), 1, device)
            key = f"{tag}-N6-train-b{size}"
            res[key], cpu[key] = round(size / w, 1), round(size / max(c, 1e-9), 1)
            if size == big:  # counted unsharded: the flop counter does not see other threads
                flops[key] = mflop_per_sample(lambda: step(1), size)
            pol.eval()
        if big_threads:
            torch.set_num_threads(big_threads)
        for size in act_batches(device):
            sub = {k: v[:size] for k, v in many.items()}
            w, c = time_calls(lambda: act(sub), max(2, repeats // 20), 1, device)
            res[f"{tag}-N6-b{size}"], cpu[f"{tag}-N6-b{size}"] = round(size / w, 1), round(size / max(c, 1e-9), 1)
            flops[f"{tag}-N6-b{size}"] = mflop_per_sample(lambda: act(sub), size)
        torch.set_num_threads(threads)
    return res, cpu, flops


def policy_with_overrides(base: PolicyConfig, overrides: list[str]) -> PolicyConfig:
    """``base`` with ``policy.<field>=<value>`` overrides applied as train.py applies them
    (:meth:`~envs.config_section.ConfigSection.from_dict`); any other key raises :class:`~envs.config.ConfigError`."""
    split = split_overrides(overrides)
    others = [*split.scenario, *(f"train.{k}" for k in split.train)]
    if others:
        raise ConfigError(f"only policy.<field>=<value> overrides apply here (the scenarios are fixed), got {others}")
    return PolicyConfig.from_dict(base.to_dict(), split.policy)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--variant", choices=POLICY_VARIANTS, default="tapfinger")
    ap.add_argument("--faithful", action="store_true", help="paper sizes (PolicyConfig.paper, shared actors)")
    ap.add_argument("--encoder", choices=ENCODERS, default="auto", help="HAN implementation (default auto)")
    ap.add_argument("--conflicts", choices=CONFLICT_MODES, default="bayes",
                    help="how agents wanting the same task are reconciled (policy.conflicts; default bayes)")
    ap.add_argument("--big-threads", type=int, default=None,
                    help="torch threads for the large-batch keys (default: --threads)")
    ap.add_argument("--no-train", action="store_true", help="skip the forward+backward throughput")
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--compile", choices=COMPILE_MODES, default=None, metavar="MODE",
                    help=f"torch.compile the policy's tensor passes first ({', '.join(COMPILE_MODES)}; "
                         "default: eager); the warm-up calls pay the compilation")
    ap.add_argument("--precision", choices=PRECISIONS, default=FLOAT32,
                    help="autocast of the policy's network passes (train.precision; default float32)")
    ap.add_argument("--shards", type=int, default=1,
                    help="row shards of the forward+backward keys, in parallel threads (train.shards; default 1)")
    ap.add_argument("overrides", nargs="*", metavar="policy.<field>=<value>",
                    help="policy settings, as train.py takes them (e.g. policy.hidden=64), applied last")
    args = ap.parse_args(argv)
    if (args.threads < 1 or args.repeats < 1 or args.warmup < 0 or args.shards < 1
            or (args.big_threads is not None and args.big_threads < 1)):
        print("error: --threads, --shards and --repeats must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    runtime = {"encoder": args.encoder, "conflicts": args.conflicts}
    base = (PolicyConfig.paper(args.variant, shared_actors=True, **runtime) if args.faithful
            else PolicyConfig(variant=args.variant, **runtime))
    try:
        cfg = policy_with_overrides(base, args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    devices = [torch.device("cpu")]
    if torch.cuda.is_available() and not args.cpu_only:
        devices.append(torch.device("cuda"))
    results: dict[str, object] = {}
    cpu_time: dict[str, float] = {}
    flops: dict[str, float] = {}
    for dev in devices:
        wall, cpu, dev_flops = bench_device(dev, cfg, args.repeats, args.warmup, not args.no_train,
                                            args.big_threads, args.compile, args.precision, args.shards)
        results.update(wall)
        cpu_time.update(cpu)
        flops.update(dev_flops)
        if not args.json:
            for k, v in wall.items():
                unit = "samples/s" if "-b" in k else "ms/round"
                work = f", {dev_flops[k]} MFLOP/sample, {dev_flops[k] * v / 1000:.1f} GFLOP/s" if k in dev_flops else ""
                print(f"{k:>22}: {v:>9} {unit:<9} (process CPU time: {cpu[k]}{work})")
    results["cpu_time"] = cpu_time
    results["flops"] = flops
    results["gflops"] = {k: round(v * results[k] / 1000, 2) for k, v in flops.items()}
    results["settings"] = {"threads": args.threads, "big_threads": args.big_threads or args.threads,
                           "repeats": args.repeats, "policy": cfg.to_dict(), "compile": args.compile,
                           "precision": args.precision, "shards": args.shards, "torch": torch.__version__}
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
