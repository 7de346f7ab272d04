"""Warm start by imitation (agents/training/imitation.py): the teacher's rounds, the loss terms, cloning
and DAgger, and ``train.imitate`` end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import train as train_cli
from agents.baselines import make_scheduler
from agents.training.imitation import (
    clone,
    discounted_returns,
    imitation_losses,
    merge,
    offered_only,
    record_teacher,
    teacher_action,
    teacher_seeds,
    warm_start,
)
from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from envs.config import ConfigError, load_scenario
from envs.joint_action import random_valid_action
from envs.observation import ObservationSpec
from envs.scheduling import Decision, run_episode

SMALL = PolicyConfig(hidden=16, han_layers=1, pointer_layers=1, pointer_ffn=32, pointer_dim=16)
TEACHER = "optimus:preemptive=false"


def _policy(cfg, seed: int = 0) -> TapFingerPolicy:
    torch.manual_seed(seed)
    return TapFingerPolicy(ObservationSpec.from_config(cfg), SMALL)


def test_teacher_action_names_slots_and_allocations():
    pending = np.array([[7, 3, -1], [3, 9, -1]])
    decision = Decision(placements=[(0, 3, 2, 1), (0, 7, 4, 4), (1, 9, 3, 2)])
    action = teacher_action(decision, pending, single=False, gpu_axis=17, teacher="t")
    # cluster 0: its first start (task 3, slot 1); cluster 1: task 9 in slot 1
    np.testing.assert_array_equal(action, [[1, 2 * 17 + 1, 0], [1, 3 * 17 + 2, 0]])
    assert not teacher_action(Decision(), pending, single=True, gpu_axis=17, teacher="t").any()


def test_preemptive_teacher_is_refused():
    decision = Decision(allocations={0: {5: (2, 1)}})
    with pytest.raises(ConfigError, match="non-preemptive"):
        teacher_action(decision, np.full((1, 2), -1), single=True, gpu_axis=17, teacher="optimus")


@pytest.mark.parametrize("scenario", ["synthetic-3", "multi-3"])
def test_recorded_rounds_replay_the_teacher_exactly(scenario):
    """Played through the env round by round, the teacher's episodes have the JCTs the
    evaluation runner gives it: the rounds are the teacher's decisions, nothing lost or added."""
    cfg = load_scenario(scenario, ["num_tasks=40", "max_start_slowdown=0"])  # the floor would void slow starts
    seeds = [1_000_001, 1_000_002]
    demos = record_teacher(cfg, TEACHER, seeds, gamma=0.99)
    runner = np.mean([run_episode(cfg, make_scheduler("optimus", preemptive=False), s).mean_jct for s in seeds])
    assert demos.mean_jct == pytest.approx(runner, abs=1e-12)
    assert demos.action.shape == (len(demos), cfg.num_clusters, 3)
    assert demos.returns.shape == (len(demos), cfg.num_clusters)
    assert (demos.action[..., 2] == 0).all() and (demos.action[..., 1] > 0).any()
    assert demos.returns.max() <= 0  # team reward -(tasks alive)


def test_offered_only_voids_starts_the_observation_holds_back():
    action = np.array([[1, 40, 0], [0, 0, 0], [2, 18, 0]])
    feasible = np.array([[1, 0, 1], [1, 1, 1], [1, 1, 1]], dtype=np.int8)
    np.testing.assert_array_equal(offered_only(action, feasible), [[0, 0, 0], [0, 0, 0], [2, 18, 0]])
    assert offered_only(action, np.ones_like(feasible)) is action  # nothing held back: unchanged


