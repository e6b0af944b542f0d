"""The backend-neutral checkpoint header (issue 34): a state says what it holds, any buffer that
can hold it loads it, and what a buffer cannot hold is refused by name; folders written with
the class-name header (main before issue 34, tests/fixtures/class-header) still load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import replaybuf
from conformance_data import SPEC, assert_items_match_ids, step_batch
from replaybuf.errors import CheckpointError

FIXTURES = Path(__file__).parent / "fixtures" / "class-header"
FRAME_SPEC = {"observation": replaybuf.ArraySpec((3, 2, 2), np.uint8), "action": replaybuf.ArraySpec((), np.int64)}


def fill(rb, steps, batch_size=2):
    for t in range(steps):
        rb.add_batch(step_batch(t, batch_size))
    return rb


def uniform(**options):
    return replaybuf.UniformReplayBuffer(SPEC, 2, 4, seed=0, **options)


def prioritized(**options):
    return replaybuf.PrioritizedReplayBuffer(SPEC, 2, 4, seed=0, alpha=0.5, **options)


def test_the_header_says_what_the_state_holds_not_who_wrote_it():
    state = fill(prioritized(), 3).state_dict()
    assert "class" not in state
    assert state["checkpoint"] == {
        "version": 2,
        "saved_by": "PrioritizedReplayBuffer",
        "rng": "PCG64",
        "priorities": True,
        "episodes": False,
        "frames": False,
        "rate_limiter": False,
    }


def test_another_class_of_the_same_spec_and_geometry_loads_it(tmp_path):
    fill(replaybuf.PyUniformReplayBuffer(SPEC, 8, seed=1), 11, batch_size=1).save(tmp_path / "py")
    rb = replaybuf.UniformReplayBuffer(SPEC, 1, 8, seed=2)
    rb.load(tmp_path / "py")
    np.testing.assert_array_equal(rb.gather_all()["id"].ravel(), np.arange(3, 11))
    assert rb.num_frames() == 8


def test_a_uniform_state_into_a_prioritized_buffer_gets_a_new_items_priority():
    rb = prioritized()
    rb.load_state_dict(fill(uniform(), 7).state_dict())
    state = rb.state_dict()
    np.testing.assert_allclose(state["priorities"]["mass"], np.full(8, (1 + 1e-6) ** 0.5))
    assert state["priorities"]["max_priority"] == 1.0
    _, info = rb.get_next(4)
    np.testing.assert_allclose(info.probabilities, 1 / 8)


def test_another_generator_kind_leaves_the_receivers_own():
    torch = pytest.importorskip("torch")
    from replaybuf.torch import TorchUniformReplayBuffer

    state = fill(TorchUniformReplayBuffer(SPEC, 2, 4, seed=5), 3).state_dict()
    state["items"] = {k: v.numpy() for k, v in state["items"].items()}
    assert isinstance(state["rng"], torch.Tensor)
    rb, twin = uniform(), uniform()
    rb.load_state_dict(state)
    assert rb.state_dict()["rng"] == twin.state_dict()["rng"]
    assert_items_match_ids(rb.gather_all(), rb._ring.stream_ids())


def _refusals():
    frames = replaybuf.FrameStackReplayBuffer(FRAME_SPEC, 2, 4, seed=0)
    frames.add_batch({"observation": np.zeros((2, 3, 2, 2), np.uint8), "action": np.arange(2)})
    plain_frames = replaybuf.UniformReplayBuffer(FRAME_SPEC, 2, 4, seed=0)
    plain_frames.add_batch({"observation": np.zeros((2, 3, 2, 2), np.uint8), "action": np.arange(2)})
    limited = uniform(rate_limiter=replaybuf.MinSize(1))
    fill(limited, 1)
    episodes = replaybuf.UniformReplayBuffer(SPEC, 2, 4, respect_episodes=True, episode_end_field="flag")
    return [
        ("priorities", fill(prioritized(), 2).state_dict(), uniform, r"state\['priorities'\]: the checkpoint holds"),
        (
            "frames into plain",
            frames.state_dict(),
            lambda: replaybuf.UniformReplayBuffer(FRAME_SPEC, 2, 4),
            r"state\['frames'\]: the checkpoint holds frame stacks",
        ),
        (
            "plain into frames",
            plain_frames.state_dict(),
            lambda: replaybuf.FrameStackReplayBuffer(FRAME_SPEC, 2, 4),
            r"state\[.frames.\]: the checkpoint holds no frame stacks",
        ),
        ("limiter counters", limited.state_dict(), uniform, r"state\['rate_limiter'\]: the checkpoint holds"),
        (
            "no limiter counters",
            fill(uniform(), 1).state_dict(),
            lambda: uniform(rate_limiter=replaybuf.MinSize(1)),
            r"state\[.rate_limiter.\]: the checkpoint holds no",
        ),
        (
            "no episode index",
            fill(uniform(), 2).state_dict(),
            lambda: episodes,
            r"state\[.episodes.\]: the checkpoint holds no episode index",
        ),
        ("streams", fill(replaybuf.UniformReplayBuffer(SPEC, 1, 8), 2, 1).state_dict(), uniform, r"'batch_size'.*1"),
    ]


@pytest.mark.parametrize("case", range(len(_refusals())))
def test_what_a_buffer_cannot_hold_is_refused_by_name_and_nothing_changes(case):
    name, state, make, match = _refusals()[case]
    rb = make()
    before = rb.state_dict()
    with pytest.raises(CheckpointError, match=match):
        rb.load_state_dict(state)
    after = rb.state_dict()
    assert after["steps"] == before["steps"] and after["rng"] == before["rng"], name


def test_an_episode_index_is_not_needed_by_a_buffer_without_one():
    """The index is derived from the items' episode markers, which travel with the items."""
    source = replaybuf.UniformReplayBuffer(SPEC, 2, 4, respect_episodes=True, episode_end_field="flag")
    fill(source, 5)
    rb = uniform()
    rb.load_state_dict(source.state_dict())
    np.testing.assert_array_equal(rb.gather_all()["id"], source.gather_all()["id"])


