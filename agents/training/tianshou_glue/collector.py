"""tianshou's collector and replay buffer without their per-environment Python loops.

* :class:`BatchCollector` is tianshou's ``Collector`` whose policy input takes the ``info``
  :class:`~tianshou.data.Batch` of :class:`~agents.training.vector_env.BatchVectorEnv` as it is
  (the stock one insists on an object array of dicts). It replaces the private
  ``Collector._compute_action_policy_hidden`` of tianshou 2.0.1.
* :class:`BatchedReplayBuffer` is a ``VectorReplayBuffer`` whose ``add`` updates every
  sub-buffer's ring pointers with array operations instead of one Python call per environment.
  Each sub-buffer reads its counters (tianshou 2.0.1's private ``_insertion_idx``, ``_size``,
  ``_ep_return``, ``_ep_len``, ``_ep_start_idx``) from shared arrays, so every other buffer
  method (sampling, ``prev``/``next``, episode bookkeeping) keeps working unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tianshou.data import Batch, Collector, ReplayBuffer, VectorReplayBuffer


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
