"""Decide between a real GPU and the Numba CUDA simulator, before numba is imported.

The simulator must be switched on through ``NUMBA_ENABLE_CUDASIM=1`` before the
first ``import numba``; afterwards the choice is fixed for the process. We probe
the driver with ctypes, so this module never imports numba or cupy itself.
"""
from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache


@lru_cache(maxsize=1)
def gpu_count() -> int:
    """How many devices the CUDA driver reports (0 when it does not load)."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if lib.cuInit(0) != 0:
            return 0
        count = ctypes.c_int(0)
        return count.value if lib.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0
    return 0


def gpu_present() -> bool:
    """True when the CUDA driver loads and reports at least one device."""
    return gpu_count() > 0


def simulator_requested() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def setup(verbose: bool = True, extras=()) -> str:
    """Pick the execution mode for this process and return it ("gpu" or "simulator").

    Call it before importing numba or triton. With no GPU it turns the simulator on, so every
    Numba kernel still runs (slowly, on the CPU) and out-of-bounds indexing raises, and Triton's
    interpreter, which runs Triton kernels on the CPU on torch tensors.
    ``extras`` names the package extras the notebook needs (e.g. ["torch"]): see course/install.py.
    """
    if "numba" in sys.modules and not simulator_requested():
        mode = "gpu" if gpu_present() else "simulator"
        if mode == "simulator":
            raise RuntimeError(
                "numba was imported before course.setup() and no GPU is present: "
                "restart the kernel and run the setup cell first."
            )
    elif simulator_requested() or not gpu_present():
        # Without a GPU, Numba kernels run in its CUDA simulator and Triton kernels in Triton's
        # interpreter: both must be switched on before numba or triton is imported.
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        os.environ["TRITON_INTERPRET"] = "1"
        mode = "simulator"
    else:
        mode = "gpu"
    # --- install (course/install.py): on Colab, what this notebook needs; numba-cuda switched on
    from .install import ensure

    ensure(extras, verbose=verbose)
    # --- end install
    if mode == "simulator":
        # warp shuffles and syncwarp, which Numba's simulator lacks: the grader's, one place
        from autograder.runner import strict_barriers
        from autograder.sim_warps import patch_simulator as patch_warps

        patch_warps()
        # The grader's simulator: threads of a kernel with no barrier run in turn (a hundred times
        # faster), and a barrier that not every thread of a block reaches fails at once.
        strict_barriers()
    if mode == "simulator" and "triton" in extras:
        # the interpreter's scalars with NumPy 2.4 (triton-lang/triton#9171): the grader's fix, one place
        from autograder.triton_compat import patch_interpreter

        patch_interpreter()
    if verbose:
        if mode == "gpu":
            print("Mode: GPU. Every cell runs on the device.")
        else:
            triton = " and Triton kernels through Triton's interpreter" if "triton" in extras else ""
            print(
                "Mode: simulator (no GPU found). Numba kernels run on the CPU through the "
                f"CUDA simulator{triton}; cells that start with %%gpu say what they show on a GPU "
                "and are skipped."
            )
    global MODE
    MODE = mode
    from . import gpu_cells

    gpu_cells.register()  # %%gpu cells skip themselves without a GPU
    return mode


MODE = "simulator" if (simulator_requested() or not gpu_present()) else "gpu"


# --------------------------------------------------------------------------- facts
def package_versions(names) -> dict[str, str]:
    """Installed versions of the named distributions (missing ones left out)."""
    from importlib import metadata

    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def nvidia_smi_gpus() -> list[dict[str, str]]:
    """One dict per GPU from nvidia-smi (index, name, compute_cap, driver, memory); [] if it fails."""
    import subprocess

    fields = ("index", "name", "compute_cap", "driver_version", "memory.total")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return [dict(zip(fields, (s.strip() for s in row.split(","))))
                for row in out.stdout.strip().splitlines() if row.count(",") == len(fields) - 1]
    except (OSError, subprocess.SubprocessError):
        return []


def cupy_runtime_version() -> str | None:
    """CuPy's CUDA runtime as "major.minor", or None without CuPy or a GPU."""
    try:
        import cupy

        v = cupy.cuda.runtime.runtimeGetVersion()
    except Exception:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


# --------------------------------------------------------------------------- sizes
def memory_budget(fraction: float = 0.8) -> int:
    """Bytes of device memory a notebook may use: a fraction of what is free now (0 in simulator mode).

    Problem sizes scale with this, so a notebook that fits a 141 GB GPU also fits a 15 GB one.
    """
    if MODE != "gpu":
        return 0
    from numba import cuda

    free, _total = cuda.current_context().get_memory_info()
    return int(free * fraction)

