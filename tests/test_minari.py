"""replaybuf.minari: Minari datasets (made here with Minari's DataCollector) into every backend and back out."""

from __future__ import annotations

import gc
import shutil
import sys
import warnings

import numpy as np
import optree
import pytest

import replaybuf

minari = pytest.importorskip("minari")
gym = pytest.importorskip("gymnasium")
from replaybuf.minari import export, load  # noqa: E402

# Minari's advice to fill in metadata; and DataCollector.close() removes its temporary folder
# with rmtree, so the TemporaryDirectory object warns when it is collected.
IMPLICIT_CLEANUP = "ignore:Implicitly cleaning up:ResourceWarning"
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:minari.*"), pytest.mark.filterwarnings(IMPLICIT_CLEANUP)]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The module's datasets, recorded once (Minari's DataCollector is slow) in their own root."""
    base = tmp_path_factory.mktemp("minari-recorded")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(base))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", ResourceWarning)
            cartpole()
            cartpole("test/cartpole-short-v0", episodes=2)
            dict_cartpole()
            image_cartpole()
            record(gym.make("Blackjack-v1"), "test/blackjack-v0", 12)
            record(gym.make("Pendulum-v1", max_episode_steps=15), "test/pendulum-v0", 4)
            gc.collect()
    return base


@pytest.fixture(autouse=True)
def minari_root(recorded, tmp_path, monkeypatch):
    """A copy of the recorded datasets in a temporary Minari root per test, never the user's home."""
    root = tmp_path / "minari"
    shutil.copytree(recorded, root)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def record(env, dataset_id, episodes, seed=0):
    """A Minari dataset of ``episodes`` random-policy episodes of ``env``, made by Minari's DataCollector."""
    collector = minari.DataCollector(env)
    collector.action_space.seed(seed)
    for index in range(episodes):
        collector.reset(seed=seed + index)
        done = False
        while not done:
            _, _, terminated, truncated, _ = collector.step(collector.action_space.sample())
            done = terminated or truncated
    dataset = collector.create_dataset(dataset_id, description="replaybuf test data", algorithm_name="random")
    collector.close()
    return dataset


def cartpole(dataset_id="test/cartpole-v0", episodes=9):
    # a 25-step limit: some episodes terminate (the pole falls), the rest are truncated
    return record(gym.make("CartPole-v1", max_episode_steps=25), dataset_id, episodes)


def dict_cartpole(dataset_id="test/dict-cartpole-v0"):
    env = gym.make("CartPole-v1", max_episode_steps=20)
    space = gym.spaces.Dict(
        {
            "position": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
            "angle": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        }
    )
    env = gym.wrappers.TransformObservation(env, lambda o: {"position": o[:2], "angle": o[2:]}, space)
    return record(env, dataset_id, 6)


def image_cartpole(dataset_id="test/image-cartpole-v0"):
    """4 stacked 16x16 uint8 frames drawn from CartPole's state (a stand-in camera)."""
    env = gym.make("CartPole-v1", max_episode_steps=20)
    space = gym.spaces.Box(0, 255, (16, 16), np.uint8)

    def frame(state):
        image = np.zeros((16, 16), np.uint8)
        image[:, int(np.clip(state[0] * 3 + 8, 0, 15))] = 255
        image[int(np.clip(state[2] * 30 + 8, 0, 15)), :] = 128
        return image

    env = gym.wrappers.FrameStackObservation(gym.wrappers.TransformObservation(env, frame, space), 4)
    return record(env, dataset_id, 5)


def model_streams(dataset, batch_size):
    """What load must store: each episode's n + 1 Trajectory items, dealt in order to the stream
    holding the fewest items (lowest index on ties), shorter streams padded with their last item."""
    streams = [[] for _ in range(batch_size)]
    for episode in dataset.iterate_episodes():
        n = len(episode.rewards)
        stream = min(range(batch_size), key=lambda s: (len(streams[s]), s))
        for t in range(n + 1):
            last = t == n
            streams[stream].append(
                {
                    "step_type": 0 if t == 0 else (2 if last else 1),
                    "observation": optree.tree_map(lambda o: o[t], episode.observations),  # noqa: B023
                    "action": None if last else optree.tree_map(lambda a: a[t], episode.actions),  # noqa: B023
                    "next_step_type": 0 if last else (2 if t == n - 1 else 1),
                    "reward": 0.0 if last else episode.rewards[t],
                    "discount": 0.0 if not last and episode.terminations[t] else 1.0,
                }
            )
    longest = max(len(s) for s in streams)
    return [s + [s[-1]] * (longest - len(s)) for s in streams]


