"""Lab 9: streams. Chunked upload and compute on several streams (a neighbour sum whose
chunks need their neighbours), copies overlapped with a heavy kernel from pinned memory,
and a CUDA graph that replays a block of small kernel launches (Numba and CuPy)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import CUPY_ARRAY_COPIES, Exercise, Lab, Out, SCALARS as SPEC_SCALARS, Speed, uniform

SCALARS = SPEC_SCALARS + ("!numpy.uint64",)  # addresses as kernel arguments
# Numba exercises: uploads (to_device, copy_to_device) are the point; host maths and
# round trips through the host are not.
NO_HOST_MATH = ("numpy.*", "cupy.*", "torch.*", "*.copy_to_host") + SCALARS
# The CuPy exercise: raw kernels, temporaries from the pool, streams, events and graphs.
CUPY_LAUNCHES_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.empty", "!cupy.empty_like",
                      "!cupy.cuda", "!cupy.cuda.*", "!cupy.float32", "!cupy.int32", "!cupy.int64",
                      "numpy.*", "torch.*") + CUPY_ARRAY_COPIES + SCALARS

LARGE = 10_000_019  # large and odd: no power-of-two grid or chunk covers it exactly

# The heavy kernel of exercise 2 (the chapter's relax): v <- A v + B x, `steps` times from v = 0.
RELAX_A, RELAX_B = np.float32(0.999), np.float32(0.001)
# 2**26 floats (256 MiB) take about 4.9 ms over PCIe Gen5 at 55 GB/s (chapter 4's measurement).
# The kernel's loop compiles to 4 FMAs and 3 bookkeeping instructions per 4 steps, so 1500 steps
# on 2**26 elements take between about 3.5 ms (one instruction issued per step, the FP32 peak)
# and about 8 ms (every instruction issued on its own): 0.7 to 1.7 times the copy.
PIPELINE_TIMED = {"n": 1 << 26, "steps": 1500}

# Exercise 3: one explicit heat-equation step per launch, on a rod whose ends are held at 0.
HEAT_R = 0.25  # diffusion number; the explicit scheme is stable for R <= 1/2
HEAT_SOURCE = r"""
extern "C" __global__ void heat_step(const float* u, float* v, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float left = i > 0 ? u[i - 1] : 0.0f;       // the ends of the rod are held at 0
        float right = i + 1 < n ? u[i + 1] : 0.0f;
        float c = u[i];
        v[i] = c + 0.25f * (left - 2.0f * c + right);
    }
}
"""
# 4,096 points: each launch is a few microseconds of GPU work, so launching is the cost.
HEAT_TIMED = {"n": 1 << 12, "steps": 4096}


def _vec(n):
    return (n,)


# --------------------------------------------------------------------------- 1. chunks
def _neighbor_sum64(x):
    """out[i] = x[i-1] + x[i] + x[i+1]; neighbours outside the array count as 0."""
    padded = np.pad(x, 1)
    return padded[:-2] + padded[1:-1] + padded[2:]


def _chunk_cases(sim: bool) -> list[dict]:
    """(n, chunk): one chunk, chunks of one element, chunks that do and do not divide n."""
    pairs = [(1, 1), (2, 1), (31, 4), (32, 32), (33, 32), (100, 1000), (1023, 100), (1024, 1024),
             (1025, 256), (5003, 500)]
    if not sim:
        pairs += [(100_003, 4096), (1_000_003, 7_777), (LARGE, 1 << 20)]
    return [{"n": n, "chunk": c} for n, c in pairs]


def _chunk_inputs(p, rng):
    return {"x": uniform(rng, p["n"]), "chunk": p["chunk"]}


# --------------------------------------------------------------------------- 2. overlap
def _relax64(x, steps):
    """The closed form of `steps` updates v <- A v + B x from v = 0, with the kernel's float32
    constants: v = B x (1 - A^steps) / (1 - A)."""
    a, b = float(RELAX_A), float(RELAX_B)
    return np.asarray(x, dtype=np.float64) * (b * (1.0 - a ** steps) / (1.0 - a))


def _pipeline_cases(sim: bool) -> list[dict]:
    if sim:
        sizes, steps = [1, 31, 32, 33, 1023, 1024, 1025, 5003], 3
    else:
        sizes, steps = [1, 31, 32, 33, 1023, 1024, 1025, LARGE], 50
    return [{"n": n, "steps": steps} for n in sizes] + [{"n": 100, "steps": 0}]


def _pipeline_inputs(p, rng):
    return {"x": uniform(rng, p["n"]), "steps": p["steps"]}


# --------------------------------------------------------------------------- 3. graph
def _heat64(u, steps):
    v = np.asarray(u, dtype=np.float64)
    for _ in range(steps):
        padded = np.pad(v, 1)  # the ends of the rod are held at 0
        v = v + HEAT_R * (padded[:-2] - 2.0 * v + padded[2:])
    return v


def _heat_cases(sim: bool) -> list[dict]:
    pairs = [(1, 1), (31, 2), (32, 3), (33, 37), (1023, 64), (1024, 65), (1025, 101), (100_003, 300)]
    return [{"n": n, "steps": s} for n, s in pairs]


def _heat_inputs(p, rng):
    return {"u": uniform(rng, p["n"]), "steps": p["steps"]}


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _numba_serial():
    """The serial reference of exercise 2, built in the reference runner on first use (never at import)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32

    a, b = RELAX_A, RELAX_B

    @cuda.jit
    def relax_kernel(x, steps, y):
        i = cuda.grid(1)
        if i < y.size:
            bx = b * x[i]
            v = float32(0.0)
            k = 0
            while k < steps:  # a plain counter: Numba's range() adds work to every step
                v = a * v + bx
                k += 1
            y[i] = v

    def serial(x, steps, out):
        out.copy_to_device(x)  # all of x, on the default stream: returns when it has arrived
        n = out.shape[0]
        relax_kernel[(n + 255) // 256, 256](out, steps, out)  # then the kernel, in place

    return serial


def _base_pipeline(x, steps, out):
    _numba_serial()(x, steps, out)


@lru_cache(maxsize=None)
def _cupy_heat():
    import cupy as cp

    return cp.RawKernel(HEAT_SOURCE, "heat_step")


def _base_heat(u, steps, out):
    """One launch per step, one after the other, ping-ponging between two temporaries."""
    import cupy as cp

    kernel = _cupy_heat()
    n = out.size
    grid, block, size = ((n + 255) // 256,), (256,), np.int64(n)
    tmp = (cp.empty_like(out), cp.empty_like(out))
    src = u
    for k in range(steps):
        dst = out if k == steps - 1 else tmp[k % 2]
        kernel(grid, block, (src, dst, size))
        src = dst


# --------------------------------------------------------------------------- the lab
LAB = Lab(
    name="streams",
    title="Lab 9: streams",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    exercises=(
        Exercise(
            name="chunked_neighbor_sum",
            title="A neighbour sum, uploaded and computed chunk by chunk on streams (Numba)",
            backend="numba",
            args=("x", "chunk", "out"),
            inputs=_chunk_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda x, chunk: {"out": _neighbor_sum64(x)},
            cases=_chunk_cases,
            points=2,
            forbidden=NO_HOST_MATH,
            host_args=("x",),  # a pageable NumPy array; left page-locked fails
        ),
        Exercise(
            name="pipeline",
            title="Overlap the upload with a heavy kernel (Numba)",
            backend="numba",
            args=("x", "steps", "out"),
            inputs=_pipeline_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda x, steps: {"out": _relax64(x, steps)},
            cases=_pipeline_cases,
            timing_case=PIPELINE_TIMED,
            baseline=_base_pipeline,
            baseline_name="serial reference: upload all of x, then the kernel",
            flops=lambda p: (2 * p["steps"] + 1) * p["n"],
            points=1,
            # Model: serial = copy + kernel; pipelined over c chunks = max(copy, kernel) + min/c.
            # With the kernel 0.7 to 1.7 times the copy (see PIPELINE_TIMED) and 16 chunks this is
            # about 1.5x to 1.9x; full points from 1.25x, none without overlap (1.0x).
            speed=Speed(2, full_at=1.25, zero_at=1.0),
            forbidden=NO_HOST_MATH,
            pinned_args=("x",),  # arrives page-locked, as from a data loader that pins its batches
            # float32 rounding in the recurrence: each step keeps 0.999 of the error before it, so
            # the error stays below about 6e-8 / (1 - 0.999) = 6e-5 of the value, for any steps.
            tolerance={"float32": (1e-4, 1e-4)},
        ),
        Exercise(
            name="heat",
            title="Replay a block of small launches as a CUDA graph (CuPy)",
            backend="cupy",
            args=("u", "steps", "out"),
            inputs=_heat_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda u, steps: {"out": _heat64(u, steps)},
            cases=_heat_cases,
            timing_case=HEAT_TIMED,
            baseline=_base_heat,
            baseline_name="reference: one launch per step, one by one",
            points=1,
            # The reference is bound by the host's cost of each launch from Python; a replayed
            # graph by the GPU's own per-kernel cost, a few times lower: the solution's graph ran
            # at 4.1x and 5.7x in two runs on an H200. Full points from 2x leave room for a faster host; a loop of
            # launches, however lean, stays near 1x.
            speed=Speed(2, full_at=2.0, zero_at=1.2),
            launch_cost_counts=True,
            forbidden=CUPY_LAUNCHES_ONLY,
            gpu_only=True,
            # float32 rounding adds up over the steps (~1e-5 of the largest value at 300 steps).
            tolerance={"float32": (1e-4, 1e-4)},
        ),
    ),
)
