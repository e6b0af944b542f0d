"""SB3's algorithms train with replaybuf.sb3's buffers exactly as with SB3's own: the same
seed gives the same learned weights (DQN on CartPole, SAC on Pendulum, n-step DQN, DQN's
CnnPolicy on Atari frames kept as lz4-compressed frame stacks with timeouts handled), and
image samples equal SB3's byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("cv2")  # SB3's Atari wrappers resize frames with OpenCV

import ale_py  # noqa: E402
import gymnasium as gym  # noqa: E402
import torch as th  # noqa: E402
from stable_baselines3 import DQN, SAC  # noqa: E402
from stable_baselines3.common import buffers as sb3  # noqa: E402
from stable_baselines3.common.env_util import make_atari_env  # noqa: E402
from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage  # noqa: E402

import replaybuf.sb3 as ours  # noqa: E402
from replaybuf.buffers import FrameStackReplayBuffer  # noqa: E402

gym.register_envs(ale_py)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One thread: the runs are small, and two cores are shared."""
    threads = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(threads)


def _weights(model) -> th.Tensor:
    return th.cat([p.detach().flatten() for p in model.policy.parameters()])


def _atari(n_envs=1, transpose=False, episode=60):
    env_kwargs = {"max_episode_steps": episode}
    env = VecFrameStack(make_atari_env("ALE/Pong-v5", n_envs=n_envs, seed=0, env_kwargs=env_kwargs), 4)
    return VecTransposeImage(env) if transpose else env


def _trained(algo, env, seed=1, **kwargs) -> th.Tensor:
    model = algo(env=env, seed=seed, buffer_size=1000, batch_size=16, **kwargs)
    model.learn(300)
    assert model.replay_buffer.size() == 300 // model.n_envs
    return _weights(model), model.replay_buffer


def _mlp() -> dict:
    # a fresh dict each time: SB3 adds its own keys to policy_kwargs
    return {"policy": "MlpPolicy", "policy_kwargs": {"net_arch": [32]}, "learning_starts": 100}


@pytest.mark.parametrize(
    ("algo", "env", "sb3_kwargs", "our_kwargs"),
    [
        (DQN, "CartPole-v1", {}, {"replay_buffer_class": ours.ReplayBuffer}),
        (SAC, "Pendulum-v1", {}, {"replay_buffer_class": ours.ReplayBuffer}),
        (
            DQN,
            "CartPole-v1",
            {"n_steps": 3},
            {"replay_buffer_class": ours.NStepReplayBuffer, "replay_buffer_kwargs": {"n_steps": 3, "gamma": 0.99}},
        ),
    ],
    ids=["dqn-cartpole", "sac-pendulum", "nstep-dqn-cartpole"],
)
def test_training_matches_sb3s_buffer_for_the_same_seed(algo, env, sb3_kwargs, our_kwargs):
    theirs, _ = _trained(algo, env, **_mlp(), **sb3_kwargs)
    mine, buffer = _trained(algo, env, **_mlp(), **our_kwargs)
    assert type(buffer) is our_kwargs["replay_buffer_class"]
    assert th.equal(mine, theirs)


def test_dqn_cnn_trains_on_compressed_atari_frames_with_timeouts_as_with_sb3s_buffer():
    cnn = {"policy": "CnnPolicy", "learning_starts": 250, "train_freq": 4}
    theirs, _ = _trained(DQN, _atari(), **cnn)
    kwargs = {"handle_timeout_termination": True, "compression": "lz4"}
    mine, buffer = _trained(DQN, _atari(), replay_buffer_class=ours.ReplayBuffer, replay_buffer_kwargs=kwargs, **cnn)
    assert isinstance(buffer.native, FrameStackReplayBuffer) and buffer.handle_timeout_termination
    assert buffer.timeouts.any()  # 60-step episodes: truncations were stored as timeouts
    assert th.equal(mine, theirs)


@pytest.mark.parametrize(
    ("transpose", "compression"), [(False, None), (True, "lz4"), (False, "zstd")], ids=["raw", "lz4-chw", "zstd"]
)
def test_image_samples_equal_sb3s(transpose, compression):
    env = _atari(n_envs=2, transpose=transpose, episode=25)
    args = (40, env.observation_space, env.action_space, "cpu", 2)
    mine, theirs = ours.ReplayBuffer(*args, compression=compression), sb3.ReplayBuffer(*args)
    obs = env.reset()
    rng = np.random.default_rng(0)
    for _ in range(60):  # past the ring's end (20 steps per env) and two 25-step episodes
        action = rng.integers(0, env.action_space.n, 2)
        next_obs, reward, done, infos = env.step(action)
        stored = next_obs.copy()
        for i in np.flatnonzero(done):  # what SB3's algorithms store at an episode's end
            stored[i] = infos[i]["terminal_observation"]
        for buffer in (mine, theirs):
            buffer.add(obs, stored, action, reward, done, infos)
        obs = next_obs
    assert isinstance(mine.native, FrameStackReplayBuffer) and theirs.timeouts.any()
    np.random.seed(5)
    a = mine.sample(64)
    np.random.seed(5)
    b = theirs.sample(64)
    for x, y in zip(a[:5], b[:5], strict=True):
        assert th.equal(x, y)
