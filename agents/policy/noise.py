"""The random draws of one acting pass and the choice rules that use them.

:func:`draw_act_noise` makes every draw of an :meth:`~agents.policy.network.TapFingerPolicy.act`
call up front (:class:`ActNoise`); the pass then picks indices from log-probabilities by the
Gumbel-max trick on those draws (sampling) or by :func:`first_argmax` (deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .conflict import TIE_TOLERANCE, Generators, uniform
from .modes import SEQUENTIAL_MODES


def first_argmax(logp: Tensor) -> Tensor:
    """Deterministic choice: the lowest index whose log-probability is within
    :data:`~agents.policy.conflict.TIE_TOLERANCE` of the best. Choices that are equal in exact
    arithmetic (slots holding tasks of the same type and age) then resolve the same way whatever
    float round-off the encoder implementation or the batch size leaves on them."""
    near = logp >= logp.max(-1, keepdim=True).values - TIE_TOLERANCE
    return near.to(torch.uint8).argmax(-1)


@dataclass
class ActNoise:
    """Every random draw of one :meth:`~agents.policy.network.TapFingerPolicy.act` call, made up front by
    :func:`draw_act_noise`, so that the sampling pass itself is a function of tensors only (no
    generator inside: ``torch.compile`` traces it whole, and an accelerator can replay it as one
    CUDA graph). Uniforms in ``[0, 1)``; ``None`` where the call draws nothing."""

    selection: Tensor | None  # (B, N, P) float32: the slot's Gumbel noise (sampling only)
    tie: Tensor | None  # (B, N) float64: Bayes conflict tie-breaks (None in the sequential modes)
    allocation: Tensor | None  # (B, N, A) float32: the allocation's Gumbel noise (sampling only)


def episode_generator(tiebreak: np.random.Generator, device: torch.device | str) -> torch.Generator:
    """The generator of one episode's draws (samples, conflict tie-breaks), seeded by the first
    draw of the episode's ``tiebreak`` stream (:func:`envs.workload.rng_streams` of its workload
    seed). The evaluation runner and the training validation both seed it so, and so take the
    same decisions on the same workload."""
    generator = torch.Generator(device=device)
    generator.manual_seed(int(tiebreak.integers(0, 2**63 - 1)))
    return generator


def draw_act_noise(
    shape: tuple[int, int, int, int], conflicts: str, deterministic: bool, generator: Generators,
    device: torch.device, argmax_allocation: bool = False,
) -> ActNoise:
    """The draws of one ``act()`` on a batch ``shape = (B, N, P, A)``, from ``generator``
    (:data:`~agents.policy.conflict.Generators`) in the order the pass uses them: selection noise,
    then (Bayes) the conflict tie-breaks, drawn even when acting deterministically so the
    stream advances alike, then the allocation noise. No allocation noise (``deterministic``, or
    ``argmax_allocation``): the pass takes each agent's most likely allocation."""
    B, N, P, A = shape
    sample = not deterministic
    return ActNoise(
        selection=uniform((B, N, P), generator, device, torch.float32) if sample else None,
        tie=None if conflicts in SEQUENTIAL_MODES else uniform((B, N), generator, device, torch.float64),
        allocation=uniform((B, N, A), generator, device, torch.float32) if sample and not argmax_allocation else None,
    )


def gumbel_noise(u: Tensor) -> Tensor:
    """Gumbel noise from uniforms ``u``."""
    return -torch.log(-torch.log(u.clamp(min=1e-20, max=1.0 - 1e-7)))


def required_noise(noise: ActNoise | None, name: str) -> Tensor:
    """``noise``'s draw ``name``; a clear error where the caller drew none."""
    u = None if noise is None else getattr(noise, name)
    if u is None:
        raise ValueError(f"this pass needs the {name} noise of draw_act_noise")
    return u
