"""Correctness figure of the batched simulator: batched vs separate envs, same actions.

For each scenario, ``--seeds`` workload seeds run one full episode each, driven by one seeded
random valid action sequence (:func:`envs.batched.random_valid_actions` on the batched
observations): once through :class:`envs.batched.BatchedEdgeClusters` with ``B = seeds``
environments (finished environments drop out via ``env_ids``), once through that many
separate :class:`envs.gym_env.EdgeClustersEnv` instances given the same actions. Reports the
total JCT (sum over every task of every episode) of each path, the number of steps, and how
many observation arrays / rewards / flags / per-task records differed (all must be 0).

    python benchmarks/batched_equivalence.py [--scenarios synthetic-6 hetero-6 testbed-6] [--seeds 20]

The last stdout line is one JSON object ``{scenario: {...}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from envs.batched import BatchedEdgeClusters, random_valid_actions  # noqa: E402
from envs.gym_env import EdgeClustersEnv  # noqa: E402
from envs.observation import KEYS  # noqa: E402


def compare(scenario: str, num_seeds: int, action_seed: int = 0) -> dict:
    batch = BatchedEdgeClusters(scenario, num_seeds)
    envs = [EdgeClustersEnv(scenario) for _ in range(num_seeds)]
    seeds = np.arange(num_seeds)
    obs = batch.reset(seeds, seeds)
    mismatches = {"obs": 0, "reward": 0, "agent_rewards": 0, "flags": 0, "info": 0, "records": 0}
    for b in range(num_seeds):
        single, _ = envs[b].reset(seed=int(seeds[b]))
        mismatches["obs"] += sum(not np.array_equal(single[k], obs[k][b]) for k in KEYS)
    rng = np.random.default_rng(action_seed)
    g1 = batch.obs_spec.alloc_dims[1]
    live = np.arange(num_seeds)
    steps = 0
    while live.size:
        actions = random_valid_actions(obs, g1, rng)
        out = batch.step(actions, live)
        steps += live.size
        for row, b in enumerate(live.tolist()):
            single, reward, terminated, truncated, info = envs[b].step(actions[row])
            mismatches["obs"] += sum(not np.array_equal(single[k], out.obs[k][row]) for k in KEYS)
            mismatches["reward"] += reward != out.reward[row]
            mismatches["agent_rewards"] += not np.array_equal(info["agent_rewards"], out.info["agent_rewards"][row])
            mismatches["flags"] += (terminated != out.terminated[row]) + (truncated != out.truncated[row])
            mismatches["info"] += sum(info[k] != out.info[k][row] for k in ("placed", "void", "invalid", "conflicts"))
        keep = ~(out.terminated | out.truncated)
        live = live[keep]
        obs = {k: v[keep] for k, v in out.obs.items()}
    jct_batched = jct_single = 0
    for b in range(num_seeds):
        ra, rb = envs[b].sim.records(), batch.records(b)
        mismatches["records"] += sum(not np.array_equal(ra[k], rb[k]) for k in ra)
        jct_single += int(ra["jct"][ra["jct"] >= 0].sum())
        jct_batched += int(rb["jct"][rb["jct"] >= 0].sum())
    return {
        "total_jct_batched": jct_batched,
        "total_jct_separate": jct_single,
        "logical_steps": steps,
        "mismatches": {k: int(v) for k, v in mismatches.items()},
        "identical": jct_batched == jct_single and not any(mismatches.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", default=["synthetic-6", "hetero-6", "testbed-6"])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--action-seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = {}
    for name in args.scenarios:
        result[name] = r = compare(name, args.seeds, args.action_seed)
        print(f"{name:14s} total JCT batched {r['total_jct_batched']}, separate {r['total_jct_separate']}, "
              f"{r['logical_steps']} steps, identical: {r['identical']}", file=sys.stderr)
    print(json.dumps(result))
    return 0 if all(r["identical"] for r in result.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
