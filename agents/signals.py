"""SIGTERM handled as Ctrl-C by the command lines (``train.py``, ``evaluate.py``).

SIGTERM (``timeout``, batch schedulers, ``docker stop``) raises :class:`KeyboardInterrupt` in the
main thread, so whatever cleans up after Ctrl-C (a saved ``last.pt``, an evaluation's worker
processes stopped, a staging directory removed) runs for it too; the exit code then says which
signal it was: :data:`EXIT_INTERRUPTED` (130) for Ctrl-C, :data:`EXIT_TERMINATED` (143) for SIGTERM.
"""

from __future__ import annotations

import signal
from types import FrameType

#: exit code of a command stopped by Ctrl-C / SIGINT (128 + 2, the shell's convention)
EXIT_INTERRUPTED = 130
#: exit code of a command stopped by SIGTERM (128 + 15)
EXIT_TERMINATED = 143


class TerminationSignals:
    """While installed, SIGTERM raises :class:`KeyboardInterrupt` and is remembered; :meth:`restore`
    puts the previous handler back. :attr:`name` and :attr:`code` describe the stop."""

    def __init__(self) -> None:
        self.terminated = False
        self._previous = signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.terminated = True
        raise KeyboardInterrupt

    def restore(self) -> None:
        """Reinstate the SIGTERM handler that was in place before."""
        signal.signal(signal.SIGTERM, self._previous)

    @property
    def name(self) -> str:
        """``terminated (SIGTERM)`` or ``interrupted``."""
        return "terminated (SIGTERM)" if self.terminated else "interrupted"

    @property
    def code(self) -> int:
        """:data:`EXIT_TERMINATED` after SIGTERM, else :data:`EXIT_INTERRUPTED`."""
        return EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED
