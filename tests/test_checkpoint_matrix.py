"""Every saving backend x every loading backend (issue 34): a checkpoint folder written by one
buffer loads into any buffer of the same spec and geometry, uniform and prioritized, after the
ring wrapped; the items, ids, counters and priorities come back, and what a buffer cannot hold
(priorities into a uniform buffer, frame stacks into a plain one, another geometry) is refused
by name with the buffer unchanged (docs/persistence.md, "Across backends").

Two geometries: two streams (NumPy, prioritized, torch uniform and prioritized, JAX, TF, shared
with two writers, Ray with two shards) and one stream (adding PyUniform and MindSpore-style, which have one).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import replaybuf
from replaybuf.errors import CheckpointError
from replaybuf.persistence import read_state

SPEC = (replaybuf.ArraySpec((3,), np.float32), replaybuf.ArraySpec((), np.int64))
MAX_LENGTH, STEPS, ALPHA = 4, 7, 0.5  # 7 steps into 4: the ring wrapped
NEW_MASS = (1.0 + 1e-6) ** ALPHA  # a new item's priority mass (priority 1.0)

UNIFORM = ["numpy", "torch", "jax", "tf", "shared", "ray"]
ONE_STREAM = ["pyuniform", "mindspore"]
PRIORITIZED = ["prioritized", "torch-prioritized", "jax-prioritized", "shared-prioritized", "ray-prioritized"]
KINDS = {1: UNIFORM + ONE_STREAM + PRIORITIZED, 2: UNIFORM + PRIORITIZED}
NEEDS = {"torch": "torch", "mindspore": "torch", "jax": "jax", "tf": "tensorflow", "ray": "ray"}
PAIRS = [(streams, saver, loader) for streams, kinds in KINDS.items() for saver in kinds for loader in kinds]


def rows(ids):
    ids = np.asarray(ids, np.int64)
    return np.stack([ids, ids + 0.5, -ids], axis=-1).astype(np.float32), ids


def needs(kind):
    module = NEEDS.get(kind.split("-")[0])
    if module is not None:
        pytest.importorskip(module)


# -- the buffers, built the same way whatever the backend -----------------------------------------
_RAY: dict = {}


def make(kind, streams, seed=0):
    needs(kind)
    prioritized = kind in PRIORITIZED
    options = {"alpha": ALPHA} if prioritized else {}
    if kind == "numpy":
        return replaybuf.UniformReplayBuffer(SPEC, streams, MAX_LENGTH, seed=seed)
    if kind == "prioritized":
        return replaybuf.PrioritizedReplayBuffer(SPEC, streams, MAX_LENGTH, seed=seed, **options)
    if kind == "pyuniform":
        return replaybuf.PyUniformReplayBuffer(SPEC, MAX_LENGTH, seed=seed)
    if kind == "torch":
        from replaybuf.torch import TorchUniformReplayBuffer

        return TorchUniformReplayBuffer(SPEC, streams, MAX_LENGTH, seed=seed)
    if kind == "torch-prioritized":
        from replaybuf.torch import TorchPrioritizedReplayBuffer

        return TorchPrioritizedReplayBuffer(SPEC, streams, MAX_LENGTH, seed=seed, **options)
    if kind == "mindspore":
        from replaybuf.mindspore_rl import ReplayBuffer

        return ReplayBuffer(2, MAX_LENGTH, [(3,), ()], [np.float32, np.int64], seed=seed)
    if kind in ("jax", "jax-prioritized"):
        from replaybuf.jax import JaxReplayBuffer

        return JaxReplayBuffer(
            SPEC, streams, MAX_LENGTH, seed=seed, sampler="prioritized" if prioritized else "uniform", **options
        )
    if kind == "tf":
        from replaybuf.tf import TFUniformReplayBuffer

        return TFUniformReplayBuffer(SPEC, streams, MAX_LENGTH, seed=seed)
    if kind in ("shared", "shared-prioritized"):
        sampler = "prioritized" if prioritized else "uniform"
        return replaybuf.SharedReplayBuffer(SPEC, streams, 1, MAX_LENGTH, seed=seed, sampler=sampler, **options)
    if kind in ("ray", "ray-prioritized"):
        key = (kind, streams)
        if key not in _RAY:  # actors are slow to start: one buffer per kind, reloaded by every test
            import ray

            from replaybuf.ray import ShardedReplayBuffer

            if not ray.is_initialized():  # one session for the module, shut down by ray_session
                ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
                ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

            cls = replaybuf.PrioritizedReplayBuffer if prioritized else replaybuf.UniformReplayBuffer
            _RAY[key] = ShardedReplayBuffer(
                SPEC, streams, streams, MAX_LENGTH, seed=seed, buffer_class=cls, buffer_options=options
            )
        rb = _RAY[key]
        rb.clear()
        return rb
    raise AssertionError(kind)


def add(rb, kind, step, streams):
    leaves = rows(step * streams + np.arange(streams))
    if kind == "mindspore":
        rb.insert(list(leaves))
    elif kind.startswith("shared"):
        for w in range(streams):
            if not hasattr(rb, "_test_writers"):
                rb._test_writers = [rb.writer(i, flush_every=1) for i in range(streams)]
            rb._test_writers[w].add_batch(tuple(leaf[w : w + 1] for leaf in leaves))
    else:
        rb.add_batch(leaves)


def close(rb, kind):
    if kind.startswith("shared"):
        for writer in getattr(rb, "_test_writers", []):
            writer.close()
        rb.close()


def frames(rb):
    """How many items the buffer holds (MindSpore-style: ``size()``)."""
    return int(rb.size() if hasattr(rb, "size") else rb.num_frames())


def snapshot(rb, kind, tmp_path):
    """``(steps, items, masses)`` of the buffer, items in id order; Ray's through a gathered folder."""
    if kind.startswith("ray"):
        rb.save(tmp_path / "snapshot", gather=True)
        state = read_state(tmp_path / "snapshot")
    else:
        state = rb.state_dict()
    items = [
        np.asarray(state["items"][str(i)].cpu() if hasattr(state["items"][str(i)], "cpu") else state["items"][str(i)])
        for i in range(2)
    ]
    masses = state["priorities"]["mass"] if "priorities" in state else None
    return state["steps"], items, None if masses is None else np.asarray(masses, np.float64)


