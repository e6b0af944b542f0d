"""SharedReplayBuffer sequences (``burn_in``, ``period``) and ``pad_episode_ends``, written by
real writer processes and checked against the brute-force model of tests/test_sequences.py
(one model per writer): contents, ids, masks, learning starts and their probabilities."""
# ruff: noqa: F811  (pytest fixtures imported from shared_workers are parameters here)

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
from scipy import stats

from replaybuf.errors import ArgumentError, EmptyBufferError
from replaybuf.samplers.sumtree import priority_mass
from sequence_model import BAD_SEQUENCE_ARGUMENTS, SPEC, Model, assert_refused
from shared_workers import buffers, no_leaked_segments  # noqa: F401

pytestmark = pytest.mark.timeout(300)

METHOD = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def write_model_steps(writer, seed: int, batch: int, length: int, start: int, stop: int, end: float) -> None:
    """In a writer process: replay the model of ``seed`` and add its steps ``[start, stop)``."""
    model = Model(batch, length, np.random.default_rng(seed))
    with writer:
        for t in range(stop):
            item = model.add(end)
            if t >= start:
                writer.add_batch(item)


class Writers:
    """One ``Model`` per writer (the same seeds as the processes), the shared ids mapped to
    each model's, and the learner's priorities (new steps get the largest so far when taken in)."""

    def __init__(self, buffer, seed: int = 0, end: float = 0.2):
        self.buffer, self.end = buffer, end
        self.writers, self.batch, self.length = buffer.writers, buffer._batch_size, buffer._max_length
        self.seeds = [seed * 100 + w for w in range(self.writers)]
        self.models = [Model(self.batch, self.length, np.random.default_rng(s)) for s in self.seeds]
        for model in self.models:
            model.taken = 0  # the uids below were taken in by the learner
        self.max_priority = 1.0

    def run(self, steps: list[int], flush_every: int = 3) -> None:
        """Writer ``w`` adds ``steps[w]`` more steps, each writer in its own process."""
        context = multiprocessing.get_context(METHOD)
        processes = []
        for w, count in enumerate(steps):
            model = self.models[w]
            args = (self.buffer.writer(w, flush_every=flush_every), self.seeds[w], self.batch, self.length)
            processes.append(
                context.Process(target=write_model_steps, args=(*args, model.steps, model.steps + count, self.end))
            )
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        assert [p.exitcode for p in processes] == [0] * len(processes)
        for w, count in enumerate(steps):
            for _ in range(count):
                self.models[w].add(self.end)

    def taken_in(self) -> None:
        """The learner took the new steps in (a sample): they get the largest priority so far."""
        for model in self.models:
            for uid in range(model.taken, model.steps * self.batch):
                model.priority[uid] = self.max_priority
            model.taken = model.steps * self.batch

    def shared(self, w: int, uid: int) -> int:
        t, s = divmod(uid, self.batch)
        return t * self.writers * self.batch + w * self.batch + s

    def local(self, shared_id: int) -> tuple[int, int]:
        t, column = divmod(int(shared_id), self.writers * self.batch)
        w, s = divmod(column, self.batch)
        return w, t * self.batch + s

    def update(self, ids: np.ndarray, priorities: np.ndarray) -> None:
        self.buffer.update_priorities(ids, priorities)
        for shared_id, p in zip(ids.tolist(), priorities.tolist(), strict=True):
            w, uid = self.local(shared_id)
            self.models[w].priority[uid] = p
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def probabilities(self, starts: dict[int, list[int]], alpha: float | None) -> dict[int, float]:
        """``{shared id: probability}`` over every writer's ``starts`` (model uids)."""
        mass = {
            self.shared(w, uid): 1.0 if alpha is None else priority_mass(self.models[w].priority[uid], alpha, 1e-6)
            for w, uids in starts.items()
            for uid in uids
        }
        total = sum(mass.values())
        return {key: value / total for key, value in mass.items()}

    def sequence_starts(self, burn_in: int, steps: int, period: int, pad: bool) -> dict[int, list[int]]:
        return {w: model.eligible(burn_in, steps, period, pad) for w, model in enumerate(self.models)}

    def window_starts(self, steps: int) -> dict[int, list[int]]:
        """Every stored start of a window of ``steps`` before the head (padded windows)."""
        found = {}
        for w, model in enumerate(self.models):
            first = max(0, model.steps - self.length) * self.batch
            found[w] = list(range(first, (model.steps - steps + 1) * self.batch))
        return found


def check_rows(writers, items, ids, mask, burn_in, steps):
    """Each row is the model's sequence (ids, mask, every field) from its learning start."""
    for row in range(ids.shape[0]):
        w, start = writers.local(ids[row, burn_in])
        model = writers.models[w]
        expected_ids, expected_mask = model.sequence(start, burn_in, steps)
        np.testing.assert_array_equal(ids[row], [writers.shared(w, uid) for uid in expected_ids])
        np.testing.assert_array_equal(mask[row], expected_mask)
        for key in SPEC:
            expected = np.stack([model.items[uid][key] for uid in expected_ids])
            np.testing.assert_array_equal(np.asarray(items[key])[row], expected, err_msg=key)


