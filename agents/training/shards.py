"""Data-parallel CPU threads for the policy's network passes (``train.shards``).

On a CPU, torch parallelises each operator over its intra-op threads, but the policy's passes
are thousands of small operators (per relation, per node type, gathers and scatters) that run
on one thread or pay a fork/join each. Splitting a batch into contiguous row shards that run in
parallel Python threads, each with one intra-op thread, keeps both cores of a small machine
busier: torch releases the GIL inside its operators, and the samples of a batch are independent,
so the shards compute the rows the whole batch would (to float round-off).

The PPO update runs the forward and backward pass of each minibatch's shards, the gradients
summing into the parameters' ``.grad``, and the old-statistics pass of ``old_stats="recompute"``
on shards too (:class:`agents.training.tianshou_glue.algorithm.MultiAgentPPO`). Acting is not sharded: a collection
pass, with no backward, is bound by Python work under the GIL, so shards gain nothing over the
intra-op threads there. Autocast and grad modes are thread-local: the function a shard runs
enters its own.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")

#: the fewest rows a shard gets (smaller batches run in fewer shards, down to one)
MIN_SHARD_ROWS = 16

_POOLS: dict[int, ThreadPoolExecutor] = {}


def shard_ranges(rows: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` row ranges of near-equal size covering ``range(rows)``: at
    most ``shards`` of them and none under :data:`MIN_SHARD_ROWS` rows (at least one range)."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    n = max(1, min(shards, rows // MIN_SHARD_ROWS))
    bounds = [rows * i // n for i in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _pool(workers: int) -> ThreadPoolExecutor:
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="tapfinger-shard")
    return _POOLS[workers]


def run_sharded(fn: Callable[[int, int], T], rows: int, shards: int) -> list[T]:
    """``[fn(start, stop) for each range of shard_ranges(rows, shards)]``, the first range on the
    calling thread and the others on worker threads at the same time, every one of them with one
    torch intra-op thread (the caller's count is restored after). Every shard finishes before
    the first error (if any) is raised."""
    ranges = shard_ranges(rows, shards)
    if len(ranges) == 1:
        return [fn(0, rows)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # before the workers start: a new thread takes the count set last
    try:
        futures = [_pool(len(ranges) - 1).submit(fn, lo, hi) for lo, hi in ranges[1:]]
        try:
            first = fn(*ranges[0])
        finally:
            rest = [f.exception() for f in futures]  # waits for every worker
    finally:
        torch.set_num_threads(threads)
    for err in rest:
        if err is not None:
            raise err
    return [first] + [f.result() for f in futures]
