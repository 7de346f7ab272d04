"""TapFinger policy: batch independence, equivariance, valid actions, masked log-probs,
transfer across N, checkpoints and the ``tapfinger`` scheduler."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.policy.checkpoint import CheckpointError, load_policy_checkpoint, save_policy_checkpoint
from agents.policy.config import POLICY_VARIANTS, PolicyConfig
from agents.policy.network import TapFingerPolicy
from agents.policy.observations import obs_to_torch
from agents.policy.scheduler import TapFingerScheduler, joint_action_to_decision
from envs import Simulator, load_scenario, run_episode
from envs.observation import ObservationSpec, build_observation

torch.set_num_threads(1)
SMALL = dict(hidden=32, han_layers=2, heads=4, pointer_dim=16, pointer_ffn=32)


def drive(cfg, seed: int, steps: int, p_place: float = 0.6, multi_rounds: bool = True):
    """Observations of a simulator driven by random placements (random allocations in bounds)."""
    spec = ObservationSpec.from_config(cfg)
    sim = Simulator(cfg, seed)
    rng = np.random.default_rng(seed)
    out = [build_observation(sim, spec)]
    for _ in range(steps):
        for i in range(sim.num_clusters):
            tasks = sim.pending_tasks(i)
            if tasks.size and rng.random() < p_place:
                task = int(rng.choice(tasks))
                lo, hi = sim.min_req[sim.task_type[task]], sim.alloc_upper(i)
                if np.all(lo <= hi):
                    sim.place(i, task, int(rng.integers(lo[0], hi[0] + 1)), int(rng.integers(lo[1], hi[1] + 1)))
            if multi_rounds and not sim.single and rng.random() < 0.3:
                out.append(build_observation(sim, spec))  # mid-step observation (gaps in pending sets)
        sim.advance()
        out.append(build_observation(sim, spec))
        if sim.done:
            break
    return spec, out


def batch_of(obs_list):
    return {k: torch.as_tensor(np.stack([o[k] for o in obs_list])) for k in obs_list[0]}


@pytest.fixture(scope="module")
def syn3():
    cfg = load_scenario("synthetic-3")
    spec, obs = drive(cfg, seed=3, steps=40)
    return cfg, spec, obs


@pytest.fixture(scope="module")
def policy3(syn3):
    torch.manual_seed(0)
    return TapFingerPolicy(syn3[1], PolicyConfig(**SMALL)).eval()


# ------------------------------------------------------------------------ batch independence
@pytest.mark.parametrize("variant", POLICY_VARIANTS)
def test_batch_independence(syn3, variant):
    torch.manual_seed(1)
    cfg, spec, obs = syn3
    pol = TapFingerPolicy(spec, PolicyConfig(variant=variant, **SMALL)).eval()
    many = obs[-32:]
    assert len(many) == 32
    sel_b, al_b = pol.probabilities(batch_of(many))
    val_b = pol.value(batch_of(many))
    for k in (0, 17, 31):
        sel_1, al_1 = pol.probabilities(obs_to_torch(many[k]))
        assert (sel_b[k] - sel_1[0]).abs().max() <= 1e-6
        assert (al_b[k] - al_1[0]).abs().max() <= 1e-6
        assert (val_b[k] - pol.value(obs_to_torch(many[k]))[0]).abs().max() <= 1e-5


# ------------------------------------------------------------------------ permutation
def permute_slots(obs: dict, perms: list[np.ndarray]) -> dict:
    """Permute every cluster's pending slots; new slot q holds old slot perms[i][q]."""
    out = {k: v.copy() for k, v in obs.items()}
    N = obs["pending_mask"].shape[0]
    for i, perm in enumerate(perms):
        for key in ("pending_x", "pending_mask", "pending_min", "feasible", "pending_where"):
            out[key][i] = obs[key][i][perm]
    inv = [np.argsort(p) for p in perms]  # old slot -> new slot
    where = out["pending_where"].astype(np.int64)
    for j in range(N):
        col = where[:, :, j]
        where[:, :, j] = np.where(col >= 0, inv[j][np.clip(col, 0, None)], -1)
    out["pending_where"] = where.astype(obs["pending_where"].dtype)
    return out


