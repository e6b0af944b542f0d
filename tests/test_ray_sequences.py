"""ShardedReplayBuffer sequences (``burn_in``, ``period``): shards with episodes written to
unequal lengths (and wrapped), checked against the brute-force model of tests/test_sequences.py
(one model per shard): contents, ids, masks, and exact probabilities across shards.

Ray: the tests' one local session (2 CPUs; tests/backends.py local_ray), shut down when they exit.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from replaybuf.errors import ArgumentError, EmptyBufferError
from replaybuf.samplers.sumtree import priority_mass
from sequence_model import BAD_SEQUENCE_ARGUMENTS, SPEC, Model

ray = pytest.importorskip("ray")
import replaybuf.ray as rb_ray  # noqa: E402 (ours: imported plainly once Ray is there)
from backends import local_ray  # noqa: E402

pytestmark = pytest.mark.timeout(300)

SHARDS, BATCH, LENGTH = 2, 4, 16  # two streams a shard


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    local_ray()  # the tests' one local session (shut down when they exit)


class Shards:
    """One ``Model`` per shard (its two streams), written through that shard's writer."""

    def __init__(self, buffer, seed: int, end: float = 0.2):
        self.buffer, self.end = buffer, end
        self.models = [Model(BATCH // SHARDS, LENGTH, np.random.default_rng(seed * 10 + k)) for k in range(SHARDS)]
        self.writers = [buffer.writer(k) for k in range(SHARDS)]

    def add(self, steps: list[int]) -> None:
        for k, count in enumerate(steps):
            for _ in range(count):
                self.writers[k].add_batch(self.models[k].add(self.end))
            self.writers[k].flush()

    def local(self, global_id: int) -> tuple[int, int]:
        shard, local = self.buffer._route(np.array([global_id]))
        return int(shard[0]), int(local[0])

    def expected(self, burn_in, steps, period, pad, alpha) -> dict[int, float]:
        """``{global id: probability}`` of every eligible start over all shards."""
        mass = {}
        for k, model in enumerate(self.models):
            for uid in model.eligible(burn_in, steps, period, pad):
                key = int(self.buffer._global(k, np.array([uid]))[0])
                mass[key] = 1.0 if alpha is None else priority_mass(model.priority[uid], alpha, 1e-6)
        total = sum(mass.values())
        return {key: value / total for key, value in mass.items()}

    def check(self, items, info, burn_in, steps, period, pad, alpha) -> dict[int, float]:
        expected = self.expected(burn_in, steps, period, pad, alpha)
        ids, mask, learn = np.asarray(info.ids), np.asarray(info.mask), np.asarray(info.learn)
        assert ids.shape == mask.shape == learn.shape == (ids.shape[0], burn_in + steps)
        np.testing.assert_array_equal(learn, mask & (np.arange(-burn_in, steps) >= 0))
        for row in range(ids.shape[0]):
            start = int(ids[row, burn_in])
            assert start in expected, (start, sorted(expected))
            assert info.probabilities[row] == pytest.approx(expected[start], rel=1e-4)
            k, uid = self.local(start)
            model = self.models[k]
            expected_ids, expected_mask = model.sequence(uid, burn_in, steps)
            np.testing.assert_array_equal(ids[row], self.buffer._global(k, np.array(expected_ids)))
            np.testing.assert_array_equal(mask[row], expected_mask)
            for key in SPEC:
                want = np.stack([model.items[u][key] for u in expected_ids])
                np.testing.assert_array_equal(np.asarray(items[key])[row], want, err_msg=key)
        return expected


def make(sampler, pad, seed):
    options = {"respect_episodes": True, "episode_end_field": "done", "pad_episode_ends": pad}
    if sampler == "prioritized":
        options["alpha"] = 0.7
    return rb_ray.ShardedReplayBuffer(
        SPEC, shards=SHARDS, batch_size=BATCH, max_length=LENGTH, seed=seed, sampler=sampler, buffer_options=options
    )


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
@pytest.mark.parametrize(("burn_in", "steps", "period", "pad"), [(2, 3, 1, False), (3, 2, 2, False), (1, 4, 3, True)])
def test_sequences_across_shards_equal_the_reference_model(sampler, burn_in, steps, period, pad):
    buffer = make(sampler, pad, seed=burn_in + steps)
    try:
        shards = Shards(buffer, seed=steps)
        alpha = 0.7 if sampler == "prioritized" else None
        shards.add([30, 11])  # unequal shards; shard 0 wrapped
        if alpha is not None:  # uneven priorities on shard 0's newest items, mirrored in its model
            model = shards.models[0]
            uids = np.arange((model.steps - 6) * 2, model.steps * 2)
            new = np.linspace(0.5, 6.0, uids.size)
            buffer.update_priorities(buffer._global(0, uids), new)
            for uid, p in zip(uids.tolist(), new.tolist(), strict=True):
                model.priority[uid] = p
        for _ in range(3):
            items, info = buffer.get_next(32, num_steps=steps, burn_in=burn_in, period=period)
            expected = shards.check(items, info, burn_in, steps, period, pad, alpha)
        _, info = buffer.get_next(6000, num_steps=steps, burn_in=burn_in, period=period)
        found, counts = np.unique(info.ids[:, burn_in], return_counts=True)
        seen = dict(zip(found.tolist(), counts.tolist(), strict=True))
        observed = np.array([seen.get(key, 0) for key in expected])
        assert set(seen) <= set(expected)
        assert stats.chisquare(observed, np.array(list(expected.values())) * observed.sum()).pvalue > 1e-4
        items, info = next(iter(buffer.as_dataset(8, num_steps=steps, burn_in=burn_in, period=period)))
        shards.check(items, info, burn_in, steps, period, pad, alpha)
    finally:
        buffer.shutdown()


@pytest.mark.parametrize(("options", "keywords", "message"), BAD_SEQUENCE_ARGUMENTS)
def test_bad_sequence_arguments_are_refused_with_the_numpy_messages(options, keywords, message):
    episodes = {"respect_episodes": True, "episode_end_field": "done", **options}
    buffer = rb_ray.ShardedReplayBuffer(SPEC, shards=SHARDS, batch_size=BATCH, max_length=20, buffer_options=episodes)
    try:
        with pytest.raises(ArgumentError, match=message):
            buffer.get_next(4, **{"num_steps": 3, **keywords})
        with pytest.raises(ArgumentError, match=message):
            buffer.as_dataset(4, **{"num_steps": 3, **keywords})
    finally:
        buffer.shutdown()


def test_a_deterministic_pass_yields_every_eligible_sequence_once_in_order():
    buffer = make("uniform", pad=False, seed=4)
    try:
        shards = Shards(buffer, seed=4)
        shards.add([25, 9])
        passes = list(buffer.as_dataset(5, num_steps=3, burn_in=2, period=2, single_deterministic_pass=True))
        starts = np.concatenate([np.asarray(info.ids)[:, 2] for _, info in passes])
        expected = sorted(shards.expected(2, 3, 2, False, None), key=lambda uid: (uid % BATCH, uid))
        np.testing.assert_array_equal(starts, expected)
        for items, info in passes:  # each row as the model builds it (probabilities are () in a pass)
            rows = np.asarray(info.ids)
            for row in range(rows.shape[0]):
                k, uid = shards.local(int(rows[row, 2]))
                expected_ids, expected_mask = shards.models[k].sequence(uid, 2, 3)
                np.testing.assert_array_equal(rows[row], buffer._global(k, np.array(expected_ids)))
                np.testing.assert_array_equal(np.asarray(info.mask)[row], expected_mask)
                want = [shards.models[k].items[u]["t"] for u in expected_ids]
                np.testing.assert_array_equal(items["t"][row], want)
        with pytest.raises(EmptyBufferError, match="num_steps=12"):  # no episode of 12 steps, unpadded
            buffer.get_next(4, num_steps=12, burn_in=1)
    finally:
        buffer.shutdown()
