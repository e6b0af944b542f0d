"""``her=`` on ``TorchUniformReplayBuffer``: the same ids, goals and rewards as the NumPy buffer
with ``respect_episodes=True`` for the same seed and adds, the relabelled fraction (binomial),
the episode rules as a state machine against the model of test_hindsight_state_machine.py,
a loaded state, and the errors."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis.stateful import initialize, invariant

import replaybuf
from replaybuf import ArraySpec
from test_hindsight_state_machine import GEOMETRY, EpisodeModel, RelabelMachine, make_her, run_machine
from test_hindsight_state_machine import SPEC as MACHINE_SPEC

torch = pytest.importorskip("torch")
import replaybuf.torch.uniform  # noqa: E402
from cuda_sync import host_sync_forbidden  # noqa: E402
from replaybuf.torch import TorchUniformReplayBuffer  # noqa: E402
from replaybuf.torch.storage import TorchStorage  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SPEC = {
    "observation": {"desired_goal": ArraySpec((2,), np.float32)},
    "achieved_goal": ArraySpec((2,), np.float32),
    "reward": ArraySpec((), np.float32),
    "done": ArraySpec((), np.bool_),
}


def distance_reward(achieved, desired, info):
    """BitFlipping's rule for arrays and tensors alike."""
    if isinstance(achieved, torch.Tensor):
        return -((achieved - desired).abs().sum(-1) > 0).float()
    return -(np.abs(achieved - desired).sum(-1) > 0).astype(np.float32)


def relabel(**overrides):
    options = {"goal_field": "observation/desired_goal", "achieved_field": "achieved_goal"}
    return replaybuf.HindsightRelabel(**{**options, "compute_reward": distance_reward, **overrides})


def fill(buffers, steps, episode_length, batch_size):
    """Stream s's achieved goal at step t is [s, t]; episodes end every ``episode_length`` steps."""
    for t in range(steps):
        item = {
            "observation": {"desired_goal": np.full((batch_size, 2), -1, np.float32)},
            "achieved_goal": np.stack([np.arange(batch_size), np.full(batch_size, t)], axis=1).astype(np.float32),
            "reward": np.full(batch_size, -1, np.float32),
            "done": np.full(batch_size, t % episode_length == episode_length - 1),
        }
        for buffer in buffers:
            buffer.add_batch(item)


@pytest.fixture(params=["cpu", "cpu, device kernels", pytest.param("cuda", marks=[pytest.mark.cuda, CUDA])])
def device(request, monkeypatch):
    """The device buffers are made on; "cpu, device kernels": a CPU storage read with
    ``index_select`` (no NumPy fields), so relabelling takes the device path, as on a GPU."""
    if request.param == "cpu, device kernels":
        monkeypatch.setattr(replaybuf.torch.uniform, "TorchStorage", partial(TorchStorage, through_numpy=False))
        return "cpu"
    return request.param


@pytest.mark.parametrize("compiled", [None, False])  # the torch buffer's draws with numba (when installed) and NumPy
@pytest.mark.parametrize("num_steps", [None, 2])
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_torch_samples_what_the_numpy_buffer_samples(strategy, num_steps, compiled, device):
    numpy_buffer = replaybuf.UniformReplayBuffer(
        SPEC, 3, 9, seed=3, respect_episodes=True, episode_end_field="done", her=relabel(strategy=strategy, ratio=0.6)
    )
    torch_buffer = TorchUniformReplayBuffer(
        SPEC,
        3,
        9,
        seed=3,
        device=device,
        episode_end_field="done",
        her=relabel(strategy=strategy, ratio=0.6, compiled=compiled),
    )
    fill([numpy_buffer, torch_buffer], 25, 4, 3)  # wrapped around, episodes cut by it, the newest unfinished
    for _ in range(4):
        expected, expected_info = numpy_buffer.get_next(64, num_steps)
        items, info = torch_buffer.get_next(64, num_steps)
        assert isinstance(info.relabelled, torch.Tensor) and isinstance(items["reward"], torch.Tensor)
        assert info.relabelled.device.type == items["reward"].device.type == device
        np.testing.assert_array_equal(info.ids.cpu().numpy(), expected_info.ids)
        np.testing.assert_array_equal(info.relabelled.cpu().numpy(), expected_info.relabelled)
        for path in (("observation", "desired_goal"), ("achieved_goal",), ("reward",)):
            got, want = items, expected
            for key in path:
                got, want = got[key], want[key]
            np.testing.assert_array_equal(got.cpu().numpy(), want)
    assert 0 < info.relabelled.float().mean() < 1


@pytest.mark.cuda
@CUDA
def test_cuda_relabelled_sampling_never_synchronises_with_the_host():
    """The draws are the host's and only their results cross, without waiting: neither the goal
    gather, the writes into the sampled leaves nor ``compute_reward`` on device tensors waits."""
    buffer = TorchUniformReplayBuffer(SPEC, 3, 9, seed=3, device="cuda", episode_end_field="done", her=relabel())
    fill([buffer], 25, 4, 3)
    buffer.get_next(64, 2)  # first calls (numba's compilation, allocator growth) outside the block
    with host_sync_forbidden():
        for _ in range(3):
            items, info = buffer.get_next(64, 2)
    assert items["reward"].is_cuda and info.relabelled.is_cuda
    steps = info.ids.cpu() // 3
    goal_steps = items["observation"]["desired_goal"][..., 1].cpu().long()
    relabelled = info.relabelled.cpu()
    assert relabelled.any() and (goal_steps[relabelled] >= steps[relabelled][:, -1:]).all()