def test_permuting_pending_slots_permutes_pointer_probs(syn3, policy3):
    _, spec, obs = syn3
    rng = np.random.default_rng(0)
    checked = 0
    for o in obs[5:40:5]:
        perms = [rng.permutation(spec.P) for _ in range(spec.N)]
        po = permute_slots(o, perms)
        # sanity: the permuted observation is still consistent (pending_where[i, p, i] == p)
        occ = po["pending_mask"].astype(bool)
        for i in range(spec.N):
            assert (po["pending_where"][i, occ[i], i] == np.flatnonzero(occ[i])).all()
        sel, al = policy3.probabilities(obs_to_torch(o))
        psel, pal = policy3.probabilities(obs_to_torch(po))
        for i, perm in enumerate(perms):
            assert torch.allclose(psel[0, i], sel[0, i, perm], atol=1e-5)
            assert torch.allclose(pal[0, i], al[0, i, perm], atol=1e-5)
        checked += int(occ.sum() > 1)
    assert checked >= 3


# ------------------------------------------------------------------------ valid actions
_SCENARIOS = {
    "synthetic-3": load_scenario("synthetic-3", ["num_tasks=60"]),
    "multi-3": load_scenario("multi-3", ["num_tasks=60"]),
    "hetero-6": load_scenario("hetero-6", ["num_tasks=80"]),
}
_POLICY = {}


def _shared_policy(variant: str) -> TapFingerPolicy:
    if variant not in _POLICY:
        torch.manual_seed(2)
        spec = ObservationSpec.from_config(_SCENARIOS["synthetic-3"])
        _POLICY[variant] = TapFingerPolicy(spec, PolicyConfig(variant=variant, **SMALL)).eval()
    return _POLICY[variant]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=st.sampled_from(sorted(_SCENARIOS)),
    variant=st.sampled_from(POLICY_VARIANTS),
    seed=st.integers(0, 10_000),
    steps=st.integers(0, 12),
    deterministic=st.booleans(),
)
def test_sampled_actions_are_always_valid(scenario, variant, seed, steps, deterministic):
    cfg = _SCENARIOS[scenario]
    _, obs = drive(cfg, seed, steps)
    pol = _shared_policy(variant)  # one set of weights for N = 3 and N = 6
    batch = batch_of(obs)
    out = pol.act(batch, deterministic=deterministic, generator=torch.Generator().manual_seed(seed))
    act = out.action.numpy()
    feas = batch["feasible"].numpy().astype(bool)
    C1, G1 = cfg.alloc_dims
    for b, o in enumerate(obs):
        taken = {}
        for i in range(cfg.num_clusters):
            slot, a, lost = act[b, i]
            if not feas[b, i].any():
                assert out.skip[b, i] and (slot, a, lost) == (0, 0, 0) and out.log_prob[b, i] == 0
                continue
            assert feas[b, i, slot], "selected an infeasible or empty slot"
            assert np.isfinite(out.log_prob[b, i].item()) and out.log_prob[b, i] <= 0
            task = (int(np.flatnonzero(o["pending_where"][i, slot] >= 0)[0]),)
            task = task + (int(o["pending_where"][i, slot, task[0]]),)
            if lost:
                assert a == 0
                taken.setdefault(task, []).append((i, True))
                continue
            taken.setdefault(task, []).append((i, False))
            if a:
                c, g = divmod(int(a), G1)
                lo, hi = o["pending_min"][i, slot], o["alloc_high"][i]
                assert lo[0] <= c <= hi[0] and lo[1] <= g <= hi[1]
        for claims in taken.values():
            assert sum(not lost for _, lost in claims) == 1  # exactly one winner per selected task


def test_joint_action_applies_without_invalid(syn3, policy3):
    cfg, spec, _ = syn3
    sim = Simulator(cfg, 11)
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        out = policy3.act(obs_to_torch(build_observation(sim, spec)), generator=gen)
        d = joint_action_to_decision(sim, out.action[0].numpy())
        for c, task, cpu, gpu in d.placements:
            assert sim.place(c, task, cpu, gpu)
        sim.advance()
    assert sim.invalid == 0 and sim.placements > 0


