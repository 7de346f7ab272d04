"""The public observation layout (``FeatureColumns``) and feature constants (``ObservationTables``):
the columns say where each documented feature is, and both observation builders share the tables."""

from __future__ import annotations

import math

import numpy as np

from envs.batched import BatchedEdgeClusters
from envs.config import load_scenario
from envs.core import Simulator
from envs.joint_action import apply_joint_action, random_valid_action
from envs.observation import (
    CLUSTER_FEATURES, FeatureColumns, ObservationBuilder, ObservationSpec, ObservationTables, feature_columns,
)


def test_columns_follow_the_documented_layout():
    for K in (1, 2, 5):
        col = feature_columns(K)
        assert col is feature_columns(K) and col == FeatureColumns(K)
        pending = [col.cpu, col.gpu, *range(K + 2)[col.types], col.time, col.reach, col.dummy]
        running = [col.cpu, col.gpu, *range(K + 2)[col.types], col.time, col.progress]
        assert pending == list(range(col.pending_features)) == list(range(K + 5))
        assert running == list(range(col.running_features)) == list(range(K + 4))
        assert list(range(8)[col.resources]) == [col.cpu, col.gpu] and col.types.start == col.type_first
        cluster = [col.free_cpu, col.free_gpu, col.capacity_cpu, col.capacity_gpu, col.queue, col.running_tasks]
        assert cluster == list(range(col.cluster_features)) == list(range(CLUSTER_FEATURES))
        assert list(range(6)[col.free]) == cluster[:2] and list(range(6)[col.capacity]) == cluster[2:4]


def test_columns_read_the_features_they_name():
    cfg = load_scenario("synthetic-3")
    spec = ObservationSpec.from_config(cfg)
    col, tab = spec.columns, ObservationTables.from_spec(spec)
    assert (spec.Fp, spec.Fr, spec.Fc) == (col.pending_features, col.running_features, col.cluster_features)
    sim = Simulator(cfg, 3)
    builder = ObservationBuilder(spec)
    rng = np.random.default_rng(0)
    for _ in range(40):
        obs = builder(sim)
        apply_joint_action(sim, random_valid_action(obs, spec.alloc_dims[1], rng))
        sim.advance()
    obs = builder(sim)
    px, pm = obs["pending_x"], obs["pending_mask"].astype(bool)
    assert np.all(px[~pm][:, col.dummy] == 1) and np.all(px[pm][:, col.dummy] == 0)
    assert np.all(px[pm][:, col.types].sum(-1) == 1)
    np.testing.assert_allclose(px[pm][:, col.resources] * np.array(spec.per_task_max), obs["pending_min"][pm],
                               atol=1e-5)
    rx, rm = obs["running_x"], obs["running_mask"].astype(bool)
    assert rm.any() and np.all(rx[rm][:, col.types].sum(-1) == 1)
    assert np.all((0 <= rx[rm][:, col.progress]) & (rx[rm][:, col.progress] <= 1))
    cx = obs["cluster_x"]
    np.testing.assert_allclose(cx[:, col.free] * np.array(spec.scale), sim.free, atol=1e-5)
    np.testing.assert_allclose(cx[:, col.capacity] * np.array(spec.scale), sim.capacity, atol=1e-5)
    np.testing.assert_allclose(cx[:, col.running_tasks] * spec.M, rm.sum(1), atol=1e-5)
    assert np.all(tab.time_log[: sim.t + 1] == builder.tables.time_log[: sim.t + 1])
    assert math.isclose(float(tab.time_log[100]), 1.0, rel_tol=1e-6)


def test_both_builders_share_the_tables():
    batch = BatchedEdgeClusters("synthetic-6", 2)
    builder = ObservationBuilder(batch.obs_spec)
    a, b = builder.tables, batch.tables
    for name in ("inv_per_task_max", "inv_scale", "time_log", "type_onehot"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.inv_running_slots == b.inv_running_slots and a.log_scale == b.log_scale
    assert builder.columns == batch.columns == batch.obs_spec.columns
