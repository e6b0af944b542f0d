"""Episode-exact windows on every backend that has them, as random add / sample / clear /
checkpoint sequences against a plain-Python model: per stream, the newest max_length
(id, done) pairs; a window of T is valid when no step before its last ends an episode.
With ``pad_episode_ends`` every stored start is drawn and the steps past the first step's
episode repeat its last real id (checked with the mask)."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import replaybuf
from replaybuf import ArraySpec

SPEC = {"id": ArraySpec((), np.int64), "done": ArraySpec((), np.bool_)}
EPISODES = {"respect_episodes": True, "episode_end_field": "done"}


def _numpy(batch_size, max_length, seed):
    return replaybuf.UniformReplayBuffer(SPEC, batch_size=batch_size, max_length=max_length, seed=seed, **EPISODES)


def _numpy_prioritized(batch_size, max_length, seed):  # no priority updates here: uniform draws
    return replaybuf.PrioritizedReplayBuffer(SPEC, batch_size=batch_size, max_length=max_length, seed=seed, **EPISODES)


def _numpy_padded(batch_size, max_length, seed):
    return replaybuf.UniformReplayBuffer(
        SPEC, batch_size=batch_size, max_length=max_length, seed=seed, pad_episode_ends=True, **EPISODES
    )


def _jax(prioritized, pad=False):
    def make(batch_size, max_length, seed):
        from replaybuf.jax import JaxReplayBuffer

        return JaxReplayBuffer(
            SPEC,
            batch_size=batch_size,
            max_length=max_length,
            seed=seed,
            episode_num_steps=min(2, max_length),
            sampler="prioritized" if prioritized else "uniform",
            pad_episode_ends=pad,
            **EPISODES,
        )

    return make


def _shared(sampler):
    def make(batch_size, max_length, seed):  # prioritized: no priority updates here, uniform draws
        from replaybuf.shared import SharedReplayBuffer

        return SharedReplayBuffer(
            SPEC, writers=1, batch_size=batch_size, max_length=max_length, seed=seed, sampler=sampler, **EPISODES
        )

    return make


BACKENDS = {
    "numpy": _numpy,
    "numpy-prioritized": _numpy_prioritized,
    "jax": _jax(False),
    "jax-prioritized": _jax(True),
    "shared": _shared("uniform"),
    "shared-prioritized": _shared("prioritized"),
    "numpy-padded": _numpy_padded,
    "jax-padded": _jax(False, pad=True),
}


class EpisodeModel:
    def __init__(self, batch_size: int, max_length: int):
        self.batch_size, self.max_length = batch_size, max_length
        self.clear()

    def clear(self) -> None:
        self.streams = [deque(maxlen=self.max_length) for _ in range(self.batch_size)]
        self.steps = 0

    def add(self, done: list[bool]) -> dict:
        ids = self.steps * self.batch_size + np.arange(self.batch_size)
        for stream, (i, d) in enumerate(zip(ids.tolist(), done, strict=True)):
            self.streams[stream].append((i, d))
        self.steps += 1
        return {"id": ids, "done": np.array(done, bool)}

    def valid_starts(self, size: int) -> set[int]:
        starts = set()
        for stream in self.streams:
            pairs = list(stream)
            for t in range(len(pairs) - size + 1):
                if not any(done for _, done in pairs[t : t + size - 1]):
                    starts.add(pairs[t][0])
        return starts

    def all_starts(self, size: int) -> set[int]:
        return {pairs[t][0] for pairs in map(list, self.streams) for t in range(len(pairs) - size + 1)}

    def padded(self, first: int, size: int) -> tuple[list[int], list[bool]]:
        """The padded window from ``first``: its ids and which steps are real."""
        pairs = list(self.streams[first % self.batch_size])
        t = [i for i, _ in pairs].index(first)
        real = 1
        while real < size and not pairs[t + real - 1][1]:
            real += 1
        ids = [pairs[t + min(k, real - 1)][0] for k in range(size)]
        return ids, [k < real for k in range(size)]


def machine_for(make, batch_size, padded):
    class EpisodeMachine(RuleBasedStateMachine):
        @initialize(max_length=st.integers(2, 6), seed=st.integers(0, 2**16))
        def create(self, max_length, seed):
            self.model = EpisodeModel(batch_size, max_length)
            self.buffer = make(batch_size, max_length, seed)
            self.make = lambda: make(batch_size, max_length, seed + 1)

        @rule(done=st.lists(st.lists(st.booleans(), min_size=batch_size, max_size=batch_size), min_size=1, max_size=4))
        def add(self, done):
            for row in done:
                self.buffer.add_batch(self.model.add(row))

        @rule()
        def clear(self):
            self.buffer.clear()
            self.model.clear()

        @rule(size=st.integers(1, 4))
        def sample(self, size):
            if size > self.model.max_length:
                return
            starts = self.model.all_starts(size) if padded else self.model.valid_starts(size)
            if not starts:
                with pytest.raises(replaybuf.EmptyBufferError):
                    self.buffer.get_next(8, size)
                return
            items, info = self.buffer.get_next(8, size)
            ids = np.asarray(info.ids)
            np.testing.assert_array_equal(np.asarray(items["id"]), ids)
            assert set(ids[:, 0].tolist()) <= starts
            np.testing.assert_allclose(np.asarray(info.probabilities), 1.0 / len(starts), rtol=1e-5)
            if padded:
                for row, mask in zip(ids.tolist(), np.asarray(info.mask).tolist(), strict=True):
                    assert (row, mask) == self.model.padded(row[0], size)

        @rule()
        def checkpoint_into_a_new_buffer(self):
            fresh = self.make()
            fresh.load_state_dict(self.buffer.state_dict())
            self.teardown()
            self.buffer = fresh

        @invariant()
        def frames(self):
            if hasattr(self, "model"):
                assert self.buffer.num_frames() == sum(len(s) for s in self.model.streams)

        def teardown(self):
            if hasattr(self, "buffer") and hasattr(self.buffer, "close"):
                self.buffer.close()

    return EpisodeMachine


@pytest.mark.parametrize("batch_size", [1, 2])
@pytest.mark.parametrize("name", list(BACKENDS))
def test_episode_windows_match_model(name, batch_size):
    machine = machine_for(BACKENDS[name], batch_size, padded=name.endswith("padded"))
    machine.TestCase.settings = settings(
        max_examples=10 if name.startswith("jax") else 40,
        stateful_step_count=20,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    )
    machine.TestCase().runTest()
