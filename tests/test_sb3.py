"""The envs with the field's trainers, unchanged: Stable-Baselines3 (check_env, make_vec_env, PPO)
and sb3-contrib's MaskablePPO through TapFinger/EdgeClustersMasked-v0; docs/sb3.md's example runs."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.env_util import make_vec_env

from envs.config import available_scenarios
from envs.registration import ENV_ID, MASKED_ENV_ID, MAX_EPISODE_STEPS

torch.set_num_threads(1)

KWARGS = {"scenario": "synthetic-3", "overrides": ["num_tasks=30"]}
TINY = {"net_arch": [32]}


class RequestCounter(BaseCallback):
    """Adds up the joint env's invalid and conflicting requests the trainer's steps caused."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = self.refused = self.joint_steps = 0

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            self.steps += 1
            self.refused += info["invalid"] + info["conflicts"]
            self.joint_steps += info["joint_steps"]
        return True


def vec_env(n_envs: int = 2):
    with pytest.warns(UserWarning, match="renders nothing"):  # make_vec_env asks for rgb_array
        return make_vec_env(MASKED_ENV_ID, n_envs=n_envs, seed=0, env_kwargs=KWARGS,
                            monitor_kwargs={"info_keywords": ("mean_jct",)})


@pytest.mark.parametrize("name", available_scenarios())
def test_sb3_check_env_passes_without_a_warning(name):
    env = gymnasium.make(MASKED_ENV_ID, scenario=name, overrides=["num_tasks=20"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)
    assert isinstance(env.action_space, gymnasium.spaces.Discrete)


def test_make_vec_env_builds_the_joint_env_with_no_extra_arguments():
    with pytest.warns(UserWarning):
        venv = make_vec_env(ENV_ID, n_envs=1, env_kwargs={"scenario": "synthetic-3"})
    obs = venv.reset()
    assert obs["feasible"].shape == (1, 3, 10)
    assert venv.get_attr("spec")[0].max_episode_steps == MAX_EPISODE_STEPS


def test_ppo_multi_input_policy_trains_a_few_thousand_steps():
    venv = vec_env()
    model = PPO("MultiInputPolicy", venv, n_steps=512, batch_size=256, n_epochs=1, policy_kwargs=TINY,
                seed=0, device="cpu")
    counter = RequestCounter()
    model.learn(total_timesteps=3_000, callback=counter)
    assert model.num_timesteps >= 3_000 and counter.joint_steps > 0
    episodes = list(model.ep_info_buffer)
    assert episodes and all(np.isfinite(e["mean_jct"]) and e["mean_jct"] > 0 for e in episodes)
    assert counter.refused > 0  # unmasked, it does pick choices the env refuses (voided and counted)


def test_maskable_ppo_never_makes_an_invalid_request():
    venv = vec_env()
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=256, batch_size=256, n_epochs=1, policy_kwargs=TINY,
                        seed=0, device="cpu")
    counter = RequestCounter()
    model.learn(total_timesteps=1_024, callback=counter)
    assert counter.steps >= 1_024 and counter.joint_steps > 0 and counter.refused == 0
    env = gymnasium.make(MASKED_ENV_ID, **KWARGS)
    obs, _ = env.reset(seed=500_000)
    while True:
        action, _ = model.predict(obs, action_masks=get_action_masks(env), deterministic=False)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    sim = env.unwrapped.sim
    assert terminated and sim.invalid == 0 and sim.conflicts == 0
    assert info["episode_metrics"]["invalid"] == 0 and info["episode_metrics"]["num_finished"] == 30


def test_the_example_of_docs_sb3_runs():
    page = (Path(__file__).resolve().parents[1] / "docs" / "sb3.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert blocks, "docs/sb3.md lost its example"
    scope: dict = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*renders nothing")
        exec(compile(blocks[0], "docs/sb3.md", "exec"), scope)
    metrics = scope["info"]["episode_metrics"]
    assert scope["model"].num_timesteps >= 1_024
    assert metrics["invalid"] == 0 and metrics["conflicts"] == 0 and metrics["num_finished"] == 40


#: the README snippet's rollouts per budget at least: a progress table every few seconds, not one at the end
MIN_TABLES = 8


def test_the_readme_snippet_shows_progress_within_its_budget():
    """README's snippet prints a table after every rollout (``verbose=1``), its rollout is a small part of its
    budget (MaskablePPO's default ``n_steps=2048`` x 4 envs would run 8,192 steps in silence first) and its
    Monitor keeps each episode's ``mean_jct``. Read, not run: its one-minute budget is timed by hand."""
    import ast

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Use it from other RL libraries", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[0]
    calls = {ast.unparse(node.func): node for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Call)}

    def keywords(name: str) -> dict:
        return {k.arg: ast.literal_eval(k.value) for k in calls[name].keywords
                if isinstance(k.value, (ast.Constant, ast.Dict, ast.Tuple))}

    vec, ppo = keywords("make_vec_env"), keywords("MaskablePPO")
    budget = ast.literal_eval(calls["model.learn"].args[0])
    assert ppo["verbose"] >= 1 and "mean_jct" in vec["monitor_kwargs"]["info_keywords"]
    assert budget >= MIN_TABLES * vec["n_envs"] * ppo["n_steps"]
    assert "ep_info_buffer" in code  # the snippet reads the mean JCT it asked Monitor for
