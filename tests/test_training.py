"""Training pipeline: smoke run, TensorBoard scalars, checkpoints, resume, Ctrl-C,
determinism, seed disjointness, per-agent GAE and the CLI's exit-2 paths.

Runs are tiny (sjf-3 with a dozen tasks, a small network, one thread) so the file stays
within its CI budget.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import train as train_cli
from agents.training.checkpoints import BEST, LAST, load_checkpoint
from agents.training.config import EVAL_SEED_DEFAULT, TRAIN_SEED_MIN, TrainConfig, split_overrides
from agents.training.envs import make_env
from agents.training.loop import run_training
from agents.training.prepare import prepare_run
from agents.training.tianshou_glue.algorithm import MultiAgentPPO
from agents.training.vector_env import SeedSchedule
from envs.config import ConfigError, load_scenario

TINY = ["num_tasks=12", "policy.hidden=16", "policy.han_layers=1", "policy.pointer_layers=1", "policy.pointer_ffn=32"]
FAST = [
    "train.collect_steps=40", "train.batch_size=16", "train.eval_episodes=1", "train.eval_every=40",
    "train.torch_threads=1", "train.progress=false", "train.max_batchsize=256", "train.repeat=2",
]


def _spec(tmp_path: Path, *extra: str, steps: int = 80, envs: int = 2, seed: int = 0, config: str = "sjf-3", **kw):
    flags = {"steps": steps, "envs": envs, "seed": seed, "logdir": str(tmp_path), "vector": kw.pop("vector", "dummy")}
    return prepare_run(config, [*TINY, *FAST, *extra], flags=flags, **kw)


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag's points, the run's event files (one per process) read in the order the processes
    started: their names order two files of one second by a per-process counter compared as text
    (``.10`` before ``.8``), as TensorBoard's directory reader reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = []
    for path in run_dir.glob("*tfevents*"):
        ea = EventAccumulator(str(path), size_guidance={"scalars": 0})
        ea.Reload()
        files.append(ea)
    out: dict[str, list[tuple[int, float]]] = {}
    for ea in sorted(files, key=lambda a: a.FirstEventTimestamp()):
        for tag in ea.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in ea.Scalars(tag))
    return out


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory):
    """One short training run (2 evaluations) shared by the smoke and resume tests."""
    tmp = tmp_path_factory.mktemp("smoke")
    spec = _spec(tmp, "train.run_name=smoke", "train.gamma=null", steps=80)  # multi mode's own gamma
    result = run_training(spec)
    return spec, result


# ---------------------------------------------------------------------------------------
# smoke: losses, checkpoints, scalars
# ---------------------------------------------------------------------------------------
def test_smoke_run_writes_checkpoints_config_and_finite_losses(smoke_run):
    spec, result = smoke_run
    run_dir = spec.run_dir
    assert run_dir == Path(spec.train.logdir) / "smoke"
    assert (run_dir / LAST).is_file() and (run_dir / BEST).is_file() and (run_dir / "config.yaml").is_file()
    assert result.env_steps == 80 and result.epochs == 2 and not result.interrupted
    assert result.update_steps == 2 and result.gradient_steps == 2 * 2 * 2  # 2 updates x repeat 2 x 2 minibatches
    ckpt = load_checkpoint(run_dir / LAST)
    assert ckpt["counters"]["env_step"] == 80
    assert ckpt["counters"]["gradient_steps"] == result.gradient_steps
    for key in ("model", "policy_config", "scenario", "obs_spec", "optimizer", "rng", "train_config", "return_scaler"):
        assert key in ckpt
    assert ckpt["scenario"]["num_tasks"] == 12 and ckpt["policy_config"]["hidden"] == 16
    assert ckpt["optimizer"]["state"], "optimizer state (Adam moments) must be saved"
    assert all(group["fused"] for group in ckpt["optimizer"]["param_groups"])  # agents.training.optimizer
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["scenario"]["num_tasks"] == 12 and cfg["train"]["steps"] == 80 and cfg["meta"]["gamma"] == 1.0
    assert result.best_mean_jct is not None and math.isfinite(result.best_mean_jct) and result.best_mean_jct >= 1.0
    # the critic's health at the end of the run: the means of the two updates' logged statistics
    critic = json.loads((run_dir / "result.json").read_text())["critic"]
    logged = _scalars(run_dir)
    assert critic["updates"] == 2
    for key in ("explained_variance", "return_scale", "return_std"):
        assert critic[key] == pytest.approx(np.mean([v for _, v in logged[f"update/{key}"]]), rel=1e-5)


def test_smoke_run_tensorboard_scalars(smoke_run):
    spec, _ = smoke_run
    sc = _scalars(spec.run_dir)
    required = [
        "update/policy_loss", "update/value_loss", "update/entropy", "update/approx_kl", "update/clip_fraction",
        "update/explained_variance", "update/return_scale", "update/return_std", "training/returns_stat/mean", "test/mean_jct", "training/conflict_rate",
        "training/void_rate", "training/invalid_rate", "training/cpu_util", "training/gpu_util",
        "usage/env_steps_per_s", "training/collect_speed",
    ]
    missing = [t for t in required if t not in sc]
    assert not missing, f"missing scalars {missing}; have {sorted(sc)}"
    for tag in ("update/policy_loss", "update/value_loss", "update/entropy", "update/loss"):
        assert all(math.isfinite(v) for _, v in sc[tag]), tag
    assert [s for s, _ in sc["update/policy_loss"]] == [1, 2]
    # evaluations: initial + one per epoch, at env steps 0, 40, 80
    assert [s for s, _ in sc["test/mean_jct"]] == [0, 40, 80]
    assert all(v >= 1.0 for _, v in sc["test/mean_jct"])
    assert 0.0 <= sc["training/conflict_rate"][-1][1] <= 1.0
    # the stored behaviour log-probs equal the recomputed ones (no sampling mismatch)
    assert all(abs(v) < 1e-4 for _, v in sc["update/logp_mismatch"])
    # only the scalars a user reads: no save/*, info/*, smoothed copies or step counters
    noise = [t for t in sc if t.startswith(("save/", "info/")) or "smoothed_loss" in t
             or t in ("training/env_step", "test/env_step", "update/update_step")]
    assert not noise, noise
    assert len(sc) <= 40, sorted(sc)


def test_resume_continues_counters_and_tensorboard(smoke_run, tmp_path):
    spec, _ = smoke_run
    # copy the run so the shared fixture stays intact
    import shutil

    run_dir = tmp_path / "resumed"
    shutil.copytree(spec.run_dir, run_dir)
    before = load_checkpoint(run_dir / LAST)["counters"]
    spec2 = prepare_run(None, ["train.eval_every=40"], flags={"steps": 120}, resume=str(run_dir / LAST))
    assert spec2.run_dir == run_dir
    assert spec2.scenario.num_tasks == 12 and spec2.policy.hidden == 16
    result = run_training(spec2)
    after = load_checkpoint(run_dir / LAST)["counters"]
    assert after["env_step"] == before["env_step"] + 40 == result.env_steps == 120
    assert after["update_step"] == before["update_step"] + 1
    assert after["epoch"] == before["epoch"] + 1
    assert after["gradient_steps"] > before["gradient_steps"]
    assert after["restarts"] == before["restarts"] + 1
    sc = _scalars(run_dir)  # same TensorBoard run directory: old and new events together
    steps = [s for s, _ in sc["training/collect_speed"]]
    assert steps == [40, 80, 120]
    assert [s for s, _ in sc["update/policy_loss"]] == [1, 2, 3]
    assert before["devices"] == ["cpu"] and after["devices"] == ["cpu"] and result.device == "cpu"


@pytest.mark.parametrize("recorded", ["counters", "config.yaml"])
def test_a_run_resumed_on_another_device_names_both(smoke_run, tmp_path, recorded):
    """As if the run's first part had trained on a GPU: said by the checkpoint's counters, or, in a
    checkpoint saved before they listed devices, by the run directory's config.yaml."""
    import shutil

    import yaml

    spec, _ = smoke_run
    run_dir = tmp_path / "moved"
    shutil.copytree(spec.run_dir, run_dir)
    ckpt = load_checkpoint(run_dir / LAST)
    if recorded == "counters":
        ckpt["counters"]["devices"] = ["cuda"]
    else:
        del ckpt["counters"]["devices"]
        doc = yaml.safe_load((run_dir / "config.yaml").read_text())
        doc["meta"]["device"] = "cuda:0"
        (run_dir / "config.yaml").write_text(yaml.safe_dump(doc))
    torch.save(ckpt, run_dir / LAST)
    spec2 = prepare_run(None, [], flags={"steps": 120}, resume=str(run_dir / LAST))
    result = run_training(spec2)
    assert result.device == "cuda+cpu"
    assert load_checkpoint(run_dir / LAST)["counters"]["devices"] == ["cuda", "cpu"]
    assert json.loads((run_dir / "result.json").read_text())["device"] == "cuda+cpu"


