"""Training-side plumbing for the batched simulator: a tianshou vector env, collector and buffer.

tianshou 2.0.1's ``Collector`` duck-types its env (``__len__``, ``is_async``,
``step(action, env_ids)``, ``reset(env_id=...)``), which is how it accepts EnvPool. This module
puts :class:`envs.batched.BatchedEdgeClusters` (B environments stepped as arrays) behind that
interface, and removes the two per-environment Python loops the stock classes add on top:

* :class:`BatchVectorEnv` returns observations and ``info`` as :class:`tianshou.data.Batch`
  objects of arrays (no per-step list of dicts); finished episodes are restarted by the
  Collector through ``reset(env_id=...)`` with the next workload seed of each environment's
  :class:`SeedSchedule` (the same schedule the per-env wrappers use, so ``--vector batch``
  trains on exactly the workloads ``--vector dummy`` would).
* :class:`BatchCollector` is tianshou's ``Collector`` whose policy input takes that ``info``
  Batch as it is (the stock one insists on an object array of dicts).
* :class:`BatchedReplayBuffer` is a ``VectorReplayBuffer`` whose ``add`` updates every
  sub-buffer's ring pointers with array operations instead of one Python call per environment.
  Each sub-buffer reads its counters from the shared arrays, so every other buffer method
  (sampling, ``prev``/``next``, episode bookkeeping) keeps working unchanged.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from tianshou.data import Batch, Collector, ReplayBuffer, VectorReplayBuffer

from envs.batched import BatchedEdgeClusters, empty_info
from envs.config import ScenarioConfig
from envs.gym_env import action_space as joint_action_space
from envs.gym_env import observation_space as joint_observation_space

from .config import TRAIN_SEED_MIN

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
    """

    def __init__(
        self,
        scenario: ScenarioConfig,
        num_envs: int,
        seed_keys: Sequence[Sequence[int]] | None = None,
        fixed_seeds: Sequence[int] | None = None,
    ) -> None:
        if (seed_keys is None) == (fixed_seeds is None):
            raise ValueError("give exactly one of seed_keys (training) or fixed_seeds (evaluation)")
        self.batched = BatchedEdgeClusters(scenario, num_envs)
        self.env_num = int(num_envs)
        if seed_keys is not None:
            schedules = [SeedSchedule(k) for k in seed_keys]
        else:
            schedules = [SeedSchedule(fixed=int(s)) for s in fixed_seeds]  # type: ignore[union-attr]
        if len(schedules) != self.env_num:
            raise ValueError(f"need {self.env_num} seed schedules, got {len(schedules)}")
        self.schedules = schedules
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
        info = empty_info(ids.size, self.num_agents)
        info["workload_seed"] = seeds
        return obs, info

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

    def close(self) -> None:
        """Nothing to release: the environments live in this process."""


class BatchCollector(Collector):
    """tianshou's ``Collector`` that passes an ``info`` :class:`Batch` to the policy as it is.

    The stock collector rebuilds ``info`` from an object array of dicts before every policy
    call; :class:`BatchVectorEnv` already returns a Batch of arrays. With any other vector
    env it behaves exactly like the stock collector.
    """

    def _compute_action_policy_hidden(
        self,
        random: bool,
        ready_env_ids_R: np.ndarray,
        last_obs_RO: Any,
        last_info_R: Any,
        last_hidden_state_RH: Any = None,
    ) -> Any:
        if random or not isinstance(last_info_R, Batch):
            return super()._compute_action_policy_hidden(
                random, ready_env_ids_R, last_obs_RO, last_info_R, last_hidden_state_RH
            )
        act_batch = self.policy(Batch(obs=last_obs_RO, info=last_info_R), last_hidden_state_RH)
        act = act_batch.act
        act = act if isinstance(act, np.ndarray) else np.asarray(act.detach().cpu())
        if self.exploration_noise:
            act = self.policy.add_exploration_noise(act, Batch(obs=last_obs_RO, info=last_info_R))
        policy_entry = act_batch.get("policy", Batch())
        if not isinstance(policy_entry, Batch):
            raise RuntimeError(f"The policy result should be a {Batch}, but got {type(policy_entry)}")
        hidden = act_batch.get("state", None)
        if hidden is not None:
            policy_entry.hidden_state = hidden
        return Batch(
            act=act,
            act_normalized=self.policy.map_action(act),
            policy_entry=policy_entry,
            dist=act_batch.get("dist"),
            hidden_state=hidden,
        )