# -- folders written with the class-name header (tests/fixtures/make_checkpoints_class.py) -------
def _class_header_buffer(name):
    if name == "numpy-uniform":
        return uniform()
    if name in ("numpy-prioritized", "shared-prioritized"):
        return prioritized()
    if name == "jax-uniform":
        pytest.importorskip("jax")
        from replaybuf.jax import JaxReplayBuffer

        return JaxReplayBuffer(SPEC, 2, 4, seed=0)
    if name == "jax-prioritized":
        pytest.importorskip("jax")
        from replaybuf.jax import JaxReplayBuffer

        return JaxReplayBuffer(SPEC, 2, 4, seed=0, sampler="prioritized", alpha=0.5)
    if name == "torch-uniform":
        pytest.importorskip("torch")
        from replaybuf.torch import TorchUniformReplayBuffer

        return TorchUniformReplayBuffer(SPEC, 2, 4, seed=0)


@pytest.mark.parametrize(
    "name", ["numpy-uniform", "numpy-prioritized", "jax-uniform", "jax-prioritized", "torch-uniform"]
)
@pytest.mark.parametrize("into", ["own", "numpy"])
def test_class_header_folders_load(name, into, tmp_path):
    expected = json.loads((FIXTURES / "expected.json").read_text())[name]
    shutil.copytree(FIXTURES / name, tmp_path / name)
    if into == "own":
        rb = _class_header_buffer(name)
    else:
        rb = prioritized() if "prioritized" in name else uniform()
    rb.load(tmp_path / name)
    state = rb.state_dict()
    assert state["steps"] == expected["steps"]
    for key, values in expected["items"].items():
        np.testing.assert_array_equal(np.asarray(state["items"][key]), values, err_msg=key)
    if "mass" in expected:
        np.testing.assert_allclose(state["priorities"]["mass"], expected["mass"], rtol=1e-6)
        assert state["priorities"]["max_priority"] == pytest.approx(expected["max_priority"])


def test_a_class_header_mindspore_folder_loads_into_a_numpy_buffer(tmp_path):
    pytest.importorskip("torch")
    from replaybuf.mindspore_rl import ReplayBuffer

    expected = json.loads((FIXTURES / "expected.json").read_text())["mindspore"]
    spec = (replaybuf.ArraySpec((3,), np.float32), replaybuf.ArraySpec((), np.int64))
    rb = replaybuf.PyUniformReplayBuffer(spec, 5)
    rb.load(FIXTURES / "mindspore")
    np.testing.assert_array_equal(rb.gather_all()[1].ravel(), expected["items"]["1"])
    again = ReplayBuffer(2, 5, [(3,), ()], [np.float32, np.int64])
    again.load(FIXTURES / "mindspore")
    assert (again.head, again.count) == (2, 5)
