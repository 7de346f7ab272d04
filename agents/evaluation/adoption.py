"""Adopt a tuning candidate as the recipe: its values into the YAML, the runs moved to match.

After ``benchmarks/tune.py`` shows that a candidate pays, three things make it the recipe, and
:func:`plan_adoption` checks them all before :func:`apply_adoption` changes anything:

* its ``train.``/``policy.`` values, and the scenario keys that are learning choices
  (:data:`~envs.config.LEARNING_KEYS`, the reward), are written into ``configs/<scenario>.yaml``
  (:func:`~agents.training.recipe_file.set_recipe_values`), and the file must then resolve to
  exactly the candidate's configuration;
* the old recipe's seeds (``<recipe_runs>/<scenario>/s<k>``, the runs of ``reproduce.py``) move to
  ``<runs>/<scenario>/<old_name>/``, where ``tune.py`` finds them as a candidate;
* the candidate's seeds move to ``<recipe_runs>/<scenario>/``, where they are the recipe's.

:attr:`AdoptionPlan.restore` is the candidate that brings the old values back, so that ``tune.py``
scores the old recipe against the new one without training anything.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from envs.config import LEARNING_KEYS, ConfigError, is_recipe_file, split_scenario_yaml

from .seed_runs import SeedRun, finished, log_path, recipe_differences, seeds_command
from .tuning import Candidate, run_dir

_SEED_DIR = re.compile(r"^s[0-9]+$")


@dataclass
class AdoptionPlan:
    """What adopting a candidate writes and moves (nothing is changed until :func:`apply_adoption`)."""

    config: str
    yaml_path: Path
    new_text: str
    dropped_comments: list[str]
    values: dict[str, object]  # section.key -> the candidate's value
    restore: Candidate  # the old recipe, as a candidate of the new one
    keep: list[tuple[Path, Path]] = field(default_factory=list)  # (from, to): the old recipe's runs and logs
    promote: list[tuple[Path, Path]] = field(default_factory=list)  # (from, to): the candidate's runs and logs
    seeds: list[int] = field(default_factory=list)  # the candidate's seeds, now the recipe's

    def follow_up(self) -> list[str]:
        """The two commands that finish an adoption: ``tune.py`` scoring the old recipe as a candidate
        (nothing trains) and the held-out page (``generalist.py`` for a family recipe file, else
        ``reproduce.py``), each with ``--restart``: the stored seeds belong to the old recipe."""
        from .results import REPORT_SEEDS

        restore = shlex.quote(f"{self.restore.name}:{','.join(self.restore.overrides)}")
        page = "generalist.py" if is_recipe_file(self.yaml_path) else "reproduce.py"
        seeds = SimpleNamespace(config=self.config, seeds=len(self.seeds), first_seed=min(self.seeds), heldout=REPORT_SEEDS)
        return [f"python benchmarks/tune.py --config {self.config} --candidate {restore} --seeds {len(self.seeds)} --restart",
                f"{seeds_command(page, seeds)} --restart"]


def _seed_dirs(parent: Path) -> list[Path]:
    if not parent.is_dir():
        return []
    return sorted((p for p in parent.iterdir() if p.is_dir() and _SEED_DIR.match(p.name)), key=lambda p: int(p.name[1:]))


def _with_logs(src: Path, dst: Path) -> list[tuple[Path, Path]]:
    """The run directory and, when there is one, its log beside it (``s0.log``)."""
    pairs = [(src, dst)]
    if log_path(src).is_file():
        pairs.append((log_path(src), log_path(dst)))
    return pairs


def plan_adoption(config: str, candidate: Candidate, old_name: str, runs: Path, recipe_runs: Path) -> AdoptionPlan:
    """Check that ``candidate`` can become ``config``'s recipe and return what that takes; the old
    recipe's seeds are to be kept as the candidate ``old_name``. Every problem is a :class:`ConfigError`."""
    from agents.training.config import split_overrides
    from agents.training.prepare import config_differences, prepare_run, resolved_config
    from agents.training.recipe_file import set_recipe_values, yaml_value

    from .ablations import RECIPE
    from .tuning import NAME_PATTERN

    if not NAME_PATTERN.match(old_name) or old_name in (RECIPE, candidate.name):
        raise ConfigError(f"--old-name {old_name!r}: one plain word, other than {RECIPE!r} and the candidate's name")
    split = split_overrides(candidate.overrides)
    workload = [key for key in split.scenario if key not in LEARNING_KEYS]
    if workload:
        raise ConfigError(f"--candidate {candidate.name} changes the scenario ({', '.join(workload)}); only train.* "
                          f"and policy.* values and the learning keys ({', '.join(LEARNING_KEYS)}) are recipe values")
    spec = prepare_run(config)
    try:
        new_spec = prepare_run(config, list(candidate.overrides))
    except ConfigError as exc:
        raise ConfigError(f"--candidate {candidate.name}: {exc}") from None
    before, after = resolved_config(spec), resolved_config(new_spec)
    changed = [(section, key) for section, keys in (("scenario", split.scenario), ("policy", split.policy),
                                                    ("train", split.train)) for key in keys]
    values = {(section, key): after[section][key] for section, key in changed}
    unchanged = [f"{section}.{key}" for section, key in changed if before[section][key] == after[section][key]]
    if unchanged:
        raise ConfigError(f"--candidate {candidate.name}: {', '.join(unchanged)} already has that value in the recipe")

    yaml_path, _, _ = split_scenario_yaml(config)
    new_text, dropped = set_recipe_values(yaml_path.read_text(), values)
    with tempfile.TemporaryDirectory() as tmp:  # the edited file must resolve to the candidate, exactly
        probe = Path(tmp) / yaml_path.name
        probe.write_text(new_text)
        try:
            edited = prepare_run(str(probe))
        except ConfigError as exc:
            raise ConfigError(f"writing the candidate into {yaml_path} gives a file that does not load ({exc}); "
                              "write its values by hand") from None
    wrong = config_differences(after, resolved_config(edited))
    if wrong:
        raise ConfigError(f"writing the candidate into {yaml_path} would not give its configuration "
                          f"({', '.join(wrong)} differ); write its values by hand")

    scenario = spec.scenario.name
    candidate_dirs = _seed_dirs(runs / scenario / candidate.name)
    if not candidate_dirs:
        raise ConfigError(f"--candidate {candidate.name}: no seeds in {runs / scenario / candidate.name}; "
                          "run tune.py with it first")
    unfinished = [d.name for d in candidate_dirs if not finished(d)]
    if unfinished:
        raise ConfigError(f"--candidate {candidate.name}: {', '.join(unfinished)} has not finished its steps; finish it "
                          "with tune.py (it resumes) before adopting it")
    kept = runs / scenario / old_name
    if kept.exists():
        raise ConfigError(f"--old-name {old_name}: {kept} exists; choose another name")
    keep: list[tuple[Path, Path]] = []
    for src in _seed_dirs(recipe_runs / scenario):
        keep += _with_logs(src, kept / src.name)
    seeds = [int(d.name[1:]) for d in candidate_dirs]
    promote: list[tuple[Path, Path]] = []
    for src, seed in zip(candidate_dirs, seeds):
        promote += _with_logs(src, run_dir(runs, recipe_runs, scenario, RECIPE, seed))
    leaving = {src for src, _ in keep}
    blocked = [dst for _, dst in promote if dst.exists() and dst not in leaving]
    if blocked:
        raise ConfigError(f"{blocked[0]} exists and is no seed directory of the recipe; move it away first")
    restore = Candidate(old_name, tuple(f"{section}.{key}={yaml_value(before[section][key])}" for section, key in changed))
    return AdoptionPlan(config=config, yaml_path=yaml_path, new_text=new_text, dropped_comments=dropped,
                        values={f"{s}.{k}": v for (s, k), v in values.items()}, restore=restore, keep=keep,
                        promote=promote, seeds=seeds)


def apply_adoption(plan: AdoptionPlan) -> list[str]:
    """Move the runs and write the YAML of ``plan``; return the recipe differences still found in the
    promoted runs (empty: every one of them is now a run of the recipe)."""
    for src, dst in (*plan.keep, *plan.promote):  # the old recipe's runs leave first, freeing their places
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():
            raise ConfigError(f"{dst} exists; stopped before moving {src}")
        os.replace(src, dst)
    plan.yaml_path.write_text(plan.new_text)
    problems = []
    for _, dst in plan.promote:
        if dst.is_dir():
            seed = int(dst.name[1:])
            problems += [f"{dst}: {d}" for d in recipe_differences(SeedRun(dst.name, plan.config, seed, dst))]
    return problems
