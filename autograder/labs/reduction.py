"""Lab 5: reduction. Block sums in shared memory with sequential addressing, a full sum in one
pass over the data, a maximum with warp shuffles, a sum of squares in CUDA C through CuPy, and
(stretch) the mean and the variance in one pass, with care for rounding."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..spec import Exercise, Lab, NO_HOST_MATH, Out, SCALARS, Speed, awkward_1d, standard_normal, uniform

# Exercise 1 is about the tree in shared memory: no atomics.
NO_ATOMICS = NO_HOST_MATH + ("numba.cuda.atomic.*",)
# The CuPy exercise: a raw kernel, not CuPy's reductions. Reading the SM count and fill are allowed.
CUPY_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.float32", "!cupy.int32",
                    "!cupy.int64", "!cupy.cuda.Device", "!cupy.cuda.runtime.getDeviceProperties",
                    "!cupy.cuda.runtime.getDevice", "numpy.*", "torch.*", "*.get", "*.set", "*.sum",
                    "*.dot", "*.vdot", "*.inner", "*.norm", "*.astype", "*.copy") + SCALARS

FULL_MASK = 0xFFFFFFFF  # all 32 lanes of a warp
BLOCK = 256  # the block size the contract of exercise 1 fixes (one partial sum per 256 elements)
LARGE = 1_000_003  # large and odd: no grid covers it exactly (4 MB of float32)
TIMED = 1 << 27  # 512 MiB of float32: far beyond the 60 MiB L2, long enough to hide launch costs

# float32 sums are compared with a float64 reference. A correct float32 sum of n terms has an
# error of at most ~ d * 2**-24 * sum(|x|), d the longest chain of additions (Higham, Accuracy and
# Stability of Numerical Algorithms, ch. 4). The inputs below have a positive offset, so |sum| is
# close to sum(|x|), and the grader's tolerance (a + b) * |sum| is relative to both. NumPy
# emulation on 10**6 such values: one atomic per element (a loop, d = n) errs by ~7e-6 of the sum,
# one atomic per 256-element block by ~2e-6, a tree by ~1e-7; losing a single block of 256 values
# is 2.6e-4. A total of 1e-4 passes every correct float32 order at the correctness sizes (up to
# 10**6) and fails a lost block. At the timing size (2**27) a loop-ordered sum (one atomic per
# element) stalls once its total outgrows the terms (the chapter's experiment) and is reported
# wrong, not timed; it would score no speed points anyway. One atomic per 256-element block stays
# near 1e-5 there. (The pair is (rtol, atol); for a one-element output both scale with |sum|.)
SUM_TOL = {"float32": (5e-5, 5e-5)}
# Mean and variance: the same 1e-4. Shifted sums, Welford or two passes err by < 2e-6 (emulated,
# offsets up to 1000 standard deviations); the naive E[x^2] - E[x]^2 in float32 errs by ~1e-3 at an
# offset of 100 standard deviations and by ~0.2 at 1000, and fails.
MV_TOL = {"float32": (5e-5, 5e-5)}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- inputs
def _offset_inputs(p, rng):
    """scale * (1 + z / 2), z standard normal: mostly one sign, so |sum| ~ sum |x|; the sign of
    the whole array and its scale are random."""
    scale = 10.0 ** rng.uniform(-1.0, 1.5) * (1.0 if rng.random() < 0.5 else -1.0)
    x = standard_normal(rng, p["n"])
    x *= np.float32(0.5)
    x += np.float32(1.0)
    x *= np.float32(scale)
    return {"x": x}


def _max_inputs(p, rng):
    x = uniform(rng, p["n"])
    if p.get("negative"):
        x -= x.max() + np.float32(0.5)  # every value below zero: a maximum started at 0 is wrong
    if p.get("max_last"):
        x[-1] = x.max() + np.float32(1.0)  # the maximum is the very last element
    return {"x": x}


def _mv_inputs(p, rng):
    """Mean `shift` standard deviations away from zero: large shifts defeat E[x^2] - E[x]^2."""
    scale = 10.0 ** rng.uniform(-1.0, 1.0)
    offset = p["shift"] * scale * (1.0 if rng.random() < 0.5 else -1.0)
    x = standard_normal(rng, p["n"])
    x *= np.float32(scale)
    x += np.float32(offset)
    return {"x": x}


# The timing size's inputs (Exercise.timing_inputs): built so that a reduction that skips or
# samples terms is wrong. At 2**27 iid terms, summing half of them and doubling errs by about
# 4e-5, inside the tolerance; so these inputs add a few large terms at random places that carry
# half of the result. A sum that drops any 1% of its input (and scales the rest up) then misses
# some of them or over-counts them, and errs by a few tenths of a percent at least.
SPIKES = 64


def _spike_places(rng, n: int) -> np.ndarray:
    return rng.choice(n, size=min(SPIKES, n), replace=False)


def _sum_timing_inputs(p, rng):
    x = _offset_inputs(p, rng)["x"]
    where = _spike_places(rng, x.size)
    share = float(np.sum(x, dtype=np.float64)) / len(where)  # the spikes carry as much as the rest
    x[where] += (share * rng.uniform(0.5, 1.5, len(where))).astype(np.float32)
    return {"x": x}


def _squares_timing_inputs(p, rng):
    x = uniform(rng, p["n"])
    where = _spike_places(rng, x.size)
    size = math.sqrt(float(np.sum(np.square(x, dtype=np.float64))) / len(where))
    x[where] = (size * rng.uniform(0.7, 1.3, len(where)) * rng.choice([-1.0, 1.0], len(where))).astype(np.float32)
    return {"x": x}


def _mv_timing_inputs(p, rng):
    x = _mv_inputs(p, rng)["x"]
    sigma = float(np.std(x, dtype=np.float64))
    where = _spike_places(rng, x.size)
    size = sigma * math.sqrt(x.size / len(where))  # the spikes carry half of the variance
    x[where] += (size * rng.uniform(0.7, 1.3, len(where)) * rng.choice([-1.0, 1.0], len(where))).astype(np.float32)
    return {"x": x}


def _max_timing_inputs(p, rng):
    """The maximum at a random place among 128 near-ties (within 0.2%): the timed calls' jitter
    (0.8% per element) picks a different winner each time, so skipping any 1% of the input
    misses the maximum in about 1% of the calls, and every call is checked."""
    x = uniform(rng, p["n"])
    top = float(x.max())
    where = rng.choice(x.size, size=min(128, x.size), replace=False)
    x[where] = (top + abs(top) * (0.01 + 0.002 * rng.random(len(where)))).astype(np.float32)
    return {"x": x}


# --------------------------------------------------------------------------- references
def _block_sums64(x):
    n = x.shape[0]
    padded = np.zeros(_cdiv(n, BLOCK) * BLOCK)
    padded[:n] = x
    return {"partials": padded.reshape(-1, BLOCK).sum(axis=1)}


def _one(value):
    return np.array([value], dtype=np.float64)


# --------------------------------------------------------------------------- cases
def _sum_cases(sim: bool) -> list[dict]:
    return awkward_1d(sim, LARGE)


def _block_cases(sim: bool) -> list[dict]:
    return awkward_1d(sim, LARGE, large_sim=2003)  # 8 blocks: the simulator runs ~10^4 threads/s


def _max_cases(sim: bool) -> list[dict]:
    sizes = [c["n"] for c in awkward_1d(sim, LARGE)]
    cases = [{"n": n, "negative": i % 2, "max_last": 0} for i, n in enumerate(sizes)]
    return cases + [{"n": 2003 if sim else 100_003, "negative": 0, "max_last": 1}]


def _mv_cases(sim: bool) -> list[dict]:
    sizes = [c["n"] for c in awkward_1d(sim, LARGE)]
    shifts = [1, 1000, 100, 1000, 10, 1000, 300, 1000]  # in standard deviations
    return [{"n": n, "shift": s} for n, s in zip(sizes, shifts)]


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _numba_baselines():
    """Reference kernels, built in the reference runner on first use (never at import time). Explicit
    signatures compile them at once, so the driver can report one wave of blocks for each."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32

    @cuda.jit("void(float32[::1], float32[::1])")
    def block_sums_kernel(x, partials):
        buf = cuda.shared.array(BLOCK, float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * BLOCK + t
        buf[t] = x[i] if i < x.shape[0] else float32(0)
        cuda.syncthreads()
        s = BLOCK // 2
        while s > 0:
            if t < s:
                buf[t] += buf[t + s]
            cuda.syncthreads()
            s //= 2
        if t == 0:
            partials[cuda.blockIdx.x] = buf[0]

    @cuda.jit("void(float32[::1])")
    def zero_one(out):
        out[0] = 0

    @cuda.jit("void(float32[::1], float32[::1])")
    def sum_kernel(x, out):
        # Four loads in flight per thread, a tree in shared memory, one atomic per block.
        buf = cuda.shared.array(BLOCK, float32)
        n = x.shape[0]
        stride = cuda.gridsize(1)
        i = cuda.grid(1)
        a0 = float32(0)
        a1 = float32(0)
        a2 = float32(0)
        a3 = float32(0)
        while i + 3 * stride < n:
            a0 += x[i]
            a1 += x[i + stride]
            a2 += x[i + 2 * stride]
            a3 += x[i + 3 * stride]
            i += 4 * stride
        while i < n:
            a0 += x[i]
            i += stride
        t = cuda.threadIdx.x
        buf[t] = (a0 + a1) + (a2 + a3)
        cuda.syncthreads()
        s = BLOCK // 2
        while s > 0:
            if t < s:
                buf[t] += buf[t + s]
            cuda.syncthreads()
            s //= 2
        if t == 0:
            cuda.atomic.add(out, 0, buf[0])

    @cuda.jit("void(float32[::1])")
    def minus_inf(out):
        out[0] = -math.inf

    @cuda.jit(device=True)
    def warp_max(v):
        delta = 16
        while delta > 0:
            v = max(v, cuda.shfl_down_sync(FULL_MASK, v, delta))
            delta //= 2
        return v

    @cuda.jit("void(float32[::1], float32[::1])")
    def max_kernel(x, out):
        # Four loads in flight per thread, shuffles within each warp and across warps, one
        # atomic per block.
        warp_maxes = cuda.shared.array(32, float32)
        n = x.shape[0]
        stride = cuda.gridsize(1)
        i = cuda.grid(1)
        m0 = float32(-math.inf)
        m1 = float32(-math.inf)
        m2 = float32(-math.inf)
        m3 = float32(-math.inf)
        while i + 3 * stride < n:
            m0 = max(m0, x[i])
            m1 = max(m1, x[i + stride])
            m2 = max(m2, x[i + 2 * stride])
            m3 = max(m3, x[i + 3 * stride])
            i += 4 * stride
        while i < n:
            m0 = max(m0, x[i])
            i += stride
        lane = cuda.threadIdx.x % 32
        warp = cuda.threadIdx.x // 32
        v = warp_max(max(max(m0, m1), max(m2, m3)))
        if lane == 0:
            warp_maxes[warp] = v
        cuda.syncthreads()
        if warp == 0:
            v = warp_maxes[lane] if lane < cuda.blockDim.x // 32 else float32(-math.inf)
            v = warp_max(v)
            if lane == 0:
                cuda.atomic.max(out, 0, v)

    @cuda.jit("void(float32[::1], float32[::1])")
    def zero_two(mean, var):
        mean[0] = 0
        var[0] = 0

    @cuda.jit("void(float32[::1], float32[::1], float32[::1])")
    def shifted_sums(x, mean, var):
        # Sums of d = x - x[0] and of d * d: shifting by one of the values keeps d small, so
        # E[d^2] - E[d]^2 loses little to cancellation.
        s1 = cuda.shared.array(BLOCK, float32)
        s2 = cuda.shared.array(BLOCK, float32)
        n = x.shape[0]
        pivot = x[0]
        stride = cuda.gridsize(1)
        i = cuda.grid(1)
        a1 = float32(0)  # four pairs of sums: four independent loads in flight
        a2 = float32(0)
        b1 = float32(0)
        b2 = float32(0)
        e1 = float32(0)
        e2 = float32(0)
        f1 = float32(0)
        f2 = float32(0)
        while i + 3 * stride < n:
            d0 = x[i] - pivot
            d1 = x[i + stride] - pivot
            d2 = x[i + 2 * stride] - pivot
            d3 = x[i + 3 * stride] - pivot
            a1 += d0
            a2 += d0 * d0
            b1 += d1
            b2 += d1 * d1
            e1 += d2
            e2 += d2 * d2
            f1 += d3
            f2 += d3 * d3
            i += 4 * stride
        while i < n:
            d0 = x[i] - pivot
            a1 += d0
            a2 += d0 * d0
            i += stride
        t = cuda.threadIdx.x
        s1[t] = (a1 + b1) + (e1 + f1)
        s2[t] = (a2 + b2) + (e2 + f2)
        cuda.syncthreads()
        s = BLOCK // 2
        while s > 0:
            if t < s:
                s1[t] += s1[t + s]
                s2[t] += s2[t + s]
            cuda.syncthreads()
            s //= 2
        if t == 0:
            cuda.atomic.add(mean, 0, s1[0])
            cuda.atomic.add(var, 0, s2[0])

    @cuda.jit("void(float32[::1], float32[::1], float32[::1])")
    def finish_mean_var(x, mean, var):
        n = float32(x.shape[0])
        mu = mean[0] / n  # the mean of d
        var[0] = max(var[0] / n - mu * mu, float32(0))
        mean[0] = x[0] + mu

    def wave(kernel):
        compiled = next(iter(kernel.overloads.values()), None)
        if compiled is None:  # the simulator compiles nothing: a few blocks, as the lab text's one_wave()
            return 4
        return compiled.max_cooperative_grid_blocks(BLOCK)  # one full wave, the driver's count

    waves = {k: wave(k) for k in (sum_kernel, max_kernel, shifted_sums)}

    def block_sums(x, partials):
        block_sums_kernel[partials.shape[0], BLOCK](x, partials)

    def reduce_sum(x, out):
        zero_one[1, 1](out)
        sum_kernel[min(waves[sum_kernel], _cdiv(x.shape[0], BLOCK)), BLOCK](x, out)

    def reduce_max(x, out):
        minus_inf[1, 1](out)
        max_kernel[min(waves[max_kernel], _cdiv(x.shape[0], BLOCK)), BLOCK](x, out)

    def mean_var(x, mean, var):
        zero_two[1, 1](mean, var)
        shifted_sums[min(waves[shifted_sums], _cdiv(x.shape[0], BLOCK)), BLOCK](x, mean, var)
        finish_mean_var[1, 1](x, mean, var)

    return {"block_sums": block_sums, "reduce_sum": reduce_sum, "reduce_max": reduce_max,
            "mean_var": mean_var}


def _base_block_sums(x, partials):
    _numba_baselines()["block_sums"](x, partials)


def _base_reduce_sum(x, out):
    _numba_baselines()["reduce_sum"](x, out)


def _base_reduce_max(x, out):
    _numba_baselines()["reduce_max"](x, out)


def _base_mean_var(x, mean, var):
    _numba_baselines()["mean_var"](x, mean, var)


SUM_SQUARES_SOURCE = r"""
// 256-thread blocks, at least 8 per SM: the compiler keeps the registers within that budget.
extern "C" __global__ void __launch_bounds__(256, 8)
sum_squares(const float* x, long long n, float* out) {
    __shared__ float warp_sums[32];
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (; i + 3 * stride < n; i += 4 * stride) {  // four loads in flight
        const float v0 = x[i], v1 = x[i + stride], v2 = x[i + 2 * stride], v3 = x[i + 3 * stride];
        a0 += v0 * v0; a1 += v1 * v1; a2 += v2 * v2; a3 += v3 * v3;
    }
    for (; i < n; i += stride) { const float v = x[i]; a0 += v * v; }
    float s = (a0 + a1) + (a2 + a3);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
    if (lane == 0) warp_sums[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
        for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
        if (lane == 0) atomicAdd(out, s);
    }
}
"""


@lru_cache(maxsize=None)
def _cupy_sum_squares():
    import cupy as cp

    kernel = cp.RawKernel(SUM_SQUARES_SOURCE, "sum_squares")
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    wave = props["multiProcessorCount"] * (props["maxThreadsPerMultiProcessor"] // 256)
    return kernel, wave


def _base_sum_squares(x, out):
    import numpy as np_

    kernel, wave = _cupy_sum_squares()
    out.fill(0)
    blocks = max(1, min(wave, _cdiv(x.size, 256)))
    kernel((blocks,), (256,), (x, np_.int64(x.size), out))


# --------------------------------------------------------------------------- the lab
ONE = {"out": Out(lambda p: (1,))}

LAB = Lab(
    name="reduction",
    title="Lab 5: reduction",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32, int32\n",
    exercises=(
        Exercise(
            name="block_sums",
            title="Block sums with sequential addressing (Numba)",
            backend="numba",
            args=("x", "partials"),
            inputs=_offset_inputs,
            outputs={"partials": Out(lambda p: (_cdiv(p["n"], BLOCK),))},
            reference=_block_sums64,
            cases=_block_cases,
            timing_case={"n": TIMED},
            baseline=_base_block_sums,
            baseline_name="reference kernel (sequential addressing, one element per thread)",
            bytes_moved=lambda p: 4 * p["n"] + 4 * _cdiv(p["n"], BLOCK),
            flops=lambda p: p["n"],
            points=2,
            # The interleaved tree of the chapter does the same work with its working threads
            # spread over every warp: partial points.
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=NO_ATOMICS,
            tolerance=SUM_TOL,
        ),
        Exercise(
            name="reduce_sum",
            title="A full sum in one pass over the data (Numba)",
            backend="numba",
            args=("x", "out"),
            inputs=_offset_inputs,
            outputs=ONE,
            reference=lambda x: {"out": _one(x.sum())},
            cases=_sum_cases,
            timing_inputs=_sum_timing_inputs,
            timing_case={"n": TIMED},
            baseline=_base_reduce_sum,
            baseline_name="reference kernel (one wave, four loads in flight, one atomic per block)",
            bytes_moved=lambda p: 4 * p["n"],
            flops=lambda p: p["n"],
            points=2,
            # One element per thread with one atomic per block, or a single load in flight per
            # thread, reads far below the copy bandwidth; the reference reads close to it.
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            tolerance=SUM_TOL,
        ),
        Exercise(
            name="reduce_max",
            title="A maximum with warp shuffles (Numba)",
            backend="numba",
            args=("x", "out"),
            inputs=_max_inputs,
            outputs=ONE,
            reference=lambda x: {"out": _one(x.max())},  # a maximum is exact: no rounding at all
            cases=_max_cases,
            timing_inputs=_max_timing_inputs,
            timing_case={"n": TIMED, "negative": 0, "max_last": 0},
            baseline=_base_reduce_max,
            baseline_name="reference kernel (one wave, warp shuffles, one atomic per block)",
            bytes_moved=lambda p: 4 * p["n"],
            flops=lambda p: p["n"],
            points=2,
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            gpu_only=True,  # warp shuffles do not run in the simulator
        ),
        Exercise(
            name="sum_squares",
            title="A sum of squares in CUDA C (CuPy)",
            backend="cupy",
            args=("x", "out"),
            inputs=lambda p, rng: {"x": uniform(rng, p["n"])},
            outputs=ONE,
            reference=lambda x: {"out": _one(np.dot(x, x))},  # every term >= 0: |sum| = sum |terms|
            cases=_sum_cases,
            timing_inputs=_squares_timing_inputs,
            timing_case={"n": TIMED},
            baseline=_base_sum_squares,
            baseline_name="reference CuPy raw kernel",
            bytes_moved=lambda p: 4 * p["n"],
            flops=lambda p: 2 * p["n"],
            points=1,
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,
            tolerance=SUM_TOL,
        ),
        Exercise(
            name="mean_var",
            title="Mean and variance in one pass (Numba, stretch)",
            backend="numba",
            args=("x", "mean", "var"),
            inputs=_mv_inputs,
            outputs={"mean": Out(lambda p: (1,)), "var": Out(lambda p: (1,))},
            reference=lambda x: {"mean": _one(x.mean()), "var": _one(x.var())},
            cases=_mv_cases,
            timing_inputs=_mv_timing_inputs,
            timing_case={"n": TIMED, "shift": 1000},
            baseline=_base_mean_var,
            baseline_name="reference kernels (shifted sums, one wave, four loads in flight)",
            bytes_moved=lambda p: 4 * p["n"],
            flops=lambda p: 4 * p["n"],
            points=2,
            # The reference reads at about 93% of the copy on an H200. Welford's update divides
            # once per element; full points from 0.7x leave room for it.
            speed=Speed(1, full_at=0.7, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            tolerance=MV_TOL,
        ),
    ),
)
