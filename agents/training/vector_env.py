"""Training-side plumbing for the batched simulator: a tianshou vector env over its shards.

tianshou 2.0.1's ``Collector`` duck-types its env (``__len__``, ``is_async``,
``step(action, env_ids)``, ``reset(env_id=...)``), which is how it accepts EnvPool. This module
puts :class:`envs.batched.BatchedEdgeClusters` (B environments stepped as arrays) behind that
interface, and returns arrays where the stock vector envs return one object per environment:

* :class:`BatchVectorEnv` returns observations and ``info`` as :class:`tianshou.data.Batch`
  objects of arrays (no per-step list of dicts); finished episodes are restarted by the
  Collector through ``reset(env_id=...)`` with the next workload seed of each environment's
  :class:`SeedSchedule` (the same schedule the per-env wrappers use, so ``--vector batch``
  trains on exactly the workloads ``--vector dummy`` would).
* the collector and buffer that go with it, without tianshou's per-env loops, are
  :mod:`agents.training.tianshou_glue.collector`.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
from tianshou.data import Batch

from envs.batched import BatchedEdgeClusters, empty_info
from envs.config import ScenarioConfig
from envs.gym_env import action_space as joint_action_space
from envs.gym_env import observation_space as joint_observation_space

from .config import TRAIN_SEED_MIN
from .stagger import random_feasible_actions, stagger_rng, stagger_target

#: what a step returns before wrapping: obs dict, reward, terminated, truncated, info dict
StepArrays = tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]


class SeedSchedule:
    """Workload seed of every episode of one env.

    ``fixed`` (evaluation): the same seed at every reset. Otherwise (training) a fresh seed
    per episode from a generator keyed by ``(run seed, restart, env index)``, always in
    ``[TRAIN_SEED_MIN, 2**62)`` so training never sees an evaluation workload (evaluation
    seeds are below ``TRAIN_SEED_MIN``; :class:`~agents.training.config.TrainConfig` checks that).
    """

    def __init__(self, key: Sequence[int] = (0,), fixed: int | None = None) -> None:
        self.fixed = fixed
        self._rng = np.random.default_rng(np.random.SeedSequence([int(k) for k in key]))

    def next(self) -> int:
        if self.fixed is not None:
            return int(self.fixed)
        return int(self._rng.integers(TRAIN_SEED_MIN, 2**62))


class _BatchedVectorEnvBase:
    """What tianshou's ``Collector`` asks of every vector env besides ``reset``/``step``."""

    is_async = False
    env_num: int

    def __len__(self) -> int:
        return self.env_num

    def seed(self, seed: Any = None) -> list[None]:
        """Workload seeds come from the seed schedules; nothing to seed here."""
        return [None] * self.env_num

    def render(self, **kwargs: Any) -> list[None]:
        return [None] * self.env_num


