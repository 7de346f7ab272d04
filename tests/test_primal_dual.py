"""Primal-dual schedulers (pd-maxweight, pd-maxsche): prices, min-cost search, hand-computed runs.

The hand-computed scenarios use one cluster of (4 CPU, 4 GPU), tasks with minimum (1, 1) and
an injected workload (all tasks arrive at step 0), with the price base fixed by ``base=`` so
the expected admissions follow from the formulas on paper:
cost = (1 / V_ref) * sum over slots of (c / 4 * price_cpu + g / 4 * price_gpu),
price = base ** (occupancy / 4) - 1, admitted iff cost < 1.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import envs.core
from agents.baselines import make_scheduler
from agents.baselines.pd_calendar import Calendar, Catalogue, Plan, Stacked, better, pareto_mask, price
from agents.baselines.primal_dual import (
    TUNED_PATH,
    _Commit,
    PDMaxScheScheduler,
    PDMaxWeightScheduler,
    default_horizon,
    load_tuned,
)
from envs.config import ConfigError, ScenarioConfig, load_scenario
from envs.core import Simulator
from envs.scheduling import apply_decision, run_episode
from envs.workload import Workload


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
class LinearGPU:
    """CPU-blind test progress: ``g / 4`` per step, so 4, 2, 2, 1 steps at 1..4 GPUs."""

    def delta(self, cpu, gpu, progress):
        return np.asarray(gpu, dtype=float) / 4.0


class CpuGpu:
    """CPU-aware test progress: ``(c + g) / 8`` per step."""

    def delta(self, cpu, gpu, progress):
        return (np.asarray(cpu, dtype=float) + np.asarray(gpu, dtype=float)) / 8.0


def tiny_cfg(mode="multi", steps=2, min_req=(1, 1), clusters=1, num_tasks=4, capacity=(4, 4)):
    return ScenarioConfig.from_dict({
        "name": "tiny", "mode": mode, "num_clusters": clusters, "capacities": [list(capacity)],
        "per_task_max": [4, 4], "arrival_rate": 4, "num_tasks": num_tasks,
        "task_types": [{"name": "a", "prob": 1.0, "min_req": list(min_req),
                        "progress": {"kind": "constant", "steps": steps}}],
    })


@pytest.fixture
def inject(monkeypatch):
    """Replace the seeded workload: ``inject(cfg, arrivals)`` -> every task of type 0, all clusters."""

    def _inject(cfg, arrivals, types=None, eligible=None):
        n = len(arrivals)
        wl = Workload(
            arrival=np.asarray(arrivals, dtype=np.int64),
            task_type=np.zeros(n, dtype=np.int64) if types is None else np.asarray(types, dtype=np.int64),
            eligible=np.ones((n, cfg.num_clusters), dtype=bool) if eligible is None else np.asarray(eligible, bool),
        )
        monkeypatch.setattr(envs.core, "generate_workload", lambda cfg, streams: wl)

    return _inject


def run(cfg, sch, functions=None, max_steps=60):
    """Run an episode step by step; returns (sim, placements per step)."""
    sim = Simulator(cfg, 0, functions)
    sch.reset(sim)
    log = []
    while not sim.done and sim.t < max_steps:
        placed = []
        for _ in range(10):
            d = sch.decide(sim)
            placed += d.placements
            if apply_decision(sim, d) == 0 or sim.single:
                break
        log.append(placed)
        sim.advance()
    assert sim.invalid == 0, sim.last_error
    return sim, log


# ---------------------------------------------------------------------------------------
# prices and calendar
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [1.5, 20.0, 25_700.0])
def test_price_endpoints_and_monotone(base):
    occ = np.arange(0, 17)
    p = price(occ, 16, base)
    assert p[0] == 0.0
    assert p[-1] == pytest.approx(base - 1)
    assert np.all(np.diff(p) > 0)


def test_booking_raises_prices_only_on_booked_slots():
    cal = Calendar(np.array([[4, 4]]), (20.0, 20.0), v_ref=4.0, horizon=6)
    before = cal.prices(0).copy()
    cal.reserve(Plan(cluster=0, cpu=1, gpu=2, start=1, dur=3, cost=0.0, vol=0.0))
    after = cal.prices(0)
    assert np.all(after >= before)
    assert np.all(after[:, 1:4] > before[:, 1:4])
    np.testing.assert_array_equal(after[:, [0, 4, 5]], before[:, [0, 4, 5]])
    assert after[0, 1] == pytest.approx(20 ** 0.25 - 1) and after[1, 1] == pytest.approx(20 ** 0.5 - 1)
    cal.reserve(Plan(cluster=0, cpu=1, gpu=1, start=2, dur=1, cost=0.0, vol=0.0))
    assert cal.prices(0)[1, 2] > after[1, 2]


def _brute_best(cal, st, lo, hi, fixed=None):
    """Triple loop over (cluster, allocation, start) with the [D-8] key (reference for best_all)."""
    K = cal.capacity.shape[0]
    now, later = [None] * K, [None] * K
    for i in range(len(st.cpu)):
        k, c, g, d = int(st.cluster[i]), int(st.cpu[i]), int(st.gpu[i]), int(st.dur[i])
        starts = range(lo, hi - d + 1) if fixed is None else [int(fixed[k])]
        for s in starts:
            if s < lo or s + d > min(hi, cal.horizon):
                continue
            window = cal.occ[k, :, s:s + d]
            if np.any(window[0] + c > cal.capacity[k, 0]) or np.any(window[1] + g > cal.capacity[k, 1]):
                continue
            if cal.one_start and cal.taken[k, s]:
                continue
            plan = Plan(k, c, g, s, d, cal.cost(k, c, g, s, d), float(st.vol[i]))
            slot = now if s == 0 else later
            if better(plan, slot[k]):
                slot[k] = plan
    return now, later


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return (a.cluster, a.cpu, a.gpu, a.start, a.dur) == (b.cluster, b.cpu, b.gpu, b.start, b.dur) and \
        a.cost == pytest.approx(b.cost, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_search_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    K, H = 3, 12
    cap = rng.integers(3, 7, size=(K, 2))
    bases = (float(rng.uniform(2, 50)), float(rng.uniform(2, 50)))
    cal = Calendar(cap, bases, 3.0, H, one_start_per_slot=bool(seed % 2))
    for _ in range(rng.integers(2, 8)):
        k = int(rng.integers(K))
        s, d = int(rng.integers(0, H)), int(rng.integers(1, 5))
        c, g = int(rng.integers(0, cap[k, 0] + 1)), int(rng.integers(0, cap[k, 1] + 1))
        if np.all(cal.occ[k, 0, s:s + d] + c <= cap[k, 0]) and np.all(cal.occ[k, 1, s:s + d] + g <= cap[k, 1]):
            cal.reserve(Plan(k, c, g, s, d, 0.0, 0.0))
    rows = [(k, c, g, int(rng.integers(1, 6))) for k in range(K) for c in range(1, 4) for g in range(1, 4)]
    cl, c, g, d = (np.array(x, dtype=np.int64) for x in zip(*rows))
    st = Stacked(cl, c, g, d, d * (c / cap[cl, 0] + g / cap[cl, 1]))
    for lo, hi in [(0, H), (0, 5), (3, 9)]:
        got, ref = cal.best_all(st, lo, hi), _brute_best(cal, st, lo, hi)
        for a, b in zip(got[0] + got[1], ref[0] + ref[1]):
            assert _same(a, b), (lo, hi, a, b)
    fixed = np.array([0, 2, -1])
    got, ref = cal.best_all(st, 0, H, fixed), _brute_best(cal, st, 0, H, fixed)
    for a, b in zip(got[0] + got[1], ref[0] + ref[1]):
        assert _same(a, b)


def test_pareto_pruning_keeps_the_optimum():
    """The best plan over Pareto candidates equals the best over the full allocation grid."""
    rng = np.random.default_rng(7)
    c, g = (x.ravel() for x in np.meshgrid(np.arange(1, 5), np.arange(1, 5), indexing="ij"))
    for trial in range(5):
        d = rng.integers(1, 6, size=c.size)
        keep = pareto_mask(c, g, d)
        cal = Calendar(np.array([[6, 6]]), (30.0, 30.0), 2.0, 10)
        for _ in range(4):
            s, dd = int(rng.integers(0, 10)), int(rng.integers(1, 4))
            if np.all(cal.occ[0, :, s:s + dd] + 2 <= 6):
                cal.reserve(Plan(0, 2, 2, s, dd, 0.0, 0.0))
        vol = d * (c / 6 + g / 6)
        full = Stacked(np.zeros(c.size, dtype=np.int64), c, g, d, vol)
        pruned = Stacked(np.zeros(int(keep.sum()), dtype=np.int64), c[keep], g[keep], d[keep], vol[keep])
        a, b = cal.best_all(full, 0, 10), cal.best_all(pruned, 0, 10)
        for x, y in zip(a[0] + a[1], b[0] + b[1]):
            assert _same(x, y)


def test_admission_threshold_on_uniform_load():
    """A single task on a uniformly loaded cluster is admitted iff u < log(1 + V_ref/V) / log(base)."""
    base, v_ref, C, d = 1000.0, 10.0, 16, 3
    st = Stacked(np.array([0]), np.array([2]), np.array([2]), np.array([d]), np.array([d * 4 / 16]))
    V = float(st.vol[0])
    threshold = math.log(1 + v_ref / V) / math.log(base)
    for used in range(0, 15):
        cal = Calendar(np.array([[C, C]]), (base, base), v_ref, d)
        cal.load(np.array([0]), np.array([[used, used]]), np.array([0]), np.array([d]))
        now, _ = cal.best_all(st, 0, d)
        assert (now[0].cost < 1.0) == (used / C < threshold)


# ---------------------------------------------------------------------------------------
# catalogue
# ---------------------------------------------------------------------------------------
def test_catalogue_durations_candidates_and_paper_F(inject):
    cfg = tiny_cfg()
    cat = Catalogue(cfg, [LinearGPU()])
    assert cat.dur[0, 1, 1] == 4 and cat.dur[0, 3, 2] == 2 and cat.dur[0, 1, 3] == 2 and cat.dur[0, 4, 4] == 1
    assert cat.dur[0, 0, 2] == -1  # below the minimum requirement
    cand = cat.candidates(0, 0)
    assert list(zip(cand.cpu, cand.gpu, cand.dur)) == [(1, 4, 1), (1, 2, 2), (1, 1, 4)]
    # V = d (c/4 + g/4): max at (4, 1) for 4 steps = 5, min at (1, 4) for 1 step = 1.25
    assert cat.v_ref == pytest.approx(5.0) and cat.v_lo == pytest.approx(1.25) and cat.paper_F == pytest.approx(4.0)
    inject(cfg, [0, 0])
    sch = PDMaxWeightScheduler(F="paper")
    sch.reset(Simulator(cfg, 0, [LinearGPU()]))
    lam = 2 * default_horizon(cfg) * 1 * 2 * 4.0 + 1
    assert default_horizon(cfg) == 2 and sch.bases == (lam, lam)
    sch = PDMaxScheScheduler(F=2.5)
    sch.reset(Simulator(cfg, 0, [LinearGPU()]))
    assert sch.bases == (2 * 2 * 1 * 1 * 2.5 + 1,) * 2


# ---------------------------------------------------------------------------------------
# pd-maxsche: hand-computed runs
# ---------------------------------------------------------------------------------------
def test_maxsche_multi_mode_admissions_and_prices(inject):
    """4 two-step (1, 1) tasks, base 20, V_ref = 2 * (4/4 + 4/4) = 4.

    Step 0: costs 0, (20^.25 - 1)/4 = .279, (20^.5 - 1)/4 = .868 -> admitted;
    (20^.75 - 1)/4 = 2.11 -> rejected. Step 1: the three have one step left, so task 3 pays
    half: (20^.75 - 1)/8 = 1.06 -> rejected. Step 2: empty cluster -> admitted.
    """
    cfg = tiny_cfg()
    inject(cfg, [0, 0, 0, 0])
    sch = PDMaxScheScheduler(base=20.0)
    sim, log = run(cfg, sch)
    assert log[0] == [(0, 0, 1, 1), (0, 1, 1, 1), (0, 2, 1, 1)]
    assert log[1] == [] and log[2] == [(0, 3, 1, 1)]
    np.testing.assert_array_equal(sim.records()["jct"], [2, 2, 2, 4])
    sim2 = Simulator(cfg, 0)
    sch.reset(sim2)
    sch.decide(sim2)
    costs = [sch.last_plans[j].cost for j in range(3)]
    assert costs == pytest.approx([0.0, (20 ** 0.25 - 1) / 4, (20 ** 0.5 - 1) / 4])
    assert 3 not in sch.last_plans
    np.testing.assert_allclose(sch.calendar.prices(0), np.full((2, 2), 20 ** 0.75 - 1))


def test_maxsche_single_mode_one_start_per_step(inject):
    """Single mode: one start per cluster and step; each later task pays for the one still running."""
    cfg = tiny_cfg(mode="single")
    inject(cfg, [0, 0, 0, 0])
    sim, log = run(cfg, PDMaxScheScheduler(base=20.0))
    assert [len(p) for p in log[:4]] == [1, 1, 1, 1]
    np.testing.assert_array_equal(sim.records()["jct"], [2, 3, 4, 5])


def test_maxsche_picks_min_cost_allocation(inject):
    """Cluster (4 CPU, 8 GPU), base 3, g/4 progress: Pareto (1, 4, 1 step), (1, 2, 2), (1, 1, 4).

    Task 0 sees zero prices and takes the earliest completion (1, 4). For task 1 slot 0 has
    CPU 1/4 and GPU 4/8 in use, prices 3^.25 - 1 = .316 and 3^.5 - 1 = .732, later slots are
    free: (1, 4) costs .079 + .366, (1, 2) .079 + .183, (1, 1) .079 + .092 (all / V_ref = 4.5),
    so the lean (1, 1) starts now although it takes 4 steps.
    """
    cfg = tiny_cfg(capacity=(4, 8), num_tasks=2)
    inject(cfg, [0, 0])
    sch = PDMaxScheScheduler(base=3.0, window="slowest")
    sim, log = run(cfg, sch, functions=[LinearGPU()])
    assert log[0] == [(0, 0, 1, 4), (0, 1, 1, 1)]
    np.testing.assert_array_equal(sim.records()["jct"], [1, 4])
    assert sch.catalogue.v_ref == pytest.approx(4.5)


def test_maxsche_cpu_policy_min(inject):
    cfg = tiny_cfg(num_tasks=1)
    inject(cfg, [0])
    full, lean = PDMaxScheScheduler(F=1.0), PDMaxScheScheduler(F=1.0, cpu_policy="min")
    for sch in (full, lean):
        sch.reset(Simulator(cfg, 0, [CpuGpu()]))
    assert full._cands(0, 0).cpu.max() > 1
    assert np.all(lean._cands(0, 0).cpu == 1) and np.all(lean._stacked(0).cpu == 1)
    sim, log = run(cfg, lean, functions=[CpuGpu()])
    assert log[0][0][2] == 1


# ---------------------------------------------------------------------------------------
# pd-maxweight: hand-computed runs
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("base,expected_jct", [(4.0, [2, 2]), (10.0, [2, 3])])
def test_maxweight_admission_threshold(inject, base, expected_jct):
    """Two (2, 2) two-step tasks, alpha 1, V_ref = 4: the second costs (sqrt(base) - 1) / 2 now.

    base 4 -> 0.5: admitted at once. base 10 -> 1.08: rejected; at step 1 it pays for one
    busy slot only, (sqrt(10) - 1) / 4 = 0.54 -> admitted then.
    """
    cfg = tiny_cfg(min_req=(2, 2))
    inject(cfg, [0, 0])
    sch = PDMaxWeightScheduler(base=base, alpha=1)
    sim, log = run(cfg, sch)
    np.testing.assert_array_equal(sim.records()["jct"], expected_jct)
    if base == 10.0:
        assert log[0] == [(0, 0, 2, 2)] and log[1] == [(0, 1, 2, 2)]


@pytest.mark.parametrize("commit,alpha,window", [("all", 2, "fastest"), ("first", 4, "slowest")])
def test_maxweight_commits_a_future_start(inject, commit, alpha, window):
    """Task 0 takes (1, 4) now (zero cost, earliest completion). Task 1's cheapest schedule is
    (1, 4) at slot 1 (cost 0): in A_dual's second sub-window [1, 2) when ``W0`` = 1 (fastest)
    and ``commit="all"``, inside the first window [0, 4) when ``W0`` = 4 (slowest). It is
    committed and started at step 1."""
    cfg = tiny_cfg()
    inject(cfg, [0, 0])
    sch = PDMaxWeightScheduler(base=20.0, alpha=alpha, commit=commit, window=window)
    sim = Simulator(cfg, 0, [LinearGPU()])
    sch.reset(sim)
    d = sch.decide(sim)
    assert d.placements == [(0, 0, 1, 4)]
    p = sch.last_plans[1]
    assert (p.cluster, p.cpu, p.gpu, p.start, p.dur, p.cost) == (0, 1, 4, 1, 1, 0.0)
    assert 1 in sch.commits and sch.commits[1].start == 1
    np.testing.assert_allclose(sch.calendar.prices(0)[:, :2], [[20 ** 0.25 - 1] * 2, [19.0, 19.0]])
    apply_decision(sim, d)
    sim.advance()
    assert sch.decide(sim).placements == [(0, 1, 1, 4)]
    # commit="first" does not bind plans of later sub-windows; "none" binds nothing
    for other in ("first", "none"):
        sch2 = PDMaxWeightScheduler(base=20.0, alpha=2, commit=other)
        sim2 = Simulator(cfg, 0, [LinearGPU()])
        sch2.reset(sim2)
        sch2.decide(sim2)
        assert sch2.commits == {} and 1 not in sch2.last_plans
    sch3 = PDMaxWeightScheduler(base=20.0, commit="none", window="slowest")
    sch3.reset(sim2 := Simulator(cfg, 0, [LinearGPU()]))
    sch3.decide(sim2)
    assert sch3.commits == {} and sch3.last_plans[1].start == 1


# ---------------------------------------------------------------------------------------
# faithful (doubling-interval) variants
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("base,starts", [(4.0, [4, 4, 4, 4]), (20.0, [4, 4, 4, 6])])
def test_maxweight_faithful_windows(inject, base, starts):
    """alpha 2: the round at tau = 2 plans into [alpha*tau, alpha*tau + tau) = [4, 6) and then
    [6, 8) (round tau = 1 fits no 2-step task). base 20 rejects the 4th task in [4, 6)."""
    cfg = tiny_cfg()
    inject(cfg, [0, 0, 0, 0])
    sim, log = run(cfg, PDMaxWeightScheduler(base=base, alpha=2, mode="faithful"))
    np.testing.assert_array_equal(sim.records()["start"], starts)
    assert all(not p for t, p in enumerate(log) if t not in set(starts))


def test_maxsche_faithful_rounds(inject):
    """Rounds at 1, 2, 4: d = 2 fits tau = 2; base 20 admits 3 tasks at 2, the 4th at 4."""
    cfg = tiny_cfg()
    inject(cfg, [0, 0, 0, 0])
    sim, log = run(cfg, PDMaxScheScheduler(base=20.0, mode="faithful"))
    np.testing.assert_array_equal(sim.records()["start"], [2, 2, 2, 4])


def test_faithful_never_starts_before_round_after_arrival(inject):
    cfg = tiny_cfg(mode="single", num_tasks=8)
    arrivals = [0, 1, 3, 3, 5, 9, 9, 12]
    inject(cfg, arrivals)
    for sch in (PDMaxWeightScheduler(F=1.0, mode="faithful"), PDMaxScheScheduler(F=1.0, mode="faithful")):
        sim, _ = run(cfg, sch, max_steps=400)
        rec = sim.records()
        assert sim.done
        first_round = [1 << max(0, math.ceil(math.log2(max(a, 1)))) for a in arrivals]  # tau_i >= arrival
        offset = sch.alpha if isinstance(sch, PDMaxWeightScheduler) else 1
        assert np.all(rec["start"] >= np.array(first_round) * offset)


def test_due_commits_start_postpone_or_move(inject):
    """A due commit starts on its cluster if there is room, else waits a step; a task not in
    its cluster's pending set starts on an eligible cluster whose pending set holds it."""
    cfg = tiny_cfg(clusters=2, num_tasks=3)
    inject(cfg, [0, 0, 0], eligible=[[1, 1], [1, 1], [1, 0]])
    sim = Simulator(cfg, 0)
    sch = PDMaxWeightScheduler(F=1.0)
    sch.reset(sim)
    assert sim.place(1, 0, 4, 4)  # cluster 1 full
    sch.commits = {1: _Commit(1, 2, 2, 0, 2), 2: _Commit(1, 1, 1, 0, 2)}
    placements, booked = sch._launch_commits(sim, sch._pending_bits(sim))
    assert placements == [(0, 2, 1, 1)] and booked == [(0, 1, 1, 0, 2)]
    assert list(sch.commits) == [1] and sch.commits[1].start == 1