class _Counters:
    """Ring-buffer counters of all sub-buffers of a :class:`BatchedReplayBuffer`, as arrays."""

    def __init__(self, n: int) -> None:
        self.insertion = np.zeros(n, dtype=np.int64)
        self.size = np.zeros(n, dtype=np.int64)
        self.ep_return = np.zeros(n, dtype=np.float64)
        self.ep_len = np.zeros(n, dtype=np.int64)
        self.ep_start = np.zeros(n, dtype=np.int64)


def _counter(name: str) -> property:
    def get(self: "_SubBuffer") -> Any:
        value = getattr(self._counters, name)[self._k]
        return float(value) if name == "ep_return" else int(value)

    def set_(self: "_SubBuffer", value: Any) -> None:
        getattr(self._counters, name)[self._k] = value

    return property(get, set_)


class _SubBuffer(ReplayBuffer):
    """A ``ReplayBuffer`` whose ring counters live in a shared :class:`_Counters` row."""

    _insertion_idx = _counter("insertion")
    _size = _counter("size")
    _ep_return = _counter("ep_return")
    _ep_len = _counter("ep_len")
    _ep_start_idx = _counter("ep_start")

    def __init__(self, size: int, counters: _Counters, k: int, **kwargs: Any) -> None:
        self._counters = counters
        self._k = k
        super().__init__(size, **kwargs)