# ------------------------------------------------------------------------ log-prob masking
def manual_terms(pol, batch, action):
    """Manual log-softmax sums of eqs. 13-14 from the policy's probability tables."""
    sel, al = pol.probabilities(batch)
    B, N, _ = sel.shape
    logp = torch.zeros(B, N, dtype=torch.float64)
    ent = torch.zeros(B, N, dtype=torch.float64)
    feas = batch["feasible"].bool()
    for b in range(B):
        for i in range(N):
            if not feas[b, i].any():
                continue  # skipped: contributes nothing
            s, a, lost = action[b, i].tolist()
            ps = sel[b, i].double()
            logp[b, i] = torch.log(ps[s])
            ent[b, i] = -(ps[ps > 0] * torch.log(ps[ps > 0])).sum()
            if not lost:
                pa = al[b, i, s].double()
                logp[b, i] += torch.log(pa[a])
                ent[b, i] += -(pa[pa > 0] * torch.log(pa[pa > 0])).sum()
    return logp, ent


def test_log_prob_masking_losers_and_skipped(syn3, policy3):
    _, spec, obs = syn3
    batch = batch_of(obs[10:18])
    batch["feasible"][0, 1] = 0  # force a skipped agent
    out = policy3.act(batch, generator=torch.Generator().manual_seed(5))
    action = out.action.clone()
    # force conflict losers on some non-skipped agents (flag set; the stored allocation is ignored)
    feas_any = batch["feasible"].bool().any(-1)
    forced = feas_any.clone()
    forced[:, 1:] = False
    action[forced, 2] = 1
    action[forced, 1] = 5
    logp, ent, skip = policy3.evaluate_actions(batch, action)
    mlogp, ment = manual_terms(policy3, batch, action)
    assert skip[0, 1] and logp[0, 1] == 0 and ent[0, 1] == 0
    assert torch.equal(skip, ~feas_any)
    assert torch.allclose(logp.double(), mlogp, atol=1e-4)
    assert torch.allclose(ent.double(), ment, atol=1e-4)
    # a loser's log-prob is its selection term only; changing its stored allocation changes nothing
    action2 = action.clone()
    action2[forced, 1] = 0
    assert torch.equal(policy3.evaluate_actions(batch, action2)[0], logp)
    # act's log-probs are exactly those evaluate_actions recomputes from the stored action
    lp_eval, ent_eval, _ = policy3.evaluate_actions(batch, out.action)
    assert torch.allclose(lp_eval, out.log_prob, atol=1e-6)
    assert torch.allclose(ent_eval, out.entropy, atol=1e-6)


def test_entropy_of_masked_log_probs_and_its_gradient():
    """``_entropy`` takes the probabilities from a softmax of the log-probabilities (fast on CPU
    where ``exp`` of masked entries is not): the same value, and the same gradient with respect
    to the logits, as ``-(exp(logp) * logp).sum(-1)``."""
    from agents.policy.outputs import _entropy
    from networks.heads import MASK_VALUE

    torch.manual_seed(0)
    x = torch.randn(64, 3, 17).masked_fill(torch.rand(64, 3, 17) < 0.6, MASK_VALUE)
    x[:, :, 0] = torch.randn(64, 3)  # one choice always open
    x[0, 0, 1:] = MASK_VALUE  # a forced choice: entropy 0
    logits = x.clone().requires_grad_()
    weights = torch.randn(64, 3)
    got = _entropy(torch.log_softmax(logits, -1))
    (g_got,) = torch.autograd.grad((got * weights).sum(), logits)
    logp = torch.log_softmax(logits, -1)
    want = -(logp.exp() * logp).sum(-1)
    (g_want,) = torch.autograd.grad((want * weights).sum(), logits)
    assert got[0, 0] == 0 and (got[1:] > 0).all()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g_got, g_want, rtol=1e-5, atol=1e-6)


