"""Hindsight relabelling on the NumPy buffers as random add / sample / clear / checkpoint
sequences against a plain-Python model of the streams' episodes (random lengths, start
markers without an end before them, wraparound, unfinished episodes, several streams).

Each item's achieved goal is ``[stream, step]``, so a relabelled goal names the item it came
from: it must be a stored item of the same episode as the sampled window, at or after the
window's last step (``future``), the episode's last stored step (``final``) or any stored
step of it (``episode``); every step of a window carries the same goal, and the rewards are
what ``compute_reward`` gives for the item's achieved goal and the new goal.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import replaybuf
from replaybuf import ArraySpec

FIRST, MID, LAST = 0, 1, 2
STORED_REWARD = 7.0
SPEC = {
    "step_type": ArraySpec((), np.int32),
    "observation": {"desired_goal": ArraySpec((2,), np.float32)},
    "next_observation": {"desired_goal": ArraySpec((2,), np.float32)},
    "achieved_goal": ArraySpec((2,), np.float32),
    "reward": ArraySpec((), np.float32),
}


def reward_of(achieved, desired, info):
    """Identifies both goals: 1000 x the achieved goal's step + the desired goal's step."""
    assert info is None
    return achieved[:, 1] * 1000 + desired[:, 1]


class EpisodeModel:
    """Per stream, the newest max_length ``(step, episode)`` pairs."""

    def __init__(self, batch_size: int, max_length: int):
        self.batch_size, self.max_length = batch_size, max_length
        self.clear()

    def clear(self) -> None:
        self.streams = [deque(maxlen=self.max_length) for _ in range(self.batch_size)]
        self.episode = [0] * self.batch_size
        self.ended = [True] * self.batch_size
        self.steps = 0

    def add(self, types: list[int]) -> dict:
        t = self.steps
        for stream, kind in enumerate(types):
            if self.ended[stream] or kind == FIRST:
                self.episode[stream] += 1
            self.streams[stream].append((t, self.episode[stream]))
            self.ended[stream] = kind == LAST
        self.steps += 1
        achieved = np.stack([np.arange(self.batch_size), np.full(self.batch_size, t)], axis=1)
        unset = np.full((self.batch_size, 2), -1, np.float32)
        return {
            "step_type": np.array(types, np.int32),
            "observation": {"desired_goal": unset},
            "next_observation": {"desired_goal": unset},
            "achieved_goal": achieved.astype(np.float32),
            "reward": np.full(self.batch_size, STORED_REWARD, np.float32),
        }

    def allowed_goals(self, stream: int, last_step: int, strategy: str) -> set[int]:
        pairs = dict(self.streams[stream])
        episode = pairs[last_step]
        steps = sorted(t for t, e in pairs.items() if e == episode)
        if strategy == "final":
            return {steps[-1]}
        if strategy == "future":
            return {t for t in steps if t >= last_step}
        return set(steps)

    def finished(self) -> int:
        """Stored items whose episode has ended (LAST, or a newer episode began in the stream)."""
        return sum(
            1
            for stream, pairs in enumerate(self.streams)
            for _, episode in pairs
            if episode != self.episode[stream] or self.ended[stream]
        )

    def has_window(self, size: int) -> bool:
        return any(
            len({e for _, e in list(s)[t : t + size]}) == 1 for s in self.streams for t in range(len(s) - size + 1)
        )


def make_her(strategy, compiled=None):
    return replaybuf.HindsightRelabel(
        goal_field=("observation/desired_goal", "next_observation/desired_goal"),
        achieved_field="achieved_goal",
        compute_reward=reward_of,
        strategy=strategy,
        ratio=0.5,
        compiled=compiled,
    )


def make_buffer(batch_size, max_length, seed, strategy, prioritized, padded, compiled):
    her = make_her(strategy, compiled)
    kind = replaybuf.PrioritizedReplayBuffer if prioritized else replaybuf.UniformReplayBuffer
    return kind(
        SPEC,
        batch_size=batch_size,
        max_length=max_length,
        seed=seed,
        respect_episodes=True,
        pad_episode_ends=padded,
        her=her,
    )


# the machine's geometry and rule (test_her_torch.py runs the machine over the torch buffer with them)
GEOMETRY = {
    "batch_size": st.integers(1, 3),
    "max_length": st.integers(1, 7),
    "seed": st.integers(0, 2**16),
    "strategy": st.sampled_from(["future", "final", "episode"]),
}


class RelabelMachine(RuleBasedStateMachine):
    @initialize(
        **GEOMETRY,
        prioritized=st.booleans(),
        padded=st.booleans(),
        compiled=st.sampled_from([None, False]),  # numba's kernel (when installed) and NumPy's
    )
    def create(self, batch_size, max_length, seed, strategy, prioritized, padded, compiled):
        self.model = EpisodeModel(batch_size, max_length)
        self.strategy, self.padded = strategy, padded
        options = (strategy, prioritized, padded, compiled)
        self.make = lambda: make_buffer(batch_size, max_length, seed + 1, *options)
        self.buffer = make_buffer(batch_size, max_length, seed, *options)

    @rule(types=st.lists(st.lists(st.sampled_from([FIRST, MID, MID, LAST]), min_size=3, max_size=3), max_size=5))
    def add(self, types):
        for row in types:
            self.buffer.add_batch(self.model.add(row[: self.model.batch_size]))

    @rule()
    def clear(self):
        self.buffer.clear()
        self.model.clear()

    @rule()
    def checkpoint_into_a_new_buffer(self):
        fresh = self.make()
        fresh.load_state_dict(self.buffer.state_dict())
        self.buffer = fresh

    @invariant()
    def finished_items_are_counted(self):  # what replaybuf.sb3.HerReplayBuffer samples from
        if hasattr(self, "model"):
            assert self.buffer.relabel.ends.finished == self.model.finished()

    @rule(batch=st.sampled_from([None, 1, 16]), num_steps=st.sampled_from([None, 1, 2, 3]))
    def sample(self, batch, num_steps):
        size = num_steps or 1
        possible = self.model.steps and size <= min(self.model.steps, self.model.max_length)
        if not (possible and (self.padded or self.model.has_window(size))):
            with pytest.raises(replaybuf.EmptyBufferError):
                self.buffer.get_next(batch, num_steps)
            return
        items, info = self.buffer.get_next(batch, num_steps)
        windows = num_steps is not None
        ids = np.asarray(info.ids).reshape(-1, size)  # [elements, T]
        relabelled = np.asarray(info.relabelled).reshape(-1)
        assert np.asarray(info.relabelled).shape == np.asarray(info.ids).shape[: np.ndim(info.ids) - windows]
        shape = (ids.shape[0], size)
        achieved = items["achieved_goal"].reshape(*shape, 2)
        goals = [items["observation"]["desired_goal"].reshape(*shape, 2)]
        goals.append(items["next_observation"]["desired_goal"].reshape(*shape, 2))
        rewards = items["reward"].reshape(shape)
        batch_size = self.model.batch_size
        np.testing.assert_array_equal(achieved[..., 0], ids % batch_size)  # the stored items, unchanged
        np.testing.assert_array_equal(achieved[..., 1], ids // batch_size)
        for k in range(ids.shape[0]):
            stream, last = int(ids[k, -1] % batch_size), int(ids[k, -1] // batch_size)
            for goal in goals:
                if not relabelled[k]:
                    assert (goal[k] == -1).all()
                    continue
                assert (goal[k, :, 0] == stream).all() and (goal[k, :, 1] == goal[k, 0, 1]).all()
                assert int(goal[k, 0, 1]) in self.model.allowed_goals(stream, last, self.strategy)
            expected = achieved[k, :, 1] * 1000 + goals[0][k, :, 1] if relabelled[k] else STORED_REWARD
            np.testing.assert_array_equal(rewards[k], expected)


def run_machine(machine, examples):
    """Run ``machine`` over ``examples`` random sequences of up to 25 steps each."""
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=25,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    )
    machine.TestCase().runTest()


def test_relabelled_goals_match_the_model():
    run_machine(RelabelMachine, 150)
