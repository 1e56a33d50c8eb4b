"""Lab: memory. Raw cudaMalloc/cudaMemcpy/cudaFree through CuPy's runtime bindings, a
faster upload from pageable host memory, a neighbour sum whose out-of-bounds bugs the
learner fixes, and (stretch) two passes of that sum with a temporary from CuPy's pool."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import CUPY_ARRAY_COPIES, Exercise, Lab, Out, Speed, awkward_1d, uniform
from ..spec import NO_HOST_MATH, SCALARS  # SCALARS has numpy.uint64: addresses as kernel arguments
# CuPy's runtime bindings (cupy.cuda.runtime.malloc, memcpy, free, ...) and raw kernels are
# allowed; CuPy array maths and the array methods that copy are not.
CUPY_RAW_ONLY = ("cupy.*", "!cupy.cuda", "!cupy.cuda.*", "numpy.*", "torch.*") + CUPY_ARRAY_COPIES + SCALARS

LARGE = 10_000_019  # large and odd: no power-of-two grid covers it exactly (40 MB of float32)
TIMED = {"n": 1 << 26}  # 256 MiB of float32: far beyond the L2, and a long transfer over PCIe


def _vec(n):
    return (n,)


def _x_inputs(p, rng):
    return {"x": uniform(rng, p["n"])}


def _neighbor_sum64(x):
    """out[i] = x[i-1] + x[i] + x[i+1]; neighbours outside the array count as 0."""
    padded = np.pad(x, 1)
    return padded[:-2] + padded[1:-1] + padded[2:]


# --------------------------------------------------------------------------- baselines
def _base_upload(host, out):
    """The plain copy from pageable memory: the driver stages it through its own pinned buffer."""
    out.copy_to_device(host)


@lru_cache(maxsize=None)
def _numba_kernels():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda

    @cuda.jit
    def neighbor_sum_kernel(x, out):
        n = out.shape[0]
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, n, stride):
            s = x[i]
            if i > 0:
                s += x[i - 1]
            if i + 1 < n:
                s += x[i + 1]
            out[i] = s

    def neighbor_sum(x, out):
        n = out.shape[0]
        neighbor_sum_kernel[max(1, min(132 * 16, (n + 255) // 256)), 256](x, out)

    return neighbor_sum


def _base_neighbor_sum(x, out):
    _numba_kernels()(x, out)


@lru_cache(maxsize=None)
def _cupy_neighbor_sum_kernel():
    import cupy as cp

    return cp.RawKernel(r"""
    extern "C" __global__ void neighbor_sum(const float* x, float* out, long long n) {
        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) {
            float s = x[i];
            if (i > 0) s += x[i - 1];
            if (i + 1 < n) s += x[i + 1];
            out[i] = s;
        }
    }""", "neighbor_sum")


def _base_neighbor_sum_twice(x, out):
    """Two launches of a CuPy raw kernel; the temporary comes from CuPy's memory pool."""
    import cupy as cp

    n = out.size
    kernel = _cupy_neighbor_sum_kernel()
    tmp = cp.empty_like(out)
    grid = ((n + 255) // 256,)
    kernel(grid, (256,), (x, tmp, np.int64(n)))
    kernel(grid, (256,), (tmp, out, np.int64(n)))


# --------------------------------------------------------------------------- the lab
LAB = Lab(
    name="memory",
    title="Lab 3: memory",
    setup="import math\nimport numpy as np\nfrom numba import cuda\n",
    exercises=(
        Exercise(
            name="copy_via_runtime",
            title="cudaMalloc, cudaMemcpy and cudaFree through CuPy's runtime bindings",
            backend="cupy",
            args=("src", "dst"),
            inputs=lambda p, rng: {"src": uniform(rng, p["n"])},
            outputs={"dst": Out(lambda p: _vec(p["n"]))},
            reference=lambda src: {"dst": src},
            cases=lambda sim: awkward_1d(sim, LARGE),
            points=1,
            forbidden=CUPY_RAW_ONLY,
            gpu_only=True,
            check_leaks=True,  # a scratch buffer that is never freed fails
        ),
        Exercise(
            name="upload",
            title="Upload from pageable memory, faster (Numba)",
            backend="numba",
            args=("host", "out"),
            inputs=lambda p, rng: {"host": uniform(rng, p["n"])},
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda host: {"out": host},
            cases=lambda sim: awkward_1d(sim, LARGE),
            timing_case=TIMED,
            baseline=_base_upload,
            baseline_name="plain pageable copy, out.copy_to_device(host)",
            points=1,
            # Page-locking in place, copying and unlocking was measured at about 2.4x the plain
            # pageable copy for 256 MiB on an H200 (PCIe Gen5 x16); 1.6x leaves room for noisier hosts.
            speed=Speed(2, full_at=1.6, zero_at=1.05),
            host_args=("host",),  # stays a pageable NumPy array; left page-locked fails
        ),
        Exercise(
            name="neighbor_sum",
            title="Fix the out-of-bounds bugs of a neighbour sum (Numba)",
            backend="numba",
            args=("x", "out"),
            inputs=_x_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda x: {"out": _neighbor_sum64(x)},
            cases=lambda sim: awkward_1d(sim, LARGE),
            timing_case=TIMED,
            baseline=_base_neighbor_sum,
            bytes_moved=lambda p: 2 * 4 * p["n"],
            flops=lambda p: 2 * p["n"],
            points=2,
            # The fixed kernel of the prompt keeps two outputs per thread: measured at 0.82x the
            # one-per-thread reference on the H200, so full points start at 0.7x.
            speed=Speed(1, full_at=0.7, zero_at=0.25),
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="neighbor_sum_twice",
            title="Two neighbour sums with a temporary from the pool (CuPy, stretch)",
            backend="cupy",
            args=("x", "out"),
            inputs=_x_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda x: {"out": _neighbor_sum64(_neighbor_sum64(x))},
            cases=lambda sim: awkward_1d(sim, LARGE),
            # 4 MiB: small enough that a cudaMalloc and cudaFree per call cost more than the kernels.
            timing_case={"n": 1 << 20},
            baseline=_base_neighbor_sum_twice,
            baseline_name="reference: two CuPy raw kernels, temporary from the pool",
            bytes_moved=lambda p: 4 * 4 * p["n"],
            flops=lambda p: 4 * p["n"],
            points=1,
            speed=Speed(1, full_at=0.8, zero_at=0.4),
            forbidden=("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.ElementwiseKernel",
                       "!cupy.empty", "!cupy.empty_like", "!cupy.cuda", "!cupy.cuda.*",
                       "!cupy.float32", "!cupy.int32", "!cupy.int64", "numpy.*", "torch.*")
            + CUPY_ARRAY_COPIES + SCALARS,
            gpu_only=True,
            check_leaks=True,
        ),
    ),
)
