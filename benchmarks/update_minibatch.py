"""PPO minibatch forward + backward on a *collected* training minibatch, pointer rows compared.

``policy_latency.py`` times the policy on observations of random placements, where almost every
agent has a feasible slot. Training data is different: agents whose cluster is full are skipped
(25-60% of them), and the policy's pointer network computes only the agents with a
choice on CPU batches (``TapFingerPolicy.pointer_compact``). This script builds the run as
``train.py`` would, collects ``--collect`` env steps with the untrained policy, then times
``evaluate()`` + backward on the first ``--batch`` samples with the pointer's full rows
(``never``) and compact rows (``auto``), interleaved, in process CPU time. Usage::

    python benchmarks/update_minibatch.py [--scenario synthetic-6] [--batch 1024] [--threads 1]
        [--repeats 5] [key=value ...]

The last stdout line is one JSON object: samples/s per mode, the speed-up and the batch's
active-agent fraction.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="synthetic-6")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--collect", type=int, default=4096, help="env steps collected (default 4096)")
    p.add_argument("--envs", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="train.py overrides (policy.hidden=64, ...)")
    args = p.parse_intermixed_args(argv)
    if min(args.batch, args.collect, args.envs, args.threads, args.repeats) < 1 or args.batch > args.collect:
        p.error("--batch, --collect, --envs, --threads and --repeats must be >= 1, and --batch <= --collect")

    import torch
    from tianshou.utils.torch_utils import policy_within_training_step, torch_train_mode

    from agents.policy.observations import obs_to_torch
    from agents.training.envs import training_envs
    from agents.training.loop import build_algorithm, make_collectors
    from agents.training.prepare import prepare_run

    torch.set_num_threads(args.threads)
    flags = {"envs": args.envs, "device": "cpu", "vector": "batch", "progress": False, "logdir": os.devnull}
    spec = prepare_run(args.scenario, [f"train.collect_steps={args.collect}", "train.eval_episodes=1"]
                       + list(args.overrides), flags=flags)
    envs = training_envs(spec.scenario, spec.train, 0)
    try:
        algorithm, pol = build_algorithm(spec, envs, torch.device("cpu"))  # pol: the TapFingerPolicy
        collector, _ = make_collectors(spec, algorithm, envs, None)
        collector.reset()
        with policy_within_training_step(algorithm.policy), torch_train_mode(algorithm.policy, False):
            collector.collect(n_step=args.collect)
    finally:
        envs.close()
    mb = collector.buffer[: args.batch]
    obs = pol.as_tensors(obs_to_torch(mb.obs, torch.device("cpu")))
    act = torch.as_tensor(mb.act).long()

    def step(mode: str) -> float:
        pol.pointer_compact = mode
        pol.zero_grad()
        t0 = time.process_time()
        lp, _, _, value = pol.evaluate(obs, act)
        (lp.sum() + value.sum()).backward()
        return time.process_time() - t0

    times: dict[str, list[float]] = {"never": [], "auto": []}
    for _ in range(args.repeats + 1):
        for mode in times:
            times[mode].append(step(mode))
    rate = {m: args.batch / statistics.median(v[1:]) for m, v in times.items()}  # first call: warm-up
    out = {
        "scenario": spec.scenario.name,
        "batch": args.batch,
        "threads": args.threads,
        "active_fraction": round(float(obs["feasible"].any(-1).float().mean()), 3),
        "full_rows_samples_per_s": round(rate["never"]),
        "compact_rows_samples_per_s": round(rate["auto"]),
        "speedup": round(rate["auto"] / rate["never"], 2),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
