"""Graph construction, per-graph HANConv, encoders and heads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import HANConv

from envs import Simulator, load_scenario
from envs.observation import ObservationSpec, build_observation
from networks.graph import EDGE_TYPES, METADATA, build_hetero_batch, canonical_slots
from networks.han import GraphEncoder, HANEncoder, PerGraphHANConv
from networks.heads import AgentLinear, AllocationHead, CentralCritic, allocation_mask
from networks.mlp_encoder import MLPEncoder
from networks.pointer import PointerNet

torch.set_num_threads(1)


def hand_obs() -> dict[str, torch.Tensor]:
    """N=3 clusters, P=3 slots, K=2, M=2.

    task A: cluster 0 slot 1 and cluster 2 slot 0; task B: cluster 1 slot 0 only;
    task C: cluster 1 slot 2 and cluster 2 slot 2; cluster 0 slot 0 = task D only.
    """
    N, P, M, K = 3, 3, 2, 2
    where = -np.ones((N, P, N), dtype=np.int8)
    mask = np.zeros((N, P), dtype=np.int8)
    tasks = {"A": {0: 1, 2: 0}, "B": {1: 0}, "C": {1: 2, 2: 2}, "D": {0: 0}}
    feat = np.zeros((N, P, K + 5), dtype=np.float32)
    feat[..., -1] = 1.0
    code = {"A": 0.1, "B": 0.2, "C": 0.3, "D": 0.4}
    for name, places in tasks.items():
        for i, p in places.items():
            mask[i, p] = 1
            feat[i, p, -1] = 0.0
            feat[i, p, 0] = code[name]
            for j, q in places.items():
                where[i, p, j] = q
    rmask = np.array([[1, 0], [0, 0], [1, 1]], dtype=np.int8)
    obs = {
        "pending_x": feat,
        "pending_mask": mask,
        "pending_where": where,
        "pending_min": np.tile(np.array([2, 1]), (N, P, 1)) * mask[..., None],
        "alloc_high": np.array([[16, 16], [4, 4], [1, 0]]),
        "feasible": mask.copy(),
        "running_x": np.random.default_rng(0).random((N, M, K + 4)).astype(np.float32) * rmask[..., None],
        "running_mask": rmask,
        "cluster_x": np.random.default_rng(1).random((N, 6)).astype(np.float32),
    }
    return {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}


def stack(obs_list):
    return {k: torch.cat([o[k] for o in obs_list]) for k in obs_list[0]}


def sim_obs(name="synthetic-3", seed=0, steps=8, overrides=()):
    cfg = load_scenario(name, list(overrides))
    spec = ObservationSpec.from_config(cfg)
    sim = Simulator(cfg, seed)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        for i in range(sim.num_clusters):
            t = sim.pending_tasks(i)
            if t.size and rng.random() < 0.6:
                task = int(rng.choice(t))
                lo = sim.min_req[sim.task_type[task]]
                sim.place(i, task, int(lo[0]), int(lo[1]))
        sim.advance()
        out.append({k: torch.as_tensor(v).unsqueeze(0) for k, v in build_observation(sim, spec).items()})
    return spec, out


# ------------------------------------------------------------------------ graph building
def test_canonical_slot_is_lowest_cluster():
    o = hand_obs()
    canon, is_canon = canonical_slots(o["pending_mask"], o["pending_where"])
    P = 3
    assert canon[0, 2, 0].item() == 0 * P + 1  # task A -> cluster 0 slot 1
    assert canon[0, 0, 1].item() == 0 * P + 1
    assert canon[0, 2, 2].item() == 1 * P + 2  # task C -> cluster 1 slot 2
    assert is_canon[0].tolist() == [[True, True, False], [True, False, True], [False, False, False]]


def test_one_node_per_distinct_task_with_edges_to_every_cluster():
    g = build_hetero_batch(hand_obs())
    assert g.num_pending == 4  # A, B, C, D
    assert g.x["pending"].shape == (4, 7)
    sn = g.slot_node[0]
    assert sn[0, 1] == sn[2, 0]  # task A is one node
    assert sn[1, 2] == sn[2, 2]  # task C is one node
    assert len({sn[0, 0].item(), sn[0, 1].item(), sn[1, 0].item(), sn[1, 2].item()}) == 4
    assert sn[1, 1].item() == 4 and sn[2, 1].item() == 4  # empty slots -> one past the last node
    # node features are those of the task
    assert g.x["pending"][sn[2, 0], 0].item() == pytest.approx(0.1)
    offers = g.edge_index[EDGE_TYPES[0]]
    edges = {(int(c), int(n)) for c, n in offers.t().tolist()}
    assert edges == {(0, sn[0, 0].item()), (0, sn[0, 1].item()), (2, sn[0, 1].item()), (1, sn[1, 0].item()),
                     (1, sn[1, 2].item()), (2, sn[1, 2].item())}
    assert torch.equal(g.edge_index[EDGE_TYPES[1]], offers.flip(0))
    # running: 3 nodes hosted by clusters 0, 2, 2
    assert g.edge_index[EDGE_TYPES[2]][0].tolist() == [0, 2, 2]
    assert g.x["running"].shape[0] == 3
    # shortcut edges: every cluster to the sample's hub
    assert g.edge_index[EDGE_TYPES[4]].tolist() == [[0, 1, 2], [0, 0, 0]]
    # cluster features gain occupied and feasible fractions
    assert g.x["cluster"][:, -2].tolist() == pytest.approx([2 / 3, 2 / 3, 2 / 3])


def test_every_node_type_receives_messages():
    dst_types = {e[2] for e in EDGE_TYPES}
    assert dst_types == set(METADATA[0])


def test_batched_graph_offsets():
    _, obs = sim_obs(steps=6)
    a, b = obs[2], obs[5]
    ga, gb = build_hetero_batch(a), build_hetero_batch(b)
    g = build_hetero_batch(stack([a, b]))
    assert g.num_pending == ga.num_pending + gb.num_pending
    assert torch.equal(g.x["pending"], torch.cat([ga.x["pending"], gb.x["pending"]]))
    assert torch.equal(g.x["running"], torch.cat([ga.x["running"], gb.x["running"]]))
    assert g.batch["pending"].tolist() == [0] * ga.num_pending + [1] * gb.num_pending
    na, N = ga.num_pending, a["pending_mask"].shape[1]
    expect_b = torch.where(gb.slot_node[0] == gb.num_pending, g.num_pending, gb.slot_node[0] + na)
    assert torch.equal(g.slot_node[1], expect_b)
    e = EDGE_TYPES[0]
    shifted = gb.edge_index[e] + torch.tensor([[N], [na]])
    assert torch.equal(g.edge_index[e], torch.cat([ga.edge_index[e], shifted], dim=1))


# ------------------------------------------------------------------------ HANConv
def _graph_inputs(obs, dim=16, seed=0):
    g = build_hetero_batch(obs)
    gen = torch.Generator().manual_seed(seed)
    x = {t: torch.randn(v.shape[0], dim, generator=gen) for t, v in g.x.items()}
    return g, x


def test_per_graph_conv_equals_stock_hanconv_on_one_graph():
    torch.manual_seed(0)
    _, obs = sim_obs(steps=5)
    g, x = _graph_inputs(obs[4])
    ours = PerGraphHANConv(16, 16, METADATA, heads=4, self_relation=False)
    stock = HANConv(16, 16, METADATA, heads=4)
    stock.load_state_dict(ours.state_dict())
    a = ours(x, g.edge_index, g.batch, g.num_graphs)
    b = stock(x, g.edge_index)
    for t in METADATA[0]:
        assert torch.allclose(a[t], b[t], atol=1e-6), t


def test_per_graph_semantic_attention_is_batch_independent_unlike_stock():
    torch.manual_seed(0)
    _, obs = sim_obs(steps=8)
    ours = PerGraphHANConv(16, 16, METADATA, heads=4)
    stock = HANConv(16, 16, METADATA, heads=4)
    stock.load_state_dict(ours.state_dict())
    g1, x1 = _graph_inputs(obs[3])
    gb, xb = _graph_inputs(stack(obs))
    # sample 3's node inputs inside the batch are replaced by the single graph's inputs
    for t in x1:
        xb[t][gb.batch[t] == 3] = x1[t]
    alone = ours(x1, g1.edge_index, g1.batch, 1)
    inside = ours(xb, gb.edge_index, gb.batch, gb.num_graphs)
    for t in METADATA[0]:
        assert torch.allclose(inside[t][gb.batch[t] == 3], alone[t], atol=1e-6)
    # the stock layer depends on the rest of the batch (what the subclass fixes)
    s_alone = stock(x1, {k: v for k, v in g1.edge_index.items()})
    s_inside = stock(xb, gb.edge_index)
    assert (s_inside["cluster"][gb.batch["cluster"] == 3] - s_alone["cluster"]).abs().max() > 1e-4


def test_encoders_handle_empty_node_types():
    o = hand_obs()
    o["running_mask"].zero_()
    o["running_x"].zero_()
    o["pending_mask"].zero_()
    o["pending_where"].fill_(-1)
    o["feasible"].zero_()
    for enc in (GraphEncoder(7, 6, 6, hidden=16, layers=2, heads=4), MLPEncoder(7, 6, hidden=16)):
        out = enc(o)
        assert out.task.shape == (1, 3, 3, 16) and out.cluster.shape == (1, 3, 16) and out.glob.shape == (1, 16)
        assert torch.isfinite(out.task).all() and torch.isfinite(out.cluster).all()


def test_faithful_encoder_is_the_plain_stack():
    enc = HANEncoder({"pending": 7, "running": 6, "cluster": 8, "shortcut": 1}, hidden=256, layers=6, heads=4,
                     faithful=True)
    assert len(enc.convs) == 6 and enc.norms is None and enc.inp is None
    assert enc.convs[0].heads == 4 and enc.convs[-1].out_channels == 256
    out = GraphEncoder(7, 6, 6, hidden=256, layers=6, heads=4, faithful=True)(hand_obs())
    assert out.task.shape == (1, 3, 3, 256)


def test_self_relation_distinguishes_single_cluster_tasks():
    # tasks B and E are pending only at cluster 1, with different features
    torch.manual_seed(0)
    o = hand_obs()
    o["pending_mask"][0, 1, 1] = 1
    o["feasible"][0, 1, 1] = 1
    o["pending_where"][0, 1, 1, 1] = 1
    o["pending_x"][0, 1, 1, 0] = 0.5
    o["pending_x"][0, 1, 1, -1] = 0.0
    enc = GraphEncoder(7, 6, 6, hidden=16, layers=2, heads=4, faithful=True)
    out = enc(o)
    assert not torch.allclose(out.task[0, 1, 0], out.task[0, 1, 1], atol=1e-4)
    # without the self relation (the stock semantics) the two embeddings coincide
    for conv in enc.han.convs:
        conv.self_relation = False
    out = enc(o)
    assert torch.allclose(out.task[0, 1, 0], out.task[0, 1, 1], atol=1e-6)


# ------------------------------------------------------------------------ heads
def test_agent_linear_unshared_equals_per_agent_linear():
    torch.manual_seed(0)
    lin = AgentLinear(3, 5, 4)
    x = torch.randn(2, 3, 7, 5)
    y = lin(x)
    for i in range(3):
        ref = nn.functional.linear(x[:, i], lin.weight[i], lin.bias[i])
        assert torch.allclose(y[:, i], ref, atol=1e-6)
    shared = AgentLinear(1, 5, 4)
    assert shared(torch.randn(2, 6, 5)).shape == (2, 6, 4)  # any number of agents
    with pytest.raises(ValueError, match="agents"):
        lin(torch.randn(2, 4, 5))


def test_allocation_mask_bounds_and_void():
    # C1 = 4, G1 = 3: index = c * 3 + g
    m = allocation_mask(torch.tensor([2, 1]), torch.tensor([3, 1]), (4, 3))
    valid = sorted(torch.nonzero(m).flatten().tolist())
    assert valid == [0, 2 * 3 + 1, 3 * 3 + 1]
    # min above the bound: only void
    m = allocation_mask(torch.tensor([2, 1]), torch.tensor([1, 2]), (4, 3))
    assert torch.nonzero(m).flatten().tolist() == [0]


def test_allocation_head_masks_logits():
    head = AllocationHead(1, 8, (4, 3))
    logits = head(torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.tensor([2, 1]).expand(2, 3, 2),
                  torch.tensor([3, 2]).expand(2, 3, 2))
    p = torch.softmax(logits, -1)
    allowed = [0, 7, 8, 10, 11]
    assert torch.allclose(p[..., allowed].sum(-1), torch.ones(2, 3))
    assert (p[..., [i for i in range(12) if i not in allowed]] == 0).all()


def test_critic_output_is_linear_and_any_n():
    torch.manual_seed(0)
    critic = CentralCritic(1, 8)
    with torch.no_grad():
        critic.l2.bias.fill_(-50.0)
    v3 = critic(torch.randn(4, 3, 8), torch.randn(4, 8))
    v6 = critic(torch.randn(4, 6, 8), torch.randn(4, 8))
    assert v3.shape == (4, 3) and v6.shape == (4, 6)
    assert (v3 < 0).all()  # no final ReLU: negative values (returns are <= 0) are reachable


def test_pointer_masks_and_is_permutation_equivariant():
    torch.manual_seed(0)
    ptr = PointerNet(1, 16, layers=2, heads=4, ffn=32)
    slots = torch.randn(1, 2, 5, 16)
    occ = torch.tensor([[[1, 1, 0, 1, 1], [1, 0, 0, 0, 0]]], dtype=torch.bool)
    feas = torch.tensor([[[1, 0, 0, 1, 1], [1, 0, 0, 0, 0]]], dtype=torch.bool)
    p = torch.softmax(ptr(slots, occ, feas), -1)
    assert (p[0, 0, [1, 2]] == 0).all() and p[0, 1, 0].item() == 1.0
    perm = torch.tensor([4, 2, 0, 1, 3])
    pp = torch.softmax(ptr(slots[:, :, perm], occ[:, :, perm], feas[:, :, perm]), -1)
    assert torch.allclose(pp, p[:, :, perm], atol=1e-6)
    # the content of an empty (padded) slot does not matter
    s2 = slots.clone()
    s2[0, 0, 2] = 100.0
    assert torch.allclose(torch.softmax(ptr(s2, occ, feas), -1), p, atol=1e-6)


def test_pointer_layer_equals_torch_transformer_encoder_layer():
    """The pointer's transformer layer (shared weights) is torch's post-norm
    ``TransformerEncoderLayer`` (ReLU, no dropout) with the empty slots as padded keys."""
    from networks.pointer import AgentTransformerLayer

    torch.manual_seed(0)
    dim, heads, ffn, B, N, P = 16, 4, 32, 3, 2, 7
    ours = AgentTransformerLayer(1, dim, heads, ffn)
    ref = torch.nn.TransformerEncoderLayer(dim, heads, ffn, dropout=0.0, batch_first=True)
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(ours.qkv.weight[0])
        ref.self_attn.in_proj_bias.copy_(ours.qkv.bias[0])
        for mine, theirs in ((ours.out, ref.self_attn.out_proj), (ours.ff1, ref.linear1), (ours.ff2, ref.linear2)):
            theirs.weight.copy_(mine.weight[0])
            theirs.bias.copy_(mine.bias[0])
        for mine, theirs in ((ours.norm1, ref.norm1), (ours.norm2, ref.norm2)):
            theirs.weight.copy_(0.5 + torch.rand(dim))
            theirs.bias.copy_(torch.randn(dim))
            mine.weight.copy_(theirs.weight.unsqueeze(0))
            mine.bias.copy_(theirs.bias.unsqueeze(0))
    x = torch.randn(B, N, P, dim)
    attend = torch.rand(B, N, P) < 0.6
    attend[..., 0] = True
    expected = ref(x.view(B * N, P, dim), src_key_padding_mask=~attend.view(B * N, P)).view(B, N, P, dim)
    assert (ours(x, attend) - expected).abs().max() < 1e-5


def test_factorised_allocation_head_is_additive_with_its_own_void_logit():
    """logit[c, g] = u[c] + v[g] on unmasked cells, void (index 0) from its own output, masks kept."""
    import torch

    from networks.heads import MASK_VALUE, AllocationHead

    torch.manual_seed(0)
    c1, g1 = 5, 4
    head = AllocationHead(n_agents=1, hidden=8, alloc_dims=(c1, g1), form="factorised")
    task, cluster = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    low = torch.tensor([1, 1]).expand(2, 3, 2)
    high = torch.tensor([c1 - 1, g1 - 1]).expand(2, 3, 2)
    logits = head(task, cluster, low, high).view(2, 3, c1, g1)
    cell = logits[..., 1:, 1:]  # the unmasked box [1..c1-1] x [1..g1-1]
    # additivity: differences between two GPU counts do not depend on the CPU count
    diff = cell[..., :, 1:] - cell[..., :, :1]
    torch.testing.assert_close(diff, diff[..., :1, :].expand_as(diff))
    # cells below the minimum (c = 0 or g = 0, except the void index 0) are masked
    assert torch.all(logits[..., 0, 1:] == MASK_VALUE) and torch.all(logits[..., 1:, 0] == MASK_VALUE)
    # the void logit is a separate output, not u[0] + v[0]
    raw = head.out(torch.relu(head.task(task) + head.cluster(cluster)))
    torch.testing.assert_close(logits[..., 0, 0], raw[..., -1])
    joint = AllocationHead(n_agents=1, hidden=8, alloc_dims=(c1, g1), form="joint")
    assert joint.out.weight.shape[-2] == c1 * g1 and head.out.weight.shape[-2] == c1 + g1 + 1
