"""Sequences for recurrent learners: a learning start, the burn-in before it, masks.

A sequence of ``burn_in`` B and ``num_steps`` T has a *learning start* ``s``: a stored step
whose position in its episode is a multiple of ``period`` P. Its ids are the B steps before
``s`` (the burn-in), then ``s`` and the T - 1 steps after it, ``[..., B + T]``. A step is
*real* when it belongs to ``s``'s episode and is stored (not overwritten, not past the write
head); the real steps of a sequence are one run around ``s``, and every other step repeats
the nearest real one (its id too), so every id is a stored id. ``mask`` says which steps are
real, ``learn`` which real steps are learning steps.

Eligible starts: every stored step of position ``% P == 0`` when padded (``pad=True``);
without padding, only those whose T learning steps are all real (the burn-in is clamped,
never a reason to exclude). Samplers draw among the eligible starts (uniformly, or by the
start's priority); ``StartList`` keeps them in id order for the periods whose starts are
too sparse to find by rejection.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from replaybuf.errors import ArgumentError
from replaybuf.ring import StreamRing
from replaybuf.samplers.compiled import load_kernel

__all__ = ["SequenceRule", "StartList", "check_sequence_arguments", "eligible", "sequence_windows"]


class SequenceRule(NamedTuple):
    """What a sequence sample asks for: ``burn_in`` steps before each learning start,
    ``num_steps`` learning steps, starts at positions ``% period == 0``, ``pad``: starts
    whose learning steps pass the episode's end (or the head) are drawn, padded."""

    burn_in: int
    num_steps: int
    period: int
    pad: bool

    @property
    def key(self) -> tuple[int, int, bool]:
        """What decides which starts are eligible (the burn-in does not)."""
        return self.num_steps, self.period, self.pad


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_sequence_arguments(
    burn_in: Any, period: Any, num_steps: Any, max_length: int, episodes: bool, pad: bool
) -> SequenceRule:
    """The ``SequenceRule`` of a ``get_next`` / ``as_dataset`` call with ``burn_in`` or
    ``period`` (None: 0 and 1) on a buffer of ``max_length`` steps per stream.

    Raises:
        ArgumentError: ``burn_in`` not an int >= 0, ``period`` not an int >= 1, ``num_steps``
            missing (sequences have a learning length), ``burn_in + num_steps`` more steps than
            a stream holds, or a buffer without ``respect_episodes=True`` (``episodes``).
    """
    if not episodes:
        raise ArgumentError(
            f"burn_in/period: expected a buffer built with respect_episodes=True (sequences are cut at "
            f"episode starts and ends), got burn_in={burn_in!r}, period={period!r} on a buffer without episodes"
        )
    if burn_in is not None and not (_is_int(burn_in) and burn_in >= 0):
        raise ArgumentError(f"burn_in: expected an int >= 0, got {burn_in!r:.80}")
    if period is not None and not (_is_int(period) and period >= 1):
        raise ArgumentError(f"period: expected an int >= 1 (or None: every step), got {period!r:.80}")
    if num_steps is None:
        raise ArgumentError(
            "num_steps: expected the sequence's learning length (a positive int) with burn_in or period, got None"
        )
    burn_in, period = int(burn_in or 0), int(period or 1)
    if burn_in + num_steps > max_length:
        raise ArgumentError(
            f"burn_in + num_steps: expected at most max_length={max_length} steps (what a stream holds), "
            f"got {burn_in} + {num_steps}"
        )
    return SequenceRule(burn_in, int(num_steps), period, bool(pad))


def eligible(position: np.ndarray, ring: StreamRing, ids: np.ndarray, rule: SequenceRule) -> np.ndarray:
    """Whether each stored id is an eligible learning start of ``rule`` (``position``: the
    episode index's positions by slot)."""
    slots = ids % ring.capacity
    ok = position[slots] % rule.period == 0
    if rule.pad:
        return ok
    steps = rule.num_steps
    last_step = ids // ring.batch_size + steps - 1
    inside = position[(ids + (steps - 1) * ring.batch_size) % ring.capacity] >= steps - 1
    return ok & (last_step < ring.steps) & inside


_kernels: dict[str, Any] = {}  # name -> the compiled kernel, or None without numba


def _kernel(name: str = "windows") -> Any:
    """``_sequence_kernels.<name>`` (compiled or loaded from the disk cache once), or None without numba."""
    if name not in _kernels:
        _kernels[name] = load_kernel("_sequence_kernels", name)
    return _kernels[name]


def accept_kernel() -> Any:
    """``_sequence_kernels.accept`` (the unpadded draw's acceptance test), or None without numba."""
    return _kernel("accept")


