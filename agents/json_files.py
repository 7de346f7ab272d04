"""Strict JSON files: the one writer of the project's JSON outputs (``result.json``, ``summary.json``,
results and tuning pages' JSON)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from agents.output_dirs import temp_beside


def json_safe(obj: Any) -> Any:
    """NaN/inf -> None, numpy scalars -> Python, recursively (strict JSON)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def write_json(path: Path, doc: Any) -> Path:
    """Write ``doc`` as indented strict JSON (:func:`json_safe`), atomically (a reader sees the old
    file or the new one, never a part), with the mode ``open()`` gives (0666 less the umask)."""
    text = json.dumps(json_safe(doc), indent=2, allow_nan=False) + "\n"
    path = Path(path)
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
