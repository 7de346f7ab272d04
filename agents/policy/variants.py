"""The policy variants: one registry of the TapFinger policy and its ablations.

A variant combines an *encoder* with a task *selector*:

* encoder ``han``: the heterogeneous graph attention network over tasks and clusters
  (``policy.encoder`` picks how it runs: dense or torch-geometric); ``mlp``: a per-task MLP
  (``policy.mlp_layers`` deep) with no message passing;
* selector ``pointer``: the pointer network over the feasible slots; ``uniform``: a uniform
  choice among the feasible slots; ``fifo``: the earliest feasible slot.

Everything that names variants reads this module: ``PolicyConfig.variant`` (checked against
:data:`VARIANT_NAMES`), :class:`~agents.policy.network.TapFingerPolicy` (which encoder and selector
it builds), ``train.py --variant`` and ``evaluate.py`` (checkpoint names). Pure Python: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from envs.config import ConfigError

#: encoder kinds of a variant
ENCODER_KINDS = ("han", "mlp")
#: task-selection rules of a variant
SELECTORS = ("pointer", "uniform", "fifo")


@dataclass(frozen=True)
class PolicyVariant:
    """One policy variant: its ``name`` (``PolicyConfig.variant``, stored in checkpoints), its
    ``encoder`` kind (:data:`ENCODER_KINDS`), its ``selector`` (:data:`SELECTORS`) and a
    one-line ``description``."""

    name: str
    encoder: str
    selector: str
    description: str

    def __post_init__(self) -> None:
        for what, value, kinds in (("encoder", self.encoder, ENCODER_KINDS), ("selector", self.selector, SELECTORS)):
            if value not in kinds:
                raise ValueError(f"variant {self.name!r}: {what} must be one of {list(kinds)}, got {value!r}")


#: every variant, the paper's policy first
VARIANTS: tuple[PolicyVariant, ...] = (
    PolicyVariant("tapfinger", "han", "pointer", "HAN encoder + pointer-network task selection (the paper's policy)"),
    PolicyVariant("no-han", "mlp", "pointer", "MLP encoder + pointer-network task selection (ablation)"),
    PolicyVariant("no-pointer", "han", "uniform", "HAN encoder + uniform choice among feasible tasks (ablation)"),
    PolicyVariant("vanilla", "mlp", "fifo", "MLP encoder + earliest feasible task, FIFO (ablation)"),
)
VARIANT_NAMES: tuple[str, ...] = tuple(v.name for v in VARIANTS)
DEFAULT_VARIANT = "tapfinger"
_BY_NAME = {v.name: v for v in VARIANTS}
if len(_BY_NAME) != len(VARIANTS) or DEFAULT_VARIANT not in _BY_NAME:  # pragma: no cover - a bad registry edit
    raise ValueError("variant names must be unique and include the default")


def get_variant(name: str) -> PolicyVariant:
    """The registry entry of a variant name; :class:`ConfigError` naming the valid ones otherwise."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown policy variant {name!r}; valid: {', '.join(VARIANT_NAMES)}") from None

