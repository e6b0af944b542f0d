"""One virtual environment per peer under bench/.venvs/, built from bench/requirements/.

Each peer gets its own environment because their pins conflict (TF-Agents needs
TensorFlow 2.15, TorchRL an older tensordict). An environment is rebuilt only when its
requirement files change (a stamp holds their hash). Every pip call gets
``-c requirements/constraints.txt`` so that no peer pulls a CUDA torch.

Run ``python bench/venvs.py [NAME ...]`` to build ahead of a benchmark run.
"""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements"
VENVS = HERE / ".venvs"
CONSTRAINTS = REQUIREMENTS / "constraints.txt"

#: peer environment -> requirement files; a file named *-nodeps.txt is installed --no-deps.
ENVIRONMENTS = {
    "cpprb": ["cpprb.txt"],
    "sb3": ["sb3.txt"],
    "torchrl": ["torchrl.txt"],
    "torchrl-minari": ["torchrl.txt", "minari.txt"],
    "tianshou": ["tianshou.txt"],
    "flashbax": ["flashbax.txt"],
    "jax": ["jax.txt"],
    "tfagents": ["tfagents.txt", "tfagents-nodeps.txt"],
}

#: environments the Makefile builds at the repository root (their pins are the tests' too):
#: name -> folder; ``ensure`` only finds them
MAKEFILE_VENVS = {"rllib": HERE.parent / ".venv-rllib"}


class VenvError(RuntimeError):
    """An environment could not be built; the message says which step and where the log is."""


def python_of(name: str) -> Path:
    return MAKEFILE_VENVS.get(name, VENVS / name) / "bin" / "python"


def _stamp_text(name: str) -> str:
    digest = hashlib.sha256()
    for path in [CONSTRAINTS, *POST_INSTALL_SCRIPTS.get(name, [])] + [REQUIREMENTS / f for f in ENVIRONMENTS[name]]:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _run(cmd: list[str], log: Path, what: str) -> None:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(map(str, cmd))}\n")
        out.flush()
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
    if code:
        tail = log.read_text().strip().splitlines()[-3:]
        raise VenvError(f"{what} failed (exit {code}); see {log}: {' | '.join(tail)}")


def ensure(name: str, base_python: str = sys.executable) -> Path:
    """Build (or reuse) the environment of peer ``name``; return its python.

    Raises:
        VenvError: venv creation, a pip install or a post-install step failed.
    """
    if name in MAKEFILE_VENVS:
        if not python_of(name).exists():
            folder = MAKEFILE_VENVS[name].name
            raise VenvError(f"{name}: {folder} is not built; run `make {folder}/.installed`")
        return python_of(name)
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per environment, also across runs
        return _ensure_locked(name, base_python)


def _ensure_locked(name: str, base_python: str) -> Path:
    venv = VENVS / name
    stamp = venv / ".bench-stamp"
    want = _stamp_text(name)
    if stamp.exists() and stamp.read_text() == want and python_of(name).exists():
        return python_of(name)
    log = VENVS / f"{name}.log"
    log.write_text(f"building {name} at {time.ctime()}\n")
    if not python_of(name).exists():
        base = getattr(sys, "_base_executable", base_python)
        _run([base, "-m", "venv", str(venv)], log, f"{name}: venv")
    pip = [str(python_of(name)), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS)]
    for req in ENVIRONMENTS[name]:
        extra = ["--no-deps"] if req.endswith("-nodeps.txt") else []
        _run(pip + extra + ["-r", str(REQUIREMENTS / req)], log, f"{name}: pip install -r {req}")
    hook = POST_INSTALL.get(name)
    if hook:
        hook(name, log)
    stamp.write_text(want)
    return python_of(name)


def _build_torchrl_extension(name: str, log: Path) -> None:
    """Rebuild TorchRL's C++ extension (prioritized sampling) against the installed torch.

    No TorchRL wheel's prebuilt ``_torchrl`` links against torch 2.13.0 (missing symbols);
    the wheel ships the C++ sources, so compile them with torch's cpp_extension.
    """
    _run([str(python_of(name)), str(HERE / "build_torchrl_ext.py")], log, f"{name}: build C++ extension")


POST_INSTALL = {"torchrl": _build_torchrl_extension, "torchrl-minari": _build_torchrl_extension}
POST_INSTALL_SCRIPTS = {name: [HERE / "build_torchrl_ext.py"] for name in POST_INSTALL}


def main(argv: list[str]) -> int:
    names = argv or list(ENVIRONMENTS)
    failed = 0
    for name in names:
        start = time.time()
        try:
            ensure(name)
            print(f"{name}: ready ({time.time() - start:.0f} s)", flush=True)
        except VenvError as exc:
            failed += 1
            print(f"{name}: FAILED: {exc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
