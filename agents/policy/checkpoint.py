"""Policy checkpoints: the one reader (safe loading only), the writer and the one error type.

Every checkpoint read in the project -- ``evaluate.py --checkpoint``, ``train.py --resume``,
:class:`agents.policy.scheduler.TapFingerScheduler` -- goes through :func:`read_checkpoint`, which
calls ``torch.load(..., weights_only=True)``: a checkpoint holds tensors and plain Python
values only (dicts, lists, numbers, strings), so a file that carries any other pickled object
(which could run code while it is unpickled) is refused, never executed.

The file's zip CRC-32 checks are run first (a damaged file is refused, not loaded with changed
bytes), and every value is checked before use (:func:`validate_checkpoint`: mappings where mappings
belong, finite non-negative integer counters, tensors in state dicts, no NaN or infinity in the
weights or the optimizer state). Every problem raises
:class:`CheckpointError`, a :class:`~envs.config.ConfigError`, so the command lines report it as
bad input (exit 2, one line on stderr). A failed write raises
:class:`~agents.output_dirs.OutputWriteError` (an ``OSError``: exit 74).

The network and its config are imported when a checkpoint is loaded: importing this module
does not load the graph networks (torch-geometric).
"""

from __future__ import annotations

import math
import os
import pickle
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from agents.output_dirs import OutputWriteError, fsync_dir, temp_beside
from envs.config import ConfigError, ScenarioConfig

from .observations import spec_dims, spec_to_dict

#: keys every policy checkpoint holds
POLICY_KEYS = ("model", "policy_config", "scenario", "obs_spec")
#: keys a training checkpoint adds (``train.py`` writes them: ``agents.training.checkpoints.CKPT_KEYS``)
TRAINING_KEYS = ("optimizer", "counters", "rng", "train_config", "return_scaler")
#: step counters every training checkpoint holds (integers >= 0)
COUNTERS = ("env_step", "gradient_steps", "update_step", "epoch")


class CheckpointError(ConfigError):
    """A checkpoint is missing, unreadable, unsafe, incomplete, or does not fit the model or scenario."""


def _why_unreadable(exc: BaseException) -> tuple[str, bool]:
    """A one-line reason for a failed ``torch.load`` and whether the file was refused as unsafe."""
    text = str(exc)
    unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text) or re.search(r"unsupported GLOBAL ([\w.]+)", text)
    if unsafe:
        return unsafe.group(1), True
    if "zip archive" in text or "central directory" in text:
        return "not a complete torch zip archive (truncated or damaged?)", False
    if isinstance(exc, (pickle.UnpicklingError, EOFError)) or "Weights only load failed" in text:
        return "not a torch checkpoint", False
    first = text.strip().split("\n")[0].split(". ")[0]
    return (first[:120] + ("..." if len(first) > 120 else "")) or type(exc).__name__, False


