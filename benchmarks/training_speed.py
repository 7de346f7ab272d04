"""End-to-end training throughput: what ``train.py`` does per collection + PPO update.

Builds the run exactly as ``train.py`` would (``agents.training.prepare.prepare_run``, the chosen
vector env, the policy, tianshou's collector and buffer, :class:`~agents.training.tianshou_glue.algorithm.MultiAgentPPO`),
then times ``--iterations`` rounds of *collect ``collect_steps`` env steps, then one PPO update*
after one untimed warm-up round. No evaluation, no checkpoints, no TensorBoard. Usage::

    python benchmarks/training_speed.py [--scenario synthetic-3] [--device cpu|cuda|auto]
        [--envs 256] [--vector batch|dummy|subproc] [--iterations 3] [--json]
        [--compare KEY=V1,V2,...] [key=value ...]

``key=value`` overrides are train.py's (``train.batch_size=1024``, ``policy.hidden=64``, ...).
The fixed PPO settings default to ``train.collect_steps = 16 x envs`` (at least 2,048),
``train.repeat=2``, ``train.batch_size=256``. The last stdout line is one JSON object::

    {"env_steps_per_s": ..., "collect_steps_per_s": ..., "update_samples_per_s": ..., "device": ..., ...}

``env_steps_per_s`` = env steps / (collection + update time); ``update_samples_per_s`` counts
every sample of every PPO pass (``samples x repeat``) over the update time.

``--compare train.precision=float32,bfloat16`` builds one run per value in the same process and
alternates their rounds (round 1 of each, round 2 of each, ...), so that the drift of a shared
machine hits every variant alike, in an order rotated every round (:func:`round_order`: the
position of a run in the round can favour it); the JSON then holds ``variants`` (one object as above per
value) and ``ratios`` (each variant's ``env_steps_per_s`` over the first's). Timings of separate
processes drift by more than many of the effects worth measuring. Keys that set the whole process
(:data:`PROCESS_WIDE_KEYS`: ``train.malloc``, ``train.torch_threads``) cannot be compared this way
and are refused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any


#: overrides that set the whole process (agents.training.prepare.configure_process): the runs of one
#: process cannot differ in them
PROCESS_WIDE_KEYS = ("train.malloc", "train.torch_threads")


class _Run:
    """One variant: its envs, algorithm and collector, and the time its timed rounds took."""

    def __init__(self, args: argparse.Namespace, overrides: list[str]) -> None:
        from agents.training.envs import training_envs
        from agents.training.loop import build_algorithm, make_collectors
        from agents.training.prepare import check_environment, configure_process, prepare_run

        collect = max(2048, 16 * args.envs)
        defaults = [f"train.collect_steps={collect}", "train.repeat=2", "train.batch_size=256", "train.eval_episodes=1"]
        flags = {"envs": args.envs, "device": args.device, "vector": args.vector, "progress": False,
                 "logdir": os.devnull}
        self.spec = spec = prepare_run(args.scenario, defaults + overrides, flags=flags)
        self.device = check_environment(spec)
        configure_process(spec.train, args.threads)  # as train.py; --threads wins over train.torch_threads
        self.envs = training_envs(spec.scenario, spec.train, 0)
        self.algorithm, _ = build_algorithm(spec, self.envs, self.device)
        self.collector, _ = make_collectors(spec, self.algorithm, self.envs, None)
        self.collector.reset()
        self.collect_s = self.update_s = 0.0
        self.steps = self.samples = 0

    def round(self, timed: bool) -> tuple[int, float, float]:
        """Collect ``collect_steps`` env steps, then one PPO update; ``(steps, collect s, update s)``."""
        import torch
        from tianshou.utils.torch_utils import policy_within_training_step, torch_train_mode

        t = self.spec.train
        with policy_within_training_step(self.algorithm.policy), torch_train_mode(self.algorithm.policy, False):
            t0 = time.perf_counter()
            stats = self.collector.collect(n_step=t.resolved_collect_steps())
            t1 = time.perf_counter()
            n = len(self.collector.buffer)
            self.algorithm.update(buffer=self.collector.buffer, batch_size=t.batch_size, repeat=t.repeat)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
        self.collector.buffer.reset(keep_statistics=True)
        if timed:
            self.collect_s += t1 - t0
            self.update_s += t2 - t1
            self.steps += stats.n_collected_steps
            self.samples += n * t.repeat
        return stats.n_collected_steps, t1 - t0, t2 - t1

    def result(self, args: argparse.Namespace) -> dict[str, Any]:
        import torch

        t = self.spec.train
        return {
            "env_steps_per_s": round(self.steps / (self.collect_s + self.update_s), 1),
            "collect_steps_per_s": round(self.steps / self.collect_s, 1),
            "update_samples_per_s": round(self.samples / self.update_s, 1),
            "device": str(self.device) if self.device.type == "cpu" else torch.cuda.get_device_name(self.device),
            "scenario": self.spec.scenario.name,
            "envs": args.envs,
            "vector": args.vector,
            "collect_steps": t.resolved_collect_steps(),
            "batch_size": t.batch_size,
            "repeat": t.repeat,
            "torch_threads": torch.get_num_threads(),
            "precision": t.precision,
            "old_stats": t.old_stats,
            "malloc": t.malloc,
        }

    def close(self) -> None:
        self.envs.close()


def round_order(n: int, iteration: int) -> list[int]:
    """The order the ``n`` variants run in at ``iteration``: rotated by one each iteration, so each
    takes every position equally often over ``n`` iterations (on a small shared machine the
    position alone can favour a run: a fixed order would be a bias of the comparison)."""
    k = iteration % n if n else 0
    return list(range(k, n)) + list(range(k))


def _variants(compare: str | None, p: argparse.ArgumentParser) -> list[tuple[str, list[str]]]:
    """``[(label, extra overrides)]``: one unlabelled variant, or one per ``--compare`` value."""
    if compare is None:
        return [("", [])]
    key, sep, values = compare.partition("=")
    labels = [v for v in values.split(",") if v]
    if not key or not sep or len(labels) < 2:
        p.error(f"--compare expects KEY=V1,V2[,...] with at least two values, got {compare!r}")
    if key in PROCESS_WIDE_KEYS:
        p.error(f"--compare cannot alternate {key}: it sets the whole process; compare separate processes")
    return [(v, [f"{key}={v}"]) for v in labels]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="synthetic-3")
    p.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--envs", type=int, default=256)
    p.add_argument("--vector", default="batch", choices=("batch", "dummy", "subproc"))
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: train.torch_threads, else torch's)")
    p.add_argument("--compare", default=None, metavar="KEY=V1,V2",
                   help="one run per value of an override, rounds alternated in this process (order rotated)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_intermixed_args(argv)
    if args.envs < 1 or args.iterations < 1:
        p.error("--envs and --iterations must be >= 1")
    variants = _variants(args.compare, p)

    from envs.config import ConfigError

    runs: list[_Run] = []
    try:
        for _, extra in variants:
            try:
                runs.append(_Run(args, list(args.overrides) + extra))
            except ConfigError as e:
                p.error(str(e))
        for it in range(args.iterations + 1):
            for v in round_order(len(runs), it):
                (label, _), run = variants[v], runs[v]
                steps, collect_s, update_s = run.round(timed=it > 0)  # round 0: warm-up (first calls, allocations)
                if it and not args.json:
                    name = f" [{label}]" if label else ""
                    print(f"iteration {it}{name}: {steps} steps, collect {collect_s:.2f} s, update {update_s:.2f} s",
                          flush=True)
        results = [run.result(args) for run in runs]
    finally:
        for run in runs:
            run.close()
    if args.compare is None:
        out = results[0]
    else:
        base = results[0]["env_steps_per_s"]
        out = {
            "compare": args.compare,
            "variants": {label: r for (label, _), r in zip(variants, results)},
            "ratios": {label: round(r["env_steps_per_s"] / base, 3) for (label, _), r in zip(variants, results)},
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
