"""The GPU table of issue 33: host wall time per call of the torch buffers beside TorchRL,
a bare ``randint`` + ``index_select`` loop and the gather kernel alone, and the JAX rows.

Rows (us per call; every case of a section is timed once per repetition, in turn, so load
on the machine hits all alike; the figure is the median):

  frames:  sample 32 / 256 frames of 84x84x4 uint8 (GB/s of the sampled bytes beside it)
  small:   add 256 small transitions (obs f32[4], action i64, reward f32, done bool,
           next_obs f32[4]) from host (NumPy) and from the device; sample 256 of them
  mindspore: the MindSpore-style buffer's insert 256 / sample 256
  jax:     J1 add 256, J2 sample 256, J2b 256 pairs, J5 add + sample pairs, prioritized
           sample 256 + update, prioritized train step (inside one jitted ``lax.scan``)

Columns: replaybuf (eager), replaybuf captured (``capture=True``: one CUDA graph replay per
call on a GPU, the same kernels into static outputs on the CPU), TorchRL
``LazyTensorStorage`` on the device (when torchrl is importable), the bare loop
(``torch.randint`` + one ``torch.index_select`` over one tensor of the same bytes: the
frames, or the small leaves packed in one byte row) and the kernel alone (that loop
recorded once as a CUDA graph and replayed; CUDA only). Flashbax beside the JAX rows when
it is importable. On CPU it runs as a smoke test of itself, and the ``small`` sample row
checks issue 33's CPU criterion (replaybuf within 1.5x the bare loop). Run:

    PYTHONPATH=src .venv/bin/python bench/gpu.py [--device cuda] [--quick] [--sections frames,small]

TorchRL and flashbax are not in the project's venv (bench/.venvs has them, each in its own);
put them on PYTHONPATH for their columns (``pip install --target``, no dependencies).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import torch

from replaybuf import ArraySpec
from replaybuf.mindspore_rl import ReplayBuffer
from replaybuf.torch import TorchUniformReplayBuffer

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: the harness, jax_gpu.py

import harness  # noqa: E402

FRAME = (84, 84, 4)
SMALL = {
    "obs": ArraySpec((4,), np.float32),
    "action": ArraySpec((), np.int64),
    "reward": ArraySpec((), np.float32),
    "done": ArraySpec((), np.bool_),
    "next_obs": ArraySpec((4,), np.float32),
}
BATCH = 256


def us_per_call(device: torch.device, calls: dict[str, Callable[[], object]], timing: harness.Timing) -> dict:
    """Median microseconds per call of each named call, the calls timed in turn by the harness.

    Each ``run(n)`` ends by waiting for the device (CUDA calls return before their kernels
    finish), so the harness's host clock covers the work, not only its launch."""

    def synced(call: Callable[[], object]) -> Callable[[int], None]:
        calls_n = harness.repeat(call)

        def run(n: int) -> None:
            calls_n(n)
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        return run

    seconds = harness.medians({name: synced(call) for name, call in calls.items()}, timing)
    return {name: value * 1e6 for name, value in seconds.items()}


def small_batch(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n + 1, 4), dtype=np.float32)
    return {
        "obs": obs[:n],
        "action": rng.integers(0, 2, n, dtype=np.int64),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "done": rng.random(n) < 0.01,
        "next_obs": obs[1:],
    }


def bare_loop(table: torch.Tensor, n: int, generator: torch.Generator) -> Callable[[], torch.Tensor]:
    """``randint`` + one ``index_select``: the least eager PyTorch code that samples ``n`` rows."""
    size = table.shape[0]

    def sample() -> torch.Tensor:
        return torch.index_select(table, 0, torch.randint(0, size, (n,), generator=generator, device=table.device))

    return sample


def kernel_alone(table: torch.Tensor, n: int, generator: torch.Generator) -> Callable[[], object] | None:
    """The bare loop recorded once as a CUDA graph and replayed (None off CUDA)."""
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


def torchrl_buffer(device: torch.device, capacity: int):
    """TorchRL's ``TensorDictReplayBuffer`` on ``LazyTensorStorage(device)``, or None without
    torchrl; sampled with the size passed to each ``sample`` (no constructor batch size, which
    TorchRL warns about when a call asks for another)."""
    if find_spec("torchrl") is None:
        return None
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    return TensorDictReplayBuffer(storage=LazyTensorStorage(capacity, device=device))


