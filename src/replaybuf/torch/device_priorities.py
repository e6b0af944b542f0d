"""Priorities kept on a torch device: sum and min trees, the running maximum, draws and updates
queued as kernels, nothing read back (``TorchPrioritizedReplayBuffer(tree_device="device")``).

``DevicePriorities`` holds what ``replaybuf.samplers.prioritized`` keeps on the host, as
tensors: the masses ``(priority + epsilon) ** alpha`` in a ``TorchSumTree`` and a
``TorchMinTree`` (``replaybuf.torch.sumtree``) and the largest priority given so far as a
0-d tensor. Its ``draw`` makes a stratified single-step draw and its ``update`` applies a
priority update, both with the host kernels' rules (masses clamped into ``[MIN_MASS,
MAX_MASS]``, ids of overwritten items ignored, duplicates last-write-wins) and without
waiting for the device: an update's checks (every priority finite and > 0, every id added)
are computed there too, and a bad update changes nothing. Whether it was bad is learnt
later, from ``PendingFault``: the update's verdict is copied to the host without waiting,
and raised as ``PriorityError`` by the first call that finds the copy done (on a CPU device,
the update's own call).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from replaybuf.errors import ArgumentError, PriorityError
from replaybuf.samplers.prioritized import check_priority_values, first_ids_of
from replaybuf.samplers.sumtree import MAX_MASS, MIN_MASS, MIN_WEIGHT
from replaybuf.torch.sumtree import TorchMinTree, TorchSumTree

__all__ = ["DevicePriorities", "PendingFault"]

_BAD_PRIORITY, _UNKNOWN_ID = 1, 2  # an update's fault codes, as the host kernel's


class PendingFault:
    """The first bad update since the last report, known on the device, reported on the host
    once the device has run it (a pinned copy and an event on CUDA; at once on a CPU)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.code = torch.zeros((), dtype=torch.int64, device=device)  # 0, or the first fault's code
        self.call = torch.zeros((), dtype=torch.int64, device=device)  # that update's number
        on_cuda = device.type == "cuda"
        self.host = torch.zeros(2, dtype=torch.int64, pin_memory=on_cuda)
        self.event = torch.cuda.Event() if on_cuda else None
        self.calls = 0
        self.last: tuple[int, torch.Tensor, torch.Tensor, int] | None = None  # the latest update, for its message

    def record(self, code: torch.Tensor, ids: torch.Tensor, priorities: torch.Tensor, head: int) -> None:
        """Keep ``code`` (0 when the update was good) unless an earlier fault is still unreported."""
        self.calls += 1
        first = (self.code == 0) & (code != 0)
        self.call.copy_(torch.where(first, self.calls, self.call))
        self.code.copy_(torch.where(first, code, self.code))
        self.host.copy_(torch.stack((self.code, self.call)), non_blocking=True)
        if self.event is not None:
            self.event.record()
        self.last = (self.calls, ids, priorities, head)

    def raise_if_any(self, wait: bool = False) -> None:
        """Raise the recorded fault's PriorityError once its verdict reached the host (``wait``:
        wait for it); nothing while the device is still running the update."""
        if self.event is not None:
            if wait:
                self.event.synchronize()
            elif not self.event.query():
                return
        code, call = self.host.tolist()
        if not code:
            return
        last = self.last
        self.clear()
        if last is not None and last[0] == call:  # still at hand: the host check's own message
            ids, priorities = last[1].cpu().numpy(), last[2].cpu().numpy()
            check_priority_values(ids, priorities, last[3])
        kind = "a priority that is not finite and > 0" if code == _BAD_PRIORITY else "an id of no added item"
        raise PriorityError(f"update_priorities call {call} of this buffer held {kind}; nothing of it was written")

    def clear(self) -> None:
        self.code.zero_()
        self.host.zero_()
        self.last = None


