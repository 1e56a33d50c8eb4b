"""Lab 1: warps and SMs. Warp and lane ids in 2D blocks, the occupancy model as a kernel,
a divergent branch removed by remapping elements to threads, and a count with a warp vote
(Numba and CUDA C through CuPy)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import Exercise, Lab, NO_HOST_MATH, Out, SCALARS, Speed, awkward_1d, uniform

# The CuPy exercise: a raw kernel, not CuPy's reductions. Reading the SM count is allowed.
CUPY_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.int32", "!cupy.int64",
                    "!cupy.cuda.Device", "!cupy.cuda.runtime.getDeviceProperties",
                    "!cupy.cuda.runtime.getDevice", "numpy.*", "torch.*", "*.get", "*.set",
                    "*.sum", "*.count_nonzero", "*.nonzero", "*.astype") + SCALARS

WARP = 32
FULL_MASK = 0xFFFFFFFF


# --------------------------------------------------------------------------- 1. warp and lane
def _warp_lane_cases(sim: bool) -> list[dict]:
    """(blocks, block_x, block_y): rows that a warp does not fill, partial last warps,
    single threads, full 1024-thread blocks."""
    shapes = [(1, 1, 1), (1, 32, 1), (2, 33, 1), (3, 16, 4), (2, 12, 10), (1, 7, 9), (4, 48, 2),
              (2, 1, 64), (1, 1024, 1), (2, 32, 32)]
    if not sim:
        shapes += [(5, 20, 51), (64, 17, 3), (7, 100, 10)]
    return [{"blocks": b, "bx": x, "by": y} for b, x, y in shapes]


def _warp_lane_inputs(p, rng):
    return {"blocks": p["blocks"], "block_x": p["bx"], "block_y": p["by"]}


def _warp_lane_reference(blocks, block_x, block_y):
    ty, tx = np.meshgrid(np.arange(block_y), np.arange(block_x), indexing="ij")
    linear = ty * block_x + tx  # x varies fastest
    warps_per_block = -(-(block_x * block_y) // WARP)  # a partial last warp still counts
    b = np.arange(blocks).reshape(-1, 1, 1)
    return {"warp": b * warps_per_block + linear // WARP,
            "lane": np.broadcast_to(linear % WARP, (blocks, block_y, block_x))}


def _block_shape(p):
    return (p["blocks"], p["by"], p["bx"])


# --------------------------------------------------------------------------- 2. occupancy
# Per-SM limits (max threads, max blocks, 32-bit registers, shared memory bytes, shared
# memory reserved per block) in the shape the CUDA C++ Programming Guide's table of
# technical specifications gives them; only the formula is graded, so any plausible set works.
SM_LIMITS = {
    "cc90": (2048, 32, 65536, 233472, 1024),
    "cc86": (1536, 16, 65536, 102400, 1024),
    "cc75": (1024, 16, 65536, 65536, 0),
}


def _occupancy_cases(sim: bool) -> list[dict]:
    sizes = [1, 33, 300] if sim else [1, 33, 1000, 5003]
    return [{"m": m, "sm": sm} for sm in SM_LIMITS for m in sizes]


def _occupancy_inputs(p, rng):
    m = p["m"]
    # Half the block sizes are multiples of the warp size, half are not.
    threads = np.where(rng.random(m) < 0.5, 32 * rng.integers(1, 33, m), rng.integers(1, 1025, m))
    regs = rng.integers(1, 256, m)
    smem = np.where(rng.random(m) < 0.3, 0, rng.integers(0, 48 * 1024 + 1, m))
    # Fixed corner cases first: too many registers to launch at all, the block limit, full occupancy.
    fixed = [(1024, 255, 0), (32, 16, 0), (1024, 32, 0), (256, 64, 49152), (1, 1, 0), (100, 40, 20000)]
    for k, (t, r, s) in enumerate(fixed[:m]):
        threads[k], regs[k], smem[k] = t, r, s
    return {"threads": threads.astype(np.int32), "regs": regs.astype(np.int32),
            "smem": smem.astype(np.int32), "limits": np.array(SM_LIMITS[p["sm"]], dtype=np.int32)}


def occupancy_model(threads, regs, smem, limits):
    """The chapter's occupancy model, vectorized: resident warps / maximum warps per SM."""
    max_threads, max_blocks, regs_sm, smem_sm, reserved = (int(v) for v in limits)
    threads = np.asarray(threads, dtype=np.int64)
    regs = np.asarray(regs, dtype=np.int64)
    smem = np.asarray(smem, dtype=np.int64)
    warps = (threads + WARP - 1) // WARP
    by_threads = max_threads // (warps * WARP)
    regs_per_warp = (regs + 7) // 8 * 8 * WARP  # registers come in chunks of 256 per warp
    by_regs = regs_sm // (regs_per_warp * warps)
    need = smem + reserved
    by_smem = np.where(need > 0, smem_sm // np.maximum(need, 1), max_blocks)
    blocks = np.minimum(np.minimum(by_threads, max_blocks), np.minimum(by_regs, by_smem))
    return blocks * warps / (max_threads // WARP)


# --------------------------------------------------------------------------- 3. divergence
# The two paths of the chapter, with float32 constants (the kernels use these exact values).
SPIN_C, SPIN_S, NUDGE, GLIDE_H = (float(np.float32(v)) for v in (0.9950042, 0.0998334, 0.01, 0.05))


def spin_np(x, steps):
    u = np.array(x, dtype=np.float64)
    v = np.zeros_like(u)
    t, w = np.empty_like(u), np.empty_like(u)
    for _ in range(steps):
        np.abs(u, out=t)
        t *= -NUDGE
        np.multiply(v, SPIN_C, out=w)
        t += w
        np.multiply(u, SPIN_S, out=w)
        t += w  # t = S u + C v - K |u|
        u *= SPIN_C
        v *= SPIN_S
        u -= v  # u = C u - S v
        v, t = t, v  # the new v; the old buffer becomes scratch
    return u


def glide_np(x, steps):
    u = np.array(x, dtype=np.float64)
    v = np.zeros_like(u)
    t = np.empty_like(u)
    for _ in range(steps):
        np.abs(v, out=t)
        t *= NUDGE
        v += t
        np.multiply(u, GLIDE_H, out=t)
        v -= t
        np.multiply(v, GLIDE_H, out=t)
        u += t
    return u


def _paths_reference(x, steps):
    out = np.empty_like(np.asarray(x, dtype=np.float64))
    out[0::2] = spin_np(x[0::2], steps)
    out[1::2] = glide_np(x[1::2], steps)
    return {"out": out}


def _divergence_cases(sim: bool) -> list[dict]:
    if sim:
        return [dict(c, steps=3) for c in awkward_1d(True, 0, large_sim=2003)] + [{"n": 100, "steps": 0}]
    cases = [dict(c, steps=64) for c in awkward_1d(False, 100_003)]
    return cases + [{"n": 1000, "steps": 1}, {"n": 4099, "steps": 300}]


def _divergence_inputs(p, rng):
    return {"x": uniform(rng, p["n"]), "steps": p["steps"]}


# --------------------------------------------------------------------------- 4, 5. warp vote
def _count_inputs(p, rng):
    x = uniform(rng, p["n"])
    x[rng.random(p["n"]) < 0.03] = 0.0  # zero is not positive
    x[rng.random(p["n"]) < 0.02] = -0.0
    return {"x": x}


def _count_reference(x):
    return {"out": np.array([np.count_nonzero(x > 0)], dtype=np.int64)}


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _numba_baselines():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32

    @cuda.jit(device=True)
    def spin(x, steps):
        c, s, k = float32(SPIN_C), float32(SPIN_S), float32(NUDGE)
        u = x
        v = float32(0.0)
        for _ in range(steps):
            u, v = c * u - s * v, s * u + c * v - k * abs(u)
        return u

    @cuda.jit(device=True)
    def glide(x, steps):
        h, k = float32(GLIDE_H), float32(NUDGE)
        u = x
        v = float32(0.0)
        for _ in range(steps):
            v = v + k * abs(v) - h * u
            u = u + h * v
        return u

    @cuda.jit
    def uniform_paths(x, steps, out):
        # Warp w takes the elements 64 * (w // 2) + 2 * lane + (w % 2): one parity per warp.
        t = cuda.grid(1)
        w = t // WARP
        i = 64 * (w // 2) + 2 * (t % WARP) + w % 2
        if i < out.shape[0]:
            if w % 2 == 0:
                out[i] = spin(x[i], steps)
            else:
                out[i] = glide(x[i], steps)

    @cuda.jit
    def zero(out):
        out[0] = 0

    @cuda.jit
    def count(x, out):
        lane = cuda.laneid
        warp = cuda.grid(1) // WARP
        warps = cuda.gridsize(1) // WARP
        n = x.shape[0]
        total = 0
        for base in range(warp * WARP, n, warps * WARP):  # warp-uniform loop: every lane votes
            i = base + lane
            total += cuda.popc(cuda.ballot_sync(FULL_MASK, i < n and x[i] > 0))
        if lane == 0:
            cuda.atomic.add(out, 0, total)

    dev = cuda.get_current_device()
    # One full wave of 256-thread blocks: as many as the SMs can hold at once (the simulator's
    # device has no SMs to count: a few blocks, as the lab text's own helper takes there).
    wave = (dev.MULTIPROCESSOR_COUNT * (dev.MAX_THREADS_PER_MULTIPROCESSOR // 256)
            if hasattr(dev, "MULTIPROCESSOR_COUNT") else 4)

    def no_divergence(x, steps, out):
        n = out.shape[0]
        threads = 64 * ((n + 63) // 64)
        uniform_paths[(threads + 255) // 256, 256](x, steps, out)

    def count_positive(x, out):
        zero[1, 1](out)
        count[wave, 256](x, out)

    return no_divergence, count_positive


def _base_no_divergence(x, steps, out):
    _numba_baselines()[0](x, steps, out)


def _base_count(x, out):
    _numba_baselines()[1](x, out)


@lru_cache(maxsize=None)
def _cupy_count():
    import cupy as cp

    kernel = cp.RawKernel(r"""
    extern "C" __global__ void count_positive(const float* x, long long n, int* out) {
        const int lane = threadIdx.x & 31;
        const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
        const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
        int total = 0;
        for (long long base = warp * 32; base < n; base += warps * 32) {
            const long long i = base + lane;
            total += __popc(__ballot_sync(0xffffffffu, i < n && x[i] > 0.0f));
        }
        if (lane == 0) atomicAdd(out, total);
    }""", "count_positive")
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    wave = props["multiProcessorCount"] * (props["maxThreadsPerMultiProcessor"] // 256)
    return kernel, wave


def _base_count_cupy(x, out):
    import numpy as np_

    kernel, wave = _cupy_count()
    out.fill(0)
    kernel((wave,), (256,), (x, np_.int64(x.size), out))


# --------------------------------------------------------------------------- the lab
COUNT = dict(
    args=("x", "out"),
    inputs=_count_inputs,
    outputs={"out": Out(lambda p: (1,), "int32")},
    reference=_count_reference,
    cases=lambda sim: awkward_1d(sim, 10_000_019),
    timing_case={"n": 1 << 26},  # 256 MiB: far beyond the L2
    bytes_moved=lambda p: 4 * p["n"],
    gpu_only=True,  # warp votes do not run in the simulator; CuPy needs a GPU
)

LAB = Lab(
    name="warps_sms",
    title="Lab 1: warps and SMs",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    exercises=(
        Exercise(
            name="warp_lane",
            title="Warp and lane of every thread (Numba)",
            backend="numba",
            args=("blocks", "block_x", "block_y", "warp", "lane"),
            inputs=_warp_lane_inputs,
            outputs={"warp": Out(_block_shape, "int32"), "lane": Out(_block_shape, "int32")},
            reference=_warp_lane_reference,
            cases=_warp_lane_cases,
            points=2,
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="occupancy",
            title="Theoretical occupancy, one configuration per thread (Numba)",
            backend="numba",
            args=("threads", "regs", "smem", "limits", "out"),
            inputs=_occupancy_inputs,
            outputs={"out": Out(lambda p: (p["m"],), "float32")},
            reference=lambda threads, regs, smem, limits: {"out": occupancy_model(threads, regs, smem, limits)},
            cases=_occupancy_cases,
            points=2,
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="no_divergence",
            title="Two paths, one per warp (Numba)",
            backend="numba",
            args=("x", "steps", "out"),
            inputs=_divergence_inputs,
            outputs={"out": Out(lambda p: (p["n"],))},
            reference=_paths_reference,
            cases=_divergence_cases,
            # 2**20 elements x 1024 steps: compute-bound (a few hundred microseconds), so the
            # cost of divergence is not hidden behind memory traffic or launch overhead.
            timing_case={"n": 1 << 20, "steps": 1024},
            baseline=_base_no_divergence,
            baseline_name="reference kernel (one path per warp)",
            flops=lambda p: 7 * p["n"] * p["steps"],  # spin 8 and glide 6 flops per step
            points=2,
            # A kernel that branches on i % 2 runs both paths in every warp: about 0.5x.
            speed=Speed(2, full_at=0.85, zero_at=0.65),
            forbidden=NO_HOST_MATH,
            # float32 error grows about linearly with the steps (~3e-5 of the largest value at 1024).
            tolerance={"float32": (1e-4, 2e-4)},
        ),
        Exercise(
            name="count_positive",
            title="Count with a warp vote (Numba)",
            backend="numba",
            baseline=_base_count,
            baseline_name="reference kernel (ballot, one atomic per warp)",
            points=2,
            # One atomic per element (or per 32 elements) on one counter is far slower than
            # reading the array; a fixed grid with one atomic per warp is memory-bound.
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            **COUNT,
        ),
        Exercise(
            name="count_positive_cupy",
            title="Count with a warp vote in CUDA C (CuPy)",
            backend="cupy",
            baseline=_base_count_cupy,
            baseline_name="reference CuPy raw kernel",
            points=1,
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=CUPY_KERNEL_ONLY,
            **COUNT,
        ),
    ),
)
