"""The size of a run's plan, checked before anything is built: env steps and memory.

* **Steps.** A collection runs at least one step per env, so ``--envs`` above
  ``train.collect_steps`` is refused. ``--steps`` is rounded up to whole evaluation intervals of whole collection batches
  (:meth:`~agents.training.config.TrainConfig.planned_env_steps`); a plan more than
  :data:`PLAN_FACTOR` times ``--steps`` (and more than :data:`PLAN_SLACK` steps over it) is refused:
  it is almost always ``--envs`` far too large for the default collection size (128 x envs).
* **Memory.** The collection buffer holds every observation of a collection batch twice (the
  observation and the next one), each training env its simulator and current observation, and the
  network passes their activations; every training and evaluation env also holds tables over the
  allocation grid (``A = (per_task_max_cpu + 1) x (per_task_max_gpu + 1)`` cells: progress,
  durations, the start gate), every network pass one allocation logit per cluster, pending slot and
  grid cell, and the allocation head one output per grid axis value (per cell for the joint form).
  :func:`estimate_parts` adds them up from the scenario's observation shapes, its clusters, pending
  and running slots, task types and tasks, and the policy's width. A plan whose estimate exceeds
  :data:`MEMORY_FRACTION` of the memory the machine has available is refused, naming the limit and
  the largest part.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np

from envs.config import ConfigError, ScenarioConfig
from envs.observation import ObservationSpec

if TYPE_CHECKING:
    from .run_spec import RunSpec

#: a plan may exceed ``--steps`` by this factor (the rounding to whole batches and intervals)...
PLAN_FACTOR = 2
#: ... or by this many env steps, whichever allows more
PLAN_SLACK = 65_536
#: the share of the machine's available memory a run may plan to use
MEMORY_FRACTION = 0.8
#: simulator state per task of an episode, per training env (bytes; arrays of a few int64 fields)
SIM_BYTES_PER_TASK = 256
#: activation memory per graph node per hidden unit of one sample: of an acting pass (no
#: gradients; 11-16 bytes measured at N = 3 and 6, hidden 64 and 128) and of an update pass
#: (activations kept for the backward: a few times more)
ACT_BYTES_PER_NODE_UNIT = 16
UPDATE_BYTES_PER_NODE_UNIT = 64
#: simulator tables over the allocation grid, per task type and grid cell, in every training and
#: evaluation env: the progress table (two to four float64 arrays), the runnable mask, the duration
#: table's steps (int64) and finishing times (float64)
GRID_BYTES_PER_TYPE_CELL = 48
#: the start gate, per cluster, task type (and the empty slot) and grid cell (bool)
GATE_BYTES_PER_CELL = 1
#: per allocation logit of one sample (cluster x pending slot x grid cell): of an acting pass
#: (logits, mask, noise, probabilities: float32) and of an update pass (kept for the backward too)
ACT_BYTES_PER_LOGIT = 16
UPDATE_BYTES_PER_LOGIT = 48
#: per parameter: float32 weight, gradient and Adam's two moments
PARAM_BYTES = 16


def observation_bytes(spec: ObservationSpec) -> int:
    """Bytes of one observation (every key of the contract)."""
    return int(sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in spec.shapes().values()))


def estimate_bytes(spec: RunSpec) -> int:
    """Memory a run takes, all parts of :func:`estimate_parts` together."""
    return sum(estimate_parts(spec).values())


def estimate_parts(spec: RunSpec) -> dict[str, int]:
    """Memory of each part of a run (bytes): the collection buffer (two observations per collected
    step), the envs (each training and evaluation env's simulator, observation and tables over the
    allocation grid), the network passes (graph activations and allocation logits of the acting
    pass over all envs, of the largest no-gradient chunk and of one minibatch's update) and the
    allocation head's parameters with their gradients and Adam moments."""
    from .envs import evaluation_scenario

    t, scenario = spec.train, spec.scenario
    ospec = ObservationSpec.from_config(scenario)
    obs = observation_bytes(ospec)
    batch = t.collection_batch()
    evaluation = evaluation_scenario(scenario, t)
    sims = t.envs * sim_bytes(scenario, obs) + t.eval_episodes * sim_bytes(evaluation, obs)
    acting = max(t.envs, t.eval_episodes, t.max_batchsize)  # rows of a pass without gradients
    node_units = ospec.N * (ospec.P + ospec.M + 2) * spec.policy.hidden
    logits = ospec.N * ospec.P * max(scenario.num_allocations, evaluation.num_allocations)
    passes = (node_units * (acting * ACT_BYTES_PER_NODE_UNIT + t.batch_size * UPDATE_BYTES_PER_NODE_UNIT)
              + logits * (acting * ACT_BYTES_PER_LOGIT + t.batch_size * UPDATE_BYTES_PER_LOGIT))
    c1, g1 = scenario.alloc_dims
    outputs = c1 * g1 if spec.policy.alloc_head == "joint" else c1 + g1 + 1
    actors = 1 if spec.policy.shared_actors else ospec.N
    head = actors * spec.policy.hidden * outputs * PARAM_BYTES
    return {"collection buffer": int(batch * 2 * obs), "envs": int(sims), "network passes": int(passes),
            "allocation head": int(head)}


def sim_bytes(scenario: ScenarioConfig, obs: int) -> int:
    """One env: its observation, per-task simulator state and tables over the allocation grid."""
    K, N = scenario.num_types, scenario.num_clusters
    grid = scenario.num_allocations * (K * GRID_BYTES_PER_TYPE_CELL + N * (K + 1) * GATE_BYTES_PER_CELL)
    return obs + SIM_BYTES_PER_TASK * scenario.num_tasks + grid


def available_memory() -> int | None:
    """Bytes of memory available to a new process (``MemAvailable`` of /proc/meminfo, else physical
    memory; None where neither can be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_plan(spec: RunSpec, available: int | None = None) -> None:
    """ConfigError for a plan far beyond ``--steps`` or beyond the machine's memory (module docstring)."""
    t = spec.train
    asked = t.resolved_collect_steps()
    if t.envs > asked:
        raise ConfigError(
            f"--envs {t.envs:,} is more than train.collect_steps ({asked:,}): every collection would run {t.envs:,} "
            "env steps, not the steps asked; lower --envs or raise train.collect_steps")
    done = spec.done_env_steps
    planned = t.planned_env_steps(done)
    asked = max(1, t.steps - done)
    if planned - done > max(PLAN_FACTOR * asked, asked + PLAN_SLACK):
        raise ConfigError(
            f"the plan is {planned - done:,} env steps for --steps {t.steps:,} (collections of {t.collection_batch():,} "
            f"env steps = train.collect_steps rounded to {t.envs:,} envs): more than {PLAN_FACTOR}x what was asked; "
            "lower --envs or set train.collect_steps")
    parts = estimate_parts(spec)
    need = sum(parts.values())
    have = available_memory() if available is None else available
    if have is not None and need > MEMORY_FRACTION * have:
        largest = max(parts, key=parts.get)
        c1, g1 = spec.scenario.alloc_dims
        raise ConfigError(
            f"the run would need about {gib(need)} of memory ({t.envs:,} envs, collections of "
            f"{t.collection_batch()} env steps, an allocation grid of {c1:,} x {g1:,}; "
            f"largest part: {largest}, {gib(parts[largest])}), above the limit of {gib(MEMORY_FRACTION * have)} "
            f"({MEMORY_FRACTION:.0%} of the {gib(have)} available); {_ADVICE[largest]}")


#: what lowers each part of :func:`estimate_parts`
_ADVICE = {
    "collection buffer": "lower --envs or train.collect_steps",
    "envs": "lower --envs, train.eval_episodes, per_task_max (the allocation grid) or num_tasks",
    "network passes": "lower per_task_max (the allocation grid), pending_slots, train.batch_size or "
                      "train.max_batchsize",
    "allocation head": "lower per_task_max (the allocation grid) or policy.hidden",
}
