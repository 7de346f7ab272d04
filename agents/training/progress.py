"""What a training run shows while it trains, between its evaluation lines (:class:`RunProgress`).

* On a terminal (``train.progress``): one tqdm bar on stderr over the run's planned env steps, with
  env steps, env steps/s, the time left, the last and best validation mean JCT and the validation
  rival's (:func:`~agents.training.validation_baselines.validation_rival`).
* Otherwise, every ``every_s`` seconds (:attr:`~agents.training.run_spec.RunSpec.status_every_s`), a
  plain line on stdout (:meth:`RunProgress.line`):
  ``step X/Y (p%), R env steps/s, ETA T; validation mean JCT L (best B); rival NAME M``.
* Neither when both are off (``train.py --quiet``).

The position moves during a collection (the training collector's step hook calls
:meth:`RunProgress.collected`), not only once per update. A ticker thread redraws the bar every
:data:`TICK_S` seconds and prints a line that is due while the trainer is inside an update or a
validation, when no hook runs.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable

from tqdm import tqdm

#: seconds between the ticker's wake-ups (bar redraws, due lines)
TICK_S = 1.0
#: the bar writes counts as 24.6k / 1.97M from this many planned env steps (below: as they are)
SCALE_FROM = 10_000
#: the bar's layout (tqdm fields; ``postfix`` carries the validation figures)
BAR_FORMAT = "{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} env steps [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


class RunProgress:
    """The bar or the plain lines of one training process.

    ``start``: the env steps done before this process; ``total``: the run's planned env steps (None:
    not known); ``bar``: draw the tqdm bar; ``every_s``: seconds between plain lines
    (None: none; ignored with the bar); ``best_jct``: the run's best validation mean JCT so far (a
    resumed run's); ``rival``: ``(name, validation mean JCT)`` or None; ``best_label``: the word before the
    best (``best.pt`` where the best is chosen on another score, ``train.also_validate_on``).
    """

    def __init__(self, start: int, total: int | None, bar: bool, every_s: float | None,
                 best_jct: float | None = None, rival: tuple[str, float] | None = None,
                 clock: Callable[[], float] = time.monotonic, best_label: str = "best") -> None:
        self.position = int(start)
        self.total = total
        self.rival = rival
        self.every_s = None if bar else every_s
        self.last_jct: float | None = None
        self.best_jct = best_jct
        self.best_label = best_label
        self.validating = False
        self._clock = clock
        self._lock = threading.Lock()
        self._line_at = clock()
        self._rate_from: tuple[float, int] | None = None  # (time, env step) of this process's first training step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = (tqdm(total=total, initial=self.position, unit=" env steps", dynamic_ncols=True, smoothing=0.05,
                          unit_scale=total is None or total >= SCALE_FROM, bar_format=BAR_FORMAT if total else None,
                          file=sys.stderr)
                     if bar else None)
        self._show_postfix()

    @property
    def active(self) -> bool:
        """Whether anything is shown (a bar or plain lines)."""
        return self._bar is not None or self.every_s is not None

    # ------------------------------------------------------------------ what the trainer reports
    def training_step(self, env_step: int) -> None:
        """A training step starts at ``env_step`` (before its collection); prints a line that is due."""
        now = self._clock()
        with self._lock:
            if self._rate_from is None:
                self._rate_from = (now, int(env_step))
            self.validating = False
            self._move(int(env_step))
            self._print_due(now)

    def collected(self, steps: int) -> None:
        """``steps`` more env steps were collected."""
        with self._lock:
            self._move(self.position + int(steps))

    def validation_started(self) -> None:
        with self._lock:
            self.validating = True
            self._show_postfix()

    def evaluated(self, last_jct: float | None, best_jct: float | None) -> None:
        """An evaluation gave ``last_jct``; the run's best is ``best_jct``."""
        with self._lock:
            self.last_jct, self.best_jct, self.validating = last_jct, best_jct, False
            self._show_postfix()

    def write(self, line: str) -> None:
        """Print ``line`` on stdout, above the bar when there is one."""
        with self._lock:
            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()

    # ------------------------------------------------------------------ text
    def rate(self, now: float | None = None) -> float | None:
        """Env steps per second since this process's first training step (None before any)."""
        if self._rate_from is None:
            return None
        t0, s0 = self._rate_from
        elapsed = (self._clock() if now is None else now) - t0
        return (self.position - s0) / elapsed if elapsed > 0 and self.position > s0 else None

    def validation_text(self, compact: bool = False) -> str:
        """``validation mean JCT L (best B); rival NAME M`` (what is known so far); ``compact``: the
        bar's ``val JCT L (best B), NAME M``."""
        last = "n/a" if self.last_jct is None else f"{self.last_jct:.3f}"
        best = "" if self.best_jct is None else f" ({self.best_label} {self.best_jct:.3f})"
        sep, what, rival = (", ", "val JCT", "") if compact else ("; ", "validation mean JCT", "rival ")
        text = f"{what} {last}{best}" + ("" if self.rival is None else f"{sep}{rival}{self.rival[0]} {self.rival[1]:.3f}")
        return text + (f"{sep}validating" if self.validating else "")

    def line(self, now: float | None = None) -> str:
        """The plain status line."""
        total = self.total
        text = f"step {self.position}" + (f"/{total} ({100 * self.position / total:.0f}%)" if total else "")
        rate = self.rate(now)
        if rate is not None:
            text += f", {rate:.0f} env steps/s"
            if total:
                text += f", ETA {tqdm.format_interval(max(0, total - self.position) / rate)}"
        return f"{text}; {self.validation_text()}"

    # ------------------------------------------------------------------ ticker
    def start(self) -> None:
        """Start the ticker thread (nothing to do when nothing is shown)."""
        if self.active and self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="run-progress", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the ticker and close the bar."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._bar is not None:
            self._bar.close()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                if self._bar is not None:
                    self._bar.refresh()
                else:
                    self._print_due(self._clock())

    # ------------------------------------------------------------------ internals (lock held)
    def _move(self, env_step: int) -> None:
        if self._bar is not None and env_step > self._bar.n:
            self._bar.update(env_step - self._bar.n)
        self.position = env_step

    def _show_postfix(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self.validation_text(compact=True), refresh=True)

    def _print_due(self, now: float) -> None:
        if self.every_s is None or now - self._line_at < self.every_s:
            return
        self._line_at = now
        sys.stdout.write(self.line(now) + "\n")
        sys.stdout.flush()
