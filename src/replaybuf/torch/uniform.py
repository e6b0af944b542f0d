"""The PyTorch buffers: ``TorchUniformReplayBuffer`` (segmented) and ``TorchPyUniformReplayBuffer``.

They are ``StreamBuffer`` (ring + storage + sampler) with torch parts: every leaf in one
preallocated tensor on ``device`` (``TorchStorage``), ids drawn on the device with a
``torch.Generator`` (``TorchUniformSampler``), adds validated on metadata and moved once
(``DeviceBatcher``), and the checkpoint protocol with tensors (``TorchCheckpoints``). So
they keep the ids, window rules and deterministic pass of the NumPy buffers, and sampling a
CUDA buffer launches kernels and never waits for the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from replaybuf.buffer import BufferInfo, check_positive
from replaybuf.buffers.stream import StreamBuffer
from replaybuf.dataset import check_sample_arguments
from replaybuf.errors import ArgumentError
from replaybuf.hindsight import HindsightRelabel
from replaybuf.nest import FlatSpec
from replaybuf.ring import StreamRing
from replaybuf.samplers.rules import check_sample_rules
from replaybuf.torch.captured import CapturedSampler
from replaybuf.torch.convert import DeviceBatcher
from replaybuf.torch.dataset import TorchDataset
from replaybuf.torch.episodes import episode_part
from replaybuf.torch.hindsight import relabel_part_of
from replaybuf.torch.rules import ruled_part
from replaybuf.torch.sampler import TorchUniformSampler
from replaybuf.torch.state import TorchCheckpoints
from replaybuf.torch.storage import TorchStorage

__all__ = ["TorchPyUniformReplayBuffer", "TorchUniformReplayBuffer", "as_device", "make_generator"]


def as_device(device: Any) -> torch.device:
    """``device`` as a torch.device; a bare 'cuda' becomes the current CUDA device."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def make_generator(device: torch.device, seed: int | None) -> torch.Generator:
    """A random generator on ``device``, seeded with ``seed`` (from the OS when None)."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator


class TorchUniformReplayBuffer(TorchCheckpoints, StreamBuffer):
    """``batch_size`` streams of ``max_length`` items as torch tensors on ``device``.

    The same contract as ``replaybuf.UniformReplayBuffer``: ``add_batch`` writes one step
    to every stream, ``get_next`` draws a step and a stream uniformly and returns windows
    that never pass the write head. Items may be torch tensors on any device (moved once)
    or NumPy arrays; everything returned (items, ids, probabilities) is a torch tensor on
    ``device``. Thread-safe: adds and reads hold one lock. ``as_dataset`` returns a
    ``torch.utils.data.IterableDataset``: give it to a ``DataLoader`` with
    ``batch_size=None`` and ``num_workers=0`` (the buffer lives in this process).

    Args:
        data_spec: a nest (tuple, namedtuple, dict) of ArraySpec, tf.TensorSpec or
            Gymnasium spaces describing one item.
        batch_size: the number of parallel streams (one per environment copy).
        max_length: items kept per stream; capacity is batch_size * max_length.
        device: where storage lives and results are returned ('cpu', 'cuda', 'cuda:1').
        seed: seed of the sampling generator (on ``device``).
        dataset_drop_remainder: in a deterministic pass, drop short windows and groups.
        dataset_window_shift: in a deterministic pass, the step between window starts.
        capture: sample a full buffer through one recorded step per sample shape (a CUDA
            graph on a GPU; ``replaybuf.torch.captured``): every ``get_next`` of that shape
            returns the same tensors, overwritten by the next call, so clone what you keep.
            Until every stream is full, samples are eager (new tensors each call).
        respect_episodes, pad_episode_ends, episode_end_field: as for the NumPy buffers
            (docs/episodes.md): windows and sequences (``get_next(..., burn_in=, period=)``)
            drawn on the host as the NumPy buffers draw them (the same ids for the same seed),
            read on the device (``replaybuf.torch.episodes``).
        her: a ``replaybuf.HindsightRelabel``: windows stay inside one episode and goals are
            relabelled as by the NumPy buffers with ``respect_episodes=True`` (the same draws
            for the same seed; ``replaybuf.torch.hindsight``, docs/her.md); implies
            ``respect_episodes``.
        rate_limiter, rate_limiter_timeout: as for the NumPy buffers (``StreamBuffer``):
            adds and samples wait for a ``MinSize`` / ``SampleToInsertRatio``; its counters
            are part of checkpoints. Not with ``capture=True``.
        replacement, drop_remainder, max_times_sampled, sampler, max_staleness, version_field:
            the sample-count rules, as for ``replaybuf.UniformReplayBuffer`` (docs/sample_rules.md):
            drawn on the host as the NumPy buffers draw them (the same ids for the same seed;
            ``replaybuf.torch.rules``), read on the device; with ``her`` too. Not with ``capture=True``.

    Checkpoints: ``state_dict()`` (tensors) / ``load_state_dict(state)``, ``save(path)`` /
    ``load(path)`` (replaybuf.torch.state, docs/persistence.md); with rules they carry the
    rules' bookkeeping (``sample_rules``) as the NumPy buffers' do, and load across them.

    Raises:
        ArgumentError: batch_size, max_length or dataset_window_shift is not a positive int;
            capture is not a bool; her is not a HindsightRelabel; her or respect_episodes with
            capture=True; pad_episode_ends or episode_end_field without episodes; a bad
            rate_limiter or rate_limiter_timeout, or a rate_limiter with capture=True; the
            sample-count rules' errors (``check_sample_rules``), or a rule with capture=True.
        SpecError: the data_spec cannot be built, or a dtype has no PyTorch equivalent.
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int = 1,
        max_length: int = 1000,
        *,
        device: Any = "cpu",
        seed: int | None = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        capture: bool = False,
        respect_episodes: bool = False,
        pad_episode_ends: bool = False,
        episode_end_field: str | None = None,
        her: HindsightRelabel | None = None,
        rate_limiter: Any = None,
        rate_limiter_timeout: float | None = None,
        replacement: bool = True,
        max_times_sampled: int | None = None,
        sampler: str | None = None,
        max_staleness: int | None = None,
        version_field: str = "policy_version",
        drop_remainder: bool = False,
        _single_stream: bool = False,
    ):
        if capture.__class__ is not bool:
            raise ArgumentError(f"capture: expected True or False, got {capture!r:.80}")
        if rate_limiter is not None and capture:
            raise ArgumentError(
                f"rate_limiter: expected None with capture=True (a recorded sample cannot wait for the "
                f"limiter), got {rate_limiter!r:.80}"
            )
        if her is not None and capture:
            raise ArgumentError(f"her: expected None with capture=True (relabelling is drawn on the host), got {her!r}")
        if respect_episodes and capture:
            raise ArgumentError(
                "respect_episodes: expected False with capture=True (episode-aware ids are drawn on the host), got True"
            )
        self._device = as_device(device)
        self._rules = {
            "replacement": replacement,
            "max_times_sampled": max_times_sampled,
            "sampler": sampler,
            "max_staleness": max_staleness,
            "version_field": version_field,
            "drop_remainder": drop_remainder,
        }
        if capture:
            refuse_captured_rules(self._rules)
        relabel = relabel_part_of(her)
        super().__init__(
            data_spec,
            batch_size,
            max_length,
            storage=lambda flat, ring: TorchStorage(flat.leaves, ring.capacity, self._device, ring=ring),
            sampler=self._sampler_part(respect_episodes or her is not None, pad_episode_ends, episode_end_field, seed),
            dataset_drop_remainder=dataset_drop_remainder,
            dataset_window_shift=dataset_window_shift,
            single_stream=_single_stream,
            rate_limiter=rate_limiter,
            rate_limiter_timeout=rate_limiter_timeout,
            relabel=relabel,
        )
        self._validate = DeviceBatcher(self._flat, self._device).batch
        self._rng = make_generator(self._device, seed)
        self._captured = self._captured_part() if capture else None

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def capture(self) -> bool:
        return self._captured is not None

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
        *,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> tuple[Any, BufferInfo]:
        """As ``StreamBuffer.get_next``; with ``capture=True`` and every stream full, the
        returned tensors are the recorded step's own, overwritten by the next call."""
        if self._captured is None or burn_in is not None or period is not None:
            return super().get_next(sample_batch_size, num_steps, time_stacked, burn_in=burn_in, period=period)
        check_sample_arguments(sample_batch_size, num_steps)
        with self._lock:
            drawn = self._captured.sample(self._ring, sample_batch_size, num_steps)
        if drawn is None:
            return super().get_next(sample_batch_size, num_steps, time_stacked)
        return self._finish_sample(*drawn, sample_batch_size, num_steps, time_stacked)

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
        *,
        burn_in: int | None = None,
        period: int | None = None,
    ) -> TorchDataset:
        """As ``StreamBuffer.as_dataset``, as a ``torch.utils.data.IterableDataset``.

        Raises:
            ArgumentError: as ``StreamBuffer.as_dataset``; ``num_parallel_calls`` with
                ``capture=True`` (a batch sampled ahead would be overwritten by the next).
        """
        if self._captured is not None and num_parallel_calls is not None and not single_deterministic_pass:
            raise ArgumentError(
                f"num_parallel_calls: expected None with capture=True (each captured sample overwrites the one "
                f"before it, so none can be sampled ahead), got {num_parallel_calls!r}"
            )
        return super().as_dataset(
            sample_batch_size, num_steps, num_parallel_calls, single_deterministic_pass, burn_in=burn_in, period=period
        )

    # -- internals ---------------------------------------------------------------------------
    def _sampler_part(
        self, episodes: bool, pad_episode_ends: bool, episode_end_field: str | None, seed: int | None
    ) -> Callable[[FlatSpec, StreamRing], Any]:
        """The sampler part: uniform on the device, the episode sampler on the host, or the
        sample-count rules on the host (over either draw) when any is set."""
        part = episode_part(episodes, pad_episode_ends, episode_end_field, self._device, seed, lambda: self._storage)
        plain = part or (lambda flat, ring: TorchUniformSampler(self._device))

        def build(flat: FlatSpec, ring: StreamRing) -> Any:
            rules = check_sample_rules(flat, **self._rules)
            if not rules.active:
                return plain(flat, ring)
            return ruled_part(rules, episodes, pad_episode_ends, episode_end_field, self._device, seed)(flat, ring)

        return build

    def _captured_part(self) -> Any:
        """What samples with ``capture=True``: recorded uniform steps over the storage."""
        return CapturedSampler(self._storage, self._rng)

    def _host_rng(self) -> np.random.Generator | None:
        """The NumPy generator of a sampler that draws on the host (episodes, ``her=``, priorities)."""
        return getattr(self._sampler, "host_rng", None)

    def _on_device(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array, device=self._device)

    def _wrap_dataset(self, dataset: Any) -> TorchDataset:
        return TorchDataset(dataset)

    def _read_ids(self, ids: np.ndarray) -> tuple[Any, BufferInfo]:
        device_ids = torch.as_tensor(ids, device=self._device)
        with self._lock:
            leaves = self._storage.read(device_ids)
        return self._flat.unflatten(leaves), BufferInfo(device_ids, ())