def test_loser_allocation_term_gets_no_gradient(syn3):
    _, spec, obs = syn3
    torch.manual_seed(0)
    pol = TapFingerPolicy(spec, PolicyConfig(**SMALL))
    batch = batch_of(obs[10:14])
    out = pol.act(batch, generator=torch.Generator().manual_seed(1))
    action = out.action.clone()
    action[..., 2] = (~out.skip).long()  # every active agent lost
    action[..., 1] = 0
    pol.zero_grad()
    pol.evaluate_actions(batch, action)[0].sum().backward()
    assert all(p.grad is None or p.grad.abs().max() == 0 for p in pol.alloc_head.parameters())
    assert any(p.grad is not None and p.grad.abs().max() > 0 for p in pol.pointer.parameters())
    # with the flags cleared, the allocation head is trained
    pol.zero_grad()
    pol.evaluate_actions(batch, out.action.masked_fill(torch.tensor([False, False, True]), 0))[0].sum().backward()
    assert any(p.grad is not None and p.grad.abs().max() > 0 for p in pol.alloc_head.parameters())
    # the critic trains the shared encoder and every HAN layer
    pol.zero_grad()
    pol.value(batch).sum().backward()
    for conv in pol.encoder.han.convs:
        assert any(p.grad is not None and p.grad.abs().max() > 0 for p in conv.parameters())


def test_train_mode_equals_eval_mode(syn3):
    _, spec, obs = syn3
    torch.manual_seed(0)
    pol = TapFingerPolicy(spec, PolicyConfig(**SMALL))
    batch = batch_of(obs[:16])
    pol.eval()
    out = pol.act(batch, generator=torch.Generator().manual_seed(3))
    pol.train()
    lp, _, _ = pol.evaluate_actions(batch, out.action)
    assert torch.allclose(lp, out.log_prob, atol=1e-6)


def test_variant_selection_rules(syn3):
    _, spec, obs = syn3
    batch = batch_of(obs[5:25])
    feas = batch["feasible"].bool()
    sel, _ = TapFingerPolicy(spec, PolicyConfig(variant="no-pointer", **SMALL)).probabilities(batch)
    n = feas.sum(-1, keepdim=True).clamp(min=1)
    expect = torch.where(feas, 1.0 / n, torch.zeros(()))
    ok = feas.any(-1)
    assert torch.allclose(sel[ok], expect[ok], atol=1e-6)
    sel, _ = TapFingerPolicy(spec, PolicyConfig(variant="vanilla", **SMALL)).probabilities(batch)
    first = feas.to(torch.uint8).argmax(-1)
    assert torch.equal(sel[ok].argmax(-1), first[ok]) and torch.allclose(sel[ok].max(-1).values, torch.ones(()))


def test_deterministic_mode_takes_argmax(syn3, policy3):
    _, _, obs = syn3
    batch = batch_of(obs[20:30])
    a = policy3.act(batch, deterministic=True, generator=torch.Generator().manual_seed(0))
    b = policy3.act(batch, deterministic=True, generator=torch.Generator().manual_seed(99))
    sel, al = policy3.probabilities(batch)
    active = ~a.skip
    assert torch.equal(a.action[..., 0][active], sel.argmax(-1)[active])
    # ties between agents are the only randomness: without lost flags both runs agree
    same = (a.action[..., 2] == 0) & (b.action[..., 2] == 0)
    assert torch.equal(a.action[..., :2][same], b.action[..., :2][same])


def test_sampling_reproducible_with_generator(syn3, policy3):
    batch = batch_of(syn3[2][:8])
    a = policy3.act(batch, generator=torch.Generator().manual_seed(7))
    b = policy3.act(batch, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a.action, b.action)


# ------------------------------------------------------------------------ transfer across N
def test_same_weights_run_at_n3_and_n6(policy3):
    cfg6 = load_scenario("synthetic-6")
    spec6, obs6 = drive(cfg6, seed=1, steps=6)
    pol6 = TapFingerPolicy(spec6, policy3.cfg).eval()
    pol6.load_state_dict(policy3.state_dict())  # same keys and shapes
    out = pol6.act(batch_of(obs6))
    assert out.action.shape == (len(obs6), 6, 3)
    assert policy3.value(batch_of(obs6)).shape == (len(obs6), 6)  # the N=3 object itself also runs at N=6
    unshared = TapFingerPolicy(ObservationSpec.from_config(load_scenario("synthetic-3")),
                               PolicyConfig(shared_actors=False, **SMALL))
    with pytest.raises(ValueError, match="clusters"):
        unshared.act(batch_of(obs6))



