"""Optimus's resource-to-speed model, fitted by non-negative least squares.

Optimus (Peng et al., EuroSys 2018) models the training speed of a synchronous job with
``p`` parameter servers and ``w`` workers as ``f = 1 / (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)``.
As in the TapFinger reference, ``(p, w)`` become the task's ``(CPU cores, GPUs)`` and the
global batch ``M`` is folded into ``θ0``, so

    1 / f(c, g) = [1/g, 1, g/c, g, c] · θ,   θ >= 0,

which is linear in θ: :func:`fit_speed_model` solves it with :func:`scipy.optimize.nnls`.
Residuals are taken relative to the observed ``1/f`` (each row is divided by its target),
so slow points, whose reciprocal is large, do not dominate the fit; repeated observations
of one allocation are averaged first and weighted by their count.

:class:`SpeedObservations` accumulates observed per-step progress gains on the allocation
grid of each task type, which is what :class:`~agents.baselines.optimus.OptimusScheduler`
fits from in its default (non-oracle) mode.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

NUM_PARAMS = 5


def features(cpu: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """``(n, 5)`` design rows ``[1/g, 1, g/c, g, c]``; needs ``cpu, gpu >= 1``."""
    c = np.asarray(cpu, dtype=np.float64).ravel()
    g = np.asarray(gpu, dtype=np.float64).ravel()
    if np.any(c < 1) or np.any(g < 1):
        raise ValueError("the Optimus speed model needs at least 1 CPU and 1 GPU per point")
    return np.stack([1.0 / g, np.ones_like(g), g / c, g, c], axis=1)


def fit_speed_model(
    cpu: np.ndarray, gpu: np.ndarray, speed: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """θ >= 0 minimising ``Σ w_i ((φ_i·θ − 1/s_i) · s_i)²`` (relative error on ``1/speed``).

    ``speed`` must be positive; ``weights`` (e.g. observation counts) default to 1.
    """
    s = np.asarray(speed, dtype=np.float64).ravel()
    if s.size == 0:
        raise ValueError("no samples to fit")
    if np.any(~np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("speeds must be finite and positive")
    w = np.ones_like(s) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
    scale = np.sqrt(w) * s  # row i divided by its target 1/s_i, times sqrt(weight)
    a = features(cpu, gpu) * scale[:, None]
    b = np.sqrt(w)
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    try:  # unit-norm columns keep the active-set iterations well conditioned
        theta, _ = nnls(a / norms, b, maxiter=50 * NUM_PARAMS)
    except RuntimeError as exc:  # no convergence: report as bad input for the caller to handle
        raise ValueError(f"NNLS did not converge: {exc}") from None
    return theta / norms


def inverse_speed(theta: np.ndarray, cpu: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """Predicted ``1/f`` (steps per unit of progress) at ``(cpu, gpu)`` (each >= 1)."""
    shape = np.broadcast(np.asarray(cpu), np.asarray(gpu)).shape
    c, g = np.broadcast_arrays(np.asarray(cpu), np.asarray(gpu))
    return (features(c, g) @ np.asarray(theta, dtype=np.float64)).reshape(shape)


class SpeedObservations:
    """Per task type, the sum and count of observed per-step gains at each ``(cpu, gpu)``."""

    def __init__(self, num_types: int, max_cpu: int, max_gpu: int) -> None:
        self.sum = np.zeros((num_types, max_cpu + 1, max_gpu + 1))
        self.count = np.zeros((num_types, max_cpu + 1, max_gpu + 1), dtype=np.int64)

    def add(self, types: np.ndarray, cpu: np.ndarray, gpu: np.ndarray, gains: np.ndarray) -> np.ndarray:
        """Record gains (callers pass only feasible, positive ones); returns the types touched."""
        types = np.asarray(types, dtype=np.int64)
        np.add.at(self.sum, (types, cpu, gpu), gains)
        np.add.at(self.count, (types, cpu, gpu), 1)
        return np.unique(types)

    def num_points(self, k: int) -> int:
        """Distinct allocations observed for type ``k``."""
        return int(np.count_nonzero(self.count[k]))

    def mean_gain(self, k: int | None = None) -> float:
        """Mean observed gain of type ``k`` (all types if None); NaN if nothing observed."""
        s = self.sum if k is None else self.sum[k]
        n = self.count if k is None else self.count[k]
        total = int(n.sum())
        return float(s.sum() / total) if total else float("nan")

    def fit(self, k: int, prior: tuple[np.ndarray, np.ndarray, np.ndarray, float] | None = None) -> np.ndarray:
        """NNLS fit of type ``k`` on the mean gain of each observed allocation.

        ``prior = (cpu, gpu, speed, weight)`` adds pseudo-observations of a prior model whose
        total weight is ``weight`` observations (a weak pull where data are missing).
        """
        c, g = np.nonzero(self.count[k])
        n = self.count[k, c, g].astype(np.float64)
        s = self.sum[k, c, g] / n
        if prior is not None and prior[3] > 0:
            pc, pg, ps, weight = prior
            c, g, s = np.concatenate([c, pc]), np.concatenate([g, pg]), np.concatenate([s, ps])
            n = np.concatenate([n, np.full(len(ps), weight / len(ps))])
        return fit_speed_model(c, g, s, weights=n)