def expected_ids(streams):
    return np.arange((STEPS - MAX_LENGTH) * streams, STEPS * streams)


# -- the saved folders: one per saving backend and geometry, written once -----------------------
_SAVED: dict = {}


def saved(kind, streams, tmp_path_factory):
    key = (kind, streams)
    if key not in _SAVED:
        rb = make(kind, streams, seed=1)
        for t in range(STEPS):
            add(rb, kind, t, streams)
        if kind in PRIORITIZED:
            ids = expected_ids(streams)[::2]
            rb.update_priorities(ids, np.linspace(0.5, 3.0, len(ids)))
        folder = tmp_path_factory.mktemp(f"{kind}-{streams}") / "ckpt"
        rb.save(folder) if not kind.startswith("ray") else rb.save(folder, gather=True)
        _SAVED[key] = (folder, snapshot(rb, kind, folder.parent))
        close(rb, kind)
    return _SAVED[key]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    """One Ray session for the module (started only if a Ray test runs), shut down at its end."""
    yield
    if _RAY:
        import ray

        for rb in _RAY.values():
            rb.shutdown()
        _RAY.clear()
        ray.shutdown()


# -- the matrix ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("streams", "saver", "loader"), PAIRS, ids=[f"{s}x-{a}-into-{b}" for s, a, b in PAIRS])
def test_every_backend_loads_every_backends_checkpoint(streams, saver, loader, tmp_path_factory, tmp_path):
    needs(saver)
    folder, (steps, items, masses) = saved(saver, streams, tmp_path_factory)
    rb = make(loader, streams, seed=2)
    add(rb, loader, 0, streams)  # something to replace (or keep, when refused)
    if saver in PRIORITIZED and loader not in PRIORITIZED:
        with pytest.raises(CheckpointError, match=r"state\['priorities'\]: the checkpoint holds priorities"):
            rb.load(folder)
        assert snapshot(rb, loader, tmp_path)[0] == 1  # unchanged
        close(rb, loader)
        return
    rb.load(folder)
    got_steps, got_items, got_masses = snapshot(rb, loader, tmp_path)
    assert got_steps == steps == STEPS
    np.testing.assert_array_equal(got_items[1], expected_ids(streams))
    np.testing.assert_array_equal(got_items[1], items[1])
    np.testing.assert_array_equal(got_items[0], rows(expected_ids(streams))[0])
    assert frames(rb) == MAX_LENGTH * streams
    if loader in PRIORITIZED:
        want = masses if saver in PRIORITIZED else np.full(len(got_items[1]), NEW_MASS)
        np.testing.assert_allclose(got_masses, want, rtol=1e-6)
    add(rb, loader, STEPS, streams)  # the ring goes on from the loaded counters
    assert snapshot(rb, loader, tmp_path)[0] == STEPS + 1
    close(rb, loader)


