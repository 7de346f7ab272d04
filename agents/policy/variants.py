"""The policy variants: one registry of the TapFinger policy and its ablations.

A variant combines an *encoder* with a task *selector*:

* encoder ``han``: the heterogeneous graph attention network over tasks and clusters
  (``policy.encoder`` picks how it runs: dense or torch-geometric); ``mlp``: a per-task MLP
  (``policy.mlp_layers`` deep) with no message passing;
* selector ``pointer``: the pointer network over the feasible slots; ``uniform``: a uniform
  choice among the feasible slots; ``fifo``: the earliest feasible slot.

Each kind maps to its constructor (:data:`ENCODER_BUILDERS`, :data:`SELECTOR_BUILDERS`), which
:class:`~agents.policy.network.TapFingerPolicy` calls through :meth:`PolicyVariant.build_encoder`
and :meth:`PolicyVariant.build_selector`. Everything that names variants reads this module:
``PolicyConfig.variant`` (checked against :data:`VARIANT_NAMES`), the policy, ``train.py
--variant`` and ``evaluate.py`` (checkpoint names). Importing it does not import torch: the
constructors import the networks when a policy is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from envs.config import ConfigError


def _han_encoder(cfg: Any, dims: Mapping[str, Any]) -> Any:
    """The HAN encoder of a :class:`~agents.policy.config.PolicyConfig` (``policy.encoder``: the
    torch-geometric one for ``pyg``, else the dense one) for the spec numbers ``dims``."""
    from networks.dense_han import DenseGraphEncoder
    from networks.han import GraphEncoder

    sizes = dict(hidden=cfg.hidden, layers=cfg.han_layers, heads=cfg.heads, faithful=cfg.faithful,
                 self_relation=cfg.self_relation)
    features = (dims["pending_features"], dims["running_features"], dims["cluster_features"])
    if cfg.encoder == "pyg":
        return GraphEncoder(*features, **sizes)
    return DenseGraphEncoder(*features, auto_pyg=cfg.encoder == "auto", **sizes)


def _mlp_encoder(cfg: Any, dims: Mapping[str, Any]) -> Any:
    """The per-task MLP encoder (``policy.mlp_layers`` deep)."""
    from networks.mlp_encoder import MLPEncoder

    return MLPEncoder(dims["pending_features"], dims["cluster_features"], hidden=cfg.hidden, layers=cfg.mlp_layers)


def _pointer_selector() -> Any:
    from .selectors import PointerSelector

    return PointerSelector()


def _uniform_selector() -> Any:
    from .selectors import UniformSelector

    return UniformSelector()


def _fifo_selector() -> Any:
    from .selectors import FifoSelector

    return FifoSelector()


#: each encoder kind's constructor ``(PolicyConfig, spec dims) -> nn.Module``
ENCODER_BUILDERS: dict[str, Callable[[Any, Mapping[str, Any]], Any]] = {"han": _han_encoder, "mlp": _mlp_encoder}
#: each task selector's constructor ``() -> agents.policy.selectors.TaskSelector``
SELECTOR_BUILDERS: dict[str, Callable[[], Any]] = {
    "pointer": _pointer_selector, "uniform": _uniform_selector, "fifo": _fifo_selector}
#: encoder kinds of a variant
ENCODER_KINDS = tuple(ENCODER_BUILDERS)
#: task-selection rules of a variant
SELECTORS = tuple(SELECTOR_BUILDERS)


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

    def build_encoder(self, cfg: Any, dims: Mapping[str, Any]) -> Any:
        """The variant's encoder for a :class:`~agents.policy.config.PolicyConfig` and the spec
        numbers ``dims`` (:func:`~agents.policy.observations.spec_dims`)."""
        return ENCODER_BUILDERS[self.encoder](cfg, dims)

    def build_selector(self) -> Any:
        """The variant's task selector (:class:`~agents.policy.selectors.TaskSelector`)."""
        return SELECTOR_BUILDERS[self.selector]()


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