def to_numpy(nest):
    return optree.tree_map(lambda x: x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x), nest)


def assert_holds(buffer, dataset):
    """``buffer.gather_all()`` equals the model of ``load`` item by item."""
    items = to_numpy(buffer.gather_all())
    if np.ndim(items.step_type) == 1:
        items = optree.tree_map(lambda x: x[None], items)
    streams = model_streams(dataset, items.step_type.shape[0])
    assert items.step_type.shape == (len(streams), len(streams[0]))
    for s, stream in enumerate(streams):
        for t, want in enumerate(stream):
            assert items.step_type[s, t] == want["step_type"], (s, t)
            assert items.next_step_type[s, t] == want["next_step_type"], (s, t)
            assert items.reward[s, t] == np.float32(want["reward"]), (s, t)
            assert items.discount[s, t] == want["discount"], (s, t)
            optree.tree_map(
                lambda got, exp: np.testing.assert_array_equal(got[s, t], exp),  # noqa: B023
                items.observation,
                want["observation"],
            )
            if want["action"] is not None:
                optree.tree_map(
                    lambda got, exp: np.testing.assert_array_equal(got[s, t], exp),  # noqa: B023
                    items.action,
                    want["action"],
                )


def _shared(spec, batch_size, max_length):
    return replaybuf.SharedReplayBuffer(spec, writers=1, batch_size=batch_size, max_length=max_length)


def _torch(spec, batch_size, max_length):
    pytest.importorskip("torch")
    import replaybuf.torch as torch_backend

    return torch_backend.TorchUniformReplayBuffer(spec, batch_size, max_length, device="cpu")


def _jax(spec, batch_size, max_length):
    pytest.importorskip("jax")
    import replaybuf.jax as jax_backend

    return jax_backend.JaxReplayBuffer(spec, batch_size, max_length)


BACKENDS = {
    "numpy": lambda spec, b, n: replaybuf.UniformReplayBuffer(spec, b, n),
    "numpy-episodes": lambda spec, b, n: replaybuf.UniformReplayBuffer(spec, b, n, respect_episodes=True),
    "prioritized": lambda spec, b, n: replaybuf.PrioritizedReplayBuffer(spec, b, n),
    "torch": _torch,
    "jax": _jax,
    "shared": _shared,
}


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_load_fills_each_backend_with_the_episodes_minari_returns(backend, batch_size):
    dataset = minari.load_dataset("test/cartpole-v0")
    spec = replaybuf.collect_data_spec(dataset)
    buffer = BACKENDS[backend](spec, batch_size, 200)
    try:
        assert load("test/cartpole-v0", buffer, chunk_steps=7) is buffer
        assert_holds(buffer, dataset)
    finally:
        if backend == "shared":
            buffer.close()


def test_load_builds_one_fifo_stream_by_default():
    dataset = minari.load_dataset("test/cartpole-v0")
    buffer = load(dataset, seed=0)
    assert isinstance(buffer, replaybuf.PyUniformReplayBuffer)
    assert buffer.capacity == buffer.num_frames() == dataset.total_steps + dataset.total_episodes
    assert_holds(buffer, dataset)


def test_load_builds_a_buffer_holding_the_whole_dataset():
    dataset = minari.load_dataset("test/cartpole-v0")
    buffer = load(dataset, batch_size=2)
    assert isinstance(buffer, replaybuf.UniformReplayBuffer)
    assert buffer.data_spec == replaybuf.collect_data_spec(dataset)
    streams = model_streams(dataset, 2)
    assert buffer.max_length == len(streams[0])
    assert buffer.num_frames() == 2 * len(streams[0])
    assert_holds(buffer, dataset)
    terminated = (buffer.gather_all().next_step_type == 2) & (buffer.gather_all().discount == 0)
    assert terminated.sum() == sum(bool(e.terminations[-1]) for e in dataset.iterate_episodes())


def test_load_by_folder_and_a_single_stream_buffer(minari_root):
    dataset = minari.load_dataset("test/cartpole-v0")
    buffer = replaybuf.PyUniformReplayBuffer(replaybuf.collect_data_spec(dataset), capacity=500)
    load(minari_root / "test" / "cartpole-v0", buffer)
    assert_holds(buffer, dataset)


def test_load_keeps_dict_and_tuple_observations_as_nested_specs():
    dataset = minari.load_dataset("test/dict-cartpole-v0")
    buffer = load(dataset, batch_size=2)
    assert set(buffer.data_spec.observation) == {"position", "angle"}
    assert_holds(buffer, dataset)
    blackjack = minari.load_dataset("test/blackjack-v0")
    buffer = load(blackjack)
    assert isinstance(buffer.data_spec.observation, tuple) and len(buffer.data_spec.observation) == 3
    assert_holds(buffer, blackjack)


def test_load_box_actions():
    dataset = minari.load_dataset("test/pendulum-v0")
    buffer = load(dataset, batch_size=2)
    assert buffer.data_spec.action.shape == (1,)
    assert_holds(buffer, dataset)


@pytest.mark.parametrize("storage", [{}, {"storage": "memmap"}, {"storage": "memmap", "compression": "lz4"}])
def test_load_image_observations_into_a_frame_stack_buffer(tmp_path, storage):
    """Into a frame-stack buffer in RAM or on disk (raw or compressed frames: the folder
    reopens holding the dataset)."""
    dataset = minari.load_dataset("test/image-cartpole-v0")
    spec = replaybuf.collect_data_spec(dataset)
    if storage:
        storage = {**storage, "path": tmp_path / "frames"}
    frames = replaybuf.FrameStackReplayBuffer(spec, batch_size=2, max_length=100, **storage)
    load(dataset, frames)
    assert_holds(frames, dataset)
    plain = load(dataset, batch_size=2, max_length=100)
    optree.tree_map(np.testing.assert_array_equal, frames.gather_all(), plain.gather_all())
    if storage:
        del frames
        reopened = replaybuf.FrameStackReplayBuffer(spec, batch_size=2, max_length=100, **storage)
        optree.tree_map(np.testing.assert_array_equal, reopened.gather_all(), plain.gather_all())