# ---------------------------------------------------------------------------------------
# protocol, determinism, tuned F, bad options
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pd-maxweight", "pd-maxsche"])
@pytest.mark.parametrize("scenario", ["synthetic-3", "hetero-6"])
def test_real_scenarios_valid_and_deterministic(name, scenario):
    cfg = load_scenario(scenario, ["num_tasks=60"])
    a = run_episode(cfg, make_scheduler(name, F=0.1), 3)
    b = run_episode(cfg, make_scheduler(name, F=0.1), 3)
    assert a.invalid == 0 and not a.truncated and a.jct.size == 60
    for key in a.records:
        np.testing.assert_array_equal(a.records[key], b.records[key])
    # never more than one start per cluster and real step in single mode
    if cfg.mode == "single":
        rec = a.records
        pairs = list(zip(rec["start"].tolist(), rec["cluster"].tolist()))
        assert len(pairs) == len(set(pairs))


def test_tuned_F_loads_committed_values(tmp_path):
    table = json.loads(TUNED_PATH.read_text())
    for name in ("pd-maxweight", "pd-maxsche"):
        for scenario in ("synthetic-3", "hetero-6"):
            sch = make_scheduler(name)  # F="tuned" is the default
            sch.reset(Simulator(load_scenario(scenario, ["num_tasks=5"]), 0))
            assert sch.F == table[name][scenario] > 0
        assert load_tuned(name, "no-such-scenario") == table[name]["default"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"pd-maxsche": {"default": 3.0, "tiny": 7.0}}))
    assert load_tuned("pd-maxsche", "tiny", path) == 7.0 and load_tuned("pd-maxsche", "x", path) == 3.0
    with pytest.raises(ConfigError, match="pd-maxweight"):
        load_tuned("pd-maxweight", "tiny", path)
    with pytest.raises(ConfigError, match="tune_pd"):
        load_tuned("pd-maxsche", "tiny", tmp_path / "missing.json")


@pytest.mark.parametrize("options", [
    {"F": "huge"}, {"F": -1}, {"mode": "doubling"}, {"base": 1.0}, {"alpha": 0},
    {"window": "longest"}, {"W_cap": 0}, {"batch": "all"}, {"commit": "some"}, {"nonsense": 1},
])
def test_bad_options_raise_config_error(options):
    with pytest.raises(ConfigError):
        make_scheduler("pd-maxweight", **options)


def test_maxsche_bad_cpu_policy():
    with pytest.raises(ConfigError, match="cpu_policy"):
        make_scheduler("pd-maxsche", cpu_policy="max")
