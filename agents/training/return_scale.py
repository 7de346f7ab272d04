"""Return scaling: value targets divided by the running standard deviation of the returns.

Team returns reach the thousands; the critic learns returns divided by their running std (not
centred, as tianshou's and OpenAI baselines' value normalisation). The running statistics
start from the first batch's Monte-Carlo returns, and with a window ``K`` they remember only
about the last ``K`` env steps (``train.return_scaling_window``), so the scale follows the
current policy's returns instead of the random policy's first ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tianshou.utils import RunningMeanStd

#: added to the variance before the square root
EPS = 1e-8


class ReturnScale:
    """The running return statistics and the scale they give (see the module docstring)."""

    def __init__(self, window: int | None = None) -> None:
        if window is not None and window < 1:
            raise ValueError(f"return_scaling_window must be >= 1 or None, got {window}")
        #: env steps whose returns the statistics remember (None: all of them)
        self.window = window
        self.stats = RunningMeanStd()

    @property
    def started(self) -> bool:
        """Whether any returns have been folded in."""
        return self.stats.count > 0

    @property
    def value(self) -> float:
        """The divisor of the value targets: ``sqrt(running variance + EPS)``."""
        return float(np.sqrt(self.stats.var + EPS))

    def update(self, returns: np.ndarray) -> None:
        """Fold a ``(T, N)`` block of returns in. With a window ``K`` the running count is capped
        at ``K x N`` returns afterwards, so older blocks fade geometrically (an exponential
        moving mean and variance)."""
        self.stats.update(returns.reshape(-1))
        if self.window is not None:
            self.stats.count = min(self.stats.count, self.window * returns.shape[1])

    def state(self) -> dict[str, Any]:
        """The statistics, for checkpoints."""
        s = self.stats
        return {"mean": float(np.asarray(s.mean)), "var": float(np.asarray(s.var)), "count": int(s.count)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.stats.mean = float(state["mean"])
        self.stats.var = float(state["var"])
        self.stats.count = int(state["count"])
