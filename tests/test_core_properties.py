"""Property-based tests of the simulator core over random scenarios and random (also invalid) actions.

Each example draws a small scenario (clusters with heterogeneous capacities, per-task max,
task types with minimum requirements, arrival rate, mode, switching overhead, connectivity
model, noise) and a random action phase in which requests are often invalid: wrong cluster,
a task that is not pending, allocations that are too small or too big, a second placement in
single mode, re-allocations over capacity, pauses. After every action and every real step the
bookkeeping invariants are checked; then a valid policy runs the episode to completion.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.config import ScenarioConfig
from envs.core import DONE, NOT_ARRIVED, RUNNING, WAITING, Simulator
from envs.scheduling import Decision, apply_decision, run_episode

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ strategies
@st.composite
def scenarios(draw, noise: bool | None = None) -> ScenarioConfig:
    """A small random scenario that passes validation by construction."""
    n = draw(st.integers(1, 4))
    caps = [[draw(st.integers(1, 8)), draw(st.integers(1, 8))] for _ in range(n)]
    ptm = [draw(st.integers(1, 8)), draw(st.integers(1, 8))]
    k = draw(st.integers(1, 3))
    weights = [draw(st.integers(0, 3)) for _ in range(k)]
    if sum(weights) == 0:
        weights[0] = 1
    types = []
    for j in range(k):
        host = draw(st.integers(0, n - 1))  # this cluster can host the type
        hc, hg = min(caps[host][0], ptm[0]), min(caps[host][1], ptm[1])
        kind = draw(st.sampled_from(["constant", "tanh"]))
        # tanh gains nothing at 0 GPUs: give such types at least one GPU (see test_config)
        mc, mg = draw(st.integers(0, hc)), draw(st.integers(1 if kind == "tanh" else 0, hg))
        if (mc, mg) == (0, 0):
            mg = 1
        progress = (
            {"kind": "constant", "steps": draw(st.integers(1, 5))}
            if kind == "constant"
            else {"kind": "tanh", "scale": draw(st.sampled_from([4.0, 8.0, 16.0])), "offset": 1.2}
        )
        types.append({"name": f"t{j}", "prob": weights[j] / sum(weights), "min_req": [mc, mg], "progress": progress})
    lo = draw(st.floats(0.0, 10.0))
    conn = {
        "model": draw(st.sampled_from(["bandwidth", "random_subset"])),
        "bandwidth_range": [lo, lo + draw(st.floats(0.0, 10.0))],
        "threshold": draw(st.floats(0.0, 15.0)),
    }
    use_noise = draw(st.booleans()) if noise is None else noise
    raw = {
        "name": "prop",
        "mode": draw(st.sampled_from(["single", "multi"])),
        "num_clusters": n,
        "capacities": caps,
        "per_task_max": ptm,
        "arrival_rate": draw(st.floats(0.2, 4.0)),
        "num_tasks": draw(st.integers(1, 16)),
        "task_types": types,
        "switch_overhead": draw(st.sampled_from([1.0, 0.5, 0.0, 0.8])),
        "pending_slots": draw(st.integers(1, 4)),
        "connectivity": conn,
        "progress_noise": 0.3 if use_noise else 0.0,
        "max_steps": 100_000,
    }
    return ScenarioConfig.from_dict(raw)


# ------------------------------------------------------------------ invariants
def check_invariants(sim: Simulator, refilled: bool) -> None:
    """Bookkeeping that must hold after any action; ``refilled``: right after reset/advance."""
    N, T = sim.num_clusters, sim.workload.num_tasks
    cap = sim.capacity
    # capacity: free >= 0 and free + allocations of the cluster's running tasks = capacity
    assert np.all(sim.free >= 0), sim.free
    for i in range(N):
        run = sim.running_tasks(i)
        assert len(set(run.tolist())) == run.size
        assert np.array_equal(sim.free[i] + sim.alloc[run].sum(axis=0), cap[i]), i
        assert np.all(sim.alloc[run] >= 0) and np.all(sim.alloc[run] <= sim.max_alloc)
    # arrivals: exactly the tasks with arrival <= t have arrived
    assert sim.next_arrival == int((sim.arrival <= sim.t).sum())
    arrived = np.arange(T) < sim.next_arrival
    assert np.all(sim.status[~arrived] == NOT_ARRIVED)
    assert np.all(sim.status[arrived] != NOT_ARRIVED)
    assert sim.num_finished == int((sim.status == DONE).sum())
    assert sim.num_alive == int(np.isin(sim.status, (WAITING, RUNNING)).sum())
    # every task is in exactly one place
    running_anywhere = np.concatenate([sim.running_tasks(i) for i in range(N)])
    assert len(set(running_anywhere.tolist())) == running_anywhere.size  # never on two clusters
    assert set(running_anywhere.tolist()) == set(np.flatnonzero(sim.status == RUNNING).tolist())
    for task in range(T):
        in_waiting = [i for i in range(N) if task in sim.waiting[i]]
        if sim.status[task] == WAITING:
            assert in_waiting == np.flatnonzero(sim.eligible[task]).tolist(), task
        else:
            assert in_waiting == [], task
        if sim.status[task] == RUNNING:
            c = sim.cluster[task]
            assert sim.eligible[task, c] and task in sim.running_tasks(c).tolist()
            assert sim.start[task] >= sim.arrival[task]
        if sim.status[task] == DONE:
            assert sim.finish[task] > sim.start[task] >= sim.arrival[task]
        else:
            assert sim.finish[task] == -1
    # FIFO: waiting lists in arrival order; the pending set is a prefix of the waiting list
    P = sim.pending.shape[1]
    for i in range(N):
        w = sim.waiting[i]
        assert w == sorted(w) and len(set(w)) == len(w)
        shown = sim.pending_tasks(i).tolist()
        assert shown == w[: len(shown)], (i, shown, w)
        if refilled:
            assert len(shown) == min(P, len(w))
        assert sim.queue_length(i) == len(w) - len(shown) >= 0


# ------------------------------------------------------------------ random actions
def random_alloc(rng: np.random.Generator, sim: Simulator, cluster: int, task: int) -> tuple[int, int]:
    """A (cpu, gpu) request that is valid or invalid in one of several ways."""
    T = sim.workload.num_tasks
    lo = sim.min_req[sim.task_type[task]] if 0 <= task < T else np.array([1, 1])
    hi = sim.alloc_upper(cluster) if 0 <= cluster < sim.num_clusters else sim.max_alloc
    kind = rng.integers(5)
    if kind == 0:
        return int(lo[0]), int(lo[1])
    if kind == 1 and np.all(lo <= hi):
        return int(rng.integers(lo[0], hi[0] + 1)), int(rng.integers(lo[1], hi[1] + 1))
    if kind == 2:  # too big on one axis
        big = hi + 1
        return (int(big[0]), int(lo[1])) if rng.random() < 0.5 else (int(lo[0]), int(big[1]))
    if kind == 3:  # too small on one axis
        return (int(lo[0]) - 1, int(lo[1])) if rng.random() < 0.5 else (int(lo[0]), int(lo[1]) - 1)
    return int(rng.integers(-1, sim.max_alloc[0] + 3)), int(rng.integers(-1, sim.max_alloc[1] + 3))


def random_task(rng: np.random.Generator, sim: Simulator, cluster: int) -> int:
    T = sim.workload.num_tasks
    kind = rng.integers(4)
    if kind <= 1 and 0 <= cluster < sim.num_clusters and sim.pending_tasks(cluster).size:
        return int(rng.choice(sim.pending_tasks(cluster)))
    if kind == 2:  # any waiting task, pending here or not
        waiting = np.flatnonzero(sim.status == WAITING)
        if waiting.size:
            return int(rng.choice(waiting))
    return int(rng.integers(-1, T + 1))  # anything, including running, done, unknown ids


def random_decision(rng: np.random.Generator, sim: Simulator) -> Decision:
    N = sim.num_clusters
    d = Decision()
    for _ in range(rng.integers(0, 4)):
        cluster = int(rng.integers(-1, N + 1)) if rng.random() < 0.2 else int(rng.integers(N))
        task = random_task(rng, sim, cluster)
        d.placements.append((cluster, task, *random_alloc(rng, sim, cluster, task)))
    for _ in range(rng.integers(0, 3)):
        cluster = int(rng.integers(-1, N + 1)) if rng.random() < 0.2 else int(rng.integers(N))
        running = np.flatnonzero(sim.status == RUNNING)
        if rng.random() < 0.7 and 0 <= cluster < N:
            running = sim.running_tasks(cluster)
        if running.size == 0:
            continue
        chosen = rng.choice(running, size=rng.integers(1, running.size + 1), replace=False)
        allocs = {}
        for t in chosen.tolist():
            r = rng.random()
            if r < 0.3:
                allocs[t] = (0, 0)  # pause
            elif r < 0.5:
                allocs[t] = tuple(int(x) for x in sim.alloc[t])
            else:
                allocs[t] = (int(rng.integers(0, sim.max_alloc[0] + 2)), int(rng.integers(0, sim.max_alloc[1] + 2)))
        d.allocations[cluster] = allocs
    return d


def expected_place_ok(sim: Simulator, placed_here: set[int], cluster, task, cpu, gpu) -> bool:
    """An independent statement of when a placement must be accepted."""
    N, T = sim.num_clusters, sim.workload.num_tasks
    if not (0 <= cluster < N and 0 <= task < T):
        return False
    if task not in sim.pending_tasks(cluster).tolist():
        return False
    if sim.cfg.mode == "single" and cluster in placed_here:
        return False
    lo = sim.min_req[sim.task_type[task]]
    hi = np.minimum(sim.free[cluster], sim.max_alloc)
    return bool(lo[0] <= cpu <= hi[0] and lo[1] <= gpu <= hi[1])


def expected_realloc_ok(sim: Simulator, cluster, allocs) -> bool:
    ids = list(allocs)
    if not all(0 <= t < sim.workload.num_tasks for t in ids):
        return False
    if not all(sim.status[t] == RUNNING and sim.cluster[t] == cluster for t in ids):
        return False
    new = np.array([allocs[t] for t in ids]).reshape(-1, 2)
    if np.any(new < 0) or np.any(new > sim.max_alloc):
        return False
    return bool(np.all(sim.free[cluster] + sim.alloc[ids].sum(axis=0) - new.sum(axis=0) >= 0))


def snapshot(sim: Simulator):
    return (sim.free.copy(), sim.alloc.copy(), sim.status.copy(), sim.pending.copy(),
            [list(w) for w in sim.waiting], sim.run_slots.copy())


def same_state(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4])) and a[4] == b[4] and np.array_equal(a[5], b[5])


def random_round(rng: np.random.Generator, sim: Simulator, placed_here: set[int]) -> None:
    """One round of random requests, checked one by one against the independent oracle."""
    d = random_decision(rng, sim)
    if rng.random() < 0.5:  # through the scheduler path
        before = int((sim.status == RUNNING).sum())
        placed = apply_decision(sim, d)
        assert int((sim.status == RUNNING).sum()) == before + placed
        placed_here.update(int(sim.cluster[t]) for t in np.flatnonzero(sim.start == sim.t))
        check_invariants(sim, refilled=False)
        return
    for cluster, allocs in d.allocations.items():
        ok = expected_realloc_ok(sim, cluster, allocs)
        before = snapshot(sim)
        assert sim.set_allocations(cluster, allocs) == ok, (cluster, allocs, sim.last_error)
        if not ok:
            assert same_state(before, snapshot(sim))
        check_invariants(sim, refilled=False)
    for cluster, task, cpu, gpu in d.placements:
        ok = expected_place_ok(sim, placed_here, cluster, task, cpu, gpu)
        before = snapshot(sim)
        invalid = sim.invalid
        assert sim.place(cluster, task, cpu, gpu) == ok, (cluster, task, cpu, gpu, sim.last_error)
        if ok:
            placed_here.add(cluster)
            assert sim.status[task] == RUNNING and sim.cluster[task] == cluster
            assert sim.alloc[task].tolist() == [cpu, gpu]
        else:
            assert sim.invalid == invalid + 1 and same_state(before, snapshot(sim))
        check_invariants(sim, refilled=False)


# ------------------------------------------------------------------ a valid policy
def valid_round(sim: Simulator) -> int:
    """Resume tasks below their minimum where room allows, then place fitting tasks at minimum."""
    for i in range(sim.num_clusters):
        run = sim.running_tasks(i)
        below = [int(t) for t in run if np.any(sim.alloc[t] < sim.min_req[sim.task_type[t]])]
        if below:
            assert sim.set_allocations(i, {t: (0, 0) for t in below})  # shrinking always fits
            for t in below:
                need = sim.min_req[sim.task_type[t]]
                if np.all(need <= sim.free[i]):
                    assert sim.set_allocations(i, {t: (int(need[0]), int(need[1]))})
    placed = 0
    for i in range(sim.num_clusters):
        for task in sim.pending_tasks(i).tolist():
            if sim.single and sim.placed_this_step[i]:
                break
            lo = sim.min_req[sim.task_type[task]]
            if np.all(lo <= sim.alloc_upper(i)):
                assert sim.place(i, task, int(lo[0]), int(lo[1])), sim.last_error
                placed += 1
    return placed


def advance_checked(sim: Simulator, done_before: np.ndarray) -> np.ndarray:
    """Advance one real step and check completions (each task completes exactly once)."""
    finish_before = sim.finish.copy()
    alive = sim.num_alive
    reward = sim.advance()
    assert reward == -alive
    done_now = sim.status == DONE
    assert np.all(done_now[done_before])  # DONE is final
    new = done_now & ~done_before
    assert np.all(sim.finish[new] == sim.t)
    assert np.array_equal(sim.finish[done_before], finish_before[done_before])
    check_invariants(sim, refilled=True)
    return done_now


def run_random_then_valid(cfg: ScenarioConfig, seed: int, action_seed: int, random_steps: int) -> Simulator:
    sim = Simulator(cfg, seed)
    rng = np.random.default_rng(action_seed)
    check_invariants(sim, refilled=True)
    done = sim.status == DONE
    for _ in range(random_steps):
        placed_here: set[int] = set()
        for _ in range(rng.integers(1, 4)):
            random_round(rng, sim, placed_here)
        done = advance_checked(sim, done)
    limit = sim.t + 5000
    while not sim.done:
        assert sim.t < limit, "the valid policy did not finish the episode"
        while valid_round(sim) and not sim.single:
            pass
        check_invariants(sim, refilled=False)
        done = advance_checked(sim, done)
    return sim


# ------------------------------------------------------------------ properties
@SETTINGS
@given(cfg=scenarios(), seed=st.integers(0, 2**16), action_seed=st.integers(0, 2**32 - 1),
       random_steps=st.integers(0, 12))
def test_random_actions_keep_the_books_and_every_task_completes_once(cfg, seed, action_seed, random_steps):
    sim = run_random_then_valid(cfg, seed, action_seed, random_steps)
    T = sim.workload.num_tasks
    assert sim.done and not sim.truncated
    assert np.all(sim.status == DONE) and sim.num_finished == T
    assert np.array_equal(sim.free, sim.capacity)
    rec = sim.records()
    assert rec["task_id"].size == T
    assert np.array_equal(rec["jct"], rec["finish"] - rec["arrival"])
    assert np.all(rec["jct"] >= 1) and np.all(rec["start"] >= rec["arrival"])
    assert np.all(sim.eligible[np.arange(T), rec["cluster"]])
    # reward: sum over the episode of tasks alive = total completion time
    assert sum(sim.tasks_in_system) == int(rec["jct"].sum())
    usage = sim.usage_series()
    assert usage.shape == (sim.t, sim.num_clusters, 2)
    assert np.all(usage >= 0) and np.all(usage <= sim.capacity[None])
    if cfg.progress_noise == 0:
        # never faster than the fastest possible run on the cluster it ran on
        fastest = sim.fastest[rec["type"], rec["cluster"]]
        assert np.all(fastest >= 1)
        assert np.all(rec["jct"] >= fastest), (rec["jct"], fastest)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=scenarios(noise=True), seed=st.integers(0, 2**16), action_seed=st.integers(0, 2**32 - 1),
       random_steps=st.integers(0, 8))
def test_same_seed_same_trajectory_with_noise(cfg, seed, action_seed, random_steps):
    a = run_random_then_valid(cfg, seed, action_seed, random_steps)
    b = run_random_then_valid(cfg, seed, action_seed, random_steps)
    ra, rb = a.records(), b.records()
    assert ra.keys() == rb.keys()
    for key in ra:
        assert np.array_equal(ra[key], rb[key]), key
    assert a.tasks_in_system == b.tasks_in_system
    assert np.array_equal(a.usage_series(), b.usage_series())
    assert np.array_equal(a.progress, b.progress)
    assert (a.invalid, a.conflicts) == (b.invalid, b.conflicts)


@settings(max_examples=40, deadline=None)
@given(cfg=scenarios(noise=False), seed=st.integers(0, 2**16), noise=st.floats(0.01, 2.0))
def test_noise_does_not_change_the_workload(cfg, seed, noise):
    noisy = ScenarioConfig.from_dict({**cfg.to_dict(), "progress_noise": noise})
    a, b = Simulator(cfg, seed), Simulator(noisy, seed)
    assert np.array_equal(a.arrival, b.arrival)
    assert np.array_equal(a.task_type, b.task_type)
    assert np.array_equal(a.eligible, b.eligible)
    # reset with the same seed reproduces the workload too
    a.reset(seed)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.eligible, b.eligible)


@settings(max_examples=60, deadline=None)
@given(cfg=scenarios(), seed=st.integers(0, 2**16), name=st.sampled_from(["min", "random"]),
       faithful=st.booleans())
def test_baselines_are_deterministic_and_finish(cfg, seed, name, faithful):
    from agents.baselines import make_scheduler

    a = run_episode(cfg, make_scheduler(name, faithful=faithful), seed)
    b = run_episode(cfg, make_scheduler(name, faithful=faithful), seed)
    assert not a.truncated and a.jct.size == cfg.num_tasks
    for key in a.records:
        assert np.array_equal(a.records[key], b.records[key]), key
    assert np.array_equal(a.tasks_in_system, b.tasks_in_system) and np.array_equal(a.usage, b.usage)
    assert int(a.tasks_in_system.sum()) == int(a.jct.sum())
    assert np.all(a.usage <= a.capacity[None])
