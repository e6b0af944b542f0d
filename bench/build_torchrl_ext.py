"""Rebuild TorchRL's C++ extension (``torchrl._torchrl``) against the installed torch.

No TorchRL wheel's prebuilt ``_torchrl`` links against torch 2.13.0 (missing symbols), and
the prioritized sampler needs it. The wheel ships the C++ sources (torchrl/csrc), so this
compiles the CPU part with g++ and torch's headers and replaces the prebuilt library.
Run with the torchrl environment's python (bench/venvs.py does).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path

import torch
from torch.utils import cpp_extension


def main() -> int:
    if subprocess.call([sys.executable, "-c", "import torchrl._torchrl"], stderr=subprocess.DEVNULL) == 0:
        print("torchrl._torchrl imports: nothing to build")  # the prebuilt one does not; ours does
        return 0
    package = Path(importlib.util.find_spec("torchrl").origin).parent
    sources = [str(package / "csrc" / name) for name in ("pybind.cpp", "utils.cpp")]
    target = package / f"_torchrl{sysconfig.get_config_var('EXT_SUFFIX')}"
    torch_lib = Path(torch.__file__).parent / "lib"
    abi = int(torch.compiled_with_cxx11_abi())
    cmd = [
        "g++",
        "-O2",
        "-shared",
        "-fPIC",
        "-std=c++17",
        "-w",
        *sources,
        *(f"-I{p}" for p in cpp_extension.include_paths()),
        f"-I{sysconfig.get_paths()['include']}",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        "-DTORCH_EXTENSION_NAME=_torchrl",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        f"-L{torch_lib}",
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
        f"-Wl,-rpath,{torch_lib}",
        "-o",
        str(target) + ".new",
    ]
    print(" ".join(cmd), flush=True)
    subprocess.check_call(cmd)
    Path(str(target) + ".new").replace(target)
    subprocess.check_call([sys.executable, "-c", "import torchrl._torchrl"])
    print(f"built {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
