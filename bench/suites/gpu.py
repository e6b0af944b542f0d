"""Issue 33's GPU table: the torch buffers on the device beside TorchRL, a bare ``randint`` +
``index_select`` loop and that loop's kernel alone (docs/gpu.md).

Runs on CUDA when the process sees a GPU, else on the CPU (one torch thread: host overhead,
not the CPU's parallel gather, is measured); the device is in every figure's note. Each
``run(n)`` ends by waiting for the device (CUDA calls return before their kernels finish),
so the harness's host clock covers the work, not only its launch.

- ``gpu_frames32`` / ``gpu_frames256``: sample 32 / 256 frames of 84x84x4 uint8 (MB/s of
  the sampled bytes; 100,000 frames stored on CUDA, 4,096 on the CPU);
- ``gpu_add_host`` / ``gpu_add_device``: add 256 small transitions (obs f32[4], action i64,
  reward f32, done bool, next_obs f32[4]) from NumPy / from device tensors;
- ``gpu_sample256``: sample 256 of those (100,352 stored). Issue 33's CPU criterion:
  replaybuf within 1.5x the bare loop (>= 0.67x its rate);
- ``gpu_sample256_captured``: the same with ``capture=True`` as ``replaybuf``, beside the bare
  loop, with the same goal (the eager call's result is fresh tensors, whose making alone
  exceeds it on the CPU: docs/gpu.md);
- ``gpu_ms_insert256`` / ``gpu_ms_sample256``: the MindSpore-style buffer;
- ``gpu_per256``: prioritized replay, sample 256 + update those 256 priorities (alpha 0.6,
  beta 0.4; capacity 1M, 200k small transitions stored, W3's sizes): replaybuf's
  ``TorchPrioritizedReplayBuffer`` (its default trees: the host's on the CPU, the device's on
  CUDA) beside TorchRL's ``PrioritizedSampler`` (``TensorDictPrioritizedReplayBuffer`` on
  ``LazyTensorStorage(device)``; its C++ trees on the CPU, its CUDA trees on a GPU). Issue
  51's goal: >= 4x TorchRL's rate on the CPU, >= 2x on CUDA;
- ``gpu_per256_numpy``: the same round beside NumPy's ``PrioritizedReplayBuffer`` (its
  priorities float64 arrays, the torch buffer's float32 tensors on the device), alternating in
  one process. Issue 51's goal: at most 1.3x its time (>= 0.77x its rate).

The prioritized rows are timed in thread CPU time on the CPU (wall time on CUDA, where the
time is the device's), the others in host wall time.

Labels: ``replaybuf`` (eager), ``replaybuf captured`` (``capture=True``: one CUDA graph
replay per call on a GPU; on the CPU a draw and NumPy calls into static outputs), ``bare loop``
(``torch.randint`` + one ``torch.index_select`` over one tensor of the same bytes: the
frames, or the small leaves packed in one byte row), ``kernel alone`` (that loop recorded
once as a CUDA graph and replayed; CUDA only) and ``torchrl`` (``TensorDictReplayBuffer`` on
``LazyTensorStorage(device)``, in bench/.venvs/torchrl).

    PYTHONPATH=src .venv/bin/python -m bench gpu [--libs replaybuf]
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import numpy as np

import harness
from common import SIZES as PEER_SIZES
from common import chunks, small_pool, small_spec
from harness import Workload
from suites import Job

FRAME = (84, 84, 4)
BATCH = 256
TORCHRL = "torchrl"
OURS_REFS = ("bare loop", "kernel alone", "replaybuf captured")
NUMPY_PER = "numpy prioritized"
#: per size: (frames stored on CUDA, on the CPU; small transitions stored)
SIZES = {"full": (100_000, 4096, 100_352), "quick": (4096, 4096, 100_352), "tiny": (64, 64, 1024)}


def _frames(n: int) -> Workload:
    return Workload(
        f"gpu_frames{n}",
        f"sample {n} frames of 84x84x4 uint8 on the device",
        "MB/s",
        n * int(np.prod(FRAME)) / 1e6,
        references=OURS_REFS,
        peers=(TORCHRL,),
    )


WORKLOADS = [
    _frames(32),
    _frames(BATCH),
    Workload("gpu_add_host", "add 256 small transitions from host", "items/s", BATCH, peers=(TORCHRL,)),
    Workload("gpu_add_device", "add 256 small transitions from device", "items/s", BATCH, peers=(TORCHRL,)),
    Workload(
        "gpu_sample256",
        "sample 256 small transitions on the device",
        "batches/s",
        references=OURS_REFS,
        peers=(TORCHRL,),
        goal_vs="bare loop",
        goal_ratio=round(1 / 1.5, 2),
    ),
    Workload(
        "gpu_sample256_captured",
        "sample 256 small transitions on the device, capture=True",
        "batches/s",
        references=("bare loop",),
        goal_vs="bare loop",
        goal_ratio=round(1 / 1.5, 2),
    ),
    Workload("gpu_ms_insert256", "MindSpore-style insert 256", "items/s", BATCH),
    Workload("gpu_ms_sample256", "MindSpore-style sample 256", "batches/s"),
    Workload(
        "gpu_per256",
        "prioritized sample 256 + update 256 on the device (1M capacity)",
        "rounds/s",
        peers=(TORCHRL,),
        goal_vs=TORCHRL,
        goal_ratio=4,
        readme="torch prioritized sample 256 + update 256 (1M capacity)",
    ),
    Workload(
        "gpu_per256_numpy",
        "prioritized sample 256 + update 256, torch beside NumPy (1M capacity)",
        "rounds/s",
        references=(NUMPY_PER,),
        goal_vs=NUMPY_PER,
        goal_ratio=round(1 / 1.3, 2),
        readme="torch prioritized sample 256 + update 256 beside NumPy's (1M capacity)",
    ),
]
PER_KEYS = ("gpu_per256", "gpu_per256_numpy")
JOBS = [
    Job("replaybuf", None, ("replaybuf", *OURS_REFS, NUMPY_PER), device=True),
    Job(TORCHRL, TORCHRL, (TORCHRL,), device=True, workloads=(*(w.key for w in WORKLOADS[:5]), "gpu_per256")),
]


def synced(device, call: Callable[[], object]) -> Callable[[int], None]:
    """A ``run(n)`` of n calls that waits for the device at its end."""
    import torch

    calls = harness.repeat(call)

    def run(n: int) -> None:
        calls(n)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return run


def bare_loop(table, n: int, generator) -> Callable[[], object]:
    """``randint`` + one ``index_select``: the least eager PyTorch code that samples ``n`` rows."""
    import torch

    size = table.shape[0]

    def sample():
        return torch.index_select(table, 0, torch.randint(0, size, (n,), generator=generator, device=table.device))

    return sample


def kernel_alone(table, n: int, generator) -> Callable[[], object] | None:
    """The bare loop recorded once as a CUDA graph and replayed (None off CUDA)."""
    import torch

    if table.device.type != "cuda":
        return None
    sample = bare_loop(table, n, generator)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        sample()  # warm up outside the capture, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(generator)  # each replay advances the generator's offset
    with torch.cuda.graph(graph):
        sample()
    return graph.replay


def as_tensordict(batch: dict, device):
    import torch
    from tensordict import TensorDict

    n = len(next(iter(batch.values())))
    leaves = {k: v if isinstance(v, torch.Tensor) else np.ascontiguousarray(v) for k, v in batch.items()}
    return TensorDict({k: torch.as_tensor(v, device=device) for k, v in leaves.items()}, [n])


class Table:
    """The buffers of one job on one device, filled alike; ``calls(key)``: label -> call of a workload."""

    def __init__(self, device, labels: tuple[str, ...], size: str):
        self.device, self.labels = device, labels
        sizes = SIZES[size]
        self.frames = sizes[0] if device.type == "cuda" else sizes[1]
        self.capacity = sizes[2]
        self.per_sizes = PEER_SIZES[size]  # W3's: capacity, stored
        self.built: dict[str, dict] = {}

    def _ours(self, spec: dict, streams: int, max_length: int, capture: bool = False):
        from replaybuf.torch import TorchUniformReplayBuffer

        return TorchUniformReplayBuffer(spec, streams, max_length, device=self.device, seed=0, capture=capture)

    def _torchrl(self, capacity: int):
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

        return TensorDictReplayBuffer(storage=LazyTensorStorage(capacity, device=self.device))

    def frames_buffers(self) -> dict:
        import torch

        if "frames" in self.built:
            return self.built["frames"]
        streams = 8
        rng = np.random.default_rng(0)
        block = torch.as_tensor(rng.integers(0, 256, (streams, *FRAME), dtype=np.uint8), device=self.device)
        made = {}
        if TORCHRL in self.labels:
            from tensordict import TensorDict

            made[TORCHRL] = self._torchrl(self.frames)
            chunk = min(1024, self.frames)  # whole chunks of the streams' block, at least one even at tiny sizes
            for _ in range(self.frames // chunk):
                made[TORCHRL].extend(TensorDict({"frame": block.repeat(chunk // streams, 1, 1, 1)}, [chunk]))
        else:  # replaybuf only here: a peer's environment may lack its dependencies
            from replaybuf import ArraySpec

            spec = {"frame": ArraySpec(FRAME, np.uint8)}
            made["replaybuf"] = self._ours(spec, streams, self.frames // streams)
            made["replaybuf captured"] = self._ours(spec, streams, self.frames // streams, capture=True)
            for _ in range(self.frames // streams):
                for buffer in made.values():
                    buffer.add_batch({"frame": block})
        self.built["frames"] = made
        return made

    def small_buffers(self) -> dict:
        import torch

        if "small" in self.built:
            return self.built["small"]
        host = small_pool(BATCH)
        on_device = {k: torch.as_tensor(v, device=self.device) for k, v in host.items()}
        made = {"host": host, "device": on_device}
        if TORCHRL in self.labels:
            made[TORCHRL] = self._torchrl(self.capacity)
            for _ in range(self.capacity // BATCH):
                made[TORCHRL].extend(as_tensordict(host, self.device))
        else:
            made["replaybuf"] = self._ours(small_spec(), BATCH, self.capacity // BATCH)
            made["replaybuf captured"] = self._ours(small_spec(), BATCH, self.capacity // BATCH, capture=True)
            for step in range(self.capacity // BATCH):
                made["replaybuf"].add_batch(host if step % 2 else on_device)
                made["replaybuf captured"].add_batch(on_device)
        self.built["small"] = made
        return made

    def sampling(self, buffers: dict, n: int, table) -> dict[str, Callable[[], object]]:
        import torch

        if TORCHRL in self.labels:
            return {TORCHRL: lambda: buffers[TORCHRL].sample(n)}
        calls = {
            "replaybuf": lambda: buffers["replaybuf"].get_next(n),
            "replaybuf captured": lambda: buffers["replaybuf captured"].get_next(n),
            "bare loop": bare_loop(table(), n, torch.Generator(device=self.device).manual_seed(0)),
        }
        kernel = kernel_alone(table(), n, torch.Generator(device=self.device).manual_seed(1))
        if kernel is not None:
            calls["kernel alone"] = kernel
        return calls

    def per_rounds(self, key: str) -> dict[str, Callable[[], object]]:
        """A prioritized round (sample 256, update their priorities) of each buffer of this job."""
        import torch

        if "per" not in self.built:
            capacity, stored = self.per_sizes.capacity, self.per_sizes.stored
            stored -= stored % BATCH
            pool = small_pool(stored)
            generator = torch.Generator().manual_seed(1)
            priorities = [torch.rand(BATCH, generator=generator) + 0.01 for _ in range(16)]
            made: dict = {"priorities": [p.to(self.device) for p in priorities]}
            if TORCHRL in self.labels:
                from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

                made[TORCHRL] = TensorDictPrioritizedReplayBuffer(
                    alpha=0.6, beta=0.4, storage=LazyTensorStorage(capacity, device=self.device), batch_size=BATCH
                )
                for _, batch in chunks(pool, stored, 4096):
                    made[TORCHRL].extend(as_tensordict(batch, self.device))
            else:
                from replaybuf import PrioritizedReplayBuffer
                from replaybuf.torch import TorchPrioritizedReplayBuffer

                made["host priorities"] = [p.numpy().astype(np.float64) for p in priorities]
                options = {"batch_size": BATCH, "max_length": capacity // BATCH, "alpha": 0.6, "beta": 0.4, "seed": 1}
                made["replaybuf"] = TorchPrioritizedReplayBuffer(small_spec(), device=self.device, **options)
                made[NUMPY_PER] = PrioritizedReplayBuffer(small_spec(), **options)
                for _, batch in chunks(pool, stored, BATCH):
                    made["replaybuf"].add_batch(batch)
                    made[NUMPY_PER].add_batch(batch)
            self.built["per"] = made
        made = self.built["per"]
        if TORCHRL in self.labels:
            return {TORCHRL: per_round(made[TORCHRL], made["priorities"], torchrl=True)}
        calls = {"replaybuf": per_round(made["replaybuf"], made["priorities"])}
        if key == "gpu_per256_numpy":
            calls[NUMPY_PER] = per_round(made[NUMPY_PER], made["host priorities"])
        return calls

    def calls(self, key: str) -> dict[str, Callable[[], object]]:
        if key in PER_KEYS:
            return self.per_rounds(key)
        if key.startswith("gpu_frames"):
            frames = self.frames_buffers()
            return self.sampling(frames, int(key.removeprefix("gpu_frames")), lambda: frames["replaybuf"]._storage.rows)
        if key == "gpu_sample256":
            small = self.small_buffers()
            return self.sampling(small, BATCH, lambda: small["replaybuf"]._storage.rows)
        if key == "gpu_sample256_captured":
            import torch

            small, generator = self.small_buffers(), torch.Generator(device=self.device).manual_seed(0)
            return {
                "replaybuf": lambda: small["replaybuf captured"].get_next(BATCH),
                "bare loop": bare_loop(small["replaybuf"]._storage.rows, BATCH, generator),
            }
        if key.startswith("gpu_add"):
            small = self.small_buffers()
            source = small["host" if key == "gpu_add_host" else "device"]
            if TORCHRL in self.labels:
                import torch

                batch = as_tensordict(source, torch.device("cpu") if key == "gpu_add_host" else self.device)
                return {TORCHRL: lambda: small[TORCHRL].extend(batch)}
            return {"replaybuf": lambda: small["replaybuf"].add_batch(source)}
        return {"replaybuf": self.mindspore(key)}

    def mindspore(self, key: str) -> Callable[[], object]:
        import torch

        from replaybuf.mindspore_rl import ReplayBuffer

        if "mindspore" not in self.built:
            shapes = [(4,), (1,), (1,), (1,), (4,)]
            types = [torch.float32, torch.int64, torch.float32, torch.bool, torch.float32]
            buffer = ReplayBuffer(BATCH, self.capacity, shapes, types, device=self.device, seed=0)
            host = small_pool(BATCH)
            rows = [
                torch.as_tensor(host[name] if name in ("obs", "next_obs") else host[name][:, None], device=self.device)
                for name in ("obs", "action", "reward", "done", "next_obs")
            ]
            for _ in range(self.capacity // BATCH):
                buffer.insert(rows)
            self.built["mindspore"] = {"buffer": buffer, "rows": rows}
        made = self.built["mindspore"]
        if key == "gpu_ms_insert256":
            return lambda: made["buffer"].insert(made["rows"])
        return made["buffer"].sample


def per_round(buffer, priorities: list, torchrl: bool = False) -> Callable[[], object]:
    """One prioritized round of ``buffer``: sample 256, set their priorities (the next of 16 sets)."""
    turn = itertools.count()

    if torchrl:

        def round_():
            sample = buffer.sample()
            buffer.update_priority(sample["index"], priorities[next(turn) & 15])

    else:

        def round_():
            _, info = buffer.get_next(BATCH)
            buffer.update_priorities(info.ids, priorities[next(turn) & 15])

    return round_


def measure(job: Job, size: str, keys: list[str]) -> None:
    """This job's labels of every workload (``keys`` only) on CUDA when visible, else the CPU."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # host overhead, not the CPU's parallel gather, is measured
    where = f"{torch.cuda.get_device_name(device)} (CUDA)" if device.type == "cuda" else "CPU, 1 torch thread"
    label = job.labels[0]
    harness.emit(lib=label, version=f"{_version(label)}, torch {torch.__version__}, on {where}")
    table = Table(device, job.labels, size)
    notes = dict.fromkeys(job.labels, where)
    for workload in WORKLOADS:
        if keys and workload.key not in keys or job.workloads and workload.key not in job.workloads:
            continue
        calls = table.calls(workload.key)
        if "kernel alone" in workload.references and label == "replaybuf" and "kernel alone" not in calls:
            harness.missing([workload.key], "kernel alone", f"a CUDA graph: none on the {device.type}")
        runs = {name: synced(device, call) for name, call in calls.items()}
        if workload.key in PER_KEYS and device.type == "cpu":
            per_notes = {name: f"{where}, thread CPU time" for name in runs}
            harness.measure(workload, runs, harness.TIMINGS[size], notes=per_notes, clock=time.thread_time)
        else:
            harness.measure(workload, runs, harness.TIMINGS[size], notes=notes)


def _version(label: str) -> str:
    if label == TORCHRL:
        import torchrl

        return f"torchrl {torchrl.__version__}"
    import replaybuf

    return f"replaybuf {replaybuf.__version__}"
