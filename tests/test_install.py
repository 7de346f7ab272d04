"""The install path the README documents: `make install` takes torch from TORCH (default the CPU
build) and, for a CUDA build, from the index in TORCH_INDEX. Checked with `make -n` (prints the
commands without running them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _dry_install(*variables: str) -> str:
    if shutil.which("make") is None:
        pytest.fail("make is required (the README's install path)")
    # -W pyproject.toml: treat the project file as changed, so the install recipe is printed even
    # when .venv is already installed
    proc = subprocess.run(["make", "-n", "-W", "pyproject.toml", "install", *variables], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_default_install_takes_the_cpu_torch_then_the_project():
    out = _dry_install()
    torch_line = next(line for line in out.splitlines() if "torch==" in line)
    assert "'torch==2.13.0'" in torch_line and "--index-url" not in torch_line
    assert out.index("torch==2.13.0") < out.index("-e '.[dev]'")


def test_torch_index_installs_the_cuda_build_from_that_index():
    index = "https://download.pytorch.org/whl/cu128"
    out = _dry_install(f"TORCH_INDEX={index}")
    assert f"--index-url {index} 'torch==2.13.0'" in out
    assert f"--index-url {index} 'torch==2.14.1'" in _dry_install(f"TORCH_INDEX={index}", "TORCH=torch==2.14.1")


def test_the_readme_documents_that_variable():
    readme = (ROOT / "README.md").read_text()
    assert "make install TORCH_INDEX=https://download.pytorch.org/whl/cu" in readme
