"""Validation on other scenarios of the run's task family too (``train.also_validate_on``).

A run validates on its own scenario: at every evaluation the trainer's test collector replays the
validation workloads ``train.eval_seed + j`` (``j < train.eval_episodes``) there, and ``best.pt`` holds
the evaluation with the lowest mean JCT. With ``train.also_validate_on`` the same workloads of each
named scenario (its validation variant, :func:`~agents.training.envs.evaluation_scenario`) are replayed
right after, the policy acting as that scenario's own recipe acts outside training
(:func:`~agents.training.prepare.acting_rule`: its ``train.eval_action`` and conflict rule, as the family
page evaluates it), and the score ``best.pt`` is chosen on becomes the *relative JCT*: the mean over every validation
scenario (the run's own first) of the policy's validation mean JCT divided by that scenario's best
validation baseline (:func:`~agents.training.validation_baselines.validation_rival`). A ratio, so no
scenario's JCT scale outweighs another's; below 1 where the policy beats the rivals on average. A family
recipe that trains one policy for scenarios of both modes so chooses ``best.pt`` on both modes.

``test/mean_jct`` stays the run's own scenario's; each other one writes ``test/also/<name>/mean_jct``
(:func:`other_tag`) and the score ``test/relative_jct`` (:data:`RELATIVE_JCT_TAG`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from .envs import evaluation_envs, evaluation_scenario
from .logger import OTHER_VALIDATION_PREFIX
from .prepare import other_validation_rules
from .stats import TRUNCATED_PENALTY, SchedulingCollectStats
from .tianshou_glue.collector import BatchCollector, BatchedReplayBuffer
from .validation_baselines import figures_text, run_validation_baselines, validation_rival

if TYPE_CHECKING:
    from .envs import VectorEnv
    from .run_spec import RunSpec
    from .tianshou_glue.algorithm import MultiAgentPPO

#: ring size per env of an evaluation collector's buffer (evaluation keeps no data: a small ring is enough for
#: tianshou's bookkeeping; read by :func:`evaluation_collector` at call time, so it may be patched here)
EVAL_BUFFER_PER_ENV = 256
#: TensorBoard tag of the score ``best.pt`` is chosen on with ``train.also_validate_on``
RELATIVE_JCT_TAG = "test/relative_jct"  # described in agents.training.logger.TAG_DESCRIPTIONS


def other_tag(name: str) -> str:
    """TensorBoard tag of the validation mean JCT on the other validation scenario ``name``."""
    return f"{OTHER_VALIDATION_PREFIX}{name}/mean_jct"


def evaluation_collector(algorithm: MultiAgentPPO, envs: VectorEnv, episodes: int) -> BatchCollector:
    """A collector that replays ``episodes`` validation workloads on ``envs`` (one env each), keeping no data."""
    return BatchCollector(algorithm, envs, BatchedReplayBuffer(EVAL_BUFFER_PER_ENV * episodes, episodes),
                          collect_stats_class=SchedulingCollectStats)


def relative_jct(mean_jcts: Sequence[float | None], rivals: Sequence[float | None]) -> float | None:
    """The mean over scenarios of ``mean_jct / rival``; None when any figure is missing or not positive."""
    ratios = []
    for jct, rival in zip(mean_jcts, rivals, strict=True):
        if jct is None or rival is None or not (math.isfinite(jct) and math.isfinite(rival)) or rival <= 0:
            return None
        ratios.append(jct / rival)
    return sum(ratios) / len(ratios)


@dataclass(frozen=True)
class ValidationPoint:
    """One evaluation on every validation scenario: each one's mean JCT (the run's own first) and the
    relative JCT over them (:func:`relative_jct`); ``truncated``: episodes cut short, over all of them."""

    mean_jct: dict[str, float | None]
    relative_jct: float | None
    truncated: int

    @property
    def score(self) -> float:
        """The score tianshou maximises: ``-relative_jct``, an evaluation with a truncated episode below every
        finished one, one without a relative JCT last."""
        if self.relative_jct is None:
            return -math.inf
        return -self.relative_jct - (TRUNCATED_PENALTY if self.truncated else 0.0)

    @property
    def others(self) -> dict[str, float | None]:
        """The other validation scenarios' mean JCTs (:attr:`mean_jct` without the run's own, its first)."""
        return dict(list(self.mean_jct.items())[1:])

    def summary(self) -> str:
        """``name X, ...; relative JCT R`` of the other scenarios (the run's own is printed before it)."""
        return f"{figures_text(self.others)}; {figures_text({'relative JCT': self.relative_jct})}"


class OtherValidation:
    """The other validation scenarios of a run (:attr:`~agents.training.run_spec.RunSpec.validation_others`):
    their evaluation envs and collectors, and each one's validation rival, computed once per run and saved
    in its directory (:func:`~agents.training.validation_baselines.run_validation_baselines`)."""

    def __init__(self, spec: RunSpec, algorithm: MultiAgentPPO, own_means: Mapping[str, float | None]) -> None:
        t = spec.train
        self.algorithm = algorithm
        self.episodes = t.eval_episodes
        self.own = spec.scenario.name
        own_rival = validation_rival(own_means)
        self.rivals: dict[str, float | None] = {self.own: None if own_rival is None else own_rival[1]}
        self.envs: list[VectorEnv] = []
        self.collectors: dict[str, BatchCollector] = {}
        #: each other scenario's acting rule outside training: (eval_action, conflicts) of its own recipe
        self.rules: dict[str, tuple[str, str]] = {}
        try:
            for scenario, rule in other_validation_rules(spec):
                self.rules[scenario.name] = rule
                means = run_validation_baselines(spec.run_dir, evaluation_scenario(scenario, t), t, scenario.name)
                rival = validation_rival(means)
                self.rivals[scenario.name] = None if rival is None else rival[1]
                if spec.eval_lines:
                    action, conflicts = self.rules[scenario.name]
                    print(f"validation baselines on {scenario.name} (the policy acting by {action}, conflicts by "
                          f"{conflicts}): {figures_text(means)}", flush=True)
                envs = evaluation_envs(scenario, t)
                self.envs.append(envs)
                self.collectors[scenario.name] = evaluation_collector(algorithm, envs, self.episodes)
        except BaseException:
            self.close()
            raise

    def evaluate(self, own: SchedulingCollectStats) -> ValidationPoint:
        """The point of one evaluation: ``own`` (the test collector's stats on the run's scenario), then each
        other scenario's workloads replayed now, acting by its rule, from the same evaluation generators' start."""
        jcts: dict[str, float | None] = {self.own: own.mean_jct}
        truncated = int(own.truncated_episodes or 0)
        for name, collector in self.collectors.items():
            self.algorithm.policy.reset_eval_generators()
            collector.reset(reset_stats=False)
            with self.algorithm.policy.acting_as(*self.rules[name]):
                stats = collector.collect(n_episode=self.episodes)
            jcts[name] = stats.mean_jct
            truncated += int(stats.truncated_episodes or 0)
        return ValidationPoint(jcts, relative_jct(list(jcts.values()), [self.rivals[k] for k in jcts]), truncated)

    def close(self) -> None:
        """Close the evaluation envs (their worker processes, where they have any)."""
        for envs in self.envs:
            try:
                envs.close()
            except Exception:  # noqa: BLE001 -- closing is best effort; the run's outcome is already decided
                pass
        self.envs.clear()