def _interrupt_the_step_starting_at(monkeypatch: pytest.MonkeyPatch, env_step: int) -> None:
    """Ctrl-C at the start of the training step that begins at ``env_step`` (after the callbacks'
    own start-of-step callback, so a periodic last.pt is as it would be)."""
    from agents.training.callbacks import TrainerCallbacks

    original = TrainerCallbacks.training_fn

    def stop(self, epoch, step):
        original(self, epoch, step)
        if step == env_step:
            raise KeyboardInterrupt

    monkeypatch.setattr(TrainerCallbacks, "training_fn", stop)


def test_a_run_resumed_inside_an_interval_stays_on_the_uninterrupted_grid(tmp_path, monkeypatch):
    """Stopped at env step 40 of an 80-step evaluation interval, the resumed run first finishes
    that interval: it evaluates at 80 and 160, as an uninterrupted run does, and ends at the
    planned 160 steps (re-planning from 40 would evaluate at 120 and end at 200)."""
    from agents.training.loop import TrainingInterrupted

    spec = _spec(tmp_path, "train.run_name=grid", "train.eval_every=80", steps=160)
    assert spec.train.planned_env_steps() == 160
    _interrupt_the_step_starting_at(monkeypatch, 40)
    with pytest.raises(TrainingInterrupted):
        run_training(spec)
    monkeypatch.undo()
    assert load_checkpoint(spec.run_dir / LAST)["counters"]["env_step"] == 40
    resumed = prepare_run(None, [], flags={}, resume=str(spec.run_dir / LAST))
    assert resumed.train.interval_plan(40) == (40, 80, 2) and resumed.train.planned_env_steps(40) == 160
    result = run_training(resumed)
    assert result.env_steps == 160
    scalars = _scalars(spec.run_dir)
    assert [s for s, _ in scalars["test/mean_jct"]] == [0, 80, 160]
    # the resumed run's first evaluation reaches the callbacks' best-keeping (tianshou would
    # otherwise compare it with its initial score of 0, which no -mean JCT beats)
    assert 80 in [s for s, _ in scalars["test/best_mean_jct"]]


