"""Logical steps per second of ``EdgeClustersEnv.step`` under a random *valid* policy.

The policy reads only the observation arrays: each agent with a feasible pending slot picks
one uniformly (skipping tasks a lower-index agent already took this step) and a uniformly
random allocation in ``[pending_min, alloc_high]``; an agent with nothing feasible sends
``[0, 0, 0]``. Only the time inside ``env.step`` is counted (observation building
included); resets and the policy are excluded and reported separately.

The env is single-threaded, so steps per second are measured on one core. By default the
rate uses the thread's CPU time (``--clock cpu``), which stays meaningful on a shared, busy
machine; ``--clock wall`` uses wall-clock time instead. Both are printed.

    python benchmarks/env_speed.py [--steps 20000] [--scenarios synthetic-6 hetero-6 testbed-6] [--clock cpu|wall] [--json]

The last stdout line is one JSON object ``{scenario: steps_per_second}`` (``null`` for a
scenario that could not be built, e.g. ``testbed-*`` without its fitted progress table).

Batched simulator (:class:`envs.batched.BatchedEdgeClusters`)::

    python benchmarks/env_speed.py --batch 1 64 256 1024 [--steps 20000] [--scenarios ...] [--repeat 3]

measures, for every batch size ``B``, logical env steps per second of
``BatchedEdgeClusters.step`` on one core (``B`` steps per call, observations included) under
the vectorised random valid policy :func:`envs.batched.random_valid_actions`, resetting
finished environments with new seeds after each call (reset time and policy time are
reported separately, not counted). Each ``B`` runs ``max(200, steps / B)`` calls after one
untimed warm-up call; the one-off set-up (numba kernels loaded from the on-disk cache, or
compiled on a fresh checkout) is printed as ``setup``. The text output also gives the
single-env ``EdgeClustersEnv`` rate of the same run for comparison. ``--repeat k`` measures
every rate ``k`` times and keeps the fastest (on a shared machine the slower repeats measure
the neighbours). With ``--batch`` the last stdout line is ``{scenario: {B: steps_per_second}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from envs.config import ConfigError  # noqa: E402
from envs.gym_env import EdgeClustersEnv  # noqa: E402
from envs.joint_action import random_valid_action  # noqa: E402

DEFAULT_SCENARIOS = ("synthetic-6", "hetero-6", "testbed-6")


def measure(scenario: str, steps: int, seed: int = 0) -> dict[str, float]:
    """Run ``steps`` logical steps (resetting as episodes end); returns timing numbers."""
    env = EdgeClustersEnv(scenario)
    g1 = env.obs_spec.alloc_dims[1]
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    step_time = step_cpu = policy_time = reset_time = 0.0
    per_step = np.empty(steps)
    episodes = real_steps = placed = 0
    perf, cpu = time.perf_counter, time.thread_time
    for k in range(steps):
        t0 = perf()
        action = random_valid_action(obs, g1, rng)
        c1 = cpu()
        t1 = perf()
        obs, _, terminated, truncated, info = env.step(action)
        t2 = perf()
        step_cpu += cpu() - c1
        policy_time += t1 - t0
        step_time += t2 - t1
        per_step[k] = t2 - t1
        placed += info["placed"]
        real_steps += info["advanced"]
        if terminated or truncated:
            episodes += 1
            t3 = perf()
            obs, _ = env.reset(seed=seed + episodes)
            reset_time += perf() - t3
    return {
        "steps_per_second": steps / step_time,
        "cpu_steps_per_second": steps / step_cpu,
        "us_per_step": 1e6 * step_time / steps,
        "median_us_per_step": 1e6 * float(np.median(per_step)),
        "policy_us_per_step": 1e6 * policy_time / steps,
        "reset_ms": 1e3 * reset_time / max(episodes, 1),
        "episodes": episodes,
        "real_steps": real_steps,
        "placed": placed,
    }


def measure_batched(scenario: str, num_envs: int, steps: int, seed: int = 0) -> dict[str, float]:
    """``BatchedEdgeClusters`` with ``num_envs`` environments; ``steps`` logical steps in all."""
    from envs.batched import BatchedEdgeClusters, random_valid_actions

    perf, cpu = time.perf_counter, time.thread_time
    t0 = perf()
    batch = BatchedEdgeClusters(scenario, num_envs)
    g1 = batch.obs_spec.alloc_dims[1]
    rng = np.random.default_rng(seed)
    obs = batch.reset(np.arange(num_envs), seed + np.arange(num_envs))
    next_seed = seed + num_envs
    calls = max(200, -(-steps // num_envs))
    step_time = step_cpu = policy_time = reset_time = 0.0
    episodes = real_steps = placed = 0
    setup = 0.0
    for k in range(calls + 1):
        t1 = perf()
        actions = random_valid_actions(obs, g1, rng)
        c2, t2 = cpu(), perf()
        out = batch.step(actions)
        c3, t3 = cpu(), perf()
        if k == 0:  # warm-up call (kernels compiled or loaded from cache): not timed
            setup = t3 - t0
        else:
            step_cpu += c3 - c2
            step_time += t3 - t2
            policy_time += t2 - t1
            placed += int(out.info["placed"].sum())
            real_steps += int(out.info["advanced"].sum())
        obs = out.obs
        end = np.flatnonzero(out.terminated | out.truncated)
        if end.size:
            t4 = perf()
            fresh = batch.reset(end, next_seed + np.arange(end.size))
            next_seed += end.size
            for key, value in fresh.items():
                obs[key][end] = value
            reset_time += perf() - t4
            episodes += end.size
    n = calls * num_envs
    return {
        "steps_per_second": n / step_time,
        "cpu_steps_per_second": n / step_cpu,
        "us_per_call": 1e6 * step_time / calls,
        "policy_us_per_call": 1e6 * policy_time / calls,
        "reset_ms": 1e3 * reset_time / max(episodes, 1),
        "setup_s": setup,
        "episodes": episodes,
        "real_steps": real_steps,
        "placed": placed,
    }


def main_batched(args: argparse.Namespace) -> int:
    result: dict[str, dict[str, float] | None] = {}
    for name in args.scenarios:
        try:
            key = "cpu_steps_per_second" if args.clock == "cpu" else "steps_per_second"
            if not args.json:
                rate = max(measure(name, min(args.steps, 5000), args.seed)[key] for _ in range(args.repeat))
                print(f"{name:14s} EdgeClustersEnv  {rate:9.0f} steps/s ({args.clock})")
            row = {}
            for b in args.batch:
                r = max((measure_batched(name, b, args.steps, args.seed) for _ in range(args.repeat)), key=lambda m: m[key])
                row[str(b)] = round(r[key], 1)
                if not args.json:
                    print(
                        f"{name:14s} batch {b:5d}     {r['cpu_steps_per_second']:9.0f} steps/s CPU, "
                        f"{r['steps_per_second']:9.0f} wall ({r['us_per_call']:.0f} us/call, "
                        f"policy {r['policy_us_per_call']:.0f} us/call, reset {r['reset_ms']:.2f} ms/episode, "
                        f"setup {r['setup_s']:.2f} s, {r['episodes']} episodes, {r['real_steps']} real steps, "
                        f"{r['placed']} placed)"
                    )
        except (ConfigError, OSError, ImportError) as exc:
            print(f"{name}: SKIPPED: {type(exc).__name__}: {exc}", file=sys.stderr)
            result[name] = None
            continue
        result[name] = row
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20000, help="logical steps per scenario")
    parser.add_argument("--scenarios", nargs="+", default=list(DEFAULT_SCENARIOS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="time base of the JSON rates")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--batch", type=int, nargs="+", default=None, metavar="B",
                        help="measure BatchedEdgeClusters with these numbers of environments")
    parser.add_argument("--repeat", type=int, default=1, help="with --batch: best of this many measurements")
    args = parser.parse_args(argv)
    if args.steps < 1:
        print("--steps must be >= 1", file=sys.stderr)
        return 2
    if args.batch is not None and (min(args.batch) < 1 or args.repeat < 1):
        print("--batch sizes and --repeat must be >= 1", file=sys.stderr)
        return 2
    try:  # one core, as documented
        import torch  # noqa: F401

        torch.set_num_threads(1)
    except ImportError:
        pass
    if args.batch is not None:
        return main_batched(args)
    result: dict[str, float | None] = {}
    for name in args.scenarios:
        try:
            r = measure(name, args.steps, args.seed)
        except (ConfigError, OSError, ImportError) as exc:
            hint = ""
            if name.startswith("testbed"):
                hint = " (test-bed scenarios need the fitted table envs/data/testbed_progress.json)"
            print(f"{name}: SKIPPED{hint}: {type(exc).__name__}: {exc}", file=sys.stderr)
            result[name] = None
            continue
        result[name] = round(r["cpu_steps_per_second" if args.clock == "cpu" else "steps_per_second"], 1)
        if not args.json:
            print(
                f"{name:14s} {r['cpu_steps_per_second']:7.0f} steps/s CPU, {r['steps_per_second']:7.0f} wall "
                f"({r['us_per_step']:.1f} us/step, "
                f"median {r['median_us_per_step']:.1f} us; "
                f"policy {r['policy_us_per_step']:.1f} us/step, reset {r['reset_ms']:.1f} ms, "
                f"{r['episodes']} episodes, {r['real_steps']} real steps, {r['placed']} placed)"
            )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
