"""End-to-end training throughput: what ``train.py`` does per collection + PPO update.

Builds the run exactly as ``train.py`` would (``agents.training.prepare_run``, the chosen
vector env, the policy, tianshou's collector and buffer, :class:`~agents.ppo.MultiAgentPPO`),
then times ``--iterations`` rounds of *collect ``collect_steps`` env steps, then one PPO update*
after one untimed warm-up round. No evaluation, no checkpoints, no TensorBoard. Usage::

    python benchmarks/training_speed.py [--scenario synthetic-3] [--device cpu|cuda|auto]
        [--envs 256] [--vector batch|dummy|subproc] [--iterations 3] [--json] [key=value ...]

``key=value`` overrides are train.py's (``train.batch_size=1024``, ``policy.hidden=64``, ...).
The fixed PPO settings default to ``train.collect_steps = 16 x envs`` (at least 2,048),
``train.repeat=2``, ``train.batch_size=256``. The last stdout line is one JSON object::

    {"env_steps_per_s": ..., "collect_steps_per_s": ..., "update_samples_per_s": ..., "device": ..., ...}

``env_steps_per_s`` = env steps / (collection + update time); ``update_samples_per_s`` counts
every sample of every PPO pass (``samples x repeat``) over the update time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="synthetic-3")
    p.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--envs", type=int, default=256)
    p.add_argument("--vector", default="batch", choices=("batch", "dummy", "subproc"))
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: train.torch_threads, else torch's)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_intermixed_args(argv)
    if args.envs < 1 or args.iterations < 1:
        p.error("--envs and --iterations must be >= 1")

    import torch
    from tianshou.utils.torch_utils import policy_within_training_step, torch_train_mode

    from agents.training import build_algorithm, make_collectors, prepare_run, resolve_device, training_envs

    collect = max(2048, 16 * args.envs)
    defaults = [f"train.collect_steps={collect}", "train.repeat=2", "train.batch_size=256", "train.eval_episodes=1"]
    flags = {"envs": args.envs, "device": args.device, "vector": args.vector, "progress": False,
             "logdir": os.devnull}
    spec = prepare_run(args.scenario, defaults + list(args.overrides), flags=flags)
    t = spec.train
    device = resolve_device(t.device)
    threads = args.threads or t.torch_threads  # --threads, else train.torch_threads (as train.py)
    if threads:
        torch.set_num_threads(threads)
    envs = training_envs(spec.scenario, t, 0)
    try:
        algorithm, _ = build_algorithm(spec, envs, device)
        collector, _ = make_collectors(spec, algorithm, envs, None)
        collector.reset()
        n_steps = t.resolved_collect_steps()
        collect_s = update_s = 0.0
        steps = samples = 0
        for it in range(args.iterations + 1):
            with policy_within_training_step(algorithm.policy), torch_train_mode(algorithm.policy, False):
                t0 = time.perf_counter()
                stats = collector.collect(n_step=n_steps)
                t1 = time.perf_counter()
                n = len(collector.buffer)
                algorithm.update(buffer=collector.buffer, batch_size=t.batch_size, repeat=t.repeat)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t2 = time.perf_counter()
            collector.buffer.reset(keep_statistics=True)
            if it == 0:
                continue  # warm-up: first calls, allocations, kernel selection
            collect_s += t1 - t0
            update_s += t2 - t1
            steps += stats.n_collected_steps
            samples += n * t.repeat
            if not args.json:
                print(f"iteration {it}: {stats.n_collected_steps} steps, collect {t1 - t0:.2f} s, "
                      f"update {t2 - t1:.2f} s", flush=True)
    finally:
        envs.close()
    out = {
        "env_steps_per_s": round(steps / (collect_s + update_s), 1),
        "collect_steps_per_s": round(steps / collect_s, 1),
        "update_samples_per_s": round(samples / update_s, 1),
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "scenario": spec.scenario.name,
        "envs": args.envs,
        "vector": args.vector,
        "collect_steps": n_steps,
        "batch_size": t.batch_size,
        "repeat": t.repeat,
        "torch_threads": torch.get_num_threads(),
        "precision": t.precision,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