class BatchedReplayBuffer(VectorReplayBuffer):
    """``VectorReplayBuffer`` with a vectorised :meth:`add` (same results, no per-env loop).

    ``add`` returns what the stock manager returns: insertion indices, episode returns and
    lengths (0 for unfinished episodes) and episode start indices, all offset into the
    whole buffer.
    """

    def __init__(self, total_size: int, buffer_num: int, **kwargs: Any) -> None:
        if buffer_num < 1:
            raise ValueError("buffer_num must be >= 1")
        size = int(np.ceil(total_size / buffer_num))
        self._counters = _Counters(buffer_num)
        buffers = [_SubBuffer(size, self._counters, k, **kwargs) for k in range(buffer_num)]
        # ReplayBufferManager.__init__, skipping VectorReplayBuffer's own buffer construction
        super(VectorReplayBuffer, self).__init__(buffers)  # type: ignore[arg-type]
        self._sub_size = size

    def _compile(self) -> None:
        """No numba warm-up: :meth:`prev` and :meth:`next` below are plain numpy."""

    def _ring(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        index = np.asarray(index, dtype=np.int64) % self.maxsize
        k = np.searchsorted(self._extend_offset, index, side="right") - 1
        return index, self._offset[k], np.maximum(self._lengths[k], 1), self.last_index[k]

    def prev(self, index: int | np.ndarray) -> np.ndarray:
        """Same as tianshou's numba ``_prev_index`` (previous step of the same episode, or itself)."""
        scalar = np.ndim(index) == 0
        index, start, length, last = self._ring(np.atleast_1d(index))
        sub = (index - start - 1) % length
        end = self.done[sub + start] | (sub + start == last)
        out = (sub + end) % length + start
        return out[0] if scalar else out

    def next(self, index: int | np.ndarray) -> np.ndarray:
        """Same as tianshou's numba ``_next_index`` (next step of the same episode, or itself)."""
        scalar = np.ndim(index) == 0
        index, start, length, last = self._ring(np.atleast_1d(index))
        end = self.done[index] | (index == last)
        out = (index - start + 1 - end) % length + start
        return out[0] if scalar else out

    def add(self, batch: Any, buffer_ids: np.ndarray | list[int] | None = None) -> tuple[np.ndarray, ...]:
        if self._save_only_last_obs or not self._save_obs_next:
            return super().add(batch, buffer_ids)  # options this project does not use
        new_batch = Batch()
        for key in set(self._reserved_keys).intersection(batch.get_keys()):
            new_batch.__dict__[key] = batch[key]
        batch = new_batch
        batch.__dict__["done"] = np.logical_or(batch.terminated, batch.truncated)
        ids = np.arange(self.buffer_num) if buffer_ids is None else np.asarray(buffer_ids, dtype=np.int64)
        if np.unique(ids).size != ids.size:
            return super().add(batch, ids)  # a buffer twice in one add: keep the sequential semantics
        c = self._counters
        cur = c.insertion[ids]
        if np.any(c.ep_start[ids] > c.size[ids]):
            return super().add(batch, ids)  # lets the stock code raise its MalformedBufferError
        insertion = cur + self._offset[ids]
        try:
            self._meta[insertion] = batch  # nothing is updated yet if this fails
        except ValueError:  # first add, or a new key: the stock code allocates the storage
            return super().add(batch, ids)
        c.size[ids] = np.minimum(c.size[ids] + 1, self._sub_size)
        c.insertion[ids] = (cur + 1) % self._sub_size
        c.ep_return[ids] += np.asarray(batch.rew, dtype=np.float64).reshape(len(ids), -1)[:, 0]
        c.ep_len[ids] += 1
        done = np.asarray(batch.done, dtype=bool)
        ep_return = np.where(done, c.ep_return[ids], 0.0)
        ep_len = np.where(done, c.ep_len[ids], 0)
        ep_start = c.ep_start[ids] + self._offset[ids]
        finished = ids[done]
        c.ep_return[finished] = 0.0
        c.ep_len[finished] = 0
        c.ep_start[finished] = c.insertion[finished]
        self.last_index[ids] = insertion
        self._lengths[ids] = c.size[ids]
        return insertion, ep_return, ep_len, ep_start


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

    def __init__(self, scenario: dict[str, Any], lo: int, hi: int, seed_keys: Any, fixed_seeds: Any) -> None:
        from envs.config import from_dict

        self.env = BatchVectorEnv(from_dict(scenario), hi - lo, seed_keys=seed_keys, fixed_seeds=fixed_seeds)

    def reset(self, ids: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        return self.env.reset_arrays(ids)

    def step(self, action: np.ndarray, ids: np.ndarray) -> StepArrays:
        return self.env.step_arrays(action, ids)


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
            result = shard.reset(payload) if cmd == "reset" else shard.step(*payload)
            conn.send(("ok", result))
        except BaseException as exc:  # noqa: BLE001
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


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
        proc = self.procs[k]
        proc.join(timeout=1.0)
        how = "" if proc.exitcode is None else (f" (killed by signal {-proc.exitcode})" if proc.exitcode < 0
                                                else f" (exit code {proc.exitcode})")
        return f"vector env worker {k} (pid {proc.pid}) died{how}"

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
            refs[k] = a.reset.remote(payload) if cmd == "reset" else a.step.remote(*payload)
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
    ) -> None:
        from envs.config import to_dict

        if (seed_keys is None) == (fixed_seeds is None):
            raise ValueError("give exactly one of seed_keys (training) or fixed_seeds (evaluation)")
        self.env_num = int(num_envs)
        self.bounds = shard_bounds(self.env_num, workers)
        raw = to_dict(scenario)
        args = []
        for lo, hi in self.bounds:
            keys = None if seed_keys is None else [list(k) for k in seed_keys[lo:hi]]
            fixed = None if fixed_seeds is None else [int(s) for s in fixed_seeds[lo:hi]]
            args.append((raw, lo, hi, keys, fixed))
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
        res = self.shards.call("reset", {k: ids[pos] - self._lo[k] for k, pos in positions.items()})
        parts = [res[k] for k in sorted(res)]
        return Batch(self._gather([p[0] for p in parts], inverse)), Batch(self._gather([p[1] for p in parts], inverse))

    def step(self, action: Any, id: Any = None) -> tuple[Batch, np.ndarray, np.ndarray, np.ndarray, Batch]:  # noqa: A002
        ids, positions, inverse = self._split(id)
        action = np.asarray(action)
        res = self.shards.call("step", {k: (action[pos], ids[pos] - self._lo[k]) for k, pos in positions.items()})
        parts = [res[k] for k in sorted(res)]
        obs, rew, term, trunc, info = (self._gather([p[j] for p in parts], inverse) for j in range(5))
        return Batch(obs), rew, term, trunc, Batch(info)

    def close(self) -> None:
        self.shards.close()