class DevicePriorities:
    """The sum and min trees of a prioritized buffer's masses and its running maximum on ``device``."""

    def __init__(self, capacity: int, arity: int, device: torch.device, *, alpha: float, epsilon: float):
        self.capacity, self.device = capacity, device
        self.alpha, self.epsilon = alpha, epsilon
        self.sums = TorchSumTree(capacity, arity, device)
        self.mins = TorchMinTree(capacity, arity, device)
        self.max_priority = torch.ones((), dtype=torch.float64, device=device)
        self.fault = PendingFault(device)

    def masses(self, priorities: torch.Tensor) -> torch.Tensor:
        """``(priority + epsilon) ** alpha`` clamped into ``[MIN_MASS, MAX_MASS]``, float64."""
        return ((priorities + self.epsilon) ** self.alpha).clamp_(MIN_MASS, MAX_MASS)

    def set(self, slots: torch.Tensor, masses: torch.Tensor) -> None:
        """Write ``masses`` at ``slots`` into both trees."""
        self.sums.update(slots, masses)
        self.mins.update(slots, masses)

    def add(self, start: int, count: int, priorities: np.ndarray | None) -> None:
        """New items in slots ``[start, start + count)``: the given priorities (checked on the
        host by the caller) or the running maximum's mass, computed here."""
        slots = torch.arange(start, start + count, device=self.device)
        if priorities is None:
            self.set(slots, self.masses(self.max_priority))
            return
        given = torch.from_numpy(np.asarray(priorities, np.float64)).to(self.device, non_blocking=True)
        self.set(slots, self.masses(given))
        self.max_priority.clamp_(min=float(priorities.max()))

    def update(self, ids: Any, priorities: Any, *, head: int, oldest: int) -> None:
        """Set the priorities of logical ``ids`` (``[B]``, or ``[B, T]`` windows counted by their
        first id) with the host kernel's rules, decided on the device: a batch holding a
        priority that is not finite and > 0, or an id outside ``[0, head)``, writes nothing and
        is reported by ``fault``; ids below ``oldest`` (overwritten items) are skipped.

        Raises:
            ArgumentError: priorities that are not numbers, or ids that are not integers shaped
                like them (or with one more time axis): read from metadata, at once.
        """
        try:
            priorities = torch.as_tensor(priorities, device=self.device).detach().to(torch.float64)
            ids = torch.as_tensor(ids, device=self.device).detach()
        except (TypeError, ValueError, RuntimeError) as err:
            raise ArgumentError(f"priorities: expected numbers, got {priorities!r:.80} ({err})") from None
        ids, priorities = first_ids_of(ids, priorities).reshape(-1).to(torch.int64), priorities.reshape(-1)
        if ids.numel() == 0:
            return
        bad_priority = ~(torch.isfinite(priorities) & (priorities > 0)).all()
        unknown_id = ((ids < 0) | (ids >= head)).any()
        code = torch.where(bad_priority, _BAD_PRIORITY, torch.where(unknown_id, _UNKNOWN_ID, 0))
        good = code == 0
        keep = good & (ids >= oldest)
        masses = self.masses(torch.where(keep, priorities, 1.0))
        slots = ids % self.capacity
        self.sums.update(slots, masses, keep)
        self.mins.update(slots, masses, keep)
        largest = torch.where(good, priorities.amax(), self.max_priority)
        torch.maximum(self.max_priority, largest, out=self.max_priority)
        self.fault.record(code, ids, priorities, head)

    def draw(
        self, count: int, head: Any, beta: Any, rng: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(slots, ids, probabilities, weights)`` of ``count`` stratified single-step draws:
        targets ``(j + U_j) * total / count``, found by one descent; ``head`` (the next id to be
        added) and ``beta`` may be numbers or 0-d device tensors (what a recorded step refills)."""
        uniforms = torch.rand(count, generator=rng, device=self.device, dtype=torch.float64)
        total = self.sums.total()
        targets = (torch.arange(count, device=self.device, dtype=torch.float64) + uniforms) * (total / count)
        slots, mass = self.sums.find(targets)
        ids = head - 1 - (head - 1 - slots) % self.capacity
        probabilities = (mass / total).float()
        weights = (mass / self.mins.smallest()).pow(-beta).clamp_(min=MIN_WEIGHT).float()
        return slots, ids, probabilities, weights

    def leaves(self) -> tuple[np.ndarray, np.ndarray]:
        """The sum and min trees' leaves on the host (one read-back: waits for the device)."""
        return self.sums.levels[0].cpu().numpy(), self.mins.levels[0].cpu().numpy()

    def load(self, sums: np.ndarray, mins: np.ndarray, max_priority: float) -> None:
        """Every leaf from host trees' leaves (a load) and the running maximum."""
        slots = torch.arange(self.capacity, device=self.device)
        self.sums.update(slots, torch.from_numpy(np.ascontiguousarray(sums[: self.capacity])).to(self.device))
        self.mins.update(slots, torch.from_numpy(np.ascontiguousarray(mins[: self.capacity])).to(self.device))
        self.max_priority.fill_(max_priority)

    def clear(self) -> None:
        self.sums.clear()
        self.mins.clear()
        self.max_priority.fill_(1.0)
        self.fault.clear()