def read_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu", required: Sequence[str] = POLICY_KEYS
) -> dict[str, Any]:
    """Load a checkpoint file safely (``weights_only=True``) and check it is a dict whose ``required``
    keys are present and hold what the project writes there (:func:`validate_checkpoint`).

    The only ``torch.load`` of a checkpoint in the project. Raises :class:`CheckpointError`
    (missing file, corrupt file, a pickled object other than tensors and plain values, not a
    dict, missing or malformed keys).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} not found: the file does not exist")
    damaged = _damaged_member(path)
    if damaged:
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt: {damaged}")
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a bad file
        reason, unsafe = _why_unreadable(exc)
        if unsafe:
            raise CheckpointError(
                f"checkpoint {str(path)!r} holds a pickled Python object ({reason}) besides tensors and plain "
                "values; refusing to load it (checkpoints written by train.py never do)"
            ) from None
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt or not a torch checkpoint: {reason}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"checkpoint {str(path)!r} holds a {type(data).__name__}, expected a dict")
    missing = [k for k in required if k not in data]
    if missing:
        raise CheckpointError(f"checkpoint {str(path)!r} lacks key(s) {missing}")
    validate_checkpoint(data, path, required)
    return data


def _damaged_member(path: Path) -> str | None:
    """Why the zip archive at ``path`` fails its CRC-32 checks (every member is read: a checkpoint is a
    few MB), or None when they pass. ``torch.load`` does not check them, so a flipped byte inside
    a tensor would load as a changed weight. A file that is no zip (torch's legacy format) passes
    here and is judged by ``torch.load``."""
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError,
            zlib.error) as exc:
        return f"its zip archive cannot be read ({str(exc).strip() or type(exc).__name__})"
    return None if bad is None else f"member {bad!r} fails its CRC check (the file was damaged after it was written)"


def validate_checkpoint(data: Mapping[str, Any], path: str | Path, keys: Sequence[str]) -> None:
    """:class:`CheckpointError` (one line naming the key) unless each of ``keys`` present in ``data``
    holds what the project writes there: a state dict of finite tensors (``model``), mappings (the configs,
    ``obs_spec``, ``optimizer``, ``rng``, ``return_scaler``) and finite numbers in them, integer
    step counters >= 0 (:data:`COUNTERS`, required in ``counters``)."""
    for key in keys:
        if key not in data:
            continue
        problem = _CHECKS[key](data[key])
        if problem:
            raise CheckpointError(f"checkpoint {str(path)!r}: {key}{problem}")


def _got(value: Any) -> str:
    """``value`` for a message: short, one line."""
    text = repr(value) if isinstance(value, (int, float, str, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _mapping(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return f" must be a mapping, got {_got(value)}"
    bad = [k for k in value if not isinstance(k, (str, int))]
    return f" has a key of type {type(bad[0]).__name__}" if bad else None


def _count(value: Any, nullable: bool = False) -> str | None:
    """An integer >= 0 (an integral float is accepted: JSON-like files write them)."""
    if value is None and nullable:
        return None
    ok = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if not ok or value < 0:
        return f" must be an integer >= 0{' or null' if nullable else ''}, got {_got(value)}"
    return None


def _number(value: Any, low: float = -math.inf, nullable: bool = False, minus_inf: bool = False) -> str | None:
    """A finite number >= ``low`` (``minus_inf``: -inf too, the score before any evaluation)."""
    if value is None and nullable:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and (math.isfinite(value) and value >= low or minus_inf and value == -math.inf):
        return None
    return f" must be a finite number{f' >= {low:g}' if low > -math.inf else ''}, got {_got(value)}"


def _state_dict(value: Any) -> str | None:
    problem = _mapping(value)
    if problem:
        return problem
    bad = [k for k, v in value.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if bad:
        return f".{bad[0]} must be a tensor, got {_got(value[bad[0]])}"
    return _finite_tensors(value)


def _finite_tensors(value: Any, where: str = "") -> str | None:
    """The first tensor in nested mappings and lists holding NaN or infinity (a diverged run), or None."""
    if isinstance(value, Tensor):
        if (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all()):
            return f"{where} holds NaN or infinite values (saved by a run that diverged?)"
        return None
    if isinstance(value, Mapping):
        items = value.items()
    else:
        items = enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        problem = _finite_tensors(item, f"{where}.{key}")
        if problem:
            return problem
    return None


def _fields(value: Any, checks: Mapping[str, Callable[[Any], str | None]], required: Sequence[str]) -> str | None:
    """A mapping whose ``required`` keys are present and whose keys in ``checks`` pass them."""
    problem = _mapping(value)
    if problem:
        return problem
    missing = [k for k in required if k not in value]
    if missing:
        return f" lacks {', '.join(missing)}"
    for key, check in checks.items():
        if key in value:
            problem = check(value[key])
            if problem:
                return f".{key}{problem}"
    return None


def _kind(kind: type | tuple[type, ...], nullable: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None and nullable or isinstance(value, kind) and not isinstance(value, bool):
            return None
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        return f" must be {names}{' or null' if nullable else ''}, got {_got(value)}"
    return check


def _list_of(kind: type) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if isinstance(value, (list, tuple)) and all(isinstance(v, kind) for v in value):
            return None
        return f" must be a list of {kind.__name__}, got {_got(value)}"
    return check


_COUNTER_CHECKS: dict[str, Callable[[Any], str | None]] = {
    **{k: _count for k in COUNTERS},
    "restarts": _count,
    "best_score": lambda v: _number(v, minus_inf=True),
    "best_mean_jct": lambda v: _number(v, 0, nullable=True),
    "best_env_step": lambda v: _count(v, nullable=True),
    "evaluated_env_step": lambda v: _count(v, nullable=True),
    "wall_s": lambda v: _number(v, 0),
    "devices": _list_of(str),
    "run_id": _kind(str, nullable=True),
}
_RNG_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "python": _list_of(int),
    "python_version": _kind(int),
    "numpy": lambda v: _fields(v, {"key": _kind(Tensor), "pos": _count, "has_gauss": _count, "gauss": _number},
                               ("key", "pos", "has_gauss", "gauss")),
    "torch": _kind(Tensor),
    "cuda": _list_of(Tensor),
}
#: the check of each known key (a problem text starting where the key's name ends, or None)
_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "model": _state_dict,
    "policy_config": _mapping,
    "scenario": _mapping,
    "obs_spec": _mapping,
    "train_config": _mapping,
    "optimizer": lambda v: _fields(v, {"state": lambda x: _mapping(x) or _finite_tensors(x),
                                       "param_groups": _list_of(Mapping)}, ("state", "param_groups")),
    "counters": lambda v: _fields(v, _COUNTER_CHECKS, COUNTERS),
    "rng": lambda v: _fields(v, _RNG_CHECKS, ("python", "python_version", "numpy", "torch")),
    "return_scaler": lambda v: _fields(v, {"mean": _number, "var": lambda x: _number(x, 0), "count": _count},
                                       ("mean", "var", "count")),
}


def check_compatible(policy: Any, spec: Any) -> None:
    """Raise :class:`CheckpointError` if ``policy`` cannot act on observations of ``spec``."""
    have, want = policy.dims, spec_dims(spec)
    labels = {
        "K": "task types", "alloc_dims": "allocation grid (CPU + 1, GPU + 1)", "P": "pending slots",
        "pending_features": "pending-task features", "running_features": "running-task features",
        "cluster_features": "cluster features",
    }
    problems = []
    for key, label in labels.items():
        if have[key] != want[key]:
            problems.append(f"{label}: {_plain(have[key])} in the model vs {_plain(want[key])} in the scenario")
    if policy.cfg.tied_to_n and have["N"] != want["N"]:
        problems.append(f"clusters: per-agent parameters for {have['N']} clusters vs {want['N']} in the scenario")
    if problems:
        raise CheckpointError("checkpoint incompatible with the scenario: " + "; ".join(problems))


def save_policy_checkpoint(
    path: str | Path, policy: Any, scenario_cfg: ScenarioConfig, extra: Mapping[str, Any] | None = None
) -> Path:
    """Write ``{model, policy_config, scenario, obs_spec, **extra}`` atomically with ``torch.save``.

    ``extra`` must hold tensors and plain values only, or :func:`read_checkpoint` will refuse the file.
    Every tensor is stored on the CPU (a checkpoint written by a CUDA run loads on a machine without
    CUDA, also with a plain ``torch.load(weights_only=True)``).
    """
    extra = dict(extra or {})
    clash = sorted(set(extra) & set(POLICY_KEYS))
    if clash:
        raise ValueError(f"extra may not override checkpoint key(s) {clash}")
    data = dict(extra)
    data.update(
        model=policy.state_dict(),
        policy_config=policy.cfg.to_dict(),
        scenario=scenario_cfg.to_dict(),
        obs_spec=spec_to_dict(policy.spec),
    )
    data = _on_cpu(data)
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_beside(path, prefix=path.name)  # last.pt<random>.tmp: what rundir clears
        with os.fdopen(fd, "wb") as f:
            torch.save(data, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except (OSError, RuntimeError) as exc:  # torch reports a full disk as a RuntimeError of its zip writer
        raise OutputWriteError(f"cannot write checkpoint {str(path)!r}: {_write_failure(exc, path.parent)}; "
                               "the previous file, if any, is unchanged") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _write_failure(exc: BaseException, directory: Path) -> str:
    """One line on why a write failed, with the free space left when the disk looks full."""
    import errno
    import shutil

    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).strip().split("\n")[0][:160]
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        free = None
    full = (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or (free is not None and free < 2**20)
    if full:
        return f"no space left on the device ({'?' if free is None else f'{free / 2**20:.1f} MiB'} free)"
    return text or type(exc).__name__


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``fn`` applied to every tensor inside its dicts, lists and tuples (new
    containers; other values as they are)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, Mapping):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, fn) for v in value)
    return value


def _on_cpu(value: Any) -> Any:
    """``value`` with every tensor inside dicts, lists and tuples moved to the CPU."""
    return map_tensors(value, lambda t: t.detach().cpu())


def shape_problems(model: nn.Module, state: Mapping[str, Any]) -> list[str]:
    """How the state dict ``state`` misfits ``model`` (missing and unexpected keys, non-tensors,
    shapes), one short text each; empty when it fits."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    out = []
    if missing:
        out.append(f"missing {len(missing)} key(s), e.g. {missing[:3]}")
    if unexpected:
        out.append(f"unexpected {len(unexpected)} key(s), e.g. {unexpected[:3]}")
    for k in sorted(set(own) & set(state)):
        v = state[k]
        if not isinstance(v, Tensor):
            out.append(f"{k} is not a tensor")
        elif tuple(v.shape) != tuple(own[k].shape):
            out.append(f"{k}: shape {tuple(v.shape)} in file vs {tuple(own[k].shape)} for the config")
    return out


def load_policy_checkpoint(
    path: str | Path, device: str | torch.device = "cpu", scenario: ScenarioConfig | None = None
) -> tuple[Any, dict[str, Any]]:
    """Load and validate a policy checkpoint; returns ``(policy in eval mode, meta)``.

    ``meta`` is the checkpoint dict without ``model``, with ``scenario`` as a
    :class:`ScenarioConfig` and ``policy_config`` as a ``PolicyConfig``. If ``scenario`` is
    given, the policy must be able to act on it (same task types, allocation grid, pending
    slots; same number of clusters for per-agent parameters, :attr:`PolicyConfig.tied_to_n`). Reads with :func:`read_checkpoint`
    (safe loading); every problem raises :class:`CheckpointError`.
    """
    from envs.observation import ObservationSpec

    from .config import PolicyConfig  # imported on first use: the network loads the graph networks
    from .network import TapFingerPolicy

    path = Path(path)
    data = read_checkpoint(path, device)
    try:
        pcfg = PolicyConfig.from_dict(data["policy_config"])
    except (ConfigError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r}: bad policy_config: {exc}") from None
    try:
        scen = ScenarioConfig.from_dict(data["scenario"])
    except (ConfigError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r}: bad scenario: {exc}") from None
    spec = ObservationSpec.from_config(scen)
    stored = data["obs_spec"]
    if not isinstance(stored, Mapping):
        raise CheckpointError(f"checkpoint {str(path)!r}: obs_spec must be a mapping")
    fresh = spec_to_dict(spec)
    diff = [k for k in fresh if k in stored and _plain(stored[k]) != _plain(fresh[k])]
    if diff:
        raise CheckpointError(
            f"checkpoint {str(path)!r}: obs_spec disagrees with its scenario on {diff} "
            "(saved by an incompatible version of the observation builder?)"
        )
    policy = TapFingerPolicy(spec, pcfg)
    state = data["model"]
    if not isinstance(state, Mapping):
        raise CheckpointError(f"checkpoint {str(path)!r}: model must be a state dict")
    problems = shape_problems(policy, state)
    if problems:
        raise CheckpointError(
            f"checkpoint {str(path)!r}: weights do not match the architecture in policy_config: "
            + "; ".join(problems[:3]) + (f"; {len(problems) - 3} more" if len(problems) > 3 else "")
        )
    policy.load_state_dict(state)
    policy.to(device).eval()
    if scenario is not None:
        check_compatible(policy, ObservationSpec.from_config(scenario))
    meta = {k: v for k, v in data.items() if k != "model"}
    meta["scenario"] = scen
    meta["policy_config"] = pcfg
    return policy, meta


def _run_choice(meta: Mapping[str, Any], key: str, default: Any, choices: Sequence[Any], path: str | Path) -> Any:
    """``train_config[key]`` of the checkpoint's run, ``default`` when the file has none; a value
    outside ``choices`` raises :class:`CheckpointError`."""
    train = meta.get("train_config")
    value = train.get(key, default) if isinstance(train, Mapping) else default
    if value not in choices:
        raise CheckpointError(f"checkpoint {str(path)!r}: train_config.{key} must be one of "
                              f"{list(choices)}, got {value!r}")
    return value


def checkpoint_eval_action(meta: Mapping[str, Any], path: str | Path = "") -> str:
    """How the checkpoint's policy acts when evaluated (``train.eval_action`` of its run,
    :data:`~agents.policy.modes.EVAL_ACTIONS`); ``argmax`` for a checkpoint without one."""
    from .modes import ARGMAX, EVAL_ACTIONS

    return str(_run_choice(meta, "eval_action", ARGMAX, EVAL_ACTIONS, path))


def checkpoint_eval_conflicts(meta: Mapping[str, Any], trained: str, path: str | Path = "") -> str:
    """How the checkpoint's agents resolve conflicts when evaluated: ``train.eval_conflicts`` of its
    run (:data:`~agents.policy.modes.CONFLICT_MODES`), or ``trained`` (its ``policy.conflicts``) for a
    run without one."""
    from .modes import CONFLICT_MODES

    mode = _run_choice(meta, "eval_conflicts", None, (None, *CONFLICT_MODES), path)
    return trained if mode is None else str(mode)


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return v