def test_export_writes_what_the_drivers_collected():
    """The env is wrapped by Minari's DataCollector and driven by replaybuf's EpisodeDriver:
    the buffer's export must equal the dataset Minari recorded of the same episodes."""
    collector = minari.DataCollector(gym.make("CartPole-v1", max_episode_steps=30))
    buffer = replaybuf.UniformReplayBuffer(replaybuf.collect_data_spec(collector), 1, 1000)
    rng = np.random.default_rng(0)
    driver = replaybuf.EpisodeDriver(
        collector, lambda o: rng.integers(0, 2, len(o)), observers=[buffer.add_batch], num_episodes=6, seed=0
    )
    driver.run()
    recorded = collector.create_dataset("test/recorded-v0", description="driver", algorithm_name="random")
    collector.close()
    del collector, driver
    gc.collect()  # here, where its TemporaryDirectory's warning is ignored, not in another module's test
    export(buffer, "test/exported-v0", description="export")
    back = minari.load_dataset("test/exported-v0")
    # the driver stops after the 6th episode's last step: its boundary item (the final observation)
    # is never stored, so the 6th is not a complete episode in the buffer
    assert (recorded.total_episodes, back.total_episodes) == (6, 5)
    for want, got in zip(list(recorded.iterate_episodes())[:5], back.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(got.observations, want.observations)
        np.testing.assert_array_equal(got.actions, want.actions)
        np.testing.assert_array_equal(got.rewards, want.rewards)
        np.testing.assert_array_equal(got.terminations, want.terminations)
        np.testing.assert_array_equal(got.truncations, want.truncations)
    assert back.observation_space.shape == (4,) and back.action_space == gym.spaces.Discrete(2)


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax", "shared"])
def test_round_trip_load_export_load(backend):
    dataset = minari.load_dataset("test/dict-cartpole-v0")
    buffer = BACKENDS[backend](replaybuf.collect_data_spec(dataset), 2, 100)
    try:
        load(dataset, buffer)
        back = export(buffer, "test/back-v0")
        for want, got in zip(dataset.iterate_episodes(), back.iterate_episodes(), strict=True):
            optree.tree_map(np.testing.assert_array_equal, got.observations, want.observations)
            np.testing.assert_array_equal(got.actions, want.actions)
            np.testing.assert_array_equal(got.rewards.astype(np.float32), want.rewards.astype(np.float32))
            np.testing.assert_array_equal(got.terminations, want.terminations)
            np.testing.assert_array_equal(got.truncations, want.truncations)
        again = load(back, batch_size=2)
        optree.tree_map(np.testing.assert_array_equal, to_numpy(buffer.gather_all()), again.gather_all())
    finally:
        if backend == "shared":
            buffer.close()


def test_export_leaves_out_episodes_the_ring_cut():
    dataset = minari.load_dataset("test/cartpole-v0")
    lengths = [len(e.rewards) + 1 for e in dataset.iterate_episodes()]
    keep = sum(lengths[-3:]) + 2  # the last 3 episodes whole, the end of the 6th
    buffer = load(dataset, max_length=keep)
    back = export(buffer, "test/cut-v0")
    assert back.total_episodes == 3
    for want, got in zip(list(dataset.iterate_episodes())[-3:], back.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(got.observations, want.observations)


def test_progress_bar(capsys):
    load("test/cartpole-v0", progress=True)
    assert "loading test/cartpole-v0" in capsys.readouterr().err


# -- bad input: a replaybuf error that names what is wrong, and nothing written ---------------


def filled_buffer(dataset):
    buffer = replaybuf.UniformReplayBuffer(replaybuf.collect_data_spec(dataset), 1, 300)
    load(dataset, buffer)
    return buffer, to_numpy(buffer.gather_all())


def test_missing_dataset():
    with pytest.raises(replaybuf.DatasetError, match="no Minari dataset 'test/none-v0' under"):
        load("test/none-v0")


def test_folder_without_a_dataset(tmp_path):
    with pytest.raises(replaybuf.DatasetError, match="holds no Minari dataset"):
        load(tmp_path)


def test_spaces_that_do_not_match_the_buffer():
    dataset = minari.load_dataset("test/cartpole-v0")
    spec = replaybuf.collect_data_spec(dataset)._replace(observation=replaybuf.ArraySpec((3,), np.float32))
    buffer = replaybuf.UniformReplayBuffer(spec, 1, 100)
    with pytest.raises(replaybuf.SpecMismatchError, match=r"observation: the buffer expects \(3,\) float32, the dat"):
        load(dataset, buffer)
    wrong = replaybuf.UniformReplayBuffer({"observation": replaybuf.ArraySpec((4,), np.float32)}, 1, 100)
    with pytest.raises(replaybuf.SpecMismatchError, match="expected the dataset's item fields"):
        load(dataset, wrong)
    assert buffer.num_frames() == 0 and wrong.num_frames() == 0


def _drop_rewards(episode):
    del episode["rewards"]


def _lengthen_in_metadata(episode):
    episode.attrs["total_steps"] = episode.attrs["total_steps"] + 1


CORRUPTIONS = {
    "missing field": (_drop_rewards, "dataset test/cartpole-v0: an episode cannot be read"),
    "length": (_lengthen_in_metadata, r"dataset test/cartpole-v0, episode 5: its metadata says \d+ steps, its data"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize("prefilled", [False, True])
def test_corrupt_episode_writes_nothing(minari_root, prefilled, corruption):
    h5py = pytest.importorskip("h5py")
    dataset = minari.load_dataset("test/cartpole-v0")
    buffer, before = filled_buffer(dataset) if prefilled else (load(dataset, max_length=400), None)
    if not prefilled:
        buffer.clear()
    corrupt, message = CORRUPTIONS[corruption]
    with h5py.File(minari_root / "test" / "cartpole-v0" / "data" / "main_data.hdf5", "a") as file:
        corrupt(file["episode_5"])
    with pytest.raises(replaybuf.DatasetError, match=message):
        load("test/cartpole-v0", buffer)
    if prefilled:
        optree.tree_map(np.testing.assert_array_equal, buffer.gather_all(), before)
    else:
        assert buffer.num_frames() == 0


def test_corrupt_file():
    dataset = minari.load_dataset("test/cartpole-v0")
    path = dataset.storage.data_path / "main_data.hdf5"
    path.write_bytes(b"not an hdf5 file" * 100)
    with pytest.raises(replaybuf.DatasetError, match="test/cartpole-v0.*cannot be read"):
        load("test/cartpole-v0")


def test_episode_of_the_wrong_shape(minari_root):
    h5py = pytest.importorskip("h5py")
    with h5py.File(minari_root / "test" / "cartpole-v0" / "data" / "main_data.hdf5", "a") as file:
        observations = file["episode_2"]["observations"][()]
        del file["episode_2"]["observations"]
        file["episode_2"]["observations"] = observations[:, :3]
    with pytest.raises(replaybuf.DatasetError, match=r"episode 2, observation: expected shape \(\d+, 4\) float32, got"):
        load("test/cartpole-v0")


def test_bad_arguments():
    dataset = minari.load_dataset("test/cartpole-short-v0")
    with pytest.raises(replaybuf.ArgumentError, match="batch_size: expected at most the dataset's 2 non-empty"):
        load(dataset, batch_size=3)
    buffer = replaybuf.UniformReplayBuffer(replaybuf.collect_data_spec(dataset), 2, 100)
    with pytest.raises(replaybuf.ArgumentError, match="max_length: only for the buffer load builds"):
        load(dataset, buffer, max_length=10)
    with pytest.raises(replaybuf.ArgumentError, match="batch_size: expected the buffer's 2 or None, got 1"):
        load(dataset, buffer, batch_size=1)
    with pytest.raises(replaybuf.ArgumentError, match="chunk_steps: expected a positive int"):
        load(dataset, buffer, chunk_steps=0)
    with pytest.raises(replaybuf.ArgumentError, match="dataset: expected a Minari dataset id"):
        load(3)
    assert buffer.num_frames() == 0


def test_export_errors():
    dataset = minari.load_dataset("test/cartpole-v0")
    buffer = load(dataset)
    with pytest.raises(replaybuf.ArgumentError, match="dataset_id: a Minari dataset 'test/cartpole-v0' already"):
        export(buffer, "test/cartpole-v0")
    with pytest.raises(replaybuf.ArgumentError, match="dataset_id: expected"):
        export(buffer, "bad/id/-v-x/")
    plain = replaybuf.UniformReplayBuffer({"observation": replaybuf.ArraySpec((4,), np.float32)}, 1, 10)
    with pytest.raises(replaybuf.SpecMismatchError, match="export needs Trajectory items"):
        export(plain, "test/plain-v0")
    buffer.clear()
    with pytest.raises(replaybuf.EmptyBufferError, match="holds no complete episode"):
        export(buffer, "test/empty-v0")
    assert "test/empty-v0" not in minari.list_local_datasets()


def test_without_minari_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "minari", None)  # what an environment without Minari imports
    with pytest.raises(ImportError, match=r"replaybuf.minari needs Minari: pip install 'replaybuf\[minari\]'"):
        load("test/cartpole-v0")
    buffer = replaybuf.UniformReplayBuffer(replaybuf.collect_data_spec(gym.make("CartPole-v1")), 1, 10)
    with pytest.raises(ImportError, match=r"pip install 'replaybuf\[minari\]'"):
        export(buffer, "test/none-v0")
