"""Figures are written atomically: a failed or interrupted write leaves the previous file whole."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from agents.evaluation.plots import save_figure  # noqa: E402


def _figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return fig


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = save_figure(_figure(), tmp_path / "curves.png")
    before = path.read_bytes()
    assert before.startswith(b"\x89PNG")
    fig = _figure()

    def broken(target, **kwargs):
        with open(target, "wb") as fh:
            fh.write(b"\x89PNG partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fig, "savefig", broken)
    with pytest.raises(OSError):
        save_figure(fig, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png"]


def test_the_same_figure_gives_the_same_bytes(tmp_path):
    a = save_figure(_figure(), tmp_path / "a.png").read_bytes()
    b = save_figure(_figure(), tmp_path / "b.png").read_bytes()
    assert a == b
