"""The checkpoint protocol for the torch buffers: ``state_dict()`` with tensors, and folders.

``state_dict()`` follows PyTorch's conventions: the items are tensors on the buffer's device
and the generator state is ``torch.Generator.get_state()`` (a CPU uint8 tensor); everything
else is plain (str, int, lists), so ``torch.save(rb.state_dict(), f)`` and
``torch.load(f, weights_only=True)`` round-trip it. The keys are those of the NumPy buffers
(docs/persistence.md): ``checkpoint`` (the backend-neutral header), ``spec``, the geometry
(``batch_size``, ``max_length``), ``steps``, ``items`` (valid items only, id order), ``rng``.

A buffer with sample-count rules adds ``sample_rules`` as the NumPy buffers do (the draw
counts and the epoch's order as int64 tensors, the policy version, epoch and cursor as ints),
so a checkpoint taken mid-epoch continues exactly, here or in a NumPy buffer.

A buffer that draws on the host (``her=``, episodes, priorities or sample-count rules: ids
from a NumPy generator) saves that generator's state instead, as the NumPy buffers do (``rng``
kind ``PCG64``), so a load continues its draws, from a torch or a NumPy buffer's checkpoint alike.

``save(path)`` / ``load(path)`` write and read the same checkpoint folders as the NumPy
buffers (``replaybuf.persistence``), and a state is checked by the same rules
(``replaybuf.persistence.state``): the items as ``.npy`` files streamed straight from a CPU
storage (through host memory from a CUDA one), the generator state as a uint8 array.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from replaybuf.errors import CheckpointError
from replaybuf.persistence.folder import ArrayRun, StoredArray
from replaybuf.persistence.front import Checkpoints
from replaybuf.persistence.header import Holds, check_header, header
from replaybuf.persistence.state import (
    check_items,
    check_rng_state,
    first_stored_step,
    require,
    ring_views,
    spec_state,
)
from replaybuf.samplers import PrioritySampler
from replaybuf.samplers.prioritized import new_item_priorities
from replaybuf.samplers.rules import RuledSampler
from replaybuf.torch.convert import as_torch_dtype

__all__ = ["TorchCheckpoints"]


class TorchCheckpoints(Checkpoints):
    """``state_dict`` / ``load_state_dict`` / ``save`` / ``load`` for the torch buffers.

    Mixed into TorchUniformReplayBuffer and the MindSpore-style ReplayBuffer; it uses the
    buffer's ring, storage, generator and lock.
    """

    _flat: Any
    _ring: Any
    _storage: Any
    _rng: torch.Generator
    _device: torch.device
    _lock: Any
    _sampler: Any

    def state_dict(self) -> dict:
        """A snapshot: the valid items as tensors on the device (copies), counters, generator
        (and the priority masses as a CPU float64 tensor)."""
        with self._lock:
            state = self._state(lambda views: torch.cat(views) if len(views) > 1 else views[0].clone())
        if "priorities" in state:
            state["priorities"]["mass"] = torch.from_numpy(state["priorities"]["mass"])
        if "sample_rules" in state:
            rules = state["sample_rules"].items()
            state["sample_rules"] = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in rules}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()`` (tensors or NumPy arrays): later samples equal the original's.

        Raises:
            CheckpointError: a state of another class, data_spec or geometry, or malformed;
                the buffer is left unchanged.
        """
        ring = self._ring
        host = self._host_rng()
        steps, same_rng, new_priorities = check_header(state, self._holds(), self._flat, self._geometry_state())
        kinds = (torch.Tensor, np.ndarray, StoredArray)

        def dtypes(spec: Any) -> tuple:
            return as_torch_dtype(spec.dtype), spec.dtype

        leaves = check_items(self._flat, state, range(len(self._flat.leaves)), kinds, dtypes)
        for path, leaf in zip(self._flat.paths, leaves, strict=True):
            if isinstance(leaf, torch.Tensor) and (leaf.layout != torch.strided or leaf.is_meta):
                raise CheckpointError(
                    f"state['items'] {path}: expected a dense tensor with data, got a {leaf.layout} "
                    f"{'meta ' if leaf.is_meta else ''}tensor"
                )
        count = leaves[0].shape[0] if leaves else 0
        first = first_stored_step(steps, count, ring.batch_size, ring.max_length, crash_safe=False)
        checked = self._check_sampler(state, count, new_priorities)
        limiter = getattr(self, "_limiter", None)
        limiter_state = None if limiter is None else limiter.check_state(state.get("rate_limiter"))
        rng = None  # another backend's generator state: keep this buffer's own
        if same_rng:
            rng = (
                check_rng_state(host, require(state, "rng", dict))
                if host
                else _generator_state(state.get("rng"), self._device)
            )
        with self._lock, torch.no_grad():  # a state's tensor that requires grad copies as data
            ring.reset()  # stays empty if a file fails its checksum while read in
            start = ring.slot(first)
            for tensor, leaf in zip(self._storage.tensors, leaves, strict=True):
                _fill(ring_views(tensor, start, count), leaf)
            ring.reset(steps)
            if checked is not None:
                self._sampler.cleared()
                self._sampler.load_state(ring, checked)
                if self._ruled():  # the rules read the loaded items (versions, live starts)
                    self._sampler.loaded(ring, self._storage.tensors)
                    self._policy_version = self._sampler.policy_version
            if limiter_state is not None:
                limiter.load_state(limiter_state)
            if rng is not None and host is not None:
                host.bit_generator.state = rng
            elif rng is not None:
                self._rng.set_state(rng)

    _lazy_keys = ("items",)

    def _saving(self) -> Any:
        return self._lock

    def _saved_state(self) -> dict:
        """Items as host views (CPU storage: no copy), a torch generator's state as a uint8 array."""
        state = self._state(_host_run)
        if isinstance(state["rng"], torch.Tensor):
            state["rng"] = state["rng"].numpy()
        return state

    def _host_rng(self) -> np.random.Generator | None:
        """The NumPy generator the buffer draws from, when not its torch generator (``her=``)."""
        return None

    def _holds(self) -> Holds:
        priorities = isinstance(getattr(self, "_sampler", None), PrioritySampler)
        limited = getattr(self, "_limiter", None) is not None
        return Holds(priorities=priorities, rate_limiter=limited, rng="torch" if self._host_rng() is None else "PCG64")

    def _ruled(self) -> bool:
        """Whether the sampler is the sample-count rules' (replaybuf.samplers.rules, over the
        uniform or the prioritized draws): its ``sample_rules`` are checked and loaded beside
        the items, then read from them."""
        return isinstance(getattr(self, "_sampler", None), RuledSampler)

    def _check_sampler(self, state: dict, count: int, new_priorities: bool) -> Any:
        """What the sampler loads of ``state`` (None for a buffer without priorities or rules):
        its ``priorities`` and ``sample_rules`` with tensors read as NumPy; a state without
        priorities gives every item a new item's (docs/persistence.md); CheckpointError naming
        the key otherwise."""
        priorities = self._holds().priorities
        if not priorities and not self._ruled():
            return None
        if priorities and new_priorities:
            state = new_item_priorities(state, self._sampler.alpha, self._sampler.epsilon, count)
        host = dict(state)
        for key in ("priorities", "sample_rules"):
            if isinstance(state.get(key), dict):
                host[key] = {k: _host_array(v) for k, v in state[key].items()}
        return self._sampler.check_state(self._ring, host, count)

    def _geometry_state(self) -> dict[str, int]:
        """The sizes a state must match, by key: the ring's streams and their length."""
        return {"batch_size": self._ring.batch_size, "max_length": self._ring.max_length}

    def _state(self, export: Any) -> dict:
        ring = self._ring
        first = ring.first_valid_step()
        count = (ring.steps - first) * ring.batch_size
        start = ring.slot(first)
        host = self._host_rng()
        return {
            "checkpoint": header(self._holds(), type(self).__name__),
            "spec": spec_state(self._flat),
            **self._geometry_state(),
            "steps": ring.steps,
            "items": {str(i): export(ring_views(t, start, count)) for i, t in enumerate(self._storage.tensors)},
            "rng": self._rng.get_state() if host is None else host.bit_generator.state,
            **(self._sampler.state(ring) if self._holds().priorities or self._ruled() else {}),
            **({"rate_limiter": self._limiter.state()} if self._holds().rate_limiter else {}),
        }


