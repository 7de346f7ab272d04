"""``train.malloc``: glibc keeps freed memory in the process (large tensors on the heap, no trim).

The setting is process-wide, so each mode is observed in its own subprocess. What is checked
is where glibc puts large blocks; the effect on training speed is a benchmark's matter
(``benchmarks/training_speed.py``, one process per mode), not a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents.training.config import TrainConfig
from agents.training.malloc import MALLOC_MODES, _mallopt, configure_allocator
from envs.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]

# where glibc puts three tensors of 30 MB (below glibc's largest mmap threshold, 32 MB) or 48 MB
# (above it) (mallinfo2, glibc >= 2.33): each in its own mapping (unmapped
# again when freed, so the next one faults its pages in afresh) or on the heap. The trim setting is
# not observed here: whether freeing such blocks shrinks the heap without it varies from run to
# run, so heap_shrank == 0 below holds with or without it
_PLACEMENT = """
import ctypes, json, sys, torch
from agents.training.malloc import configure_allocator
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = MallInfo2
applied = configure_allocator(sys.argv[1])
before = mallinfo2()
blocks = [torch.empty(int(sys.argv[2]) << 20, dtype=torch.uint8).fill_(1) for _ in range(3)]
alive = mallinfo2()
del blocks
freed = mallinfo2()
print(json.dumps({"applied": applied, "mapped": alive.hblks - before.hblks,
                  "heap_grew": alive.arena - before.arena, "heap_shrank": alive.arena - freed.arena}))
"""


def _placement(mode: str, mb: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _PLACEMENT, mode, str(mb)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    if "mallinfo2" in out.stderr:
        pytest.skip("this glibc has no mallinfo2 (before 2.33): the placement cannot be observed")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mb", [30, 48])
def test_keep_puts_large_tensors_on_the_heap_and_keeps_them_once_freed(mb):
    if _mallopt() is None:
        pytest.skip("the C library is not glibc: train.malloc=keep does nothing here")
    system, keep = _placement("system", mb), _placement("keep", mb)
    assert keep["applied"] and not system["applied"]
    assert system["mapped"] >= 1  # glibc's default: a block this large gets its own mapping
    assert keep["mapped"] == 0 and keep["heap_grew"] >= 3 * mb << 20  # kept: on the heap ...
    assert keep["heap_shrank"] == 0  # ... and still there once they are freed


def test_modes_and_config():
    assert MALLOC_MODES == ("keep", "system") and TrainConfig().malloc == "keep"
    assert configure_allocator("system") is False
    with pytest.raises(ValueError, match="malloc mode"):
        configure_allocator("jemalloc")
    with pytest.raises(ConfigError, match="malloc"):
        TrainConfig(malloc="jemalloc").validate()