def check_sequences(writers, items, info, burn_in, steps, period, pad, alpha):
    """``check_sample`` of tests/test_sequences.py across writers; returns the expected probabilities."""
    expected = writers.probabilities(writers.sequence_starts(burn_in, steps, period, pad), alpha)
    ids, mask, learn = np.asarray(info.ids), np.asarray(info.mask), np.asarray(info.learn)
    assert ids.shape == mask.shape == learn.shape == (ids.shape[0], burn_in + steps)
    for row in range(ids.shape[0]):
        start = int(ids[row, burn_in])
        assert start in expected, (start, sorted(expected))
        assert info.probabilities[row] == pytest.approx(expected[start], rel=1e-4)
    check_rows(writers, items, ids, mask, burn_in, steps)
    np.testing.assert_array_equal(learn, mask & (np.arange(-burn_in, steps) >= 0))
    return expected


def chi_square(starts: np.ndarray, expected: dict[int, float]) -> float:
    found, counts = np.unique(starts, return_counts=True)
    assert set(found.tolist()) <= set(expected)
    seen = dict(zip(found.tolist(), counts.tolist(), strict=True))
    observed = np.array([seen.get(uid, 0) for uid in expected])
    return stats.chisquare(observed, np.array(list(expected.values())) * observed.sum()).pvalue


def make(buffers, sampler, pad, seed=0):
    options = {"alpha": 0.7} if sampler == "prioritized" else {}
    return buffers(
        SPEC,
        writers=2,
        batch_size=2,
        max_length=16,
        seed=seed,
        sampler=sampler,
        respect_episodes=True,
        episode_end_field="done",
        pad_episode_ends=pad,
        **options,
    )


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
@pytest.mark.parametrize(
    ("burn_in", "steps", "period", "pad"),
    [(2, 3, 1, False), (2, 3, 1, True), (3, 2, 2, False), (1, 4, 3, True), (4, 12, 12, True)],
)
def test_sequences_from_writer_processes_equal_the_reference_model(buffers, sampler, burn_in, steps, period, pad):
    buffer = make(buffers, sampler, pad, seed=burn_in * 10 + steps)
    writers = Writers(buffer, seed=steps)
    alpha = 0.7 if sampler == "prioritized" else None
    for rounds in ([9, 5], [6, 9], [8, 4], [5, 12]):  # both writers wrap (16 steps a ring), taken in each round
        writers.run(rounds)
        _, info = buffer.get_next(8, num_steps=steps, burn_in=burn_in, period=period)
        writers.taken_in()
        if alpha is not None:  # uneven priorities on the starts drawn, mirrored in the models
            starts = np.unique(info.ids[:, burn_in])
            writers.update(starts, np.linspace(0.5, 4.0, starts.size))
        items, info = buffer.get_next(32, num_steps=steps, burn_in=burn_in, period=period)
        expected = check_sequences(writers, items, info, burn_in, steps, period, pad, alpha)
    _, info = buffer.get_next(6000, num_steps=steps, burn_in=burn_in, period=period)
    assert chi_square(info.ids[:, burn_in], expected) > 1e-4


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_padded_windows_equal_the_model(buffers, sampler):
    buffer = make(buffers, sampler, pad=True, seed=3)
    writers = Writers(buffer, seed=3, end=0.3)
    for rounds in ([10, 7], [9, 12]):
        writers.run(rounds)
        items, info = buffer.get_next(64, num_steps=4)
        writers.taken_in()
        expected = writers.probabilities(writers.window_starts(4), 0.7 if sampler == "prioritized" else None)
        ids, mask = np.asarray(info.ids), np.asarray(info.mask)
        for row in range(ids.shape[0]):
            assert info.probabilities[row] == pytest.approx(expected[int(ids[row, 0])], rel=1e-4)
        check_rows(writers, items, ids, mask, 0, 4)  # a window is the sequence of its first step, no burn-in
        if sampler == "prioritized":
            assert info.weights.shape == (64,)
    _, info = buffer.get_next(6000, num_steps=4)
    assert chi_square(info.ids[:, 0], expected) > 1e-4
    one, info = buffer.get_next(num_steps=3)
    assert info.ids.shape == info.mask.shape == (3,) and one["t"].shape == (3,)


