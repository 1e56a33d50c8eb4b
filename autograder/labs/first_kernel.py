"""Lab: your first kernel. Vector add in Numba with a bounds check, SAXPY with a
grid-stride loop, and the same add written as a CuPy raw kernel."""
from __future__ import annotations

from functools import lru_cache

from ..spec import Exercise, Lab, NO_HOST_MATH, Out, SCALARS, Speed, awkward_1d, uniform


def _vec(n):
    return (n,)


@lru_cache(maxsize=None)
def _baselines():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda

    @cuda.jit
    def add_kernel(a, b, out):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, out.shape[0], stride):
            out[i] = a[i] + b[i]

    @cuda.jit
    def saxpy_kernel(alpha, x, y, out):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, out.shape[0], stride):
            out[i] = alpha * x[i] + y[i]

    def blocks(n):
        return max(1, min(132 * 16, (n + 255) // 256))

    def add(a, b, out):
        add_kernel[blocks(out.shape[0]), 256](a, b, out)

    def saxpy(alpha, x, y, out):
        saxpy_kernel[blocks(out.shape[0]), 256](alpha, x, y, out)

    return add, saxpy


def _base_add(a, b, out):
    _baselines()[0](a, b, out)


@lru_cache(maxsize=None)
def _cupy_add_kernel():
    import cupy as cp

    return cp.RawKernel(r"""
    extern "C" __global__ void add(const float* a, const float* b, float* out, long long n) {
        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = a[i] + b[i];
    }""", "add")


def _base_add_cupy(a, b, out):
    """The CuPy exercise's reference: a CuPy raw kernel, so both pay CuPy's launch cost.
    (Numba launching on CuPy arrays converts them on every call, which would flatter the learner.)"""
    import numpy as np

    n = out.size
    _cupy_add_kernel()(((n + 255) // 256,), (256,), (a, b, out, np.int64(n)))


def _base_saxpy(alpha, x, y, out):
    _baselines()[1](alpha, x, y, out)


def _add_inputs(p, rng):
    return {"a": uniform(rng, p["n"]), "b": uniform(rng, p["n"])}


def _saxpy_inputs(p, rng):
    return {"alpha": float(rng.uniform(-3, 3)), "x": uniform(rng, p["n"]), "y": uniform(rng, p["n"])}


LARGE = 10_000_019  # large and odd: no power-of-two grid covers it exactly
TIMED = {"n": 1 << 26}  # 256 MiB per array: far beyond the L2

# What every exercise of this lab shares: 1D float32 vectors of awkward lengths, timed at 2**26.
VECTOR_1D = dict(
    outputs={"out": Out(lambda p: _vec(p["n"]))},
    cases=lambda sim: awkward_1d(sim, LARGE),
    timing_case=TIMED,
    bytes_moved=lambda p: 3 * 4 * p["n"],
    speed=Speed(1, full_at=0.8, zero_at=0.25),
)
ADD = dict(VECTOR_1D, args=("a", "b", "out"), inputs=_add_inputs, reference=lambda a, b: {"out": a + b},
           baseline=_base_add, flops=lambda p: p["n"])

LAB = Lab(
    name="first_kernel",
    title="Lab 0: your first kernel",
    setup="import math\nimport numpy as np\nfrom numba import cuda\n",
    exercises=(
        Exercise(
            name="vector_add",
            title="Vector add with a bounds check (Numba)",
            backend="numba",
            points=2,
            forbidden=NO_HOST_MATH,
            **ADD,
        ),
        Exercise(
            name="saxpy",
            title="SAXPY with a grid-stride loop (Numba)",
            backend="numba",
            args=("alpha", "x", "y", "out"),
            inputs=_saxpy_inputs,
            reference=lambda alpha, x, y: {"out": alpha * x + y},
            baseline=_base_saxpy,
            flops=lambda p: 2 * p["n"],
            points=2,
            forbidden=NO_HOST_MATH,
            **VECTOR_1D,
        ),
        Exercise(
            name="vector_add_cupy",
            title="Vector add as a CuPy raw kernel",
            backend="cupy",
            points=1,
            baseline_name="reference CuPy raw kernel",
            # The kernel is the point: library array maths is not allowed.
            forbidden=("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.ElementwiseKernel",
                       "!cupy.float32", "!cupy.int32", "!cupy.int64", "numpy.*", "torch.*",
                       "*.get", "*.set") + SCALARS,
            gpu_only=True,
            **dict(ADD, baseline=_base_add_cupy),
        ),
    ),
)