def test_recorded_labels_follow_the_start_floor():
    """With ``max_start_slowdown`` every recorded start is on an offered slot (the loss stays
    finite); the teacher's slow starts became voids, so its played episode differs."""
    cfg = load_scenario("synthetic-3", ["num_tasks=40", "max_start_slowdown=1"])
    demos = record_teacher(cfg, TEACHER, [1_000_001], gamma=0.99)
    start = demos.action[..., 1] > 0
    t, i = np.nonzero(start)
    assert start.any() and (demos.obs["feasible"][t, i, demos.action[t, i, 0]] == 1).all()
    free = record_teacher(load_scenario("synthetic-3", ["num_tasks=40"]), TEACHER, [1_000_001], gamma=0.99)
    assert demos.mean_jct != free.mean_jct


def test_discounted_returns():
    r = np.array([[-1.0, -2.0], [-3.0, 0.0]])
    np.testing.assert_allclose(discounted_returns(r, 0.5), [[-2.5, -2.0], [-3.0, 0.0]])


def test_loss_terms_match_the_policy_probabilities():
    cfg = load_scenario("synthetic-3", ["num_tasks=30"])
    demos = record_teacher(cfg, TEACHER, [1_000_003], gamma=0.99)
    policy = _policy(cfg)
    obs = policy.as_tensors({k: torch.as_tensor(v) for k, v in demos.obs.items()})
    act = torch.as_tensor(demos.action)
    with torch.no_grad():
        nll, active, value = imitation_losses(policy, obs, act)
        sel, alloc = policy.probabilities(obs)
        logp, _, skip = policy.evaluate_actions(obs, act)
    assert torch.equal(active, ~skip)
    start = act[..., 1] > 0
    assert start.any() and (active & ~start).any()  # both kinds of decision are covered
    # a start: the log-probability the PPO update uses for the same action
    torch.testing.assert_close(-nll[start], logp[start], rtol=1e-5, atol=1e-5)
    # a void: log of sum over slots of p(slot) * p(void | slot)
    void = active & ~start
    by_hand = torch.log((sel * alloc[..., 0]).sum(-1))
    torch.testing.assert_close(-nll[void], by_hand[void], rtol=1e-4, atol=1e-5)
    assert (nll[~active] == 0).all()
    assert value.shape == nll.shape


@pytest.mark.parametrize("variant", ["vanilla", "no-pointer"])
def test_fixed_selectors_imitate_the_allocation_only(variant):
    """A selector without weights cannot learn the teacher's choice of task (and gives it
    probability 0 when the fixed rule picks another slot): a start costs -log p(a | s) only."""
    cfg = load_scenario("sjf-3", ["num_tasks=30"])
    demos = record_teacher(cfg, TEACHER, [1_000_003], gamma=0.99)
    torch.manual_seed(0)
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, variant=variant))
    obs = policy.as_tensors({k: torch.as_tensor(v) for k, v in demos.obs.items()})
    act = torch.as_tensor(demos.action)
    nll, active, _ = imitation_losses(policy, obs, act)
    _, alloc = policy.probabilities(obs)
    slot, size = act[..., 0], act[..., 1]
    start = active & (size > 0)
    assert start.any()
    by_hand = -torch.log(alloc.gather(2, slot[..., None, None].expand(-1, -1, 1, alloc.shape[-1])).squeeze(2)
                         .gather(-1, size[..., None]).squeeze(-1))
    torch.testing.assert_close(nll[start].detach(), by_hand[start], rtol=1e-4, atol=1e-5)
    assert torch.isfinite(nll).all() and nll[start].max() < 20
    nll[active].mean().backward()  # the allocation head learns from it
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.alloc_head.parameters())


def test_clone_fits_the_teacher_and_is_seeded():
    cfg = load_scenario("synthetic-3", ["num_tasks=30"])
    demos = record_teacher(cfg, TEACHER, [1_000_004, 1_000_005], gamma=0.99)
    a, b = _policy(cfg), _policy(cfg)
    ra = clone(a, demos, epochs=20, lr=3e-3, batch_size=64, seed=1)
    rb = clone(b, demos, epochs=20, lr=3e-3, batch_size=64, seed=1)
    assert ra.actor_loss == rb.actor_loss  # same seed, same minibatches, same result
    assert ra.actor_loss[-1] < 0.75 * ra.actor_loss[0]
    assert ra.critic_loss[-1] < ra.critic_loss[0]
    assert ra.return_count == demos.returns.size
    assert ra.return_var == pytest.approx(float(demos.returns.var()))