def _host_array(value: Any) -> Any:
    """A checkpoint value given as a tensor (any device) as a NumPy array; others as given."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _host_run(views: list[torch.Tensor]) -> ArrayRun:
    """Storage rows as host NumPy views (CPU: the storage's own memory; CUDA: a copy)."""
    return ArrayRun([v.numpy() if v.device.type == "cpu" else v.cpu().numpy() for v in views])


def _fill(views: list[torch.Tensor], rows: Any) -> None:
    """Copy ``rows`` (tensor, array or stored file) into consecutive storage ``views``."""
    if isinstance(rows, StoredArray):
        if all(v.device.type == "cpu" for v in views):
            rows.read_into(ArrayRun([v.numpy() for v in views]))  # straight into storage
            return
        rows = rows.read()
    rows = torch.as_tensor(rows)
    done = 0
    for view in views:
        view.copy_(rows[done : done + len(view)])
        done += len(view)


def _generator_state(state: Any, device: torch.device) -> torch.Tensor:
    """``state`` as a generator state for ``device``; CheckpointError when it is not one."""
    if isinstance(state, np.ndarray) and state.dtype == np.uint8:
        state = torch.from_numpy(np.array(state))  # a writable copy of an array in any layout
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.dim() != 1:
        raise CheckpointError(f"state['rng']: expected torch.Generator.get_state() (a uint8 tensor), got {state!r:.80}")
    if state.layout != torch.strided or state.is_meta:
        raise CheckpointError(f"state['rng']: expected a dense uint8 tensor, got a {state.layout} tensor")
    state = state.cpu().contiguous()
    try:
        probe = torch.Generator(device=device)
        probe.set_state(state)
        # a CPU state that set_state takes but normalises (a flipped byte in a field it
        # recomputes) does not read back: no generator wrote it
        same = device.type != "cpu" or torch.equal(probe.get_state(), state)
    except Exception as err:  # torch's own check of the state (size, mt19937 validity, ...)
        raise CheckpointError(f"state['rng']: not a state of a {device.type} generator ({err})") from None
    if not same:
        raise CheckpointError(f"state['rng']: not a state of a {device.type} generator (it does not read back)")
    return state
