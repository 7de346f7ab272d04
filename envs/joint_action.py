"""Apply one joint action of all agents to the simulator, never trusting it.

A joint action is an int array ``(N, 3)``: for agent (cluster) ``i`` the row
``[slot, allocation, lost]`` names pending slot ``slot`` of cluster ``i``, the joint
allocation index ``allocation = cpu * G1 + gpu`` (``G1 = per_task_max_gpu + 1``; index 0 is
*void*, schedule nothing) and the lost-conflict flag set by a policy that resolved a conflict
against this agent.

Rules, applied to the agents in index order ``0 .. N-1`` against the pending sets as they
were when the step began:

1. ``lost == 1``: the agent is void; counted as a *conflict*.
2. The slot index, allocation index or flag is outside its range (slot ``0..P-1``,
   allocation ``0..A-1``, flag ``0/1``): void, counted *invalid*.
3. ``allocation == 0``: the agent is void (a deliberate "schedule nothing"; not counted).
   An agent with no feasible slot is expected to send ``[0, 0, 0]``.
4. The slot was empty when the step began: void, counted *invalid*.
5. The slot's task was already placed this step by a lower-index agent: void, counted as a
   *conflict* (the lower index wins).
6. The allocation ``(cpu, gpu)`` is not within ``[task minimum, min(free, per_task_max)]``
   componentwise, or (``single`` mode) the cluster already placed a task in this real step:
   void, counted *invalid*.
7. Otherwise the task starts on cluster ``i`` at ``(cpu, gpu)`` and leaves every pending set.

A void agent leaves its task pending, so no task is ever lost. Conflicts and invalid
requests are also added to ``sim.conflicts`` / ``sim.invalid``.

*Void*, two counts with one definition each:

* ``StepReport.void`` (the env's ``info["void"]``): every agent that placed nothing in this
  joint action, whatever the reason (``N - placed``);
* ``sim.void`` (the episode counter): *deliberate* voids only -- rule 3 applied to an agent
  that had a feasible pending task when the step began (one whose minimum fits
  ``min(free, per_task_max)``, and in ``single`` mode a cluster that has not placed yet in
  this real step). An agent with nothing feasible that sends ``[0, 0, 0]`` is not counted.

The start floor (:mod:`envs.durations`, factor ``max_start_slowdown``) shapes only the
observation's ``feasible``; these rules do not read it: a start of a task the start floor held
back is valid here, and a void while only held-back tasks fit counts as deliberate.

:func:`decode_joint_action` applies these rules without touching the simulator; both the
Gymnasium env (:func:`apply_joint_action`) and the learned scheduler
(:mod:`agents.policy.scheduler`) use it, so the two paths give identical placements and counters.

Time: in ``single`` mode every joint action is followed by one real step
(``sim.advance()``); in ``multi`` mode real time advances only after a joint action that
placed nothing (:func:`needs_advance`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


class ActionShapeError(ValueError):
    """The joint action cannot be read as an ``(N, 3)`` integer array."""


@dataclass
class StepReport:
    """What one joint action did. ``void`` counts every agent that placed nothing."""

    placed: int = 0
    void: int = 0
    invalid: int = 0
    conflicts: int = 0
    placed_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def integer_array(action: Any) -> np.ndarray:
    """``action`` as an int64 array: integers and booleans as they are, floats only when every
    value is a finite whole number; anything else raises ``TypeError``."""
    arr = np.asarray(action)
    if arr.dtype.kind not in "iub":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)
        raise TypeError(f"dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _as_joint(action: Any, n: int) -> np.ndarray:
    try:
        arr = integer_array(action).reshape(n, 3)
    except (TypeError, ValueError) as exc:
        raise ActionShapeError(
            f"joint action must be an integer array of shape ({n}, 3) [slot, allocation, lost]: {exc}"
        ) from None
    return arr


@dataclass
class DecodedAction:
    """A joint action read against a simulator, nothing applied yet (:func:`decode_joint_action`).

    ``placements``: ``(cluster, task, cpu, gpu)`` in agent order, every one valid against the
    state as the step began; ``invalid``/``conflicts``: counts of rules 2, 4, 6 / 1, 5;
    ``deliberate_void``: agents counted into ``sim.void`` (module docstring);
    ``placed_mask``: ``(N,)`` agents that place a task.
    """

    placements: list[tuple[int, int, int, int]]
    invalid: int
    conflicts: int
    deliberate_void: int
    placed_mask: np.ndarray

    @property
    def placed(self) -> int:
        return len(self.placements)

    @property
    def void(self) -> int:
        """Agents that place nothing (``N - placed``)."""
        return int(self.placed_mask.size) - self.placed

    def add_counters(self, sim: Any) -> None:
        """Add this action's conflicts, invalid requests and deliberate voids to ``sim``'s counters."""
        sim.conflicts += self.conflicts
        sim.invalid += self.invalid
        sim.void += self.deliberate_void


def decode_joint_action(sim: Any, action: Any) -> DecodedAction:
    """Read a joint action ``(N, 3)`` under the module rules; ``sim`` is not modified.

    Never raises for any integer values; raises :class:`ActionShapeError` (a ``ValueError``)
    only when ``action`` is not ``N x 3`` integers.
    """
    n = sim.num_clusters
    act = _as_joint(action, n).tolist()
    # Python-int snapshots of the state as the step began (agent i only changes cluster i)
    pending = sim.pending.tolist()
    free = sim.free.tolist()
    min_req = sim.min_req.tolist()
    max_c, max_g = sim.max_alloc.tolist()
    task_type = sim.task_type
    P = len(pending[0])
    g1 = max_g + 1
    num_alloc = (max_c + 1) * g1
    blocked = sim.placed_this_step.tolist() if sim.single else [False] * n
    placed_mask = np.zeros(n, dtype=bool)
    placements: list[tuple[int, int, int, int]] = []
    placed_tasks: set[int] = set()
    invalid = conflicts = deliberate = 0
    for i in range(n):
        slot, a, lost = act[i]
        if lost == 1:
            conflicts += 1
            continue
        if not (0 <= slot < P and 0 <= a < num_alloc and lost == 0):
            invalid += 1
            continue
        hi_c, hi_g = min(free[i][0], max_c), min(free[i][1], max_g)
        if a == 0:
            if not blocked[i] and any(
                t >= 0 and min_req[task_type[t]][0] <= hi_c and min_req[task_type[t]][1] <= hi_g for t in pending[i]
            ):
                deliberate += 1
            continue
        task = pending[i][slot]
        if task < 0:
            invalid += 1
            continue
        if task in placed_tasks:
            conflicts += 1
            continue
        cpu, gpu = divmod(a, g1)
        lo_c, lo_g = min_req[task_type[task]]
        if cpu < lo_c or gpu < lo_g or cpu > hi_c or gpu > hi_g or blocked[i]:
            invalid += 1
            continue
        # every condition of Simulator.can_place holds: the task was in this cluster's pending
        # set when the step began, is not placed by a lower-index agent, and fits (checked above)
        placed_mask[i] = True
        placed_tasks.add(task)
        placements.append((i, int(task), int(cpu), int(gpu)))
    return DecodedAction(placements, invalid, conflicts, deliberate, placed_mask)


def apply_joint_action(sim: Any, action: Any) -> StepReport:
    """Apply the joint action's placements to ``sim`` (no time advance); see the module rules.

    Decodes with :func:`decode_joint_action`, commits the placements and adds the counters to
    ``sim`` (``sim.conflicts``, ``sim.invalid``, ``sim.void``). Never raises for any integer
    values; raises :class:`ActionShapeError` (a ``ValueError``) only when ``action`` is not
    ``N x 3`` integers.
    """
    decoded = decode_joint_action(sim, action)
    for i, task, cpu, gpu in decoded.placements:
        sim.commit_placement(i, task, cpu, gpu)
    decoded.add_counters(sim)
    return StepReport(placed=decoded.placed, void=decoded.void, invalid=decoded.invalid,
                      conflicts=decoded.conflicts, placed_mask=decoded.placed_mask)


def needs_advance(sim: Any, report: StepReport) -> bool:
    """Whether real time advances after this joint action (single: always; multi: nothing placed)."""
    return bool(sim.single or report.placed == 0)


def allocation_in_bounds(cpu: Any, gpu: Any, low: Any, high: Any) -> Any:
    """Rule 6's bounds: ``low <= (cpu, gpu) <= high`` componentwise (``low``/``high``: ``(..., 2)``).

    Operators only, so one rule serves numpy arrays (:func:`allocation_mask`) and torch tensors
    (the policy's allocation head, :func:`networks.heads.allocation_mask`) alike.
    """
    return (cpu >= low[..., 0]) & (cpu <= high[..., 0]) & (gpu >= low[..., 1]) & (gpu <= high[..., 1])


def allocation_mask(low: np.ndarray, high: np.ndarray, alloc_dims: tuple[int, int]) -> np.ndarray:
    """Allocation indices an agent may send for a task: void (0) or within rule 6's bounds.

    ``low``: ``(..., 2)`` task minimums (``pending_min``), ``high``: ``(..., 2)`` the cluster's
    ``alloc_high`` (broadcast against ``low``); returns bool ``(..., A)``, ``A = C1 * G1``.
    """
    c1, g1 = alloc_dims
    a = np.arange(c1 * g1)
    lo, hi = np.asarray(low)[..., None, :], np.asarray(high)[..., None, :]
    return allocation_in_bounds(a // g1, a % g1, lo, hi) | (a == 0)


def claim_task(feasible: np.ndarray, pending_where: np.ndarray, agent: int, slot: int) -> None:
    """Mark the task in ``agent``'s ``slot`` as taken for every agent (rule 5: a task started by
    one agent is a conflict for the others), in place on a ``feasible (N, P)`` copy."""
    where = pending_where[agent, slot]
    js = np.flatnonzero(where >= 0)
    feasible[js, where[js]] = False


def choice_mask(obs: dict[str, np.ndarray], agent: int, alloc_dims: tuple[int, int],
                feasible: np.ndarray | None = None) -> np.ndarray:
    """``(P, A)`` bool: the ``(slot, allocation)`` pairs ``agent`` is offered, as the learned policy
    masks them: a ``feasible`` slot (the observation's, or a copy after :func:`claim_task` calls)
    with an allocation of :func:`allocation_mask` (void included)."""
    feas = (obs["feasible"] if feasible is None else feasible)[agent].astype(bool)
    allowed = allocation_mask(obs["pending_min"][agent], obs["alloc_high"][agent], alloc_dims)
    return allowed & feas[:, None]


def random_valid_action(obs: dict[str, np.ndarray], gpu_axis: int, rng: np.random.Generator) -> np.ndarray:
    """A random joint action that only makes valid choices (for benchmarks and tests).

    Each agent with a feasible slot picks one uniformly, skipping tasks a lower-index agent
    already took in this action (:func:`claim_task`), and a uniform allocation in
    ``[pending_min, alloc_high]``; an agent with nothing left sends ``[0, 0, 0]``.
    ``gpu_axis`` is ``G1`` (``spec.alloc_dims[1]``).
    """
    feasible = obs["feasible"].astype(bool)
    n = feasible.shape[0]
    action = np.zeros((n, 3), dtype=np.int64)
    if not feasible.any():
        return action
    where, lo_all, hi_all = obs["pending_where"], obs["pending_min"], obs["alloc_high"]
    for i in np.flatnonzero(feasible.any(axis=1)).tolist():
        slots = np.flatnonzero(feasible[i])
        if slots.size == 0:
            continue
        p = int(slots[rng.integers(slots.size)])
        lo, hi = lo_all[i, p], hi_all[i]
        c = int(rng.integers(lo[0], hi[0] + 1))
        g = int(rng.integers(lo[1], hi[1] + 1))
        action[i] = (p, c * gpu_axis + g, 0)
        claim_task(feasible, where, i, p)
    return action
