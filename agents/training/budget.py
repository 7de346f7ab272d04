"""The size of a run's plan, checked before anything is built: env steps and memory.

* **Steps.** A collection runs at least one step per env, so ``--envs`` above
  ``train.collect_steps`` is refused. ``--steps`` is rounded up to whole evaluation intervals of whole collection batches
  (:meth:`~agents.training.config.TrainConfig.planned_env_steps`); a plan more than
  :data:`PLAN_FACTOR` times ``--steps`` (and more than :data:`PLAN_SLACK` steps over it) is refused:
  it is almost always ``--envs`` far too large for the default collection size (128 x envs).
* **Memory.** The collection buffer holds every observation of a collection batch twice (the
  observation and the next one), each training env its simulator and current observation, and the
  network passes their activations; :func:`estimate_bytes` adds them up from the scenario's
  observation shapes and the policy's width. A plan whose estimate
  exceeds :data:`MEMORY_FRACTION` of the memory the machine has available is refused, naming the limit.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np

from envs.config import ConfigError
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


def observation_bytes(spec: ObservationSpec) -> int:
    """Bytes of one observation (every key of the contract)."""
    return int(sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in spec.shapes().values()))


def estimate_bytes(spec: RunSpec) -> int:
    """Memory a run's collection buffer, training envs and network passes take: every env's
    simulator and observation, the buffer's two observations per collected step, the acting
    pass over all envs at once and one minibatch's update pass."""
    t = spec.train
    ospec = ObservationSpec.from_config(spec.scenario)
    obs = observation_bytes(ospec)
    batch = t.collection_batch()
    if batch is None:  # episode mode: whole episodes per env
        batch = t.buffer_per_env * t.envs if t.buffer_per_env else t.envs * (4 * spec.scenario.num_tasks + 256)
    envs = t.envs * (obs + SIM_BYTES_PER_TASK * spec.scenario.num_tasks)
    node_units = ospec.N * (ospec.P + ospec.M + 2) * spec.policy.hidden
    passes = node_units * (t.envs * ACT_BYTES_PER_NODE_UNIT + t.batch_size * UPDATE_BYTES_PER_NODE_UNIT)
    return int(batch * 2 * obs + envs + passes)


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


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_plan(spec: RunSpec, available: int | None = None) -> None:
    """ConfigError for a plan far beyond ``--steps`` or beyond the machine's memory (module docstring)."""
    t = spec.train
    asked = t.resolved_collect_steps()
    if asked is not None and t.envs > asked:
        raise ConfigError(
            f"--envs {t.envs:,} is more than train.collect_steps ({asked:,}): every collection would run {t.envs:,} "
            "env steps, not the steps asked; lower --envs or raise train.collect_steps")
    done = spec.done_env_steps
    planned = t.planned_env_steps(done)
    asked = max(1, t.steps - done)
    if planned is not None and planned - done > max(PLAN_FACTOR * asked, asked + PLAN_SLACK):
        raise ConfigError(
            f"the plan is {planned - done:,} env steps for --steps {t.steps:,} (collections of {t.collection_batch():,} "
            f"env steps = train.collect_steps rounded to {t.envs:,} envs): more than {PLAN_FACTOR}x what was asked; "
            "lower --envs or set train.collect_steps")
    need = estimate_bytes(spec)
    have = available_memory() if available is None else available
    if have is not None and need > MEMORY_FRACTION * have:
        raise ConfigError(
            f"the run would need about {_gib(need)} of memory ({t.envs:,} envs, collections of "
            f"{t.collection_batch() or 'whole-episode'} env steps), above the limit of {_gib(MEMORY_FRACTION * have)} "
            f"({MEMORY_FRACTION:.0%} of the {_gib(have)} available); lower --envs or train.collect_steps")