def test_a_policy_that_observes_the_mode_reads_the_multi_mode_flag(syn3):
    _, spec, obs = syn3
    batch = batch_of(obs[:4])
    assert batch["multi_mode"].tolist() == [[0]] * 4, "synthetic-3 runs in single mode"
    multi = drive(load_scenario("multi-3"), seed=2, steps=2)[1]
    assert batch_of(multi)["multi_mode"].flatten().tolist() == [1] * len(multi)
    flipped = {**batch, "multi_mode": torch.ones_like(batch["multi_mode"])}
    torch.manual_seed(0)
    sees = TapFingerPolicy(spec, PolicyConfig(observe_mode=True, **SMALL)).eval()
    torch.manual_seed(0)
    blind = TapFingerPolicy(spec, PolicyConfig(**SMALL)).eval()
    assert not torch.allclose(sees.value(batch), sees.value(flipped))
    assert torch.equal(blind.value(batch), blind.value(flipped)), "without observe_mode the flag is not read"
    # the flag is one more encoder input: the shapes of the two policies differ only there
    a, b = sees.state_dict(), blind.state_dict()
    assert a.keys() == b.keys()
    assert [k for k in a if a[k].shape != b[k].shape], "the cluster input is one feature wider"


# ------------------------------------------------------------------------ checkpoints
def test_checkpoint_round_trip(tmp_path, syn3, policy3):
    cfg, _, obs = syn3
    path = save_policy_checkpoint(tmp_path / "p.pt", policy3, cfg, {"step": 123, "optimizer": {"lr": 1e-4}})
    pol, meta = load_policy_checkpoint(path, "cpu", scenario=load_scenario("hetero-6"))
    assert meta["step"] == 123 and meta["scenario"] == cfg and meta["policy_config"] == policy3.cfg
    batch = batch_of(obs[:10])
    for x, y in zip(pol.probabilities(batch), policy3.probabilities(batch)):
        assert torch.equal(x, y)
    with pytest.raises(ValueError, match="override"):
        save_policy_checkpoint(tmp_path / "q.pt", policy3, cfg, {"model": 1})


def test_checkpoint_tensors_stored_on_cpu_with_structure(tmp_path, syn3, policy3):
    """Nested extras keep their container types and values; every stored tensor is a CPU
    tensor detached from autograd, so a plain ``torch.load(weights_only=True)`` reads the file
    (what a CUDA-trained checkpoint needs on a machine without CUDA)."""
    cfg = syn3[0]
    w = torch.arange(6.0, requires_grad=True).reshape(2, 3)
    extra = {"optimizer": {"state": {0: {"exp_avg": w}}, "groups": [(1, torch.ones(2))]}}
    path = save_policy_checkpoint(tmp_path / "p.pt", policy3, cfg, extra)
    data = torch.load(path, weights_only=True)
    saved = data["optimizer"]["state"][0]["exp_avg"]
    assert torch.equal(saved, w.detach()) and not saved.requires_grad and saved.device.type == "cpu"
    group = data["optimizer"]["groups"][0]
    assert isinstance(group, tuple) and group[0] == 1 and torch.equal(group[1], torch.ones(2))
    assert all(t.device.type == "cpu" for t in data["model"].values())


