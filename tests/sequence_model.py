"""The brute-force reference of sequences (``burn_in``, ``period``) that every backend's
sequence tests check samples against: what was added by id, each step's episode and
position, the eligible learning starts, each start's expected ids and mask, and its
probability (uniform, or by the start's priority)."""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf import ArraySpec
from replaybuf.errors import ArgumentError
from replaybuf.samplers.sumtree import priority_mass

SPEC = {
    "t": ArraySpec((), np.int64),
    "episode": ArraySpec((), np.int64),
    "observation": ArraySpec((2, 1), np.uint8),
    "done": ArraySpec((), np.bool_),
}


def numpy_of(value):
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


class Model:
    """What was added, by id; which ids are stored; each id's priority (new: the running max)."""

    def __init__(self, batch: int, length: int, rng: np.random.Generator):
        self.batch, self.length, self.rng = batch, length, rng
        self.clear()

    def clear(self):
        self.items, self.episode_of, self.position = {}, {}, {}
        self.steps, self.next_episode = 0, 0
        self.current = [None] * self.batch
        self.priority, self.max_priority = {}, 1.0

    def add(self, end_probability: float) -> dict:
        t, frames = self.steps, []
        done = self.rng.random(self.batch) < end_probability
        item = {"t": np.full(self.batch, t), "episode": np.zeros(self.batch, np.int64), "done": done}
        for s in range(self.batch):
            if self.current[s] is None:
                self.current[s] = (self.next_episode, 0)
                self.next_episode += 1
            episode, position = self.current[s]
            uid = t * self.batch + s
            self.episode_of[uid], self.position[uid] = episode, position
            item["episode"][s] = episode
            frames.append([[(t * 7 + s) % 256], [(t * 7 + s + 1) % 256]])
            self.current[s] = None if done[s] else (episode, position + 1)
            self.priority[uid] = self.max_priority
        item["observation"] = np.array(frames, np.uint8)
        for s in range(self.batch):
            self.items[t * self.batch + s] = {k: v[s] for k, v in item.items()}
        self.steps += 1
        return item

    def stored(self, uid: int) -> bool:
        return max(0, self.steps - self.length) * self.batch <= uid < self.steps * self.batch

    def real(self, start: int, k: int) -> bool:
        uid = start + k * self.batch
        return self.stored(uid) and self.episode_of[uid] == self.episode_of[start]

    def eligible(self, burn_in: int, steps: int, period: int, pad: bool) -> list[int]:
        first = max(0, self.steps - self.length) * self.batch
        return [
            uid
            for uid in range(first, self.steps * self.batch)
            if self.position[uid] % period == 0 and (pad or all(self.real(uid, k) for k in range(steps)))
        ]

    def sequence(self, start: int, burn_in: int, steps: int) -> tuple[list[int], list[bool]]:
        """The expected ids and mask: real steps, each padded one the nearest real step's id."""
        offsets = range(-burn_in, steps)
        real = [self.real(start, k) for k in offsets]
        real_offsets = [k for k, r in zip(offsets, real, strict=True) if r]
        ids = [start + min(max(k, real_offsets[0]), real_offsets[-1]) * self.batch for k in offsets]
        return ids, real

    def probabilities(self, starts: list[int], alpha: float | None) -> dict[int, float]:
        if alpha is None:
            return {uid: 1 / len(starts) for uid in starts}
        mass = {uid: priority_mass(self.priority[uid], alpha, 1e-6) for uid in starts}
        total = sum(mass.values())
        return {uid: m / total for uid, m in mass.items()}


def check_sample(model, items, info, burn_in, steps, period, pad, alpha):
    """Every row is an eligible start's sequence, as the model builds it, with its probability."""
    eligible = model.probabilities(model.eligible(burn_in, steps, period, pad), alpha)
    ids, mask, learn = numpy_of(info.ids), numpy_of(info.mask), numpy_of(info.learn)
    probabilities = numpy_of(info.probabilities)
    assert ids.shape == mask.shape == learn.shape == (ids.shape[0], burn_in + steps)
    for row in range(ids.shape[0]):
        start = int(ids[row, burn_in])
        assert start in eligible, (start, sorted(eligible))
        assert probabilities[row] == pytest.approx(eligible[start], rel=1e-4)
        expected_ids, expected_mask = model.sequence(start, burn_in, steps)
        np.testing.assert_array_equal(ids[row], expected_ids)
        np.testing.assert_array_equal(mask[row], expected_mask)
        np.testing.assert_array_equal(learn[row], np.array(expected_mask) & (np.arange(-burn_in, steps) >= 0))
        for key in SPEC:
            np.testing.assert_array_equal(
                numpy_of(items[key])[row], np.stack([model.items[uid][key] for uid in expected_ids]), err_msg=key
            )
    return eligible


BAD_SEQUENCE_ARGUMENTS = [
    ({}, {"burn_in": -1}, "burn_in: expected an int >= 0, got -1"),
    ({}, {"burn_in": 1.5}, "burn_in: expected an int >= 0, got 1.5"),
    ({}, {"period": 0}, "period: expected an int >= 1"),
    ({}, {"period": True}, "period: expected an int >= 1"),
    ({}, {"num_steps": None, "burn_in": 2}, "num_steps: expected the sequence's learning length"),
    ({}, {"num_steps": 15, "burn_in": 6}, r"burn_in \+ num_steps: expected at most max_length=20"),
    ({"respect_episodes": False, "episode_end_field": None}, {"burn_in": 2}, "respect_episodes=True"),
]


def assert_refused(buffer, keywords, message):
    """``get_next`` and ``as_dataset`` refuse ``keywords`` (beside num_steps=3) with ``message``,
    and the sampling generator did not move."""
    before = buffer.state_dict()["rng"]
    with pytest.raises(ArgumentError, match=message):
        buffer.get_next(4, **{"num_steps": 3, **keywords})
    assert buffer.state_dict()["rng"] == before
    with pytest.raises(ArgumentError, match=message):
        buffer.as_dataset(4, **{"num_steps": 3, **keywords})