def refuse_captured_rules(rules: dict) -> None:
    """ArgumentError naming the first sample-count rule set (with ``capture=True``: a recorded
    device step cannot read the host's eligible items)."""
    defaults = {"replacement": True, "max_times_sampled": None, "sampler": None, "max_staleness": None}
    name = next((key for key, default in defaults.items() if rules[key] != default), None)
    if name is not None:
        raise ArgumentError(
            f"{name}: expected {defaults[name]} with capture=True (a recorded device step cannot read the "
            f"host's eligible items), got {rules[name]!r:.80}"
        )


class TorchPyUniformReplayBuffer(TorchUniformReplayBuffer):
    """One FIFO stream of ``capacity`` items as tensors on ``device`` (PyUniform on PyTorch).

    ``add_batch`` takes a batch of any size and appends its items in order; an unbatched
    item is an error that says how to add one.
    """

    def __init__(
        self,
        data_spec: Any,
        capacity: int,
        *,
        device: Any = "cpu",
        seed: int | None = None,
        capture: bool = False,
        rate_limiter: Any = None,
        rate_limiter_timeout: float | None = None,
    ):
        check_positive("capacity", capacity, allow_none=False)
        super().__init__(
            data_spec,
            batch_size=1,
            max_length=capacity,
            device=device,
            seed=seed,
            capture=capture,
            rate_limiter=rate_limiter,
            rate_limiter_timeout=rate_limiter_timeout,
            _single_stream=True,
        )