def test_dagger_labels_the_students_states():
    cfg = load_scenario("synthetic-3", ["num_tasks=30"])
    policy = _policy(cfg)
    rng = np.random.default_rng(0)
    gpu_axis = ObservationSpec.from_config(cfg).alloc_dims[1]
    played = record_teacher(cfg, TEACHER, [1_000_006], gamma=0.99,
                            student=lambda obs: random_valid_action(obs, gpu_axis, rng))
    teacher = record_teacher(cfg, TEACHER, [1_000_006], gamma=0.99)
    # a random student schedules worse than the teacher; the teacher labels the states it reaches
    assert played.mean_jct > teacher.mean_jct
    assert (played.action[..., 1] > 0).any()
    # a student that never starts anything is cut off after max_rounds
    idle = record_teacher(cfg, TEACHER, [1_000_006], gamma=0.99, student=lambda obs: np.zeros((3, 3), np.int64),
                          max_rounds=50)
    # its episode is cut off with nothing finished: the mean JCT counts the waiting tasks' time so far
    assert len(idle) == 50 and idle.mean_jct > teacher.mean_jct
    both = merge(teacher, played)
    assert len(both) == len(teacher) + len(played) and both.episodes == 2
    out = warm_start(policy, cfg, TEACHER, episodes=1, rounds=1, epochs=1, lr=1e-3, batch_size=64,
                     gamma=0.99, seed=0, seed_low=1_000_000)
    assert len(out.played_mean_jct) == 2 and len(out.clones) == 2 and len(out.clones[1].actor_loss) == 1
    assert out.teacher_mean_jct == out.played_mean_jct[0]


def test_teacher_seeds_are_training_seeds_and_reproducible():
    a = teacher_seeds(3, 1, 5, 1_000_000)
    assert a == teacher_seeds(3, 1, 5, 1_000_000) and a != teacher_seeds(3, 2, 5, 1_000_000)
    assert min(a) >= 1_000_000


TINY = ["num_tasks=12", "policy.hidden=16", "policy.han_layers=1", "policy.pointer_layers=1", "policy.pointer_ffn=32",
        "train.collect_steps=40", "train.batch_size=16", "train.eval_episodes=1", "train.eval_every=40",
        "train.torch_threads=1", "train.progress=false"]


def test_train_cli_imitate_end_to_end(tmp_path: Path, capsys):
    argv = ["--config", "sjf-3", "--steps", "40", "--envs", "2", "--logdir", str(tmp_path), *TINY,
            f"train.imitate={TEACHER}", "train.imitate_episodes=1", "train.imitate_rounds=1", "train.imitate_epochs=1",
            "train.run_name=imit"]
    assert train_cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "imitation: teacher optimus:preemptive=false mean JCT" in out and "imitation round 1" in out
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(tmp_path / "imit"), size_guidance={"scalars": 0})
    ea.Reload()
    assert {"warmstart/actor_loss", "warmstart/teacher_mean_jct"} <= set(ea.Tags()["scalars"])


@pytest.mark.parametrize("teacher, message", [("nosuch", "unknown scheduler"), ("optimus", "non-preemptive")])
def test_train_cli_bad_teacher_exits_2(tmp_path: Path, capsys, teacher, message):
    argv = ["--config", "sjf-3", "--steps", "40", "--envs", "2", "--logdir", str(tmp_path), *TINY,
            f"train.imitate={teacher}", "train.imitate_episodes=1"]
    assert train_cli.main(argv) == 2
    assert message in capsys.readouterr().err