class BatchVectorEnv(_BatchedVectorEnvBase):
    """``num_envs`` environments of one scenario behind tianshou's vector-env interface.

    Args:
        scenario: the (resolved) scenario of every environment.
        num_envs: number of environments ``B``.
        seed_keys: one :class:`SeedSchedule` key per environment (training), or
        fixed_seeds: one fixed workload seed per environment (evaluation: every reset replays it).
        stagger: (training) each environment's first episode is fast-forwarded to a staggered
            point, by the generator of its seed key (:mod:`agents.training.stagger`).
    """

    def __init__(
        self,
        scenario: ScenarioConfig,
        num_envs: int,
        seed_keys: Sequence[Sequence[int]] | None = None,
        fixed_seeds: Sequence[int] | None = None,
        stagger: bool = False,
    ) -> None:
        if (seed_keys is None) == (fixed_seeds is None):
            raise ValueError("give exactly one of seed_keys (training) or fixed_seeds (evaluation)")
        if stagger and seed_keys is None:
            raise ValueError("stagger needs seed_keys: only training environments start staggered")
        self.batched = BatchedEdgeClusters(scenario, num_envs)
        self.env_num = int(num_envs)
        if seed_keys is not None:
            schedules = [SeedSchedule(k) for k in seed_keys]
        else:
            schedules = [SeedSchedule(fixed=int(s)) for s in fixed_seeds]  # type: ignore[union-attr]
        if len(schedules) != self.env_num:
            raise ValueError(f"need {self.env_num} seed schedules, got {len(schedules)}")
        self.schedules = schedules
        #: per environment, the generator of its first episode's fast-forward (None once used, or unstaggered)
        self.staggers: list[np.random.Generator | None] = (
            [stagger_rng(k) for k in seed_keys] if stagger and seed_keys is not None else [None] * self.env_num)
        spec = self.batched.obs_spec
        self.num_agents = spec.N
        single_obs, single_act = joint_observation_space(spec), joint_action_space(spec)
        self.observation_space = [single_obs] * self.env_num
        self.action_space = [single_act] * self.env_num

    def reset_arrays(self, ids: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """:meth:`reset` as plain dicts of arrays (what shard workers send back)."""
        ids = self.batched.env_ids(ids)
        seeds = np.array([self.schedules[i].next() for i in ids.tolist()], dtype=np.int64)
        obs = self.batched.reset(ids, seeds)
        rows = np.flatnonzero([self.staggers[i] is not None for i in ids.tolist()])
        if rows.size:
            self._fast_forward(ids, rows, obs, seeds)
        info = empty_info(ids.size, self.num_agents)
        info["workload_seed"] = seeds
        return obs, info

    def _fast_forward(self, ids: np.ndarray, rows: np.ndarray, obs: dict[str, np.ndarray], seeds: np.ndarray) -> None:
        """Random feasible steps for environments ``ids[rows]`` until each reaches its stagger
        target (a new episode, unstaggered, for one whose episode ends first); ``obs`` and
        ``seeds`` (rows of ``ids``) are updated in place. The same draws as
        :meth:`agents.training.envs.TrainingEnv.reset` makes for the same seed key."""
        cfg = self.batched.cfg
        rngs = {int(r): self.staggers[int(ids[r])] for r in rows}
        for r in rows.tolist():
            self.staggers[int(ids[r])] = None
        targets = np.array([stagger_target(rngs[int(r)], cfg) for r in rows])
        while rows.size:
            going = self.batched.real_time(ids[rows]) < targets
            rows, targets = rows[going], targets[going]
            if not rows.size:
                break
            actions = random_feasible_actions({k: v[rows] for k, v in obs.items()}, [rngs[int(r)] for r in rows], cfg)
            out = self.batched.step(actions, ids[rows])
            for k, v in out.obs.items():
                obs[k][rows] = v
            ended = out.terminated | out.truncated
            if ended.any():
                done = rows[ended]
                fresh = np.array([self.schedules[int(i)].next() for i in ids[done]], dtype=np.int64)
                for k, v in self.batched.reset(ids[done], fresh).items():
                    obs[k][done] = v
                seeds[done] = fresh
                rows, targets = rows[~ended], targets[~ended]

    def step_arrays(self, action: np.ndarray, ids: Any) -> StepArrays:
        """:meth:`step` as plain arrays (what shard workers send back)."""
        out = self.batched.step(np.asarray(action), ids)
        return out.obs, out.reward, out.terminated, out.truncated, out.info

    def reset(self, env_id: Any = None, **kwargs: Any) -> tuple[Batch, Batch]:
        """Start new episodes in ``env_id`` (all by default) with each env's next workload seed."""
        obs, info = self.reset_arrays(env_id)
        return Batch(obs), Batch(info)

    def step(self, action: Any, id: Any = None) -> tuple[Batch, np.ndarray, np.ndarray, np.ndarray, Batch]:  # noqa: A002
        """Step the environments ``id`` (all by default) with joint actions ``(R, N, 3)``."""
        obs, rew, term, trunc, info = self.step_arrays(np.asarray(action), id)
        return Batch(obs), rew, term, trunc, Batch(info)

    def running_mean_jct(self) -> np.ndarray:
        """Per environment, its current episode's mean JCT so far: finished tasks' JCT and the time
        arrived unfinished ones have spent until now (NaN before the episode's first real step)."""
        return self.batched.running_mean_jct()

    def close(self) -> None:
        """Nothing to release: the environments live in this process."""


# =======================================================================================
# several workers, each holding a slice of the batch
# =======================================================================================
def shard_bounds(num_envs: int, shards: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` env ranges of ``shards`` near-equal contiguous slices (empty ones dropped)."""
    shards = max(1, min(int(shards), int(num_envs)))
    edges = np.linspace(0, num_envs, shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


class _Shard:
    """Environments ``[lo, hi)`` of a sharded vector env, as held by one worker."""

    def __init__(self, scenario: dict[str, Any], lo: int, hi: int, seed_keys: Any, fixed_seeds: Any,
                 stagger: bool = False) -> None:
        self.env = BatchVectorEnv(ScenarioConfig.from_dict(scenario), hi - lo, seed_keys=seed_keys,
                                  fixed_seeds=fixed_seeds, stagger=stagger)

    def reset(self, ids: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        return self.env.reset_arrays(ids)

    def step(self, action: np.ndarray, ids: np.ndarray) -> StepArrays:
        return self.env.step_arrays(action, ids)

    def running_mean_jct(self) -> np.ndarray:
        return self.env.running_mean_jct()


#: what a shard answers: the name of a :class:`_Shard` method, called with the payload's arguments
SHARD_COMMANDS = ("reset", "step", "running_mean_jct")


def _shard_worker(conn: Any, args: tuple) -> None:
    """Process main loop: build the shard, then answer ``(command, payload)`` messages."""
    try:
        shard = _Shard(*args)
        conn.send(("ok", None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if cmd == "close":
            return
        try:
            if cmd not in SHARD_COMMANDS:
                raise ValueError(f"unknown shard command {cmd!r}")
            conn.send(("ok", getattr(shard, cmd)(*payload)))
        except BaseException as exc:  # noqa: BLE001
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def worker_death(k: int, proc: Any) -> str:
    """The one line that says vector env worker ``k`` (a ``multiprocessing`` process) died, and how."""
    proc.join(timeout=1.0)
    how = "" if proc.exitcode is None else (f" (killed by signal {-proc.exitcode})" if proc.exitcode < 0
                                            else f" (exit code {proc.exitcode})")
    return f"vector env worker {k} (pid {proc.pid}) died{how}"


#: how long a broken pipe waits for the process behind it to be reported dead: the kernel closes a
#: killed process's pipes before its parent can reap it, and on a loaded machine that gap is visible
DEATH_GRACE_S = 5.0


def first_dead(procs: Sequence[Any]) -> int | None:
    """Index of the first of ``procs`` (``multiprocessing`` processes) that is dead, polled for up to
    :data:`DEATH_GRACE_S` seconds after a pipe to one of them broke; None if all of them live on."""
    deadline = time.monotonic() + DEATH_GRACE_S
    while True:
        dead = next((k for k, proc in enumerate(procs) if not proc.is_alive()), None)
        if dead is not None or time.monotonic() >= deadline:
            return dead
        time.sleep(0.02)


class WorkerDied(RuntimeError):
    """A vector env worker process or Ray actor died (killed, out of memory, crashed)."""


class _ProcessShards:
    """Each shard in its own spawned process; one pipe round trip per worker per call."""

    def __init__(self, shard_args: list[tuple]) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for args in shard_args:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_shard_worker, args=(child, args), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        for k in range(len(self.conns)):
            self._receive(k)

    def _receive(self, k: int) -> Any:
        try:
            status, value = self.conns[k].recv()
        except (EOFError, ConnectionError, OSError):
            raise WorkerDied(self._death(k)) from None
        if status != "ok":
            raise RuntimeError(f"vector env worker {k}: {value}")
        return value

    def _death(self, k: int) -> str:
        return worker_death(k, self.procs[k])

    def call(self, cmd: str, payloads: dict[int, Any]) -> dict[int, Any]:
        for k, payload in payloads.items():
            try:
                self.conns[k].send((cmd, payload))
            except (BrokenPipeError, ConnectionError, OSError):
                raise WorkerDied(self._death(k)) from None
        return {k: self._receive(k) for k in payloads}

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()


class _RayShards:
    """Each shard in a Ray actor (local Ray, or the cluster at ``address``)."""

    def __init__(self, shard_args: list[tuple], address: str | None) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(address=address or None, ignore_reinit_error=True, include_dashboard=False,
                     log_to_driver=False)
        actor = ray.remote(num_cpus=1)(_Shard)
        self.ray = ray
        self.actors = [actor.remote(*args) for args in shard_args]

    def call(self, cmd: str, payloads: dict[int, Any]) -> dict[int, Any]:
        refs = {}
        for k, payload in payloads.items():
            a = self.actors[k]
            if cmd not in SHARD_COMMANDS:
                raise ValueError(f"unknown shard command {cmd!r}")
            refs[k] = getattr(a, cmd).remote(*payload)
        keys = list(refs)
        try:
            values = self.ray.get([refs[k] for k in keys])
        except self.ray.exceptions.RayError as exc:
            first = str(exc).strip().split("\n")[0][:200]
            raise WorkerDied(f"vector env Ray actor died or failed ({type(exc).__name__}: {first})") from None
        return dict(zip(keys, values))

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


class ShardedBatchVectorEnv(_BatchedVectorEnvBase):
    """:class:`BatchVectorEnv` split over ``workers`` processes or Ray actors.

    Worker ``k`` holds environments ``[lo_k, hi_k)`` (:func:`shard_bounds`) as one batched
    simulator; a step sends each worker its slice of the actions and gets its slice of the
    results back: one round trip per worker per step, whatever the number of environments.
    Environment ``i`` keeps its own seed schedule, so results do not depend on ``workers``.
    """

    def __init__(
        self,
        scenario: ScenarioConfig,
        num_envs: int,
        workers: int,
        backend: str = "process",
        seed_keys: Sequence[Sequence[int]] | None = None,
        fixed_seeds: Sequence[int] | None = None,
        ray_address: str | None = None,
        stagger: bool = False,
    ) -> None:
        if (seed_keys is None) == (fixed_seeds is None):
            raise ValueError("give exactly one of seed_keys (training) or fixed_seeds (evaluation)")
        self.env_num = int(num_envs)
        self.bounds = shard_bounds(self.env_num, workers)
        raw = scenario.to_dict()
        args = []
        for lo, hi in self.bounds:
            keys = None if seed_keys is None else [list(k) for k in seed_keys[lo:hi]]
            fixed = None if fixed_seeds is None else [int(s) for s in fixed_seeds[lo:hi]]
            args.append((raw, lo, hi, keys, fixed, stagger))
        if backend == "process":
            self.shards: Any = _ProcessShards(args)
        elif backend == "ray":
            self.shards = _RayShards(args, ray_address)
        else:
            raise ValueError(f"unknown shard backend {backend!r} (process or ray)")
        from envs.observation import ObservationSpec

        spec = ObservationSpec.from_config(scenario)
        self.observation_space = [joint_observation_space(spec)] * self.env_num
        self.action_space = [joint_action_space(spec)] * self.env_num
        self._lo = np.array([lo for lo, _ in self.bounds])

    def _split(self, ids: Any) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray | None]:
        ids = np.arange(self.env_num) if ids is None else np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.env_num):
            raise ValueError(f"env ids must lie in [0, {self.env_num}), got {ids.tolist()}")
        shard = np.searchsorted(self._lo, ids, side="right") - 1
        order = np.argsort(shard, kind="stable")
        positions = {int(k): order[shard[order] == k] for k in np.unique(shard)}
        inverse = None if np.all(order == np.arange(ids.size)) else np.argsort(order)
        return ids, positions, inverse

    def _gather(self, parts: list[Any], inverse: np.ndarray | None) -> Any:
        if isinstance(parts[0], dict):
            out = _concat(parts)
            return out if inverse is None else {k: v[inverse] for k, v in out.items()}
        out = np.concatenate(parts)
        return out if inverse is None else out[inverse]

    def reset(self, env_id: Any = None, **kwargs: Any) -> tuple[Batch, Batch]:
        ids, positions, inverse = self._split(env_id)
        res = self.shards.call("reset", {k: (ids[pos] - self._lo[k],) for k, pos in positions.items()})
        parts = [res[k] for k in sorted(res)]
        return Batch(self._gather([p[0] for p in parts], inverse)), Batch(self._gather([p[1] for p in parts], inverse))

    def step(self, action: Any, id: Any = None) -> tuple[Batch, np.ndarray, np.ndarray, np.ndarray, Batch]:  # noqa: A002
        ids, positions, inverse = self._split(id)
        action = np.asarray(action)
        res = self.shards.call("step", {k: (action[pos], ids[pos] - self._lo[k]) for k, pos in positions.items()})
        parts = [res[k] for k in sorted(res)]
        obs, rew, term, trunc, info = (self._gather([p[j] for p in parts], inverse) for j in range(5))
        return Batch(obs), rew, term, trunc, Batch(info)

    def running_mean_jct(self) -> np.ndarray:
        """Per environment, its current episode's mean JCT so far (:meth:`BatchVectorEnv.running_mean_jct`)."""
        res = self.shards.call("running_mean_jct", {k: () for k in range(len(self.bounds))})
        return np.concatenate([res[k] for k in sorted(res)])

    def close(self) -> None:
        self.shards.close()