def test_an_update_interrupted_part_way_is_undone_so_last_pt_matches_its_env_steps(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) after the first minibatch step of the update that follows env step 80
    leaves a last.pt equal to one saved by a stop just before that training step: the same
    counters, weights, optimizer and return scaling. Without the rollback the weights carry a
    partial update that the counters (env step 80, the old gradient steps) do not account for."""
    from agents.training.loop import TrainingInterrupted

    def interrupted_last(name: str) -> dict:
        spec = _spec(tmp_path, f"train.run_name={name}", steps=160)
        with pytest.raises(TrainingInterrupted):
            run_training(spec)
        return load_checkpoint(spec.run_dir / LAST)

    _interrupt_the_step_starting_at(monkeypatch, 80)
    reference = interrupted_last("between_steps")
    monkeypatch.undo()

    original_step = MultiAgentPPO._minibatch_step
    partial = {"steps": 0}

    def stop_inside_the_third_update(self, mb):
        out = original_step(self, mb)
        if self.update_count == 2:  # two updates done: this is the third one
            partial["steps"] += 1
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(MultiAgentPPO, "_minibatch_step", stop_inside_the_third_update)
    got = interrupted_last("inside_update")
    assert partial["steps"] == 1  # the interrupt came after a minibatch step had moved the weights

    for key in ("env_step", "gradient_steps", "update_step", "epoch"):
        assert got["counters"][key] == reference["counters"][key], key
    assert got["counters"]["env_step"] == 80 and got["counters"]["update_step"] == 2
    assert got["model"].keys() == reference["model"].keys()
    for name, tensor in reference["model"].items():
        assert torch.equal(got["model"][name], tensor), name
    for slot, state in reference["optimizer"]["state"].items():
        for k, v in state.items():
            assert torch.equal(torch.as_tensor(got["optimizer"]["state"][slot][k]), torch.as_tensor(v)), (slot, k)
    assert got["return_scaler"] == reference["return_scaler"]


def test_an_interrupted_best_pt_write_leaves_best_pt_last_pt_and_result_json_agreeing(tmp_path, monkeypatch):
    """Every validation improves (a patched score); Ctrl-C arrives while the second new best is
    being written. best.pt keeps the first best, and last.pt and result.json say that same best,
    not the one whose file never landed; a resumed run then finishes with all three agreeing."""
    from agents.training import callbacks as callbacks_module
    from agents.training.loop import TrainingInterrupted
    from agents.training.callbacks import TrainerCallbacks

    def improving(self, stats):  # mean JCT 100 at step 0, 99 at step 40, ...: every evaluation is a new best
        self.last_mean_jct = 100.0 - self.env_step() / 40
        self.last_score = -self.last_mean_jct
        return self.last_score

    writes = {"best": 0}
    original_save = callbacks_module.save_checkpoint

    def interrupted_second_best(path, *args, **kwargs):
        if Path(path).name == BEST:
            writes["best"] += 1
            if writes["best"] == 2:
                raise KeyboardInterrupt  # the atomic write never replaced the file
        return original_save(path, *args, **kwargs)

    monkeypatch.setattr(TrainerCallbacks, "compute_score_fn", improving)
    monkeypatch.setattr(callbacks_module, "save_checkpoint", interrupted_second_best)
    spec = _spec(tmp_path, "train.run_name=bestsig", steps=120)
    with pytest.raises(TrainingInterrupted):
        run_training(spec)

    def agreeing() -> float:
        best = load_checkpoint(spec.run_dir / BEST)["counters"]
        last = load_checkpoint(spec.run_dir / LAST)["counters"]
        result = json.loads((spec.run_dir / "result.json").read_text())
        assert last["best_score"] == best["best_score"] and last["best_env_step"] == best["best_env_step"]
        assert result["best_mean_jct"] == best["best_mean_jct"] and result["best_env_step"] == best["best_env_step"]
        return best["best_env_step"]

    assert writes["best"] == 2 and agreeing() == 0  # the step-0 best stands: its file is the one on disk
    monkeypatch.setattr(callbacks_module, "save_checkpoint", original_save)
    run_training(prepare_run(None, [], flags={}, resume=str(spec.run_dir / LAST)))
    assert agreeing() == 120


def test_resume_refuses_a_different_scenario_or_architecture(smoke_run, capsys):
    spec, _ = smoke_run
    last = str(spec.run_dir / LAST)
    with pytest.raises(ConfigError, match="num_tasks"):
        prepare_run(None, ["num_tasks=13"], resume=last)
    with pytest.raises(ConfigError, match="policy.hidden"):
        prepare_run(None, ["policy.hidden=32"], resume=last)
    with pytest.raises(ConfigError, match="connectivity.model"):  # a nested scenario key
        prepare_run(None, ["connectivity.model=random_subset"], resume=last)
    assert train_cli.main(["--resume", last, "--config", "multi-3"]) == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "Traceback" not in err
    assert train_cli.main(["--resume", last, "--steps", "80"]) == 2  # budget already spent
    assert "nothing to do" in capsys.readouterr().err


def test_resume_accepts_a_checkpoint_from_before_a_policy_field_existed(smoke_run, tmp_path):
    """A file saved before ``policy.conflicts`` existed (the key absent) resumes with the
    default; a real difference in that field is still refused."""
    spec, _ = smoke_run
    ckpt = torch.load(spec.run_dir / LAST, weights_only=True)
    del ckpt["policy_config"]["conflicts"]
    old = tmp_path / "old" / LAST
    old.parent.mkdir()
    torch.save(ckpt, old)
    resumed = prepare_run(None, [], flags={"steps": 200}, resume=str(old))
    assert resumed.policy.conflicts == "bayes"
    # a copied file is not in its run's directory: it goes on as a new run under the logdir
    assert resumed.fresh_dir and resumed.run_dir.parent == Path(spec.train.logdir) and resumed.run_dir != spec.run_dir
    with pytest.raises(ConfigError, match="policy.conflicts"):
        prepare_run(None, ["policy.conflicts=sequential"], flags={"steps": 200}, resume=str(old))


# ---------------------------------------------------------------------------------------
# Ctrl-C and determinism
# ---------------------------------------------------------------------------------------
def test_keyboard_interrupt_saves_last_checkpoint(tmp_path, monkeypatch, capsys):
    calls = {"n": 0}
    original = MultiAgentPPO._update_with_batch

    def interrupt_second_update(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MultiAgentPPO, "_update_with_batch", interrupt_second_update)
    argv = ["--config", "sjf-3", "--steps", "200", "--envs", "1", "--logdir", str(tmp_path), *TINY, *FAST,
            "train.run_name=ctrlc", "train.eval_every=200"]
    assert train_cli.main(argv) == 130
    assert "interrupted" in capsys.readouterr().err
    counters = load_checkpoint(tmp_path / "ctrlc" / LAST)["counters"]
    assert counters["env_step"] == 40 and counters["update_step"] == 1 and counters["epoch"] == 0


def test_same_seed_same_parameters(tmp_path, monkeypatch):
    from agents.training import validation_set

    def run(name: str, seed: int) -> tuple[dict[str, torch.Tensor], list]:
        spec = _spec(tmp_path, f"train.run_name={name}", steps=40, envs=2, seed=seed, config="synthetic-3",
                     vector="subproc")
        run_training(spec)
        return load_checkpoint(spec.run_dir / LAST)["model"], _scalars(spec.run_dir)["test/mean_jct"]

    a, jct_a = run("a", 3)
    # run b: same seed, evaluation ring buffer far shorter than an episode (metrics must not care)
    monkeypatch.setattr(validation_set, "EVAL_BUFFER_PER_ENV", 3)
    b, jct_b = run("b", 3)
    monkeypatch.undo()
    c, _ = run("c", 4)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert jct_a == jct_b and len(jct_a) == 2
    assert any(not torch.equal(a[k], c[k]) for k in a), "a different seed should give different parameters"


# ---------------------------------------------------------------------------------------
# units: seeds, overrides, GAE
# ---------------------------------------------------------------------------------------
def test_training_and_evaluation_workload_seeds_are_disjoint():
    train_seeds = [SeedSchedule((0, r, i)).next() for r in range(3) for i in range(4)]
    assert all(s >= TRAIN_SEED_MIN for s in train_seeds) and len(set(train_seeds)) == len(train_seeds)
    fixed = SeedSchedule(fixed=EVAL_SEED_DEFAULT + 2)
    assert fixed.next() == fixed.next() == EVAL_SEED_DEFAULT + 2
    with pytest.raises(ConfigError, match="eval_seed"):
        TrainConfig(eval_seed=TRAIN_SEED_MIN - 1, eval_episodes=8).validate()
    env = make_env(load_scenario("sjf-3", ["num_tasks=5"]).to_dict(), fixed_seed=10_001)
    _, info = env.reset()
    assert info["workload_seed"] == 10_001 and info["episode_end"] is False and info["agent_rewards"].shape == (3,)


def test_override_routing_and_typing():
    split = split_overrides(["train.lr=3e-4", "policy.hidden=64", "num_tasks=50", "scenario.connectivity.model=random_subset"])
    assert set(split.train) == {"lr"} and split.policy == {"hidden": 64}
    assert split.scenario == {"num_tasks": 50, "connectivity.model": "random_subset"}
    assert TrainConfig.from_dict(split.train).lr == 3e-4  # YAML reads "3e-4" as text; still a float
    cfg = TrainConfig.from_dict({"lr": 1, "gamma": None, "envs": 4.0})
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float) and cfg.envs == 4 and cfg.gamma is None
    assert cfg.resolved_gamma("multi") == 1.0 and cfg.resolved_gamma("single") == 0.99
    for bad in ({"lr": "abc"}, {"nope": 1}, {"envs": 1.5}, {"progress": 1}):
        with pytest.raises(ConfigError):
            TrainConfig.from_dict(bad)


def test_yaml_sections_flags_and_overrides_precedence(tmp_path):
    import yaml

    raw = yaml.safe_load((Path(__file__).resolve().parent.parent / "configs" / "sjf-3.yaml").read_text())
    raw["train"] = {"lr": 5e-4, "envs": 3, "eval_episodes": 2}
    raw["policy"] = {"hidden": 32, "variant": "no-han"}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = prepare_run(str(path), ["train.eval_episodes=5", "num_tasks=40"], flags={"envs": 4, "logdir": str(tmp_path)})
    assert spec.train.lr == 5e-4 and spec.train.envs == 4 and spec.train.eval_episodes == 5
    assert spec.policy.hidden == 32 and spec.policy.variant == "no-han"
    assert spec.scenario.name == "exp" and spec.scenario.num_tasks == 40
    assert spec.run_dir.parent == tmp_path and spec.run_dir.name.startswith("exp-no-han-s0-")
    assert prepare_run("sjf-3", [], variant="vanilla").policy.variant == "vanilla"


@pytest.mark.parametrize("penalty", [0.0, 0.5])
def test_per_agent_gae_matches_a_hand_computation(penalty):
    """Two agents, one finished episode of 3 steps and gamma 1, lambda 0.5, given values. With
    ``lost_claim_penalty`` an agent learns from its reward less the penalty at each step its
    stored action carries the lost-conflict flag (agent 1 at step 0, agent 0 at step 2)."""
    from tianshou.data import Batch, ReplayBuffer

    buf = ReplayBuffer(8)
    rew = np.array([[-1.0, -2.0], [0.0, 0.0], [-3.0, -1.0]])
    lost = np.array([[0, 1], [0, 0], [1, 0]])
    for t in range(3):
        act = np.stack([np.array([1, 2]), np.array([3, 0]), lost[t]], axis=1)  # (N, 3) [slot, allocation, lost]
        buf.add(Batch(obs=np.zeros(1), act=act, rew=float(rew[t].sum()), terminated=t == 2,
                      truncated=False, obs_next=np.zeros(1), info={"agent_rewards": rew[t]}))
    batch, idx = buf.sample(0)
    v = np.array([[0.5, 1.0], [0.2, -0.4], [1.5, 0.0]])
    v_next = np.array([[0.2, -0.4], [1.5, 0.0], [9.0, 9.0]])  # terminal next value is masked out

    class Stub:
        gamma, gae_lambda, return_scaling = 1.0, 0.5, False
        lost_claim_penalty = penalty
        batch_stats: dict = {}
        device = torch.device("cpu")
        value_mask = staticmethod(MultiAgentPPO.value_mask)
        episode_structure = MultiAgentPPO.episode_structure

        def _values(self, obs):
            return torch.as_tensor(v_next, dtype=torch.float32)

        def _next_values(self, batch, buffer, indices, v_s):  # the network part is stubbed
            return self._values(batch.obs_next)

    batch.v_s = torch.as_tensor(v, dtype=torch.float32)
    out = MultiAgentPPO._add_returns_and_advantages(Stub(), batch, buf, idx)
    expected = np.zeros((3, 2))
    for i in range(2):
        gae = 0.0
        for t in reversed(range(3)):
            nxt = 0.0 if t == 2 else v_next[t, i]
            delta = rew[t, i] - penalty * lost[t, i] + nxt - v[t, i]
            gae = delta + (0.0 if t == 2 else 0.5) * gae
            expected[t, i] = gae
    np.testing.assert_allclose(out.adv.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.returns.numpy(), expected + v, rtol=1e-5, atol=1e-5)
    assert Stub.batch_stats["return_scale"] == 1.0  # no return scaling: targets are the returns
    assert Stub.batch_stats["return_std"] == pytest.approx(float(np.std(expected + v)))


def test_return_scale_divides_the_value_targets_and_is_reported():
    """With return scaling the critic's outputs are multiplied, and the value targets divided, by
    the running std in place before the update; the update reports that divisor and the batch's
    own spread of unscaled returns."""
    from tianshou.data import Batch, ReplayBuffer

    from agents.training.return_scale import ReturnScale

    buf = ReplayBuffer(8)
    rew = np.array([[-40.0, -20.0], [-60.0, 0.0], [-30.0, -10.0]])
    for t in range(3):
        buf.add(Batch(obs=np.zeros(1), act=np.zeros(1), rew=float(rew[t].sum()), terminated=t == 2,
                      truncated=False, obs_next=np.zeros(1), info={"agent_rewards": rew[t]}))
    batch, idx = buf.sample(0)
    v = np.array([[0.5, 1.0], [0.2, -0.4], [1.5, 0.0]])  # in units of the running std

    class Stub:
        gamma, gae_lambda, return_scaling = 1.0, 1.0, True
        lost_claim_penalty = 0.0
        batch_stats: dict = {}
        device = torch.device("cpu")
        return_scale = ReturnScale()
        value_mask = staticmethod(MultiAgentPPO.value_mask)
        episode_structure = MultiAgentPPO.episode_structure

        def _next_values(self, batch, buffer, indices, v_s):  # the next step's value; the terminal one is masked
            return torch.cat([v_s[1:], torch.full_like(v_s[:1], 9.0)])

    Stub.return_scale.load_state({"mean": 0.0, "var": 400.0, "count": 10**9})  # std 20, frozen by the count
    batch.v_s = torch.as_tensor(v, dtype=torch.float32)
    out = MultiAgentPPO._add_returns_and_advantages(Stub(), batch, buf, idx)
    mc = np.cumsum(rew[::-1], axis=0)[::-1]  # gamma = lambda = 1: returns are the rewards to go
    np.testing.assert_allclose(out.returns.numpy(), mc / 20.0, rtol=1e-5)
    np.testing.assert_allclose(out.adv.numpy(), mc - 20.0 * v, rtol=1e-5)
    assert Stub.batch_stats["return_scale"] == pytest.approx(20.0)
    assert Stub.batch_stats["return_std"] == pytest.approx(float(np.std(mc)))


@pytest.mark.parametrize("window", [None, 512])
def test_return_scaling_window_lets_the_scale_follow_the_current_returns(window):
    """A first batch of returns 100x wider than the rest: the all-history std stays near that
    width; a window forgets it geometrically and ends at the recent returns' spread."""
    from agents.training.return_scale import ReturnScale

    scale, rng, n_agents = ReturnScale(window), np.random.default_rng(0), 3
    scale.update(rng.normal(-5000.0, 1000.0, size=(256, n_agents)))
    for _ in range(40):
        scale.update(rng.normal(-300.0, 10.0, size=(256, n_agents)))
    state = scale.state()
    std = math.sqrt(state["var"])
    assert scale.value == pytest.approx(std)
    if window is None:
        assert state["count"] == 41 * 256 * n_agents
        assert std > 100.0  # the random-policy era still sets the scale
    else:
        assert state["count"] == window * n_agents  # the cap is in env steps, x the agents
        assert 9.0 < std < 11.5 and abs(state["mean"] + 300.0) < 2.0