def test_checkpoint_errors(tmp_path, syn3, policy3):
    cfg = syn3[0]
    good = save_policy_checkpoint(tmp_path / "good.pt", policy3, cfg)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_policy_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_policy_checkpoint(tmp_path / "junk.pt")
    raw = good.read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_policy_checkpoint(tmp_path / "cut.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="expected a dict"):
        load_policy_checkpoint(tmp_path / "list.pt")

    data = torch.load(good, weights_only=False)

    def write(name, mutate):
        d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
        mutate(d)
        torch.save(d, tmp_path / name)
        return tmp_path / name

    with pytest.raises(CheckpointError, match="lacks key"):
        load_policy_checkpoint(write("nokey.pt", lambda d: d.pop("obs_spec")))
    with pytest.raises(CheckpointError, match="architecture"):
        load_policy_checkpoint(write("arch.pt", lambda d: d["policy_config"].update(hidden=64)))
    with pytest.raises(CheckpointError, match="architecture"):
        load_policy_checkpoint(write("variant.pt", lambda d: d["policy_config"].update(variant="no-han")))
    key = "alloc_head.out.weight"
    with pytest.raises(CheckpointError, match="shape"):
        load_policy_checkpoint(write("shape.pt", lambda d: d["model"].update({key: d["model"][key][:, :5]})))
    with pytest.raises(CheckpointError, match="policy_config"):
        load_policy_checkpoint(write("badcfg.pt", lambda d: d["policy_config"].update(prior="uniform")))
    with pytest.raises(CheckpointError, match="scenario"):
        load_policy_checkpoint(write("badscen.pt", lambda d: d["scenario"].update(mode="sometimes")))
    with pytest.raises(CheckpointError, match="obs_spec"):
        load_policy_checkpoint(write("spec.pt", lambda d: d["obs_spec"].update(P=7)))
    # incompatible scenarios: K = 3 and allocation dims (17, 9) for the test-bed; N = 6 is fine (shared)
    with pytest.raises(CheckpointError, match="task types: 2 in the model vs 3"):
        load_policy_checkpoint(good, scenario=load_scenario("testbed-3"))
    with pytest.raises(CheckpointError, match="pending slots: 10 in the model vs 6"):
        load_policy_checkpoint(good, scenario=load_scenario("synthetic-3", ["pending_slots=6"]))
    load_policy_checkpoint(good, scenario=load_scenario("synthetic-6"))
    # unshared actors are tied to N
    unshared = TapFingerPolicy(syn3[1], PolicyConfig(shared_actors=False, **SMALL))
    path = save_policy_checkpoint(tmp_path / "unshared.pt", unshared, cfg)
    load_policy_checkpoint(path, scenario=load_scenario("multi-3"))
    with pytest.raises(CheckpointError, match="clusters: per-agent parameters for 3"):
        load_policy_checkpoint(path, scenario=load_scenario("synthetic-6"))
    assert issubclass(CheckpointError, ValueError)


# ------------------------------------------------------------------------ scheduler
@pytest.mark.parametrize("name", ["synthetic-3", "multi-3"])
def test_tapfinger_scheduler_full_episode(tmp_path, policy3, name):
    cfg = load_scenario(name, ["num_tasks=40"])
    path = save_policy_checkpoint(tmp_path / "p.pt", policy3, load_scenario("synthetic-3"))
    sched = TapFingerScheduler(checkpoint=path, device="cpu", deterministic=True)
    assert sched.name == "tapfinger"
    r1 = run_episode(cfg, sched, seed=4)
    assert r1.invalid == 0 and not r1.truncated
    assert r1.records["jct"].size == 40 and (r1.records["jct"] >= 1).all()
    r2 = run_episode(cfg, TapFingerScheduler(policy=policy3, deterministic=False), seed=4)
    r3 = run_episode(cfg, TapFingerScheduler(policy=policy3, deterministic=False), seed=4)
    assert r2.invalid == 0 and np.array_equal(r2.records["jct"], r3.records["jct"])  # seeded


def test_scheduler_rejects_incompatible_scenario(policy3):
    sched = TapFingerScheduler(policy=policy3)
    with pytest.raises(CheckpointError):
        run_episode(load_scenario("testbed-3", ["num_tasks=5"]), sched, seed=0)
    with pytest.raises(ValueError, match="exactly one"):
        TapFingerScheduler()


# ------------------------------------------------------------------------ details
def test_conflict_prior_reads_true_free_resources():
    # hetero-6: free resources above per_task_max must come from cluster_x, not alloc_high
    cfg = load_scenario("hetero-6", ["num_tasks=50"])
    spec = ObservationSpec.from_config(cfg)
    sim = Simulator(cfg, 0)
    while not sim.pending_tasks(5).size:
        sim.advance()
    assert sim.place(5, int(sim.pending_tasks(5)[0]), 3, 2)
    pol = TapFingerPolicy(spec, PolicyConfig(**SMALL))
    free = pol._free(pol.as_tensors(obs_to_torch(build_observation(sim, spec))))
    assert free[0].tolist() == sim.free.astype(float).tolist()
    assert free[0, 5, 0].item() > cfg.per_task_max[0] - 1  # (32, 32) cluster: beyond the per-task cap


def test_unshared_actors_use_their_own_weights(syn3):
    _, spec, obs = syn3
    torch.manual_seed(0)
    pol = TapFingerPolicy(spec, PolicyConfig(shared_actors=False, **SMALL)).eval()
    batch = batch_of(obs[10:20])
    sel, al = pol.probabilities(batch)
    with torch.no_grad():
        pol.pointer.w_r.weight[0].mul_(3.0)
        pol.alloc_head.out.weight[0].mul_(3.0)
    sel2, al2 = pol.probabilities(batch)
    active = batch["feasible"].bool().sum(-1) > 1
    assert not torch.allclose(sel2[:, 0][active[:, 0]], sel[:, 0][active[:, 0]])
    assert not torch.allclose(al2[:, 0], al[:, 0])
    assert torch.equal(sel2[:, 1:], sel[:, 1:]) and torch.equal(al2[:, 1:], al[:, 1:])


def test_agent_id_embedding_is_each_agents_own_and_ties_the_policy_to_n(tmp_path, syn3):
    cfg, spec, obs = syn3
    torch.manual_seed(0)
    pol = TapFingerPolicy(spec, PolicyConfig(agent_id=True, **SMALL)).eval()
    assert pol.agent_embed.shape == (spec.N, SMALL["hidden"])
    plain = TapFingerPolicy(spec, PolicyConfig(**SMALL)).eval()
    plain.load_state_dict({k: v for k, v in pol.state_dict().items() if k != "agent_embed"})
    batch = batch_of(obs[10:20])
    with torch.no_grad():
        pol.agent_embed.zero_()  # a zero embedding: the shared policy without agent ids
    sel, al = pol.probabilities(batch)
    want_sel, want_al = plain.probabilities(batch)
    assert torch.allclose(sel, want_sel, atol=1e-6) and torch.allclose(al, want_al, atol=1e-6)
    value = pol.value(batch)
    with torch.no_grad():
        pol.agent_embed[0].normal_()  # only agent 0's index embedding moves
    sel2, al2 = pol.probabilities(batch)
    value2 = pol.value(batch)
    active = batch["feasible"].bool().sum(-1) > 1
    assert not torch.allclose(sel2[:, 0][active[:, 0]], sel[:, 0][active[:, 0]])
    assert not torch.allclose(al2[:, 0], al[:, 0]) and not torch.allclose(value2[:, 0], value[:, 0])
    assert torch.allclose(sel2[:, 1:], sel[:, 1:], atol=1e-6) and torch.allclose(al2[:, 1:], al[:, 1:], atol=1e-6)
    # (the other agents' values may move: the central critic pools over every cluster embedding)
    # per-agent parameters: the policy acts only at its scenario's N
    six = drive(load_scenario("synthetic-6", ["num_tasks=20"]), seed=0, steps=2)[1][-1]
    with pytest.raises(ValueError, match="6 clusters, the per-agent parameters were built for 3"):
        pol.value(obs_to_torch(six))
    path = save_policy_checkpoint(tmp_path / "agent-id.pt", pol, cfg)
    with pytest.raises(CheckpointError, match="clusters: per-agent parameters for 3"):
        load_policy_checkpoint(path, scenario=load_scenario("synthetic-6"))
    loaded = load_policy_checkpoint(path, scenario=load_scenario("multi-3"))[0].eval()
    assert torch.equal(loaded.agent_embed, pol.agent_embed)


def test_numpy_observations_are_accepted(syn3, policy3):
    obs = syn3[2][:4]
    np_batch = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    a = policy3.probabilities(np_batch)[0]
    b = policy3.probabilities(batch_of(obs))[0]
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="lacks"):
        policy3.value({"pending_mask": np_batch["pending_mask"]})
    with pytest.raises(ValueError, match="batch"):
        policy3.value(obs[0])


def test_policy_config_validation_and_round_trip():
    cfg = PolicyConfig.paper("no-pointer", prior="code")
    assert cfg.faithful and cfg.hidden == 256 and cfg.han_layers == 6 and not cfg.shared_actors
    assert PolicyConfig.from_dict(cfg.to_dict()) == cfg
    for bad in ({"variant": "gnn"}, {"prior": "flat"}, {"hidden": 0}, {"hidden": 30, "heads": 4},
                {"shared_actors": "yes"}, {"unknown_key": 1}):
        with pytest.raises(ValueError):
            PolicyConfig.from_dict(bad)