def test_an_unbatched_torch_sample_is_relabelled(device):
    buffer = TorchUniformReplayBuffer(
        SPEC, 1, 8, seed=1, device=device, episode_end_field="done", her=relabel(ratio=1.0)
    )
    fill([buffer], 8, 4, 1)
    items, info = buffer.get_next()
    assert info.relabelled.shape == () and bool(info.relabelled)
    assert all(leaf.device.type == device for leaf in (info.relabelled, items["reward"], items["achieved_goal"]))
    assert items["observation"]["desired_goal"][1] >= info.ids // 1  # a goal at or after the sampled step
    achieved, goal = items["achieved_goal"][None], items["observation"]["desired_goal"][None]
    assert items["reward"].item() == distance_reward(achieved, goal, None).item()


@pytest.mark.parametrize("ratio", [0.3, 0.8])
def test_the_relabelled_fraction_matches_the_ratio(ratio):
    buffer = TorchUniformReplayBuffer(SPEC, 2, 50, seed=7, episode_end_field="done", her=relabel(ratio=ratio))
    fill([buffer], 50, 5, 2)
    draws = 4000
    relabelled = int(sum(buffer.get_next(500)[1].relabelled.sum() for _ in range(draws // 500)))
    assert abs(relabelled - draws * ratio) <= 5 * (draws * ratio * (1 - ratio)) ** 0.5  # binomial: fails ~6e-7


def test_a_loaded_state_rebuilds_the_episodes_it_relabels_from():
    source = TorchUniformReplayBuffer(SPEC, 2, 12, seed=2, episode_end_field="done", her=relabel(ratio=1.0))
    fill([source], 20, 3, 2)
    loaded = TorchUniformReplayBuffer(SPEC, 2, 12, seed=2, episode_end_field="done", her=relabel(ratio=1.0))
    loaded.load_state_dict(source.state_dict())
    items, info = loaded.get_next(400)
    step, goal_step = info.ids // 2, items["observation"]["desired_goal"][:, 1].long()
    end = step - step % 3 + 2  # episodes of 3 steps: the sampled step's episode ends there
    assert ((goal_step >= step) & (goal_step <= end)).all()


@pytest.mark.parametrize("saver", ["torch", "numpy"])
def test_a_load_continues_the_savers_host_draws(saver, tmp_path):
    """The ids and goals of a relabelling torch buffer come from a NumPy generator: its checkpoint
    holds that generator (kind PCG64), so a load continues the saver's draws, from either backend."""
    make = {
        "torch": lambda seed: TorchUniformReplayBuffer(SPEC, 2, 12, seed=seed, episode_end_field="done", her=relabel()),
        "numpy": lambda seed: replaybuf.UniformReplayBuffer(
            SPEC, 2, 12, seed=seed, respect_episodes=True, episode_end_field="done", her=relabel()
        ),
    }
    source = make[saver](5)
    fill([source], 20, 3, 2)
    source.get_next(7)  # the generator has moved on from its seed
    source.save(tmp_path / "ckpt")
    loaded = make["torch"](99)
    loaded.load(tmp_path / "ckpt")
    for _ in range(3):
        (want, want_info), (got, got_info) = source.get_next(32), loaded.get_next(32)
        np.testing.assert_array_equal(np.asarray(got_info.ids), np.asarray(want_info.ids))
        np.testing.assert_array_equal(np.asarray(got_info.relabelled), np.asarray(want_info.relabelled))
        np.testing.assert_array_equal(
            np.asarray(got["observation"]["desired_goal"]), np.asarray(want["observation"]["desired_goal"])
        )
    again = make["torch"](99)
    again.load_state_dict(loaded.state_dict())  # the in-memory form holds the same generator
    np.testing.assert_array_equal(np.asarray(again.get_next(32)[1].ids), np.asarray(loaded.get_next(32)[1].ids))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"her": "yes"}, "her: expected a replaybuf.HindsightRelabel or None, got 'yes'"),
        ({"episode_end_field": "done"}, "episode_end_field: only used with respect_episodes=True"),
        ({"her": relabel(), "capture": True}, "her: expected None with capture=True"),
        ({"her": relabel(), "episode_end_field": "nope"}, "episode_end_field"),
    ],
)
def test_torch_buffers_refuse_relabelling_they_cannot_do(options, message):
    with pytest.raises(replaybuf.ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TorchUniformReplayBuffer(SPEC, 1, 4, **{"episode_end_field": None, **options})


def test_compute_reward_returning_the_wrong_count_is_an_error(device):
    buffer = TorchUniformReplayBuffer(
        SPEC,
        1,
        8,
        seed=0,
        device=device,
        episode_end_field="done",
        her=relabel(ratio=1.0, compute_reward=lambda a, d, i: a[:1, 0]),
    )
    fill([buffer], 8, 4, 1)
    with pytest.raises(replaybuf.ArgumentError, match="compute_reward: expected 16 rewards shaped"):
        buffer.get_next(16)


class TorchRelabelMachine(RelabelMachine):
    """The NumPy buffers' relabelling machine over ``TorchUniformReplayBuffer`` (uniform, excluded windows)."""

    @initialize(**GEOMETRY)
    def create(self, batch_size, max_length, seed, strategy):
        self.model = EpisodeModel(batch_size, max_length)
        self.strategy, self.padded = strategy, False

        def make(seed):
            return TorchUniformReplayBuffer(MACHINE_SPEC, batch_size, max_length, seed=seed, her=make_her(strategy))

        self.make = lambda: make(seed + 1)
        self.buffer = make(seed)

    @invariant()
    def finished_items_are_counted(self):  # once the episode index has caught up with a loaded state
        if hasattr(self, "model") and self.buffer._sampler._steps == self.buffer._ring.steps:
            assert self.buffer.relabel.ends.finished == self.model.finished()


def test_torch_relabelled_goals_match_the_model():
    run_machine(TorchRelabelMachine, 60)