def as_tensordict(batch: dict, device: torch.device):
    from tensordict import TensorDict

    n = len(next(iter(batch.values())))
    return TensorDict({k: torch.as_tensor(np.ascontiguousarray(v), device=device) for k, v in batch.items()}, [n])


def frames_section(device: torch.device, frames: int, timing: harness.Timing) -> list[str]:
    streams = 8
    spec = {"frame": ArraySpec(FRAME, np.uint8)}
    ours = TorchUniformReplayBuffer(spec, streams, frames // streams, device=device, seed=0)
    captured = _captured(spec, streams, frames // streams, device)
    rng = np.random.default_rng(0)
    block = torch.as_tensor(rng.integers(0, 256, (streams, *FRAME), dtype=np.uint8), device=device)
    theirs = torchrl_buffer(device, frames)
    for _ in range(frames // streams):
        ours.add_batch({"frame": block})
        captured.add_batch({"frame": block})
    if theirs is not None:
        from tensordict import TensorDict

        chunk = min(1024, frames)  # whole chunks of the streams' block, at least one even at --tiny sizes
        for _ in range(frames // chunk):
            theirs.extend(TensorDict({"frame": block.repeat(chunk // streams, 1, 1, 1)}, [chunk]))
    table = ours._storage.rows  # the same bytes, one tensor: the bare loop's table
    generator = torch.Generator(device=device).manual_seed(0)
    lines = []
    for n in (32, BATCH):
        calls = {"replaybuf": lambda n=n: ours.get_next(n), "replaybuf captured": lambda n=n: captured.get_next(n)}
        if theirs is not None:
            calls["TorchRL"] = lambda n=n: theirs.sample(n)
        calls["bare loop"] = bare_loop(table, n, generator)
        kernel = kernel_alone(table, n, torch.Generator(device=device).manual_seed(1))
        if kernel is not None:
            calls["kernel alone"] = kernel
        gigabytes = n * np.prod(FRAME) / 1e9
        lines.append(_row(f"sample {n} frames", us_per_call(device, calls, timing), gigabytes))
    return lines


def small_section(device: torch.device, capacity: int, timing: harness.Timing) -> list[str]:
    streams = BATCH
    ours = TorchUniformReplayBuffer(SMALL, streams, capacity // streams, device=device, seed=0)
    captured = _captured(SMALL, streams, capacity // streams, device)
    theirs = torchrl_buffer(device, capacity)
    host = small_batch(BATCH, 0)
    on_device = {k: torch.as_tensor(v, device=device) for k, v in host.items()}
    for step in range(capacity // streams):
        ours.add_batch(host if step % 2 else on_device)
        captured.add_batch(on_device)
        if theirs is not None:
            theirs.extend(as_tensordict(host, device))
    packed = ours._storage.rows  # the five leaves side by side: the bare loop's one table
    lines = []
    calls: dict[str, Callable[[], object]] = {"replaybuf": lambda: ours.add_batch(host)}
    if theirs is not None:
        host_td = as_tensordict(host, torch.device("cpu"))
        calls["TorchRL"] = lambda: theirs.extend(host_td)
    lines.append(_row("add 256 small transitions from host", us_per_call(device, calls, timing)))
    calls = {"replaybuf": lambda: ours.add_batch(on_device)}
    if theirs is not None:
        device_td = as_tensordict(host, device)
        calls["TorchRL"] = lambda: theirs.extend(device_td)
    lines.append(_row("add 256 small transitions from device", us_per_call(device, calls, timing)))
    calls = {"replaybuf": lambda: ours.get_next(BATCH), "replaybuf captured": lambda: captured.get_next(BATCH)}
    if theirs is not None:
        calls["TorchRL"] = lambda: theirs.sample(BATCH)
    calls["bare loop"] = bare_loop(packed, BATCH, torch.Generator(device=device).manual_seed(0))
    kernel = kernel_alone(packed, BATCH, torch.Generator(device=device).manual_seed(1))
    if kernel is not None:
        calls["kernel alone"] = kernel
    figures = us_per_call(device, calls, timing)
    lines.append(_row("sample 256 small transitions", figures))
    ratio = figures["replaybuf"] / figures["bare loop"]
    lines.append(f"\nsample 256 small transitions: replaybuf / bare loop = {ratio:.2f}x (issue 33 CPU target <= 1.5x)")
    return lines


def mindspore_section(device: torch.device, capacity: int, timing: harness.Timing) -> list[str]:
    shapes, types = (
        [(4,), (1,), (1,), (1,), (4,)],
        [torch.float32, torch.int64, torch.float32, torch.bool, torch.float32],
    )
    buffer = ReplayBuffer(BATCH, capacity, shapes, types, device=device, seed=0)
    host = small_batch(BATCH, 1)
    rows = [
        torch.as_tensor(host["obs"], device=device),
        torch.as_tensor(host["action"][:, None], device=device),
        torch.as_tensor(host["reward"][:, None], device=device),
        torch.as_tensor(host["done"][:, None], device=device),
        torch.as_tensor(host["next_obs"], device=device),
    ]
    for _ in range(capacity // BATCH):
        buffer.insert(rows)
    figures = us_per_call(device, {"insert 256": lambda: buffer.insert(rows), "sample 256": buffer.sample}, timing)
    return [f"| MindSpore-style insert 256 / sample 256 | {figures['insert 256']:.1f} / {figures['sample 256']:.1f} |"]


def _captured(spec: dict, streams: int, max_length: int, device: torch.device) -> TorchUniformReplayBuffer:
    """The buffer sampled through its recorded step (a CUDA graph on a GPU; eager on the CPU)."""
    return TorchUniformReplayBuffer(spec, streams, max_length, device=device, seed=0, capture=True)


COLUMNS = ("replaybuf", "replaybuf captured", "TorchRL", "bare loop", "kernel alone")


def _row(name: str, figures: dict[str, float], gigabytes: float | None = None) -> str:
    cells = []
    for column in COLUMNS:
        if column not in figures:
            cells.append("")
            continue
        cell = f"{figures[column]:.1f}"
        if gigabytes is not None:
            rate = gigabytes / figures[column] * 1e6
            cell += f" ({rate:,.0f} GB/s)" if rate >= 100 else f" ({rate:.3g} GB/s)"
        cells.append(cell)
    return f"| {name} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sections", default="frames,small,mindspore,jax")
    parser.add_argument("--quick", action="store_true", help="small sizes, short repetitions")
    parser.add_argument("--tiny", action="store_true", help="toy sizes: a smoke test of this script")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # host overhead, not the CPU's parallel gather, is measured
    frames = 64 if args.tiny else 4096 if args.quick or device.type == "cpu" else 100_000
    capacity = 1024 if args.tiny else 100_352
    # one call's warm-up and the calibration of calls per repetition come before the timing
    timing = harness.Timing(3, 0.01, 0.0) if args.tiny else harness.Timing(args.reps, 0.05 if args.quick else 0.25, 0.0)
    sections = args.sections.split(",")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"bench/gpu.py {' '.join(argv if argv is not None else sys.argv[1:])}: {name}, torch {torch.__version__}")
    print(f"us per call (host wall time), median of {timing.reps} repetitions; {frames} frames stored\n")
    print("| case | " + " | ".join(COLUMNS) + " |\n| --- |" + " ---: |" * len(COLUMNS))
    lines: list[str] = []
    if "frames" in sections:
        lines += frames_section(device, frames, timing)
    if "small" in sections:
        lines += small_section(device, capacity, timing)
    print("\n".join(line for line in lines if line.startswith("|")))
    print("\n".join(line for line in lines if not line.startswith("|")))
    if "mindspore" in sections:
        print("\n| MindSpore-style buffer | us |\n| --- | ---: |")
        print("\n".join(mindspore_section(device, capacity, timing)))
    if "jax" in sections and find_spec("jax") is not None:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch's tensors
        from jax_gpu import jax_section

        print("\n".join(jax_section(tiny=args.tiny, quick=args.quick, reps=timing.reps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
