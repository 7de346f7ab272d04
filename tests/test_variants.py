"""One owner per fact (issue 12): the policy-variant registry (encoder x selector) read by the
policy, ``train.py``, ``evaluate.py`` and the evaluation runner; the CLI choices read from
``agents/training/config.py``; one declare-and-validate mechanism for the policy and train
config sections (``envs/config_section.py``, shared with the scenario)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import train as train_cli
from agents.evaluation.runner import POLICY_PATTERN
from agents.policy.config import POLICY_VARIANTS, PolicyConfig
from agents.policy.network import TapFingerPolicy
from agents.policy.variants import (
    DEFAULT_VARIANT, ENCODER_KINDS, SELECTORS, VARIANT_NAMES, VARIANTS, PolicyVariant, get_variant,
)
from agents.training.config import DEVICES, VECTOR_KINDS, TrainConfig
from envs import Simulator, load_scenario
from envs.config import ConfigError
from envs.config_section import ConfigSection
from envs.observation import ObservationSpec, build_observation
from networks.mlp_encoder import MLPEncoder

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(hidden=32, han_layers=1, heads=4, pointer_dim=16, pointer_ffn=32, mlp_layers=2)


def _choices(parser, dest: str) -> tuple:
    return tuple(next(a for a in parser._actions if a.dest == dest).choices)


def _evaluate_parser():
    spec = importlib.util.spec_from_file_location("evaluate_cli_variants", ROOT / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_parser()


# ---------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------
def test_registry_is_the_one_list_of_variants():
    assert VARIANT_NAMES == tuple(v.name for v in VARIANTS) == POLICY_VARIANTS
    assert VARIANT_NAMES == ("tapfinger", "no-han", "no-pointer", "vanilla")  # stored in checkpoints: stable
    assert len(set(VARIANT_NAMES)) == len(VARIANTS)
    assert {(v.encoder, v.selector) for v in VARIANTS} == {
        ("han", "pointer"), ("mlp", "pointer"), ("han", "uniform"), ("mlp", "fifo")}
    assert all(v.encoder in ENCODER_KINDS and v.selector in SELECTORS and v.description for v in VARIANTS)
    assert PolicyConfig().variant == DEFAULT_VARIANT == VARIANTS[0].name
    assert get_variant("no-pointer").selector == "uniform" and get_variant("no-han").encoder == "mlp"
    with pytest.raises(ConfigError, match="tapfinger, no-han, no-pointer, vanilla"):
        get_variant("gnn")
    with pytest.raises(ValueError, match="encoder"):
        PolicyVariant("x", "gcn", "pointer", "a bad entry")
    with pytest.raises(ValueError, match="selector"):
        PolicyVariant("x", "han", "random", "a bad entry")


@pytest.fixture(scope="module")
def observations():
    cfg = load_scenario("synthetic-3", ["num_tasks=40"])
    spec = ObservationSpec.from_config(cfg)
    sim = Simulator(cfg, 5)
    out = []
    for _ in range(12):
        sim.advance()
        out.append(build_observation(sim, spec))
    batch = {k: torch.as_tensor(np.stack([o[k] for o in out])) for k in out[0]}
    return spec, batch


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_NAMES)
def test_policy_builds_the_registry_encoder_and_selector(observations, variant):
    spec, batch = observations
    torch.manual_seed(0)
    policy = TapFingerPolicy(spec, PolicyConfig(variant=variant.name, **SMALL)).eval()
    assert policy.variant is variant is policy.cfg.variant_spec
    assert isinstance(policy.encoder, MLPEncoder) == (variant.encoder == "mlp")
    assert (policy.pointer is not None) == (policy.slot_proj is not None) == (variant.selector == "pointer")
    sel, _ = policy.probabilities(batch)
    feasible = batch["feasible"].bool()
    ok = feasible.any(-1)
    assert ok.any(), "the observations should have feasible slots"
    assert torch.all(sel[~feasible] < 1e-6)
    if variant.selector == "uniform":
        n = feasible.sum(-1, keepdim=True).clamp(min=1)
        assert torch.allclose(sel[ok], torch.where(feasible, 1.0 / n, torch.zeros(()))[ok], atol=1e-6)
    elif variant.selector == "fifo":
        assert torch.equal(sel[ok].argmax(-1), feasible.to(torch.uint8).argmax(-1)[ok])
        assert torch.allclose(sel[ok].max(-1).values, torch.ones(()))


def test_shipped_checkpoint_loads_with_its_variant():
    from agents.policy.checkpoint import load_policy_checkpoint

    policy, meta = load_policy_checkpoint(ROOT / "checkpoints" / "synthetic-3.pt")
    assert meta["policy_config"].variant == "tapfinger" and isinstance(meta["policy_config"].variant, str)
    assert policy.variant.encoder == "han" and policy.variant.selector == "pointer"
    assert policy.cfg.to_dict()["variant"] == "tapfinger"


def test_checkpoint_names_follow_the_registry():
    for name in VARIANT_NAMES:
        assert POLICY_PATTERN.fullmatch(name) and POLICY_PATTERN.fullmatch(f"{name}-3")
    for other in ("optimus", "tapfinger-", "no_han", "vanilla2"):
        assert not POLICY_PATTERN.fullmatch(other)


# ---------------------------------------------------------------------------------------
# CLI choices read from their owners
# ---------------------------------------------------------------------------------------
def test_cli_choices_come_from_their_owners():
    parser = train_cli.build_parser()
    assert _choices(parser, "variant") == VARIANT_NAMES
    assert _choices(parser, "vector") == VECTOR_KINDS
    assert _choices(parser, "device") == DEVICES
    text = parser.format_help()
    assert "dummy for 1 env" not in text and "default auto" in text
    assert all(kind in text for kind in VECTOR_KINDS)
    evaluate = _evaluate_parser()
    assert _choices(evaluate, "device") == DEVICES
    assert all(name in evaluate.format_help() for name in VARIANT_NAMES)
    args = parser.parse_intermixed_args(["--vector", "batch", "--variant", "no-han", "--device", "cpu"])
    assert (args.vector, args.variant, args.device) == ("batch", "no-han", "cpu")


# ---------------------------------------------------------------------------------------
# one way to declare and validate a config section
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, section, field, bad", [
    (PolicyConfig, "policy", "hidden", "many"),
    (TrainConfig, "train", "envs", 1.5),
])
def test_sections_share_from_dict(cls, section, field, bad):
    assert issubclass(cls, ConfigSection) and cls.SECTION == section
    with pytest.raises(ConfigError, match=f"unknown {section} key 'nope'; valid keys: .*{field}"):
        cls.from_dict({"nope": 1})
    with pytest.raises(ConfigError, match=rf"{section}\.{field} must be int"):
        cls.from_dict({field: bad})
    with pytest.raises(ConfigError, match=f"{section} config must be a mapping"):
        cls.from_dict([1, 2])
    with pytest.raises(ConfigError, match=rf"{section}\.{field} must be >= 1"):
        cls.from_dict({field: 0})
    with pytest.raises(ConfigError, match=rf"{section}\.{field} must be int, got '8': a quoted string is not a number"):
        cls.from_dict({field: "8"})  # a string is no number, numeric text included (docs/configuration.md)
    cfg = cls.from_dict({field: 8e0}, {})  # an integral float (YAML's 8.0 or 8e0) is an int
    assert getattr(cfg, field) == 8 and isinstance(getattr(cfg, field), int)
    assert cls.from_dict(cfg.to_dict()) == cfg


def test_policy_validates_on_construction_train_when_asked():
    with pytest.raises(ConfigError, match=r"policy\.hidden must be int"):
        PolicyConfig(hidden=64.0)
    with pytest.raises(ConfigError, match=r"policy\.encoder must be one of"):
        PolicyConfig(encoder="sparse")
    with pytest.raises(ConfigError, match=r"policy\.hidden \(30\) must be divisible by heads \(4\)"):
        PolicyConfig(hidden=30)
    partial = TrainConfig(scenario_shares=(1.0,))  # layered: valid only once complete
    with pytest.raises(ConfigError, match="scenario_shares needs one share"):
        partial.validate()
    assert partial.apply({"scenarios": ["sjf-3"]}).validate() is partial
    with pytest.raises(ConfigError, match=r"train\.steps must be int"):
        TrainConfig(steps=1.5).validate()
    for bad, key in (({"imitate_lr": 0}, "imitate_lr"), ({"imitate_episodes": 0}, "imitate_episodes"),
                     ({"imitate": " "}, "imitate"), ({"vector": "thread"}, "vector"), ({"gamma": 1.5}, "gamma")):
        with pytest.raises(ConfigError, match=rf"train\.{key}"):
            TrainConfig.from_dict(bad)


def test_policy_config_from_dict_layers_a_checkpoint_base_and_overrides():
    base = PolicyConfig(variant="no-han", hidden=64).to_dict()
    cfg = PolicyConfig.from_dict(base, {"heads": 8, "pointer_dim": 32.0})
    assert (cfg.variant, cfg.hidden, cfg.heads, cfg.pointer_dim) == ("no-han", 64, 8, 32)
    assert PolicyConfig.from_dict({}, {}) == PolicyConfig()
    with pytest.raises(ConfigError, match="unknown policy key 'width'; valid keys"):
        PolicyConfig.from_dict({}, {"width": 3})
    with pytest.raises(ConfigError, match=r"policy\.variant must be one of"):
        PolicyConfig.from_dict(base, {"variant": "gnn"})
