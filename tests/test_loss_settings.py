"""The update's settings come from one object (:class:`agents.training.loss.LossSettings`, built from the
``train:`` section) and its statistics travel by name (:attr:`agents.training.loss.MAPPOLoss.stats`)."""

from __future__ import annotations

from dataclasses import asdict, fields

import pytest

from agents.training.config import TrainConfig
from agents.training.loss import LossSettings
from agents.training.tianshou_glue.algorithm import MAPPOTrainingStats


def test_every_loss_setting_is_the_train_key_of_its_name():
    train = TrainConfig(ent_coef=0.03, vf_coef=0.25, eps_clip=0.1, shards=2, lost_claim_penalty=1.5)
    settings = LossSettings.from_train(train, "multi")
    for f in fields(LossSettings):
        if f.name == "gamma":
            assert settings.gamma == train.resolved_gamma("multi")
        else:
            assert getattr(settings, f.name) == getattr(train, f.name), f.name


@pytest.mark.parametrize("bad, match", [({"old_stats": "stored"}, "old_stats must be one of"),
                                        ({"shards": 0}, "shards must be"),
                                        ({"lost_claim_penalty": -1.0}, "lost_claim_penalty must be"),
                                        ({"precision": "half"}, "precision must be one of")])
def test_settings_are_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        LossSettings(**bad)


def test_the_update_logs_every_statistic_of_the_loss_by_name():
    stats = MAPPOTrainingStats.with_loss_stats(
        {"loss": 1.0, "policy_loss": 2.0, "a_new_statistic": 3.0, "grad_norm": 4.0},
        explained_variance=0.5, return_scale=1.0, return_std=1.0, logp_mismatch=0.0, active_fraction=1.0,
        gradient_steps=2)
    logged = asdict(stats)  # what tianshou hands the logger
    assert logged["loss"] == 1.0 and logged["a_new_statistic"] == 3.0 and logged["grad_norm"] == 4.0
    assert isinstance(stats, MAPPOTrainingStats) and stats.policy_loss == 2.0