def test_return_scaling_window_is_validated():
    with pytest.raises(ConfigError, match="return_scaling_window"):
        TrainConfig(return_scaling_window=0).validate()
    assert TrainConfig(return_scaling_window=65536).validate().return_scaling_window == 65536


@pytest.mark.parametrize("bad", [-0.5, float("inf"), float("nan")])
def test_lost_claim_penalty_is_validated(bad):
    with pytest.raises(ConfigError, match="lost_claim_penalty"):
        TrainConfig(lost_claim_penalty=bad).validate()
    assert TrainConfig(lost_claim_penalty=4.0).validate().lost_claim_penalty == 4.0


# ---------------------------------------------------------------------------------------
# CLI exit code 2
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config", "no-such-scenario"], "unknown scenario"),
        (["--config", "sjf-3", "train.lr=abc"], "train.lr"),
        (["--config", "sjf-3", "train.nope=1"], "unknown train key"),
        (["--config", "sjf-3", "nope=1"], "nope"),
        (["--config", "sjf-3", "policy.hidden=-4"], "hidden"),
        (["--config", "sjf-3", "train.eval_action=greedy"], "eval_action"),
        (["--config", "sjf-3", "train.lr_schedule=cosine"], "lr_schedule"),
        (["--config", "sjf-3", "not-an-override"], "key=value"),
        (["--resume", "/no/such/dir/last.pt"], "not found"),
        ([], "--config is required"),
    ],
)
def test_bad_input_exits_2_without_traceback(argv, message, capsys, tmp_path):
    assert train_cli.main([*argv, "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not any(tmp_path.iterdir()), "nothing may be written on bad input"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here, so --device cuda is valid")
def test_device_cuda_without_cuda_exits_2(capsys, tmp_path):
    assert train_cli.main(["--config", "sjf-3", "--device", "cuda", "--logdir", str(tmp_path)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def _ray_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


@pytest.mark.skipif(_ray_importable(), reason="ray is installed, so --vector ray is valid")
def test_vector_ray_without_ray_exits_2(capsys, tmp_path):
    assert train_cli.main(["--config", "sjf-3", "--vector", "ray", "--logdir", str(tmp_path)]) == 2
    assert "pip install" in capsys.readouterr().err


@pytest.mark.skipif(not _ray_importable(), reason="ray is not installed (optional extra: pip install '.[ray]')")
def test_ray_vector_env_trains_with_a_local_ray_instance(tmp_path):
    import ray

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        spec = _spec(tmp_path, "train.run_name=ray", steps=40, envs=2, vector="ray")
        result = run_training(spec)
        assert result.env_steps == 40 and (spec.run_dir / LAST).is_file()
    finally:
        ray.shutdown()


@pytest.mark.parametrize("action, deterministic", [("argmax", True), ("sample", False), ("argmax-busy", True)])
def test_eval_action_sets_how_validation_acts(tmp_path, action, deterministic):
    from agents.training.envs import training_envs
    from agents.training.loop import build_algorithm

    spec = _spec(tmp_path, f"train.eval_action={action}")
    envs = training_envs(spec.scenario, spec.train, 0)
    try:
        algorithm, _ = build_algorithm(spec, envs, torch.device("cpu"))
    finally:
        envs.close()
    assert algorithm.policy.deterministic_eval is deterministic
    assert algorithm.policy.keep_busy_eval is (action == "argmax-busy")


@pytest.mark.parametrize("action", ["argmax", "sample", "argmax-busy"])
def test_validation_takes_the_decisions_evaluate_takes_on_the_same_workloads(tmp_path, action):
    """The logged validation mean JCT at the last step equals the mean over the validation seeds
    of the evaluation runner's episodes with last.pt (what ``evaluate.py --seed-offset 10000``
    runs): the same workloads, and each episode's draws (samples, conflict tie-breaks) from a
    generator seeded from its own workload, whatever else shares the batch."""
    from agents.policy.scheduler import TapFingerScheduler
    from agents.training.envs import evaluation_scenario
    from envs.scheduling import run_episode

    spec = _spec(tmp_path, f"train.run_name=v_{action}", f"train.eval_action={action}", "train.eval_episodes=3",
                 steps=80)
    run_training(spec)
    logged = dict(_scalars(spec.run_dir)["test/mean_jct"])[80]
    scheduler = TapFingerScheduler(checkpoint=spec.run_dir / LAST)
    assert scheduler.deterministic is (action != "sample") and scheduler.keep_busy is (action == "argmax-busy")
    cfg = evaluation_scenario(spec.scenario, spec.train)
    alone = [run_episode(cfg, scheduler, spec.train.eval_seed + j).mean_jct for j in range(3)]
    assert float(np.mean(alone)) == pytest.approx(logged, rel=1e-6)


def test_lr_schedule_is_a_function_of_the_env_step():
    cfg = TrainConfig(steps=1000, lr=2e-4)
    assert [cfg.lr_at(s) for s in (0, 500, 1000)] == [2e-4, 2e-4, 2e-4]
    cfg = TrainConfig(steps=1000, lr=2e-4, lr_schedule="linear")
    assert cfg.lr_at(0) == pytest.approx(2e-4) and cfg.lr_at(250) == pytest.approx(1.5e-4)
    assert cfg.lr_at(1000) == 0.0 and cfg.lr_at(1200) == 0.0  # rounding past --steps never goes negative


def test_linear_lr_schedule_sets_each_update_and_resumes(tmp_path):
    spec = _spec(tmp_path, "train.lr_schedule=linear", "train.lr=1e-3", "train.run_name=lin", steps=80)
    run_training(spec)
    sc = _scalars(spec.run_dir)
    # one update per 40 env steps, each at the rate of the env step it starts from
    assert sc["update/lr"] == [(0, pytest.approx(1e-3)), (40, pytest.approx(5e-4))]
    ckpt = load_checkpoint(spec.run_dir / LAST)
    assert [g["lr"] for g in ckpt["optimizer"]["param_groups"]] == [pytest.approx(5e-4)]
    # a resume with a larger budget continues from the step reached, on the new horizon
    spec2 = prepare_run(None, [], flags={"steps": 160}, resume=str(spec.run_dir / LAST))
    run_training(spec2)
    lrs = dict(_scalars(spec.run_dir)["update/lr"])
    assert lrs[80] == pytest.approx(1e-3 * (1 - 80 / 160)) and lrs[120] == pytest.approx(1e-3 * (1 - 120 / 160))
