"""Extreme values and foreign inputs (issue 18, classes 6-8): finite but extreme priorities
on both tree kernels, other frameworks' errors instead of ours (bfloat16 tensors, huge
sizes, MindSpore configs, booleans as numbers), and messages that name the field (namedtuple
specs such as Trajectory, through StepDriver too).

Each refused call raises a replaybuf error (and ValueError), names the argument or field,
and leaves the buffer equal to an untouched twin (tests/hostile_buffers.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import replaybuf
from compiled_kernels import compiled_tree_kernels
from conformance_data import SPEC, step_batch
from hostile_buffers import FRAME_SPEC, KINDS, MINDSPORE_SHAPES, MINDSPORE_TYPES, assert_twins, twins
from replaybuf import ArgumentError, PrioritizedReplayBuffer, ReplayBufferError, SpecMismatchError
from replaybuf.samplers.sumtree import MAX_MASS, MIN_MASS, MIN_WEIGHT


def _refused(error, match, call):
    with pytest.raises(error, match=match) as caught:
        call()
    assert isinstance(caught.value, ReplayBufferError) and isinstance(caught.value, ValueError)
    return caught.value


def _needs(kind):
    if KINDS[kind].torch:
        pytest.importorskip("torch")


# -- class 6: extreme but finite priorities -------------------------------------------------------
EXTREMES = {
    # name: (alpha, epsilon, priorities of ids 0..7)
    "1e-300 at alpha 2 (mass 0)": (2.0, 0.0, [1e-300] + [1.0] * 7),
    "all 1e-300 at alpha 2": (2.0, 0.0, [1e-300] * 8),
    "the smallest float": (1.0, 0.0, [5e-324] + [1.0] * 7),
    "1e200 at alpha 2 (mass inf)": (2.0, 1e-6, [1e200] + [1.0] * 7),
    "two of 1.7e308 at alpha 1 (total inf)": (1.0, 0.0, [1.7e308, 1.7e308] + [1.0] * 6),
    "priority + epsilon overflows": (1.0, 1e308, [1e308] * 8),
    "1e-300 and 1e300 at alpha 1": (1.0, 0.0, [1e-300, 1e300] + [1.0] * 6),
}


def _extreme_buffer(alpha, epsilon, priorities, compiled, **kwargs):
    buffer = PrioritizedReplayBuffer(
        SPEC, 2, 5, alpha=alpha, beta=0.4, epsilon=epsilon, seed=3, compiled=compiled, **kwargs
    )
    for t in range(4):
        buffer.add_batch(step_batch(t, 2))
    buffer.update_priorities(np.arange(8), np.array(priorities))
    return buffer


def _check_sample(info):
    weights, probabilities = np.asarray(info.weights), np.asarray(info.probabilities)
    assert np.all((weights > 0) & (weights <= 1)), weights  # the documented range (0, 1]
    assert np.all(np.isfinite(probabilities) & (probabilities >= 0) & (probabilities <= 1)), probabilities


@pytest.mark.parametrize("name", sorted(EXTREMES))
def test_extreme_priorities_keep_masses_in_range_and_both_kernels_agree(name):
    alpha, epsilon, priorities = EXTREMES[name]
    compiled = [False] + ([None] if compiled_tree_kernels() is not None else [])
    draws = []
    for kernel in compiled:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow or divide-by-zero warning either
            buffer = _extreme_buffer(alpha, epsilon, priorities, kernel)
            sampler = buffer._sampler
            stored = sampler.sums.levels[0][:8]
            assert MIN_MASS <= stored.min() and stored.max() <= MAX_MASS
            assert np.isfinite(sampler.sums.root()) and sampler.mins.root() >= MIN_MASS
            trace = []
            for size, steps in [(64, None), (16, 2), (None, None)]:
                items, info = buffer.get_next(size, steps)
                _check_sample(info)
                trace.append(info)
            buffer.add_batch(step_batch(4, 2))  # a new item gets the largest priority's mass, clamped too
            _, info = buffer.get_next(64)
            _check_sample(info)
            trace.append(info)
            copy = PrioritizedReplayBuffer(SPEC, 2, 5, alpha=alpha, beta=0.4, epsilon=epsilon, compiled=kernel)
            copy.load_state_dict(buffer.state_dict())  # the masses it saves are ones it accepts
            draws.append(trace)
    for numpy_info, compiled_info in zip(*draws, strict=False) if len(draws) == 2 else []:
        np.testing.assert_array_equal(numpy_info.ids, compiled_info.ids)
        np.testing.assert_allclose(numpy_info.probabilities, compiled_info.probabilities, rtol=1e-6)
        np.testing.assert_allclose(numpy_info.weights, compiled_info.weights, rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, None])
def test_extreme_priorities_in_episode_window_trees(compiled):
    buffer = _extreme_buffer(
        2.0,
        0.0,
        [1e-300, 1e200, 1.0, 1.0, 1e-300, 1.0, 1.0, 1.0],
        compiled,
        respect_episodes=True,
        episode_end_field="flag",
    )
    for _ in range(3):
        _, info = buffer.get_next(16, 2)
        _check_sample(info)
    buffer.update_priorities(info.ids, np.full(16, 1e300))
    _, info = buffer.get_next(16, 2)
    _check_sample(info)


def test_the_weight_too_small_for_float32_reads_as_its_smallest_normal():
    buffer = _extreme_buffer(1.0, 0.0, [1e-300, 1e300] + [1.0] * 6, False)
    buffer.beta = 1.0
    _, info = buffer.get_next(8)
    np.testing.assert_array_equal(info.ids, 1)  # the 1e300 item holds all the mass
    np.testing.assert_array_equal(info.weights, np.float32(MIN_WEIGHT))


# -- class 7: other libraries' errors --------------------------------------------------------------
def _bfloat16_batch(batch_size, field="position"):
    torch = pytest.importorskip("torch")
    try:  # NumPy knows a "bfloat16" once ml_dtypes is imported (TensorFlow, JAX): refused all the same
        import ml_dtypes  # noqa: F401
    except ImportError:
        pass
    items = step_batch(0, batch_size)
    items["observation"][field] = torch.zeros(items["observation"][field].shape, dtype=torch.bfloat16)
    return items


BF16_MESSAGE = r"observation/position: expected dtype float32, got torch\.bfloat16"
BF16_KINDS = ["uniform", "columns", "py-uniform", "prioritized", "episodes", "memmap", "limited", "torch", "torch-py"]


@pytest.mark.parametrize("kind", BF16_KINDS)
def test_a_bfloat16_tensor_is_refused_naming_the_field(kind, tmp_path):
    _needs(kind)
    buffer, twin = twins(kind, tmp_path)
    items = _bfloat16_batch(getattr(buffer, "batch_size", 1))
    _refused(SpecMismatchError, BF16_MESSAGE, lambda: buffer.add_batch(items))
    assert_twins(buffer, twin)


def test_a_bfloat16_tensor_is_refused_by_frame_stacks_and_mindspore(tmp_path):
    torch = pytest.importorskip("torch")
    _bfloat16_batch(2)  # imports ml_dtypes where it is installed
    buffer, twin = twins("frames", tmp_path)
    items = {
        "observation": np.zeros((2, 2, 3, 2), np.uint8),
        "action": torch.zeros(2, dtype=torch.bfloat16),
        "step_type": np.zeros(2, np.int32),
    }
    _refused(SpecMismatchError, r"action: expected dtype int64, got torch\.bfloat16", lambda: buffer.add_batch(items))
    assert_twins(buffer, twin)
    buffer, twin = twins("mindspore", tmp_path)
    row = [torch.zeros(3, dtype=torch.bfloat16), np.array([1]), np.array(True)]
    _refused(SpecMismatchError, r"tensor 0: expected dtype float32, got torch\.bfloat16", lambda: buffer.insert(row))
    assert_twins(buffer, twin)


def _tf_twins():
    pytest.importorskip("tensorflow")
    from replaybuf.tf import TFUniformReplayBuffer

    out = []
    for _ in range(2):
        buffer = TFUniformReplayBuffer(SPEC, 2, 5, seed=5)
        for t in range(4):
            buffer.add_batch(step_batch(t, 2))
        out.append(buffer)
    return out


def _assert_tf_twins(buffer, twin):
    from hostile_buffers import assert_equal_trees, plain

    def tf_plain(value):
        import optree

        return optree.tree_map(lambda x: x.numpy() if hasattr(x, "numpy") else x, value)

    assert buffer.num_frames() == twin.num_frames()
    assert_equal_trees(tf_plain(buffer.gather_all()), tf_plain(twin.gather_all()))
    for _ in range(2):
        assert_equal_trees(plain(tf_plain(buffer.get_next(3))), plain(tf_plain(twin.get_next(3))))


def test_tensorflow_refuses_a_bfloat16_torch_tensor_eagerly_and_in_a_graph():
    tf = pytest.importorskip("tensorflow")
    buffer, twin = _tf_twins()
    items = _bfloat16_batch(2)
    _refused(SpecMismatchError, BF16_MESSAGE, lambda: buffer.add_batch(items))

    @tf.function
    def add():  # the tensor is captured, not an argument (tf.function traces arguments itself)
        buffer.add_batch(items)

    _refused(SpecMismatchError, BF16_MESSAGE, add)
    _assert_tf_twins(buffer, twin)


@pytest.mark.parametrize("kind", ["prioritized", "episodes"])
@pytest.mark.parametrize(
    ("priorities", "match"),
    [
        (["high", "low"], r"priorities: expected numbers"),
        ([1 + 2j, 3j], r"priorities: expected numbers"),
        ([object(), object()], r"priorities: expected numbers"),
        ([[1.0], [2.0, 3.0]], r"priorities: expected numbers"),
        ([1.0, 2.0, 3.0], r"priorities"),
    ],
)
def test_update_priorities_with_non_numbers_names_the_argument(kind, priorities, match):
    buffer, twin = twins(kind)
    _refused(ArgumentError, match, lambda: buffer.update_priorities(np.array([0, 1]), priorities))
    _refused(ArgumentError, r"ids", lambda: buffer.update_priorities(["a", "b"], [1.0, 2.0]))
    _refused(ArgumentError, r"ids", lambda: buffer.update_priorities([0.5, 1.5], [1.0, 2.0]))
    assert_twins(buffer, twin)


SIZE_KINDS = [
    "uniform",
    "columns",
    "py-uniform",
    "prioritized",
    "episodes",
    "uniform-episodes",
    "frames",
    "memmap",
    "limited",
    "torch",
    "torch-py",
]
HUGE_SAMPLES = [
    ((2**62, None), r"sample_batch_size: expected a positive int <= 2147483647"),
    ((2**40, None), r"sample_batch_size: expected a positive int <= 2147483647"),
    ((2**31, None), r"sample_batch_size: expected a positive int <= 2147483647"),
    ((2, 10**30), r"num_steps: expected a positive int <= 2147483647"),
    ((None, 2**31), r"num_steps: expected a positive int <= 2147483647"),
    ((2**16, 2**16), r"sample_batch_size x num_steps: expected at most 2147483647"),
    ((True, None), r"sample_batch_size: expected a positive int"),
    ((2.0, None), r"sample_batch_size: expected a positive int"),
]


@pytest.mark.parametrize("kind", SIZE_KINDS)
def test_huge_sample_sizes_are_refused_naming_the_argument(kind, tmp_path):
    _needs(kind)
    buffer, twin = twins(kind, tmp_path)
    for (size, steps), match in HUGE_SAMPLES:
        _refused(ArgumentError, match, lambda size=size, steps=steps: buffer.get_next(size, steps))
        _refused(ArgumentError, match, lambda size=size, steps=steps: buffer.as_dataset(size, steps))
    assert_twins(buffer, twin)


def test_tensorflow_refuses_huge_sample_sizes_naming_the_argument():
    buffer, twin = _tf_twins()
    for (size, steps), match in HUGE_SAMPLES:
        _refused(ArgumentError, match, lambda size=size, steps=steps: buffer.get_next(size, steps))
        _refused(ArgumentError, match, lambda size=size, steps=steps: buffer.as_dataset(size, steps))
    _assert_tf_twins(buffer, twin)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: replaybuf.UniformReplayBuffer(SPEC, 2, 2**62), r"max_length: a capacity of"),
        (lambda: replaybuf.UniformReplayBuffer(SPEC, 2**40, 2**40), r"max_length: a capacity of"),
        (lambda: replaybuf.PrioritizedReplayBuffer(SPEC, 2, 2**62), r"max_length: a capacity of"),
        (lambda: replaybuf.PyUniformReplayBuffer(SPEC, 2**62), r"capacity: a capacity of"),
        (lambda: replaybuf.FrameStackReplayBuffer(FRAME_SPEC, 2, 2**62), r"max_length: a capacity of"),
        (lambda: replaybuf.PyUniformReplayBuffer(SPEC, 0), r"capacity: expected a positive int, got 0"),
        (lambda: replaybuf.PyUniformReplayBuffer(SPEC, True), r"capacity: expected a positive int"),
        (lambda: replaybuf.PyUniformReplayBuffer(SPEC, 2.5), r"capacity: expected a positive int"),
        (lambda: PrioritizedReplayBuffer(SPEC, alpha=True), r"alpha: expected a finite float >= 0, got True"),
        (lambda: PrioritizedReplayBuffer(SPEC, alpha="0.6"), r"alpha"),
        (lambda: PrioritizedReplayBuffer(SPEC, alpha=np.nan), r"alpha"),
        (lambda: PrioritizedReplayBuffer(SPEC, epsilon=True), r"epsilon: expected a finite float >= 0, got True"),
        (lambda: PrioritizedReplayBuffer(SPEC, epsilon=-1e-9), r"epsilon"),
        (lambda: PrioritizedReplayBuffer(SPEC, beta=True), r"beta: expected a float in \[0, 1\]"),
        (lambda: PrioritizedReplayBuffer(SPEC, beta=np.bool_(True)), r"beta: expected a float in \[0, 1\]"),
        (lambda: PrioritizedReplayBuffer(SPEC, beta=1.5), r"beta"),
        (lambda: PrioritizedReplayBuffer(SPEC, compiled="yes"), r"compiled"),
        (lambda: replaybuf.PrioritizedFrameStackReplayBuffer(FRAME_SPEC, alpha=True), r"alpha"),
        (lambda: replaybuf.PrioritizedFrameStackReplayBuffer(FRAME_SPEC, beta=True), r"beta"),
    ],
)
def test_bad_numpy_constructor_arguments_are_refused_naming_them(make, match):
    _refused(ArgumentError, match, make)


def test_bad_torch_constructor_arguments_are_refused_naming_them():
    pytest.importorskip("torch")
    import replaybuf.torch as torch_buffers

    uniform, py_uniform = torch_buffers.TorchUniformReplayBuffer, torch_buffers.TorchPyUniformReplayBuffer
    _refused(ArgumentError, r"max_length: a capacity of", lambda: uniform(SPEC, 2, 2**62))
    _refused(ArgumentError, r"capacity: a capacity of", lambda: py_uniform(SPEC, 2**62))
    _refused(ArgumentError, r"capacity: expected a positive int, got 0", lambda: py_uniform(SPEC, 0))


def _mindspore():
    pytest.importorskip("torch")
    from replaybuf.mindspore_rl import ReplayBuffer

    return ReplayBuffer


CONFIG = {"capacity": 7, "data_shape": MINDSPORE_SHAPES, "data_type": MINDSPORE_TYPES, "sample_size": 3}


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda rb: rb.from_config(None), r"config: expected a mapping"),
        (lambda rb: rb.from_config([("capacity", 7)]), r"config: expected a mapping"),
        (lambda rb: rb.from_config({**CONFIG, "data_shape": 5}), r"config\['data_shape'\]: expected a list"),
        (lambda rb: rb.from_config({**CONFIG, "data_shape": "(3,)"}), r"config\['data_shape'\]: expected a list"),
        (lambda rb: rb.from_config({**CONFIG, "data_type": 5}), r"config\['data_type'\]: expected a list"),
        (lambda rb: rb.from_config({**CONFIG, "sample_size": 2**62}), r"config\['sample_size'\]"),
        (lambda rb: rb.from_config({**CONFIG, "sample_size": True}), r"config\['sample_size'\]"),
        (lambda rb: rb.from_config({**CONFIG, "capacity": 0}), r"capacity"),
        (lambda rb: rb.from_config({**CONFIG, "shape": 1}), r"config: expected the keys"),
        (lambda rb: rb(3, 2**62, MINDSPORE_SHAPES, MINDSPORE_TYPES, device="cpu"), r"capacity: a capacity of"),
        (lambda rb: rb(2**62, 7, MINDSPORE_SHAPES, MINDSPORE_TYPES, device="cpu"), r"batch_size: expected .* <= "),
        (lambda rb: rb(3, 7, 5, MINDSPORE_TYPES, device="cpu"), r"shapes: expected a list"),
        (lambda rb: rb(3, 7, MINDSPORE_SHAPES, "float32", device="cpu"), r"types: expected a list"),
        (lambda rb: rb(3, 7, MINDSPORE_SHAPES, MINDSPORE_TYPES[:2], device="cpu"), r"shapes and types"),
    ],
)
def test_bad_mindspore_configs_and_arguments_are_argument_errors(call, match):
    _refused(ArgumentError, match, lambda: call(_mindspore()))


@pytest.mark.parametrize(
    "row",
    [
        [[[1.0, 2.0, 3.0], [1.0]], [[1], [2]], [True, False]],  # ragged first column
        [np.zeros((2, 3), np.float32), [[1], [2, 3]], [True, False]],  # ragged second column
        [np.zeros((2, 3), np.float32), [[1], [2]], [[True], [False, True]]],
    ],
)
def test_a_ragged_mindspore_column_is_refused_naming_it(row):
    buffer, twin = twins("mindspore")
    _refused(SpecMismatchError, r"insert: tensor \d: .*ragged", lambda: buffer.insert(row))
    assert_twins(buffer, twin)


@pytest.mark.parametrize("kind", ["prioritized", "episodes"])
@pytest.mark.parametrize("returned", [2.0, -0.5, True, "0.5", np.nan, None])
def test_a_beta_schedule_returning_no_exponent_is_refused_at_the_sample(kind, returned):
    buffer, twin = twins(kind)
    buffer.beta = lambda: returned
    twin.beta = 0.4
    _refused(ArgumentError, r"beta: expected the callable to return a float in \[0, 1\]", lambda: buffer.get_next(3))
    _refused(ArgumentError, r"beta", lambda: setattr(buffer, "beta", True))
    buffer.beta = 0.4
    assert_twins(buffer, twin)


# -- class 8: messages that name the field ---------------------------------------------------------
def _trajectory_spec():
    return replaybuf.Trajectory(
        step_type=replaybuf.ArraySpec((), np.int32, "step_type"),
        observation=replaybuf.ArraySpec((4,), np.float32),
        action=replaybuf.ArraySpec((), np.int64),
        policy_info={"logits": replaybuf.ArraySpec((2,), np.float32)},
        next_step_type=replaybuf.ArraySpec((), np.int32, "next_step_type"),
        reward=replaybuf.ArraySpec((), np.float32, "reward"),
        discount=replaybuf.ArraySpec((), np.float32, "discount"),
    )


def _trajectory(n, **changes):
    items = replaybuf.Trajectory(
        step_type=np.zeros(n, np.int32),
        observation=np.zeros((n, 4), np.float32),
        action=np.zeros(n, np.int64),
        policy_info={"logits": np.zeros((n, 2), np.float32)},
        next_step_type=np.ones(n, np.int32),
        reward=np.zeros(n, np.float32),
        discount=np.ones(n, np.float32),
    )
    return items._replace(**changes)


def _trajectory_buffers():
    yield "numpy", replaybuf.UniformReplayBuffer(_trajectory_spec(), 2, 4)
    yield "numpy-py", replaybuf.PyUniformReplayBuffer(_trajectory_spec(), 4)
    yield "numpy-prioritized", replaybuf.PrioritizedReplayBuffer(_trajectory_spec(), 2, 4)
    pytest.importorskip("torch")
    import replaybuf.torch as torch_buffers

    yield "torch", torch_buffers.TorchUniformReplayBuffer(_trajectory_spec(), 2, 4)
    yield "torch-py", torch_buffers.TorchPyUniformReplayBuffer(_trajectory_spec(), 4)
    pytest.importorskip("tensorflow")
    import replaybuf.tf as tf_buffers

    yield "tf", tf_buffers.TFUniformReplayBuffer(_trajectory_spec(), 2, 4)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"observation": np.zeros((2, 3), np.float32)}, r"^observation: expected shape \((2|n), 4\) float32"),
        ({"action": np.zeros(2, np.float64)}, r"^action: expected dtype int64, got float64"),
        ({"reward": np.zeros((2, 1), np.float32)}, r"^reward: expected shape \((2|n)\) float32"),
        ({"policy_info": {"logits": np.zeros((2, 3), np.float32)}}, r"^policy_info/logits: expected shape"),
        ({"step_type": np.zeros(2, np.int64)}, r"^step_type: expected dtype int32"),
    ],
)
def test_namedtuple_specs_name_their_fields_on_every_backend(changes, match):
    for name, buffer in _trajectory_buffers():
        items = _trajectory(2, **changes)
        with pytest.raises(SpecMismatchError, match=match):
            buffer.add_batch(items)
        assert buffer.num_frames() == 0, name
        buffer.add_batch(_trajectory(2))  # the unchanged trajectory is taken
    torch = pytest.importorskip("torch")
    torch_items = _trajectory(2, observation=torch.zeros(2, 3))
    with pytest.raises(SpecMismatchError, match=r"^observation: expected shape \(2, 4\) float32"):
        replaybuf.torch.TorchUniformReplayBuffer(_trajectory_spec(), 2, 4).add_batch(torch_items)


def test_the_step_driver_reports_the_field_of_a_trajectory_that_does_not_fit():
    gym = pytest.importorskip("gymnasium")
    env = gym.make("CartPole-v1")
    spec = replaybuf.collect_data_spec(env)
    wide = spec._replace(observation=replaybuf.ArraySpec((5,), np.float32))
    buffer = replaybuf.UniformReplayBuffer(wide, 1, 10)
    driver = replaybuf.StepDriver(env, lambda obs: np.zeros(1, np.int64), [buffer.add_batch], num_steps=3, seed=0)
    with pytest.raises(SpecMismatchError, match=r"^observation: expected shape \(1, 5\) float32"):
        driver.run()
    narrow = spec._replace(action=replaybuf.ArraySpec((), np.int32))
    buffer = replaybuf.UniformReplayBuffer(narrow, 1, 10)
    driver = replaybuf.StepDriver(env, lambda obs: np.zeros(1, np.int64), [buffer.add_batch], num_steps=3, seed=0)
    with pytest.raises(SpecMismatchError, match=r"^action: expected dtype int32, got int64"):
        driver.run()
    assert buffer.num_frames() == 0


def test_checkpoints_and_memmap_folders_of_namedtuple_specs_still_match(tmp_path):
    """The paths are names now; a state or folder whose paths were positions still loads."""
    buffer = replaybuf.UniformReplayBuffer(_trajectory_spec(), 2, 4, storage="memmap", path=tmp_path / "rb")
    buffer.add_batch(_trajectory(2))
    state = buffer.state_dict()
    assert state["spec"]["paths"][:2] == ["step_type", "observation"]
    state["spec"]["paths"] = [str(i) for i in range(len(state["spec"]["paths"]))]
    replaybuf.UniformReplayBuffer(_trajectory_spec(), 2, 4).load_state_dict(state)
    import json

    meta = json.loads((tmp_path / "rb" / "meta.json").read_text())
    meta["spec"]["paths"] = state["spec"]["paths"]
    (tmp_path / "rb" / "meta.json").write_text(json.dumps(meta))
    del buffer
    reopened = replaybuf.UniformReplayBuffer(_trajectory_spec(), 2, 4, storage="memmap", path=tmp_path / "rb")
    assert reopened.num_frames() == 2


def _other_backends():
    """The shared-memory and JAX buffers (Ray's shards take the same check, untested here:
    starting a Ray session costs seconds)."""

    def shared():
        return replaybuf.SharedReplayBuffer(SPEC, writers=1, batch_size=2, max_length=5, seed=5)

    yield "shared", shared
    pytest.importorskip("jax")
    import replaybuf.jax as jax_buffers

    yield "jax", lambda: jax_buffers.JaxReplayBuffer(SPEC, batch_size=2, max_length=5, seed=5)


def test_the_shared_and_jax_buffers_refuse_huge_sample_sizes():
    """Issue 18's class on the other backends: NumPy's "array is too big" (shared) and an XLA
    abort of the whole process (JAX) before."""
    import optree

    from hostile_buffers import assert_equal_trees, plain

    def numpy_tree(value):
        return plain(optree.tree_map(np.asarray, value, none_is_leaf=True))

    for _, make in _other_backends():
        buffer, twin = make(), make()
        try:
            for b in (buffer, twin):
                for t in range(4):
                    b.add_batch(step_batch(t, 2))
            for (size, steps), match in HUGE_SAMPLES:
                _refused(ArgumentError, match, lambda b=buffer, size=size, steps=steps: b.get_next(size, steps))
                _refused(ArgumentError, match, lambda b=buffer, size=size, steps=steps: b.as_dataset(size, steps))
            assert_equal_trees(numpy_tree(buffer.gather_all()), numpy_tree(twin.gather_all()))
            assert_equal_trees(numpy_tree(buffer.get_next(3)), numpy_tree(twin.get_next(3)))
        finally:
            for b in (buffer, twin):
                if hasattr(b, "close"):  # the shared buffer's memory block
                    b.close()
