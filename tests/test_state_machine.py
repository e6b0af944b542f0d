"""Random add / sample / clear sequences against a plain-Python model of the buffer."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import replaybuf
from backends import BACKENDS
from conformance_data import SPEC, as_numpy, assert_items_match_ids, fields_for_ids, step_batch


class BufferModel:
    """What a segmented ring must hold: per stream, the ids of its newest max_length steps."""

    def __init__(self, batch_size: int, max_length: int):
        self.batch_size, self.max_length = batch_size, max_length
        self.streams = [deque(maxlen=max_length) for _ in range(batch_size)]
        self.next_id = 0

    def add_step(self) -> int:
        step = self.next_id // self.batch_size
        for stream in range(self.batch_size):
            self.streams[stream].append(step * self.batch_size + stream)
        self.next_id += self.batch_size
        return step

    def clear(self) -> None:
        self.streams = [deque(maxlen=self.max_length) for _ in range(self.batch_size)]

    def window_starts(self, num_steps: int) -> set[int]:
        return {ids[i] for ids in self.streams for i in range(len(ids) - num_steps + 1)}


def machine_for(backend, batch_size: int):
    class BufferMachine(RuleBasedStateMachine):
        @initialize(max_length=st.integers(1, 6), seed=st.integers(0, 2**16))
        def create(self, max_length, seed):
            self.model = BufferModel(batch_size, max_length)
            self.buffer = backend.make(SPEC, batch_size, max_length, seed)

        @rule(steps=st.integers(1, 5))
        def add(self, steps):
            for _ in range(steps):
                # After a clear the buffer restarts its ids at 0; the model mirrors that.
                step = self.model.add_step()
                self.buffer.add_batch(step_batch(step, batch_size))

        @rule(bad_leaf=st.sampled_from(["id", "flag"]))
        def rejected_add(self, bad_leaf):
            batch = step_batch(0, batch_size)
            batch[bad_leaf] = np.zeros((batch_size, 2), batch[bad_leaf].dtype)
            with pytest.raises(replaybuf.SpecMismatchError):
                self.buffer.add_batch(batch)

        @rule()
        def clear(self):
            self.buffer.clear()
            self.model.clear()
            self.model.next_id = 0

        @rule(size=st.integers(1, 9), num_steps=st.one_of(st.none(), st.integers(1, 4)))
        def sample(self, size, num_steps):
            starts = self.model.window_starts(num_steps or 1)
            if not starts:
                with pytest.raises(replaybuf.EmptyBufferError):
                    self.buffer.get_next(size, num_steps)
                return
            items, info = self.buffer.get_next(size, num_steps)
            ids = np.asarray(backend.to_numpy(info.ids))
            first = ids if num_steps is None else ids[:, 0]
            assert set(first.tolist()) <= starts
            assert_items_match_ids(as_numpy(items, backend.to_numpy), ids)
            probabilities = np.asarray(backend.to_numpy(info.probabilities))
            np.testing.assert_allclose(probabilities, 1.0 / len(starts), rtol=1e-6)

        @precondition(lambda self: any(self.model.streams))
        @rule()
        def deterministic_pass(self):
            ids = [
                int(np.asarray(backend.to_numpy(info.ids)))
                for _, info in self.buffer.as_dataset(single_deterministic_pass=True)
            ]
            assert ids == [i for stream in self.model.streams for i in stream]

        @invariant()
        def frames_and_contents(self):
            if not hasattr(self, "model"):
                return
            stored = sum(len(s) for s in self.model.streams)
            assert self.buffer.num_frames() == stored
            if stored:
                items = as_numpy(self.buffer.gather_all(), backend.to_numpy)
                assert_items_match_ids(items, np.array([list(s) for s in self.model.streams]))

    BufferMachine.__name__ = f"BufferMachine_{backend.name}_B{batch_size}"
    return BufferMachine


_CASES = [
    pytest.param(b, n, id=f"{b.name}-B{n}", marks=b.marks)
    for b in BACKENDS
    for n in (1, 3)
    if not (b.single_stream and n != 1)
]


@pytest.mark.parametrize("backend, batch_size", _CASES)
def test_buffer_matches_model(backend, batch_size):
    machine = machine_for(backend, batch_size)
    # Graph backends trace functions for every new buffer: fewer, equally long, runs there.
    examples = 40 if backend.name.startswith("numpy") else 8
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=25,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    )
    machine.TestCase().runTest()


def test_model_agrees_with_fields_helper():
    """The model's ids are the ones step_batch writes (guards the test's own bookkeeping)."""
    model = BufferModel(2, 3)
    for _ in range(4):
        model.add_step()
    assert [list(s) for s in model.streams] == [[2, 4, 6], [3, 5, 7]]
    np.testing.assert_array_equal(step_batch(3, 2)["id"], [6, 7])
    np.testing.assert_array_equal(fields_for_ids(np.array([6]))["id"], [6])