# -- refusals: another geometry, frame stacks --------------------------------------------------------
LOADERS = sorted(set(KINDS[1]))


@pytest.mark.parametrize("loader", LOADERS)
def test_another_geometry_is_refused_by_name_and_changes_nothing(loader, tmp_path):
    needs(loader)
    other = replaybuf.UniformReplayBuffer(SPEC, 1, MAX_LENGTH + 1)
    other.add_batch(rows([0]))
    other.save(tmp_path / "longer")
    rb = make(loader, 1, seed=2)
    add(rb, loader, 0, 1)
    with pytest.raises(CheckpointError, match=r"state\['max_length'\]: saved 5, this buffer has 4"):
        rb.load(tmp_path / "longer")
    assert snapshot(rb, loader, tmp_path)[0] == 1 and frames(rb) == 1
    close(rb, loader)


FRAME_SPEC = {"observation": replaybuf.ArraySpec((2, 3), np.uint8), "id": replaybuf.ArraySpec((), np.int64)}


def frames_step(t):
    """Step t of two streams: frame stacks that overlap from step to step, as frame stacking makes."""
    stacks = np.stack([np.stack([np.full(3, (t - 1 + j + 5 * s) % 251, np.uint8) for j in range(2)]) for s in range(2)])
    return {"observation": stacks, "id": 2 * t + np.arange(2)}


@pytest.mark.parametrize(
    "loader", [replaybuf.FrameStackReplayBuffer, replaybuf.PrioritizedFrameStackReplayBuffer], ids=lambda c: c.__name__
)
def test_frame_stacks_load_into_frame_stack_buffers(loader, tmp_path):
    source = replaybuf.FrameStackReplayBuffer(FRAME_SPEC, 2, MAX_LENGTH, seed=0)
    for t in range(STEPS):
        source.add_batch(frames_step(t))
    source.save(tmp_path / "frames")
    rb = loader(FRAME_SPEC, 2, MAX_LENGTH, seed=1)
    rb.load(tmp_path / "frames")
    got, want = rb.gather_all(), source.gather_all()
    np.testing.assert_array_equal(got["id"], want["id"])
    np.testing.assert_array_equal(got["observation"], want["observation"])


def test_frame_stacks_and_plain_items_refuse_each_other_by_name(tmp_path):
    source = replaybuf.FrameStackReplayBuffer(FRAME_SPEC, 2, MAX_LENGTH, seed=0)
    for t in range(STEPS):
        source.add_batch(frames_step(t))
    source.save(tmp_path / "frames")
    plain = replaybuf.UniformReplayBuffer(FRAME_SPEC, 2, MAX_LENGTH)
    plain.add_batch(frames_step(0))
    with pytest.raises(CheckpointError, match=r"state\['frames'\]: the checkpoint holds frame stacks"):
        plain.load(tmp_path / "frames")
    plain.save(tmp_path / "plain")
    with pytest.raises(CheckpointError, match=r"state\['frames'\]: the checkpoint holds no frame stacks"):
        source.load(tmp_path / "plain")
    assert plain.num_frames() == 2 and source.num_frames() == 2 * MAX_LENGTH


