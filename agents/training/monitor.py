"""Machine utilisation sampled for the ``usage/*`` TensorBoard scalars."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import psutil


class SystemMonitor:
    """Machine utilisation for ``usage/*`` scalars (best effort, never raises).

    One per run (:class:`~agents.training.callbacks.TrainerCallbacks`); CPU percentages cover the time
    since the previous :meth:`sample` (machine-wide and this process, the latter can exceed 100
    with several threads).
    """

    def __init__(self) -> None:
        self._process: psutil.Process | None = None

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        try:
            import psutil

            if self._process is None:
                self._process = psutil.Process()
                self._process.cpu_percent(interval=None)
            out["cpu_percent"] = float(psutil.cpu_percent(interval=None))
            out["process_cpu_percent"] = float(self._process.cpu_percent(interval=None))
        except Exception:  # pragma: no cover - psutil is a torch-geometric dependency
            pass
        if torch.cuda.is_available():
            try:
                out["gpu_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
                out["gpu_util_percent"] = float(torch.cuda.utilization())
            except Exception:  # nvml missing: memory only
                pass
        return out
