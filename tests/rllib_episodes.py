"""Episodes for the side-by-side tests of replaybuf.rllib against RLlib's own buffers: random
episodes cut into chunks that arrive interleaved (as several env runners' would), and
scripted draws that make RLlib's buffers pick the steps ours picked."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

BOX = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
DICT = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "mode": gym.spaces.Discrete(4)})
TUPLE = gym.spaces.Tuple((gym.spaces.Discrete(5), gym.spaces.Box(0.0, 1.0, (2, 2), np.float32)))
ACTIONS = gym.spaces.Discrete(3)


def episode_data(rng: np.random.Generator, length: int, space: gym.Space, serial: int) -> dict:
    """One whole episode's lists: observations (length + 1), actions, rewards, infos (some of
    any structure), extra model outputs."""
    space.seed(int(rng.integers(2**31)))
    return {
        "observations": [space.sample() for _ in range(length + 1)],
        "actions": [int(rng.integers(3)) for _ in range(length)],
        "rewards": [float(np.round(rng.normal(), 3)) for _ in range(length)],
        "infos": [{"serial": serial, "t": t, "deep": {"k": [t, "x"]}} if t % 3 == 0 else {} for t in range(length + 1)],
        "extras": {"q": [rng.normal(size=2).astype(np.float32) for _ in range(length)]},
        "terminated": bool(rng.random() < 0.7),
    }


def chunk(data: dict, id_: str, start: int, stop: int, space: gym.Space, last: bool) -> SingleAgentEpisode:
    """Steps ``[start, stop)`` of an episode as the chunk an env runner would return."""
    return SingleAgentEpisode(
        id_=id_,
        observations=data["observations"][start : stop + 1],
        actions=data["actions"][start:stop],
        rewards=data["rewards"][start:stop],
        infos=data["infos"][start : stop + 1],
        extra_model_outputs={k: v[start:stop] for k, v in data["extras"].items()},
        terminated=last and data["terminated"],
        truncated=last and not data["terminated"],
        observation_space=space,
        action_space=ACTIONS,
        t_started=start,
        len_lookback_buffer=0,
    )


def stream(seed: int, episodes: int, space: gym.Space = BOX, longest: int = 12, lanes: int = 3) -> list:
    """Chunks of ``episodes`` random episodes (1..longest steps), ``lanes`` running at once, in arrival order."""
    rng = np.random.default_rng(seed)
    running: list[list] = []  # [id, data, next start]
    out, started = [], 0
    while started < episodes or running:
        while len(running) < lanes and started < episodes:
            data = episode_data(rng, int(rng.integers(1, longest + 1)), space, started)
            running.append([f"ep{seed}-{started}", data, 0])
            started += 1
        lane = running[int(rng.integers(len(running)))]
        id_, data, start = lane
        length = len(data["actions"])
        stop = min(length, start + int(rng.integers(1, 6)))
        out.append(chunk(data, id_, start, stop, space, stop == length))
        lane[2] = stop
        if stop == length:
            running.remove(lane)
    return out


class Scripted:
    """An rng whose ``integers`` and ``random`` return scripted values in order (RLlib's buffers
    draw through ``self.rng``: this makes them pick given steps and n-steps)."""

    def __init__(self, integers=(), randoms=()):
        self.ints, self.floats = list(integers), list(randoms)

    def integers(self, *args, **kwargs):
        return self.ints.pop(0)

    def random(self, *args, **kwargs):
        return self.floats.pop(0)


def rllib_index(buffer, id_: str, t: int) -> int:
    """Where step ``t`` of episode ``id_`` sits in an RLlib buffer's ``_indices``."""
    eps_idx = buffer.episode_id_to_index[id_]
    return next(i for i, entry in enumerate(buffer._indices) if entry[0] == eps_idx and entry[1] == t)


def same_structure_equal(a, b) -> bool:
    """Nests of arrays and numbers equal leaf by leaf (dicts by key)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_structure_equal(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and not isinstance(a, np.ndarray):
        return len(a) == len(b) and all(same_structure_equal(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(np.asarray(a), np.asarray(b))
