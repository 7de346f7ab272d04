"""The policy's architecture: :class:`PolicyConfig`, stored in every checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envs.config_section import ConfigSection, at_least, one_of, rule
from networks.heads import AllocationHead

from .modes import CONFLICT_MODES, PRIORS
from .variants import DEFAULT_VARIANT, VARIANT_NAMES, PolicyVariant, get_variant

#: variant names, in registry order (the registry, with encoder and selector, is agents/policy/variants.py)
POLICY_VARIANTS = VARIANT_NAMES
ENCODERS = ("auto", "dense", "pyg")


@dataclass
class PolicyConfig(ConfigSection):
    """Architecture of a :class:`~agents.policy.network.TapFingerPolicy` (stored in every checkpoint).

    ``variant``: a variant name of :data:`agents.policy.variants.VARIANTS`, the registry that gives its
    encoder (HAN or MLP) and task selector (pointer, uniform or FIFO); :attr:`variant_spec` is
    its entry. ``hidden``/``han_layers``/``heads``: HAN encoder size. ``faithful``: the paper's
    plain HANConv stack (no input projection, residual or LayerNorm; see :meth:`paper` for the
    paper's sizes). ``self_relation``: add the self relation to the residual stack too (always
    on when faithful). ``pointer_dim``/``pointer_ffn``/``pointer_layers``/``pointer_heads``:
    pointer transformer size. ``mlp_layers``: depth of the MLP encoder (``no-han``, ``vanilla``). ``shared_actors``: one
    set of actor/critic-head weights for any number of clusters (False: one per agent, the
    paper's layout, tied to the scenario's N). ``agent_id``: add a learned embedding of each
    agent's index to its cluster's embedding, as MAPPO feeds shared actors an agent id, so agents
    with alike observations can still learn to claim different tasks (an option beyond the paper;
    ties the policy to the scenario's N). ``observe_mode``: the encoder reads the observation's
    ``multi_mode`` flag as one more cluster feature, so one policy can train on and act in scenarios
    of both modes (an option beyond the paper). ``conflicts``: how agents that want the same
    task are reconciled (:data:`agents.policy.modes.CONFLICT_MODES`): ``bayes`` (default, paper
    eq. 11: independent choices, one winner per task, the others lose the step),
    ``sequential`` (agents choose in index order, each over the tasks no earlier agent started)
    or ``room`` (the same in order of decreasing free room, :func:`~agents.policy.sequential.room_order`).
    ``prior``: the Bayes conflict prior, ``paper`` (eq. 11) or ``code`` (the reference code's
    softmax). ``encoder``: how the HAN runs, ``dense``
    (masked attention over the padded observation axes, static shapes, no host sync), ``pyg``
    (the reference: a torch-geometric heterogeneous graph built per forward) or ``auto``
    (default: ``pyg`` for CPU batches of 8 or more, where it is the faster, ``dense``
    otherwise: batch-1 scheduling rounds and accelerators); all hold the same parameters and
    compute the same function (to float round-off), so any checkpoint loads into any of them.
    """

    variant: str = DEFAULT_VARIANT  # tapfinger, no-han, no-pointer or vanilla (agents/policy/variants.py)
    hidden: int = 128  # HAN encoder width
    han_layers: int = 3  # HAN layers
    heads: int = 4  # HAN attention heads
    faithful: bool = False  # the paper's plain HANConv stack (no input projection, residual or LayerNorm)
    self_relation: bool = False  # add the self relation to the residual stack (always on when faithful)
    shared_actors: bool = True  # one set of actor/critic-head weights for any N (false: one per agent, the paper's)
    agent_id: bool = False  # a learned embedding of each agent's index added to its cluster embedding (ties to N)
    prior: str = "paper"  # Bayes conflict prior: paper (eq. 11) or code (the reference code's softmax)
    conflicts: str = "bayes"  # bayes (the paper), sequential (index order) or room (decreasing free room)
    pointer_dim: int = 64  # pointer transformer width
    pointer_layers: int = 2  # pointer transformer layers
    pointer_heads: int = 4  # pointer attention heads
    pointer_ffn: int = 128  # pointer feed-forward width
    mlp_layers: int = 4  # depth of the MLP encoder (no-han, vanilla)
    alloc_head: str = "factorised"  # allocation head form (networks/heads.py AllocationHead.FORMS)
    encoder: str = "auto"  # how the HAN runs: dense, pyg, or auto (pyg for CPU batches of 8+, else dense)
    observe_mode: bool = False  # the observation's multi_mode flag as one more cluster feature (both modes)

    #: fields that choose how the parameters are run, not which parameters exist: a checkpoint
    #: trained with any value of them runs with any other (``train.eval_conflicts``, ``evaluate.py``)
    RUNTIME_FIELDS = ("encoder", "prior", "conflicts")

    # declared once (envs/config_section.py): built from a mapping with from_dict (typed,
    # unknown keys refused), validated on construction: field types, then these checks in order
    SECTION = "policy"
    CHECKS = (
        one_of("variant", VARIANT_NAMES),
        one_of("alloc_head", AllocationHead.FORMS),
        one_of("encoder", ENCODERS),
        one_of("prior", PRIORS),
        one_of("conflicts", CONFLICT_MODES),
        *(at_least(name, 1) for name in ("hidden", "han_layers", "heads", "pointer_dim", "pointer_layers",
                                         "pointer_heads", "pointer_ffn", "mlp_layers")),
        rule(lambda c: c.hidden % c.heads == 0, "hidden ({hidden}) must be divisible by heads ({heads})"),
        rule(lambda c: c.pointer_dim % c.pointer_heads == 0,
             "pointer_dim ({pointer_dim}) must be divisible by pointer_heads ({pointer_heads})"),
    )

    @classmethod
    def paper(cls, variant: str = DEFAULT_VARIANT, **overrides: Any) -> "PolicyConfig":
        """The paper's sizes: plain 6-layer HAN, 4 heads, hidden 256, unshared actors, and the
        reference pointer (d_model 256, feed-forward 2048)."""
        base = dict(variant=variant, hidden=256, han_layers=6, heads=4, faithful=True, shared_actors=False,
                    pointer_dim=256, pointer_ffn=2048, alloc_head="joint")
        base.update(overrides)
        return cls(**base)

    @property
    def tied_to_n(self) -> bool:
        """Whether the parameters hold one entry per agent, so the policy acts only at its scenario's N."""
        return not self.shared_actors or self.agent_id

    @property
    def variant_spec(self) -> PolicyVariant:
        """The registry entry of :attr:`variant` (its encoder and selector kinds)."""
        return get_variant(self.variant)