def sequence_windows(
    position: np.ndarray, ring: StreamRing, starts: np.ndarray, burn_in: int, num_steps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, mask, learn)`` of the sequences with learning starts ``starts`` (stored ids,
    any shape S): each ``S + [burn_in + num_steps]``; see the module for what is real.
    Compiled (replaybuf.samplers._sequence_kernels) with numba, else ``numpy_windows``."""
    kernel = _kernel()
    if kernel is None:
        return numpy_windows(position, ring, starts, burn_in, num_steps)
    flat = np.asarray(starts, np.int64).reshape(-1)
    rows = (flat.size, burn_in + num_steps)
    ids, mask, learn = np.empty(rows, np.int64), np.empty(rows, bool), np.empty(rows, bool)
    first_step = ring.first_valid_step()
    kernel(position, ring.capacity, ring.batch_size, first_step, ring.steps, flat, burn_in, ids, mask, learn)
    shape = (*np.shape(starts), rows[1])
    return ids.reshape(shape), mask.reshape(shape), learn.reshape(shape)


def numpy_windows(
    position: np.ndarray, ring: StreamRing, starts: np.ndarray, burn_in: int, num_steps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``sequence_windows`` in NumPy passes over the whole batch (without numba)."""
    batch = ring.batch_size
    step = starts // batch
    here = position[starts % ring.capacity]
    # the burn-in's real steps: back to the episode's first step or the oldest stored one
    first = -np.minimum(np.minimum(here, step - ring.first_valid_step()), burn_in)
    offsets = np.arange(-burn_in, num_steps, dtype=np.int64)
    # real learning steps are a run from the start (positions go up by one inside an episode,
    # back to 0 at the next): the whole run is real when the last step is, so only the
    # sequences whose last step is not (padded ones) gather the positions of every step
    end = starts + (num_steps - 1) * batch
    last = np.full(starts.shape, num_steps - 1, np.int64)
    short = (end >= ring.steps * batch) | (position[end % ring.capacity] != here + (num_steps - 1))
    if short.any():
        ahead = starts[short][..., None] + offsets[burn_in:] * batch
        real = (ahead < ring.steps * batch) & (
            position[ahead % ring.capacity] == here[short][..., None] + offsets[burn_in:]
        )
        last[short] = real.sum(axis=-1) - 1
    clipped = np.clip(offsets, first[..., None], last[..., None])
    ids = starts[..., None] + clipped * batch
    mask = clipped == offsets
    return ids, mask, mask & (offsets >= 0)


class StartList:
    """The eligible starts of one ``(num_steps, period, pad)``, in id order: the starts the adds
    since the last look decided are appended when the list is looked at (ids only grow; an
    add does no work for it), the overwritten ones dropped from the front.

    A uniform draw picks an index into the live run: O(1) per draw however sparse the
    starts are (a period as long as an episode keeps one start per episode).
    """

    def __init__(self, position: np.ndarray, ring: StreamRing, rule: SequenceRule):
        self.position, self.ring, self.rule = position, ring, rule
        self._ids = np.empty(64, np.int64)
        self._front = self._stop = 0
        self._next = 0  # the first step whose starts are not listed yet

    def _decide(self) -> None:
        """Append the starts decided since the last look: each step's own (padded), or that
        of the window of ``num_steps`` ending at an added step (unpadded). A start's
        positions never change while it is stored, so deciding late decides alike."""
        ring, rule = self.ring, self.rule
        newest = ring.steps - (1 if rule.pad else rule.num_steps)  # the newest decided step
        first = max(self._next, ring.first_valid_step())
        if first <= newest:
            batch = ring.batch_size
            ids = np.arange(first * batch, (newest + 1) * batch, dtype=np.int64)
            new = ids[eligible(self.position, ring, ids, rule)]
            self._room(new.size)
            self._ids[self._stop : self._stop + new.size] = new
            self._stop += new.size
        self._next = max(self._next, newest + 1)

    def _room(self, count: int) -> None:
        """Make room for ``count`` more ids: when full, drop the overwritten prefix, grow if need be."""
        if self._stop + count > self._ids.size:
            live = self._ids[self._front : self._stop]
            grown = np.empty(max(64, 2 * (live.size + count)), np.int64)
            grown[: live.size] = live
            self._ids, self._front, self._stop = grown, 0, live.size

    def live(self) -> np.ndarray:
        """The eligible starts now stored, in id order (a view)."""
        oldest = self.ring.first_valid_step() * self.ring.batch_size
        ids = self._ids[: self._stop]
        if self._front < self._stop and ids[self._front] < oldest:
            self._front += int(np.searchsorted(ids[self._front :], oldest))
        self._decide()  # appends stored starts only
        return self._ids[self._front : self._stop]
