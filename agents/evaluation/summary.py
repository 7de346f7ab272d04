"""Statistics of an evaluation: ``summary.json``, ``tasks.csv``, ``run.json`` and the printed table.

Definitions (what ``summary.json`` holds per scheduler):

* ``mean_jct``, ``median_jct``, ``p90_jct``: over **all finished tasks of all seeds pooled**
  (numpy's linear percentile); recomputable from the ``jct`` column of ``tasks.csv``.
  Tasks unfinished at the step cap (``max_steps``) are left out; ``run.json`` and the table
  count the truncated episodes.
* ``ci95``: 95% Student-t interval of the mean over the **per-seed** mean JCTs,
  ``m ± t(0.975, K-1) · s / sqrt(K)`` with ``s`` the sample standard deviation;
  ``[null, null]`` for a single seed.
* ``mean_wait``: steps from arrival to first start, over all finished tasks of all seeds pooled
  (recomputable from ``tasks.csv``: ``start - arrival``); JCT minus it is the running time.
* ``mean_tasks_in_system``: tasks arrived and not finished, averaged over every real step of
  every seed (time-weighted; by Little's law it equals total JCT / total steps).
* ``cpu_util``, ``gpu_util``: fraction of all clusters' CPUs / GPUs allocated, averaged over
  every real step of every seed.
* ``decision_ms``: wall-clock milliseconds of decisions per real step, mean over seeds
  (a timing: it differs between runs).
* ``switches``: per started task, the real steps it ran at an allocation other than its previous
  step's (a resume after a pause included; each pays the scenario's switching overhead), mean over
  started tasks of all seeds; ``switch_share``: those steps over all real steps the started tasks
  spent in the system after starting (0 for a scheduler that never re-sizes a running task).
* ``conflicts``: claims lost to another agent's claim on the same task, per episode (mean over
  seeds; 0 for the centralised baselines, and for a policy whose agents choose one after
  another, ``policy.conflicts=sequential`` or ``room``).

``bound.mean_jct`` is the pooled mean of every task's fastest possible JCT; ``oracle`` lists
the baselines informed by the true durations (:func:`agents.baselines.uses_oracle`). With a
checkpoint, where ``policy`` is the first checkpoint's scheduler (``tapfinger`` for a TapFinger
checkpoint):

* ``reduction``: ``1 - mean_jct(policy) / mean_jct(other)`` for each other scheduler;
* ``paired``: per other scheduler, the per-seed differences ``mean_jct_s(policy) -
  mean_jct_s(other)`` over the common seeds ``s``, their mean ``mean_diff`` and its 95% t-interval
  ``ci95`` (negative: the policy is faster; an interval below 0 is a significant win);
* ``target``: the project's quality target: the best non-oracle and the best
  oracle baseline (lowest pooled mean JCT; further checkpoints are not baselines), whether the policy beats the best non-oracle one
  with the paired interval below zero, its ratio to ``bound`` and whether that is at most
  :data:`BOUND_RATIO_TARGET`, and ``met`` (both); ``best_baseline`` and
  ``best_baseline_bound_ratio``: the baseline closest to ``bound`` (oracle or not) and its ratio,
  which says whether the bound half of the target is within reach of any scheduler here. A
  policy evaluated with the scenario's start floor (``max_start_slowdown``) reads the true durations
  through it (``policy_uses_oracle``) and must also beat the best oracle baseline
  (``beats_best_oracle``) to meet the target; ``max_start_slowdown`` is recorded at the top level,
  and ``start_floor`` (with a checkpoint): ``scenario`` (that oracle start floor) or ``online`` (the same
  factor on durations the policy's scheduler estimates in the episode,
  :mod:`agents.baselines.online_floor`; such a policy does not read the true durations).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from envs.scheduling import EpisodeResult

from .runner import EvaluationRun

#: tasks.csv columns, in order
CSV_COLUMNS = ("scheduler", "seed", "task_id", "type", "arrival", "start", "finish", "jct", "cluster", "cpu", "gpu")
#: the quality target's ceiling on mean JCT(policy) / mean JCT(bound)
BOUND_RATIO_TARGET = 1.3
#: the mark of an oracle baseline's row in the printed table (explained under it)
ORACLE_MARK = "*"
#: summary fields that are wall-clock timings (differ between otherwise identical runs)
TIMING_FIELDS = ("decision_ms",)


def mean_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean of the finite ``samples`` and the half-width of its Student-t confidence interval.

    NaN mean for no samples; NaN half-width for fewer than 2.
    """
    x = np.asarray(samples, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan, math.nan
    if x.size < 2:
        return float(x.mean()), math.nan
    from scipy.stats import t

    return float(x.mean()), float(t.ppf(0.5 + confidence / 2.0, x.size - 1)) * float(x.std(ddof=1)) / math.sqrt(x.size)


def t_interval(samples: Sequence[float], confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Student-t confidence interval of the mean of ``samples`` (``(None, None)`` if fewer than 2)."""
    m, half = mean_halfwidth(samples, confidence)
    if not math.isfinite(half):
        return None, None
    return m - half, m + half


def _finite(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def jct_stats(jcts: Sequence[np.ndarray]) -> dict[str, Any]:
    """Pooled mean / median / p90 over all tasks, and the t-interval over per-seed means."""
    pooled = np.concatenate([np.asarray(j, dtype=np.float64) for j in jcts]) if jcts else np.zeros(0)
    per_seed = [float(np.mean(j)) if len(j) else math.nan for j in jcts]
    lo, hi = t_interval(per_seed)
    if pooled.size == 0:
        return {"mean_jct": None, "median_jct": None, "p90_jct": None, "ci95": [lo, hi]}
    return {
        "mean_jct": float(pooled.mean()),
        "median_jct": float(np.median(pooled)),
        "p90_jct": float(np.percentile(pooled, 90)),
        "ci95": [lo, hi],
    }


def scheduler_stats(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """The ``summary.json`` entry of one scheduler (see the module docstring)."""
    out = jct_stats([r.jct for r in results])
    steps = sum(int(r.tasks_in_system.shape[0]) for r in results)
    in_system = sum(float(r.tasks_in_system.sum()) for r in results)
    used = sum((r.usage.sum(axis=(0, 1)).astype(np.float64) for r in results), np.zeros(2))
    capacity = results[0].capacity.sum(axis=0).astype(np.float64)
    out["mean_tasks_in_system"] = in_system / steps if steps else None
    out["cpu_util"] = float(used[0] / (steps * capacity[0])) if steps else None
    out["gpu_util"] = float(used[1] / (steps * capacity[1])) if steps else None
    out["decision_ms"] = float(np.mean([r.decision_ms for r in results]))
    out["conflicts"] = float(np.mean([r.conflicts for r in results]))
    waits = np.concatenate([r.wait for r in results]).astype(np.float64)
    out["mean_wait"] = float(waits.mean()) if waits.size else None
    out.update(switching_stats(results))
    out["coordination"] = coordination_stats(results)
    return {k: out[k] for k in ("mean_jct", "median_jct", "p90_jct", "ci95", "mean_wait", "mean_tasks_in_system",
                                "cpu_util", "gpu_util", "decision_ms", "conflicts", "switches", "switch_share",
                                "coordination")}


def switching_stats(results: Sequence[EpisodeResult]) -> dict[str, float | None]:
    """``switches`` and ``switch_share`` of a scheduler's episodes (see the module docstring);
    None where no task started."""
    switches = started = spent = 0
    for r in results:
        rec = r.records
        ran = rec["start"] >= 0
        end = np.where(rec["finish"] >= 0, rec["finish"], r.steps)
        switches += int(rec["switches"][ran].sum())
        started += int(ran.sum())
        spent += int((end - rec["start"])[ran].sum())
    return {"switches": switches / started if started else None,
            "switch_share": switches / spent if spent else None}


def switching_text(name: str, stats: Mapping[str, Any], overhead: float) -> str:
    """One line on how often ``name`` re-sized running tasks (:func:`switching_stats`)."""
    return (f"switching of {name}: a started task ran {stats['switches']:.1f} real steps at a new allocation "
            f"({100 * stats['switch_share']:.0f}% of its steps after starting), each at {overhead:g}x its progress "
            "(the scenario's switch_overhead)")


def coordination_stats(results: Sequence[EpisodeResult]) -> dict[str, Any] | None:
    """A learned policy's coordination over its episodes (:mod:`agents.policy.coordination`), or
    None for a scheduler that reports none: per contested decision the distinct tasks claimed
    (``distinct``) beside uniform choice (``uniform``) and the maximum matching (``matching``),
    ``halfway``: how far ``distinct`` went from ``uniform`` to ``matching`` (1: all the way), the
    mean lost claims per episode, and ``idle_share``: the share of real steps that ended while a
    cluster that placed nothing was offered a task that no cluster started."""
    tallies = [r.extra.get("coordination") for r in results]
    if not tallies or any(t is None for t in tallies):
        return None
    total = {k: sum(t[k] for t in tallies) for k in tallies[0]}
    n = total["contested"]
    distinct, uniform, matching = (total[k] / n if n else None for k in ("distinct", "uniform", "matching"))
    gap = None if n == 0 else matching - uniform
    return {
        "distinct": distinct, "uniform": uniform, "matching": matching,
        "halfway": (distinct - uniform) / gap if gap else None,
        "contested_per_episode": n / len(results),
        "lost_claims": float(np.mean([r.conflicts for r in results])),
        "idle_share": total["idle_ends"] / total["real_steps"] if total["real_steps"] else None,
    }


def coordination_text(name: str, c: Mapping[str, Any]) -> str:
    """One line on ``name``'s coordination (:func:`coordination_stats`)."""
    way = "" if c["halfway"] is None else f", {100 * c['halfway']:.0f}% of the way from uniform to the matching"
    idle = "" if c["idle_share"] is None else (f"; {100 * c['idle_share']:.0f}% of real steps end with a cluster "
                                               "idle while a task it was offered waits")
    return (f"coordination of {name}: {_f(c['distinct'], 0).strip()} distinct tasks claimed per contested decision "
            f"(uniform choice {_f(c['uniform'], 0).strip()}, maximum matching {_f(c['matching'], 0).strip()}{way}); "
            f"{c['lost_claims']:.1f} lost claims per episode{idle}")


def per_seed_means(results: Sequence[EpisodeResult]) -> np.ndarray:
    """Mean JCT of each seed's finished tasks (NaN for a seed with none), in seed order."""
    return np.array([r.mean_jct for r in results], dtype=np.float64)


def paired_difference(a: Sequence[EpisodeResult], b: Sequence[EpisodeResult]) -> dict[str, Any]:
    """Per-seed mean JCT of ``a`` minus ``b`` (same seeds, same order): the differences, their mean
    and its 95% t-interval (``[None, None]`` below two seeds)."""
    return paired_from_means(per_seed_means(a), per_seed_means(b))


def paired_from_means(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """:func:`paired_difference` from per-seed mean JCTs ``a`` and ``b`` (same seeds, same order)."""
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mean, _ = mean_halfwidth(diff)
    lo, hi = t_interval(diff)
    return {"mean_diff": _finite(mean), "ci95": [lo, hi], "per_seed": [_finite(d) for d in diff]}


def _best(schedulers: dict[str, Any], names: Sequence[str]) -> str | None:
    ranked = [n for n in names if schedulers[n]["mean_jct"] is not None]
    return min(ranked, key=lambda n: schedulers[n]["mean_jct"]) if ranked else None


def target_check(schedulers: dict[str, Any], paired: dict[str, Any], oracle: Sequence[str],
                 policy: str, bound: float, policies: Sequence[str] = (),
                 policy_oracle: bool = False) -> dict[str, Any]:
    """The ``target`` entry (see the module docstring) of ``policy`` against the baselines.

    ``policies`` names the other learned policies of the run (further checkpoints): they are
    compared in ``paired`` but are not baselines, so the target never names one of them.
    ``policy_oracle``: the policy itself reads the true durations (the scenario's start floor,
    ``max_start_slowdown``), so it is held to the oracle baselines too: ``met`` also needs
    the paired interval below zero against the best oracle baseline (when one ran).
    """
    others = [n for n in paired if n in schedulers and n not in policies]
    best_online = _best(schedulers, [n for n in others if n not in oracle])
    best_oracle = _best(schedulers, [n for n in others if n in oracle])
    tap = schedulers[policy]["mean_jct"]
    hi = paired[best_online]["ci95"][1] if best_online else None
    beats = None if hi is None else bool(hi < 0.0)
    oracle_hi = paired[best_oracle]["ci95"][1] if best_oracle else None
    beats_oracle = None if oracle_hi is None else bool(oracle_hi < 0.0)  # None: no oracle ran, or one seed
    ratio = tap / bound if tap is not None and bound > 0 else None
    within = None if ratio is None else bool(ratio <= BOUND_RATIO_TARGET)
    closest = _best(schedulers, [n for n in (best_online, best_oracle) if n])  # the closer of the two
    closest_ratio = schedulers[closest]["mean_jct"] / bound if closest and bound > 0 else None
    return {
        "best_non_oracle": best_online,
        "best_oracle": best_oracle,
        "beats_best_non_oracle": beats,
        "bound_ratio": ratio,
        "within_bound_ratio": within,
        "policy_uses_oracle": bool(policy_oracle),
        "beats_best_oracle": beats_oracle,
        "met": bool(beats and within and (not policy_oracle or beats_oracle is not False)),
        "best_baseline": closest,
        "best_baseline_bound_ratio": closest_ratio,
    }


def build_summary(run: EvaluationRun) -> dict[str, Any]:
    """The ``summary.json`` document of a run."""
    schedulers = {name: scheduler_stats(res) for name, res in run.results.items()}
    bound = float(np.concatenate(run.bound).astype(np.float64).mean())
    oracle = [spec.name for spec in run.specs if spec.is_oracle]
    doc: dict[str, Any] = {
        "scenario": run.cfg.name,
        "seeds": list(run.seeds),
        "schedulers": schedulers,
        "bound": {"mean_jct": bound},
        "oracle": oracle,
        "max_start_slowdown": float(run.cfg.max_start_slowdown),
        "switch_overhead": float(run.cfg.switch_overhead),
    }
    policies = run.policy_names
    if policies:
        primary = policies[0]
        floor = next(s.start_floor for s in run.specs if s.name == primary)
        doc["start_floor"] = floor
        tap = schedulers[primary]["mean_jct"]
        doc["reduction"] = {
            name: (1.0 - tap / s["mean_jct"] if tap is not None and s["mean_jct"] else None)
            for name, s in schedulers.items() if name != primary
        }
        doc["paired"] = {name: paired_difference(run.results[primary], run.results[name])
                         for name in schedulers if name != primary}
        doc["target"] = target_check(schedulers, doc["paired"], oracle, primary, bound, policies,
                                     policy_oracle=run.cfg.max_start_slowdown > 0 and floor != "online")
    return doc


def write_rows_csv(path: Path, rows: Sequence[Any], fields: Sequence[str]) -> Path:
    """One CSV row per dataclass (or mapping) in ``rows``, the columns ``fields`` in order: None as an
    empty cell, floats rounded to 4 decimals. The parent directory is created."""
    from collections.abc import Mapping
    from dataclasses import asdict

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for row in rows:
            d = row if isinstance(row, Mapping) else asdict(row)
            w.writerow(["" if d[k] is None else (round(d[k], 4) if isinstance(d[k], float) else d[k]) for k in fields])
    return path


def _num(v: float) -> str:
    """Compact, deterministic text of an allocation (integers stay integers)."""
    v = round(float(v), 6)
    return str(int(v)) if v.is_integer() else repr(v)


def task_rows(run: EvaluationRun) -> Iterator[list[Any]]:
    """``tasks.csv`` rows: one per task per scheduler per seed (unfinished: empty finish/jct).

    ``cpu``/``gpu``: the allocation at start, or for preemptive schedulers the allocation
    averaged over the steps the task ran (``avg_cpu``/``avg_gpu``); empty if it never started.
    """
    type_names = [t.name for t in run.cfg.task_types]
    for spec in run.specs:
        pre = run.preemptive.get(spec.name, False)
        for seed, res in zip(run.seeds, run.results[spec.name]):
            rec = res.records
            cpu = rec["avg_cpu"] if pre else rec["cpu"]
            gpu = rec["avg_gpu"] if pre else rec["gpu"]
            for k in range(rec["task_id"].shape[0]):
                started = rec["start"][k] >= 0
                finished = rec["finish"][k] >= 0
                yield [
                    spec.name, seed, int(rec["task_id"][k]), type_names[int(rec["type"][k])],
                    int(rec["arrival"][k]),
                    int(rec["start"][k]) if started else "",
                    int(rec["finish"][k]) if finished else "",
                    int(rec["jct"][k]) if finished else "",
                    int(rec["cluster"][k]) if started else "",
                    _num(cpu[k]) if started else "",
                    _num(gpu[k]) if started else "",
                ]


def write_tasks_csv(path: Path, run: EvaluationRun) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        w.writerows(task_rows(run))
    return path


def run_metadata(run: EvaluationRun, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``run.json``: resolved scenario, seeds, scheduler specs, preemptive flags, episode counters."""
    per = {}
    for spec in run.specs:
        res = run.results[spec.name]
        per[spec.name] = {
            "baseline": spec.baseline or None,
            "checkpoint": spec.checkpoint or None,
            "preemptive": bool(run.preemptive.get(spec.name, False)),
            "truncated_seeds": [r.seed for r in res if r.truncated],
            "unfinished_tasks": int(sum(int((r.records["jct"] < 0).sum()) for r in res)),
            "steps": [int(r.steps) for r in res],
            "conflicts": int(sum(r.conflicts for r in res)),
            "invalid": int(sum(r.invalid for r in res)),
        }
    doc = {"scenario": run.cfg.to_dict(), "seeds": list(run.seeds), "schedulers": per}
    doc.update(extra or {})
    return doc


# ---------------------------------------------------------------------------------------
# Printed table
# ---------------------------------------------------------------------------------------
def _f(v: float | None, width: int, digits: int = 2) -> str:
    return f"{v:>{width}.{digits}f}" if v is not None else f"{'n/a':>{width}}"


def format_table(summary: dict[str, Any], run: EvaluationRun | None = None) -> str:
    """The printed table: JCT mean ± CI half-width, median, p90 per scheduler, best first, with the bound."""
    seeds = summary["seeds"]
    scheds = summary["schedulers"]
    reduction = summary.get("reduction")
    truncated = {name: sum(r.truncated for r in res) for name, res in run.results.items()} if run else {}
    if not any(truncated.values()):
        truncated = {}  # the column appears only when some episode hit the step cap
    oracle = set(summary.get("oracle", ()))
    w = max([15] + [len(name) + len(ORACLE_MARK) + 2 for name in scheds])  # the column fits every marked name
    seed_text = f"seeds {seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    head = [
        f"scenario {summary['scenario']}: {len(seeds)} workload seed(s) ({seed_text}), same workloads for every "
        "scheduler; JCT in real steps over all tasks of all seeds; ± = half-width of the 95% t-interval "
        "over per-seed means",
        f"{'scheduler':<{w}}{'mean JCT':>9}{'± 95%':>8}{'median':>8}{'p90':>8}{'wait':>7}{'in sys':>8}{'CPU %':>7}"
        f"{'GPU %':>7}{'ms/step':>9}{'confl.':>8}" + (f"{'tap. gain':>10}{'paired Δ':>14}" if reduction else "")
        + (f"{'trunc':>6}" if truncated else ""),
    ]
    rows = [(name, s) for name, s in scheds.items()]
    rows.append(("bound", {"mean_jct": summary["bound"]["mean_jct"]}))
    rows.sort(key=lambda r: (r[1]["mean_jct"] is None, r[1]["mean_jct"] or 0.0))
    lines = list(head)
    for name, s in rows:
        if name == "bound" and "median_jct" not in s:
            lines.append(f"{'bound':<{w}}{_f(s['mean_jct'], 9)}{'':>8}  (every task at its fastest, no waiting)")
            continue
        lo, hi = s["ci95"]
        half = (hi - lo) / 2.0 if lo is not None and hi is not None else None
        pct = lambda v: v * 100.0 if v is not None else None  # noqa: E731
        label = f"{name} {ORACLE_MARK}" if name in oracle else name
        line = (
            f"{label:<{w}}{_f(s['mean_jct'], 9)}{_f(half, 8)}{_f(s['median_jct'], 8, 1)}{_f(s['p90_jct'], 8, 1)}"
            f"{_f(s['mean_wait'], 7)}{_f(s['mean_tasks_in_system'], 8)}{_f(pct(s['cpu_util']), 7, 1)}"
            f"{_f(pct(s['gpu_util']), 7, 1)}"
            f"{_f(s['decision_ms'], 9, 3)}{_f(s['conflicts'], 8, 1)}"
        )
        if reduction:
            r = reduction.get(name)
            line += f"{r * 100:>9.1f}%" if r is not None else f"{'-':>10}"
            line += f"{_paired_text(summary.get('paired', {}).get(name)):>14}"
        if truncated:
            line += f"{truncated.get(name, 0):>6d}"
        lines.append(line)
    if oracle & set(scheds):
        lines.append(f"{ORACLE_MARK} oracle baseline: reads the true task durations, so it is compared apart "
                     "(ranked here by its JCT, never a target's rival)")
    lines += [coordination_text(name, s["coordination"]) for name, s in scheds.items() if s.get("coordination")]
    overhead = summary.get("switch_overhead", 1.0)
    if overhead < 1.0:
        lines += [switching_text(name, s, overhead) for name, s in scheds.items() if s.get("switches")]
    unfinished = [name for name, sc in scheds.items() if sc["mean_jct"] is None]
    if unfinished:
        lines.append(f"n/a: {', '.join(unfinished)} finished no task on any seed (no JCT to average; "
                     "tasks_in_system and utilisation still count)")
    if reduction:
        tap = run.policy_names[0] if run and run.policy_names else "tapfinger"
        lines.append(f"tap. gain: {tap}'s mean-JCT reduction against the row, 1 - {tap}/row; paired Δ: "
                     f"{tap}'s per-seed mean JCT minus the row's, mean ± half-width of its 95% t-interval")
        if "target" in summary:
            lines += target_lines(summary, tap)
    return "\n".join(lines)


def _paired_text(entry: dict[str, Any] | None) -> str:
    if not entry or entry["mean_diff"] is None:
        return "-"
    lo, hi = entry["ci95"]
    half = f"±{(hi - lo) / 2.0:.2f}" if lo is not None and hi is not None else ""
    return f"{entry['mean_diff']:+.2f}{half}"


def _verdict(passed: bool | None) -> str:
    """One target's verdict: ``met``, ``not met`` or ``undecided`` (one seed gives no interval)."""
    return {True: "met", False: "not met", None: "undecided (one seed: no interval)"}[passed]


def target_lines(summary: dict[str, Any], policy: str) -> list[str]:
    """The quality target (see the module docstring): one line per target with its verdict and its number,
    the best oracle baseline for reference (a target only for a policy that reads the true durations),
    then the overall verdict."""
    t = summary["target"]
    best = t["best_non_oracle"]
    if best is None:
        return ["target: no non-oracle baseline in this evaluation"]
    ratio = t["bound_ratio"]
    if ratio is None:
        return [f"target: {policy} finished no task, so it has no mean JCT to compare -> not met"]
    closest_ratio = t["best_baseline_bound_ratio"]
    closest = f"; closest baseline {t['best_baseline']} {closest_ratio:.2f}x" if closest_ratio is not None else ""
    verdicts = [t["beats_best_non_oracle"], t["within_bound_ratio"]]
    lines = [
        f"targets for {policy}:",
        f"  below the best non-oracle baseline {best}, paired 95% interval below 0: "
        f"{_verdict(verdicts[0])} (paired Δ {_paired_text(summary['paired'][best])})",
        f"  within {BOUND_RATIO_TARGET:g}x the bound: {_verdict(verdicts[1])} ({ratio:.2f}x{closest})",
    ]
    oracle = t["best_oracle"]
    if oracle and t.get("policy_uses_oracle"):
        verdicts.append(t["beats_best_oracle"])
        lines.append(f"  below the best oracle baseline {oracle} {ORACLE_MARK}, paired 95% interval below 0 "
                     f"({policy} reads the true durations, max_start_slowdown={summary['max_start_slowdown']:g}, "
                     f"so it must beat that one too): {_verdict(t['beats_best_oracle'])} "
                     f"(paired Δ {_paired_text(summary['paired'][oracle])})")
    elif oracle:
        lines.append(f"  for reference, not a target: the best oracle baseline {oracle} {ORACLE_MARK} "
                     f"(paired Δ {_paired_text(summary['paired'][oracle])})")
    lines.append(f"  -> {sum(v is True for v in verdicts)} of {len(verdicts)} targets met: "
                 f"{'MET' if t['met'] else 'not met'}")
    return lines


def target_text(summary: dict[str, Any], policy: str) -> str:
    """:func:`target_lines` as one text."""
    return "\n".join(target_lines(summary, policy))