def test_an_unbatched_sequence_a_time_unstacked_one_and_a_deterministic_pass(buffers):
    buffer = make(buffers, "uniform", pad=False, seed=5)
    writers = Writers(buffer, seed=5)
    writers.run([12, 9])
    items, info = buffer.get_next(num_steps=2, burn_in=3, period=2)
    assert info.ids.shape == info.mask.shape == info.learn.shape == (5,) and items["t"].shape == (5,)
    check_rows(writers, {k: v[None] for k, v in items.items()}, info.ids[None], info.mask[None], 3, 2)
    unstacked, _ = buffer.get_next(4, num_steps=2, burn_in=3, time_stacked=False)
    assert len(unstacked) == 5 and unstacked[0]["t"].shape == (4,)
    passes = list(buffer.as_dataset(5, num_steps=2, burn_in=3, period=2, single_deterministic_pass=True))
    starts = np.concatenate([np.asarray(info.ids)[:, 3] for _, info in passes])
    expected = [
        writers.shared(w, uid)
        for w, uids in writers.sequence_starts(3, 2, 2, False).items()
        for uid in sorted(uids, key=lambda uid: (uid % writers.batch, uid))
    ]
    np.testing.assert_array_equal(starts, expected)
    for items, info in passes:
        check_rows(writers, items, np.asarray(info.ids), np.asarray(info.mask), 3, 2)
    items, info = next(iter(buffer.as_dataset(8, num_steps=2, burn_in=3, period=2)))
    check_sequences(writers, items, info, 3, 2, 2, False, None)


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_a_writer_that_laps_the_learner_keeps_period_one_exact_and_drops_its_unknown_positions(buffers, sampler):
    """40 steps in a ring of 16 before the first sample: the learner never saw where the oldest
    stored episodes began. Period 1 is still exact; with period 2 those episodes' steps offer
    no starts, every other start is the model's, with its sequence."""
    buffer = make(buffers, sampler, pad=True, seed=8)
    writers = Writers(buffer, seed=8, end=0.15)
    writers.run([40, 37])
    alpha = 0.7 if sampler == "prioritized" else None
    items, info = buffer.get_next(64, num_steps=3, burn_in=2)
    writers.taken_in()
    check_sequences(writers, items, info, 2, 3, 1, True, alpha)
    items, info = buffer.get_next(256, num_steps=3, burn_in=2, period=2)
    expected = writers.probabilities(writers.sequence_starts(2, 3, 2, True), alpha)
    starts = set(info.ids[:, 2].tolist())
    assert starts < set(expected)
    for start in set(expected) - starts:  # left out: its episode began before the learner's first step
        w, uid = writers.local(start)
        model = writers.models[w]
        assert not model.real(uid, -model.position[uid])
    check_rows(writers, items, np.asarray(info.ids), np.asarray(info.mask), 2, 3)


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_a_loaded_copy_draws_the_same_sequences_and_a_cleared_buffer_none(buffers, sampler):
    buffer = make(buffers, sampler, pad=False, seed=6)
    writers = Writers(buffer, seed=6)
    writers.run([11, 7])
    buffer.get_next(4, num_steps=2, burn_in=2, period=2)
    writers.taken_in()
    copy = make(buffers, sampler, pad=False, seed=6)
    copy.load_state_dict(buffer.state_dict())  # positions are read again from the loaded records
    alpha = 0.7 if sampler == "prioritized" else None
    items, info = copy.get_next(64, num_steps=2, burn_in=2, period=2)
    check_sequences(writers, items, info, 2, 2, 2, False, alpha)
    buffer.clear()
    with pytest.raises(EmptyBufferError, match="is empty"):
        buffer.get_next(4, num_steps=2, burn_in=2, period=2)


def test_no_eligible_start_is_an_empty_buffer_error(buffers):
    buffer = make(buffers, "uniform", pad=False)
    with pytest.raises(EmptyBufferError, match="is empty"):
        buffer.get_next(2, num_steps=2, burn_in=1)
    handle = buffer.writer(0)
    for t in range(6):  # episodes of 2 steps: no start of 3 real learning steps, unpadded
        handle.add_batch(
            {"t": [t, t], "episode": [0, 0], "observation": np.zeros((2, 2, 1), np.uint8), "done": [t % 2 == 1] * 2}
        )
    handle.close()
    with pytest.raises(EmptyBufferError, match="num_steps=3: no stored episode holds 3 steps from a position"):
        buffer.get_next(2, num_steps=3, burn_in=1, period=2)


@pytest.mark.parametrize(("options", "keywords", "message"), BAD_SEQUENCE_ARGUMENTS)
def test_bad_sequence_arguments_are_refused_with_the_numpy_messages(buffers, options, keywords, message):
    episodes = {"respect_episodes": True, "episode_end_field": "done", **options}
    buffer = buffers(SPEC, writers=2, batch_size=2, max_length=20, seed=0, **episodes)
    Writers(buffer).run([4, 4])
    assert_refused(buffer, keywords, message)


def test_pad_episode_ends_needs_respect_episodes(buffers):
    with pytest.raises(ArgumentError, match="pad_episode_ends: only used with respect_episodes=True, got"):
        buffers(SPEC, writers=1, pad_episode_ends=True)