def test_a_shared_buffer_of_writers_at_different_steps_loads_only_into_its_twin(tmp_path):
    rb = replaybuf.SharedReplayBuffer(SPEC, 2, 1, MAX_LENGTH, seed=0)
    writers = [rb.writer(0, flush_every=1), rb.writer(1, flush_every=1)]
    for t in range(3):
        writers[0].add_batch(tuple(leaf[:1] for leaf in rows([2 * t])))
    writers[1].add_batch(tuple(leaf[:1] for leaf in rows([1])))
    rb.save(tmp_path / "segments")
    twin = replaybuf.SharedReplayBuffer(SPEC, 2, 1, MAX_LENGTH, seed=0)
    twin.load(tmp_path / "segments")
    assert twin.num_frames() == 4
    with pytest.raises(
        CheckpointError, match=r"state\['segments'\]: the checkpoint holds a SharedReplayBuffer's writers"
    ):
        replaybuf.UniformReplayBuffer(SPEC, 2, MAX_LENGTH).load(tmp_path / "segments")
    for writer in writers:
        writer.close()
    rb.close()
    twin.close()


def test_a_class_name_shared_folder_still_loads(tmp_path):
    folder = Path(__file__).parent / "fixtures" / "class-header" / "shared-prioritized"
    from conformance_data import SPEC as CONFORMANCE_SPEC

    rb = replaybuf.SharedReplayBuffer(CONFORMANCE_SPEC, 1, 2, MAX_LENGTH, sampler="prioritized", alpha=0.5)
    rb.load(folder)
    np.testing.assert_array_equal(rb.gather_all()["id"].ravel(), [6, 8, 10, 12, 7, 9, 11, 13])
    rb.close()


def test_a_gathered_ray_save_of_shards_at_different_steps_is_refused(tmp_path):
    pytest.importorskip("ray")
    rb = make("ray", 2)
    with rb.writer(0) as writer:
        writer.add_batch(tuple(leaf[:1] for leaf in rows([0])))
    with pytest.raises(CheckpointError, match=r"shards: a gathered checkpoint is one ring"):
        rb.save(tmp_path / "gathered", gather=True)
    assert not (tmp_path / "gathered").exists()


def test_the_jax_functional_core_joins_the_family(tmp_path):
    """A ``BufferState`` of ``make_buffer`` to and from every backend's folder format."""
    pytest.importorskip("jax")
    from replaybuf.jax import make_buffer
    from replaybuf.jax.checkpoint import load_state_dict, state_dict
    from replaybuf.persistence import write_state

    core = make_buffer(SPEC, 2, MAX_LENGTH, sampler="prioritized", alpha=ALPHA)
    state = core.init()
    for t in range(STEPS):
        state = core.add(state, rows(2 * t + np.arange(2)))
    state = core.update_priorities(state, np.array([8, 9]), np.array([2.0, 3.0], np.float32))
    write_state(tmp_path / "core", state_dict(core, state, SPEC))
    numpy_rb = make("prioritized", 2)
    numpy_rb.load(tmp_path / "core")
    steps, items, masses = snapshot(numpy_rb, "prioritized", tmp_path)
    assert steps == STEPS
    np.testing.assert_array_equal(items[1], expected_ids(2))
    np.testing.assert_allclose(masses[2:4], [(2.0 + 1e-6) ** ALPHA, (3.0 + 1e-6) ** ALPHA], rtol=1e-6)
    numpy_rb.update_priorities(np.array([10]), np.array([5.0]))
    back = load_state_dict(core, numpy_rb.state_dict(), SPEC)
    assert int(back.steps) == STEPS
    np.testing.assert_allclose(
        state_dict(core, back, SPEC)["priorities"]["mass"], snapshot(numpy_rb, "prioritized", tmp_path)[2], rtol=1e-6
    )
    with pytest.raises(CheckpointError, match=r"state\['max_length'\]"):
        load_state_dict(make_buffer(SPEC, 2, MAX_LENGTH + 1), numpy_rb.state_dict(), SPEC)
