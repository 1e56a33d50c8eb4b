"""Lab 13: quantization. Symmetric int8 quantization of each row, a fused asymmetric dequantize,
and the weight-only int8 GEMV: in Numba, and (stretch) in CUDA C through CuPy.

The CUDA C reference GEMV (``INT8_GEMV_CU``, launched by ``reference_int8_gemv``) is also the
kernel of the performance bar: the chapter *Quantization* and ``tests/test_quant_bar.py`` time
this same kernel, with ``time_cold`` below, against an FP16 GEMV from cuBLAS.
"""
from __future__ import annotations

import time
from functools import lru_cache

import numpy as np

from ..spec import Exercise, Lab, NO_HOST_MATH as BASE_NO_HOST_MATH, Out, SCALARS, Speed, uniform

# cuBLAS is not host maths, but it is not the learner's kernel either.
NO_HOST_MATH = BASE_NO_HOST_MATH + ("cupyx.*", "operator.matmul")
# The CuPy exercise: a raw kernel, not a library call.
CUPY_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.int32", "!cupy.int64",
                    "!cupy.float32", "cupyx.*", "numpy.*", "torch.*", "*.get", "*.set", "*.dot",
                    "*.T", "*.transpose", "*.copy", "*.astype", "operator.matmul") + SCALARS

QMAX = 127  # symmetric int8 uses -127..127: -128 is left out so that q and -q both exist

# y = scale * (q @ x) sums k products in float32. Summed one after the other (the worst order a
# kernel is likely to use), k = 50,000 of them were measured at about 1e-5 of the largest |y|
# (NumPy emulation, the inputs below); (5e-5, 5e-5) leaves a margin of 5x. One product left out
# is off by more than 1e-3 of the largest |y| at every size here, and x rounded to float16 by
# about 1e-4: both fail. Both entries equal, read as atol or rtol alike.
GEMV_TOLERANCE = {"float32": (5e-5, 5e-5)}

# Numba reference kernels (the baselines of Exercises 2 and 3)
DQ_THREADS = 256  # dequantize: threads per block
DQ_STEPS = 4  # columns per thread, DQ_THREADS apart: four loads in flight
GV_THREADS = 128  # int8 GEMV in Numba: threads per block
GV_ROWS = 4  # rows per block: each load of x serves four rows

# The CUDA C reference (Exercise 4 and the performance bar): a block per CU_ROWS rows, its
# CU_SPLIT warps splitting the columns. Kept in step with the #defines of INT8_GEMV_CU. Measured
# on the H200 at 4096 x 4096, batch 1, cold: 7.3 us, against 9.0 to 10.3 us for a warp per 1, 2
# or 4 rows (the design before) and 8.7 to 12.4 us for other splits.
CU_ROWS = 8
CU_SPLIT = 8

cuda = None  # numba.cuda, bound by _numba_kernels() on first use


# --------------------------------------------------------------------------- inputs
def _row_scales(rng, n):
    """One positive float32 scale per row, within a factor of 4 of each other: rows differ, and
    a row handled with the wrong scale is off by far more than the tolerance."""
    base = 10.0 ** rng.uniform(-3.0, -1.0)
    return (base * rng.uniform(0.5, 2.0, n)).astype(np.float32)


def _quantize_inputs(p, rng):
    """Weights whose quotients w / scale stay at least 0.1 away from every half-integer.

    Each row is built from targets t = (integer) + (fraction in [-0.4, 0.4]), scaled so that
    the row's largest |t| is exactly 127, then multiplied by a row scale and rounded to float32.
    Any correct float32 computation of round(w / scale) (w / s, w * (1 / s), w * 127 / max|w|)
    is within about 1e-5 of t, so all of them give the same integers: no ties, no off-by-one.
    One row of every case with two rows or more is all zero.
    """
    n, k = p["n"], p["k"]
    z = rng.standard_normal((n, k))
    z *= QMAX / np.abs(z).max(axis=1, keepdims=True)  # the largest |z| of each row is 127
    near = np.round(z)
    t = near + np.clip(z - near, -0.4, 0.4)
    s = 10.0 ** rng.uniform(-3.0, 0.0, (n, 1))
    w = (t * s).astype(np.float32)
    if n >= 2:
        w[rng.integers(n)] = 0.0
    return {"w": w}


def _quantize_reference(w):
    """Symmetric int8 per row: scale = max|w| / 127 rounded to float32; q = round(w / scale),
    halves away from zero, in [-127, 127]; an all-zero row gets scale 0 and q 0."""
    amax = np.abs(w).max(axis=1)
    scale = (amax / QMAX).astype(np.float32).astype(np.float64)  # one rounding, as float32 division
    safe = np.where(scale > 0, scale, 1.0)[:, None]
    v = w / safe
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)
    q = np.clip(q, -QMAX, QMAX)
    q[scale == 0] = 0
    return {"q": q, "scale": scale}


def _dequantize_inputs(p, rng):
    n, k = p["n"], p["k"]
    return {"q": rng.integers(0, 256, (n, k), dtype=np.uint8), "scale": _row_scales(rng, n),
            "zero": rng.integers(0, 256, n, dtype=np.uint8)}


def _gemv_inputs(p, rng):
    n, k = p["n"], p["k"]
    return {"q": rng.integers(-QMAX, QMAX + 1, (n, k), dtype=np.int8), "scale": _row_scales(rng, n),
            "x": uniform(rng, k)}


def _gemv_reference(q, scale, x):
    return {"y": scale * (q.astype(np.float64) @ x)}


def _gemv_bytes(p):
    return p["n"] * p["k"] + 4 * (2 * p["n"] + p["k"])  # q once, scale and y, x


# --------------------------------------------------------------------------- cases
def quantize_cases(simulator: bool) -> list[dict]:
    if simulator:  # a block per row: few rows
        shapes = [(1, 1), (2, 33), (3, 1), (5, 300), (4, 129), (2, 1025)]
    else:
        shapes = [(1, 1), (1, 33), (31, 32), (33, 31), (1000, 1025), (1025, 1000), (5000, 3),
                  (3, 50_000), (4099, 513), (4096, 4096)]
    return [{"n": n, "k": k} for n, k in shapes]


def dequantize_cases(simulator: bool) -> list[dict]:
    if simulator:
        shapes = [(1, 1), (2, 33), (3, 1025), (5, 300), (4, 1), (2, 2100)]
    else:
        shapes = [(1, 1), (1, 33), (31, 32), (33, 31), (1023, 1025), (1025, 1023), (5000, 3),
                  (3, 50_000), (4099, 8191), (2, 1_000_003)]
    return [{"n": n, "k": k} for n, k in shapes]


def gemv_cases(simulator: bool) -> list[dict]:
    """Rows not a multiple of any block's rows; columns that are and are not a multiple of 16
    (the CUDA C reference reads 16 bytes at a time only where every row starts on 16 bytes)."""
    if simulator:
        shapes = [(1, 1), (3, 33), (5, 300), (2, 1025), (9, 64), (6, 257)]
    else:
        shapes = [(1, 1), (1, 33), (31, 32), (33, 31), (1023, 1025), (1025, 1024), (5000, 3),
                  (3, 50_000), (4099, 8191), (4097, 4112)]
    return [{"n": n, "k": k} for n, k in shapes]


# --------------------------------------------------------------------------- Numba references
@lru_cache(maxsize=None)
def _numba_kernels():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32

    @cuda.jit
    def dequantize_rows(q, scale, zero, out):
        # Block (row, tile): DQ_THREADS * DQ_STEPS columns of one row. All loads come before
        # the stores: Numba cannot tell that q and out do not overlap, so a load written after
        # a store would wait for it.
        row = cuda.blockIdx.x
        k = q.shape[1]
        j0 = cuda.blockIdx.y * (DQ_THREADS * DQ_STEPS) + cuda.threadIdx.x
        j1 = j0 + DQ_THREADS
        j2 = j0 + 2 * DQ_THREADS
        j3 = j0 + 3 * DQ_THREADS
        v0 = float32(q[row, j0]) if j0 < k else float32(0.0)
        v1 = float32(q[row, j1]) if j1 < k else float32(0.0)
        v2 = float32(q[row, j2]) if j2 < k else float32(0.0)
        v3 = float32(q[row, j3]) if j3 < k else float32(0.0)
        s = scale[row]
        z = float32(zero[row])
        if j0 < k:
            out[row, j0] = s * (v0 - z)
        if j1 < k:
            out[row, j1] = s * (v1 - z)
        if j2 < k:
            out[row, j2] = s * (v2 - z)
        if j3 < k:
            out[row, j3] = s * (v3 - z)

    @cuda.jit
    def int8_gemv_rows(q, scale, x, y):
        # A block of GV_THREADS threads per GV_ROWS rows; thread t takes columns t, t + T, ...
        # two per step, so each step has 8 independent loads of q and 2 of x in flight, and
        # each value of x serves four rows. Rows past the end repeat the last row, never stored.
        partial = cuda.shared.array((GV_ROWS, GV_THREADS), float32)
        t = cuda.threadIdx.x
        n, k = q.shape
        r0 = cuda.blockIdx.x * GV_ROWS
        r1 = min(r0 + 1, n - 1)
        r2 = min(r0 + 2, n - 1)
        r3 = min(r0 + 3, n - 1)
        a0 = float32(0.0)
        a1 = float32(0.0)
        a2 = float32(0.0)
        a3 = float32(0.0)
        j = t
        while j + GV_THREADS < k:
            j2 = j + GV_THREADS
            x0 = x[j]
            x1 = x[j2]
            a0 += float32(q[r0, j]) * x0 + float32(q[r0, j2]) * x1
            a1 += float32(q[r1, j]) * x0 + float32(q[r1, j2]) * x1
            a2 += float32(q[r2, j]) * x0 + float32(q[r2, j2]) * x1
            a3 += float32(q[r3, j]) * x0 + float32(q[r3, j2]) * x1
            j += 2 * GV_THREADS
        if j < k:
            x0 = x[j]
            a0 += float32(q[r0, j]) * x0
            a1 += float32(q[r1, j]) * x0
            a2 += float32(q[r2, j]) * x0
            a3 += float32(q[r3, j]) * x0
        partial[0, t] = a0
        partial[1, t] = a1
        partial[2, t] = a2
        partial[3, t] = a3
        cuda.syncthreads()
        stride = GV_THREADS // 2
        while stride > 0:
            if t < stride:
                for r in range(GV_ROWS):
                    partial[r, t] += partial[r, t + stride]
            cuda.syncthreads()
            stride //= 2
        if t < GV_ROWS and r0 + t < n:
            y[r0 + t] = partial[t, 0] * scale[r0 + t]  # the scale, once per row

    return {"dequantize_rows": dequantize_rows, "int8_gemv_rows": int8_gemv_rows}


def _base_dequantize(q, scale, zero, out):
    n, k = q.shape
    tiles = (k + DQ_THREADS * DQ_STEPS - 1) // (DQ_THREADS * DQ_STEPS)
    _numba_kernels()["dequantize_rows"][(n, tiles), DQ_THREADS](q, scale, zero, out)


def _base_int8_gemv(q, scale, x, y):
    n = q.shape[0]
    _numba_kernels()["int8_gemv_rows"][(n + GV_ROWS - 1) // GV_ROWS, GV_THREADS](q, scale, x, y)


# --------------------------------------------------------------------------- the CUDA C reference
# y[b, i] = scale[i] * sum_j q[i, j] * x[b, j] for BATCH vectors x (1 unless -DBATCH=... is given).
# A warp per ROWS rows. Where every row starts on 16 bytes, each lane loads 16 int8 weights at a
# time (a uint4), UNROLL of them per row before it uses any, with a streaming hint (__ldcs: read
# once, evict first). Each weight becomes a float with two instructions: after the xor, byte i of
# a word holds q + 128, and the float whose bits are 0x4B0000uu is exactly 2^23 + uu, so
# subtracting 2^23 + 128 leaves q. x is read as float4 through the L1 cache (__ldg), and each
# float4 of x serves all ROWS rows. Sums in float32; the warp adds its lanes with shuffles; the
# row's scale is applied once, at the end.
INT8_GEMV_CU = r"""
#ifndef BATCH
#define BATCH 1
#endif
#ifndef ROWS
#define ROWS 8      // rows per block (fewer for several vectors: ROWS * BATCH sums per lane)
#endif
#define SPLIT 8     // warps per block, each taking every SPLIT-th stretch of the columns

__device__ __forceinline__ void unpack16(uint4 w, float* f) {
    const unsigned int words[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u,
                                   w.z ^ 0x80808080u, w.w ^ 0x80808080u};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[4 * i + 0] = __int_as_float(__byte_perm(words[i], 0x4B000000u, 0x7650)) - 8388736.0f;
        f[4 * i + 1] = __int_as_float(__byte_perm(words[i], 0x4B000000u, 0x7651)) - 8388736.0f;
        f[4 * i + 2] = __int_as_float(__byte_perm(words[i], 0x4B000000u, 0x7652)) - 8388736.0f;
        f[4 * i + 3] = __int_as_float(__byte_perm(words[i], 0x4B000000u, 0x7653)) - 8388736.0f;
    }
}

__device__ __forceinline__ float dot16(const float* f, float4 a, float4 b, float4 c, float4 d) {
    float s0 = f[0] * a.x, s1 = f[1] * a.y, s2 = f[2] * a.z, s3 = f[3] * a.w;
    s0 = fmaf(f[4], b.x, s0);  s1 = fmaf(f[5], b.y, s1);  s2 = fmaf(f[6], b.z, s2);  s3 = fmaf(f[7], b.w, s3);
    s0 = fmaf(f[8], c.x, s0);  s1 = fmaf(f[9], c.y, s1);  s2 = fmaf(f[10], c.z, s2); s3 = fmaf(f[11], c.w, s3);
    s0 = fmaf(f[12], d.x, s0); s1 = fmaf(f[13], d.y, s1); s2 = fmaf(f[14], d.z, s2); s3 = fmaf(f[15], d.w, s3);
    return (s0 + s1) + (s2 + s3);
}

// A block owns ROWS rows. Its SPLIT warps split the columns: warp w, lane l reads the 16-byte
// pieces w * 32 + l, then SPLIT * 32 further on, and so on, of all ROWS rows (consecutive warps
// read consecutive 512-byte stretches). Each lane issues its ROWS loads before using any, and
// each float4 of x it loads serves all ROWS rows. Partial sums meet in shared memory.
// At most 64 registers a thread for one vector, so that four blocks fit on an SM and a
// 4096-row layer's 512 blocks run in one wave (79 registers, left to itself: two waves).
#define MIN_BLOCKS (BATCH == 1 ? 4 : 1)
extern "C" __global__ void __launch_bounds__(32 * SPLIT, MIN_BLOCKS)
int8_gemv(const signed char* __restrict__ q, const float* __restrict__ scale,
          const float* __restrict__ x, float* __restrict__ y, int n, int k) {
    __shared__ float part[SPLIT][ROWS * BATCH];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int row0 = blockIdx.x * ROWS;
    const signed char* row_ptr[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)                // past the last row: computed, never stored
        row_ptr[r] = q + (long long)min(row0 + r, n - 1) * k;
    float acc[ROWS][BATCH];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int b = 0; b < BATCH; ++b) acc[r][b] = 0.0f;
    const bool aligned = k % 16 == 0 && ((unsigned long long)q | (unsigned long long)x) % 16 == 0;
    if (aligned) {
        const int k16 = k / 16;                   // 16-byte pieces per row
        for (int c = warp * 32 + lane; c < k16; c += 32 * SPLIT) {
            uint4 w[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; ++r)        // ROWS loads in flight, none used yet
                w[r] = __ldcs(reinterpret_cast<const uint4*>(row_ptr[r]) + c);
#pragma unroll
            for (int b = 0; b < BATCH; ++b) {
                const float4* xp = reinterpret_cast<const float4*>(x + (long long)b * k) + 4 * c;
                const float4 x0 = __ldg(xp), x1 = __ldg(xp + 1), x2 = __ldg(xp + 2), x3 = __ldg(xp + 3);
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    float f[16];
                    unpack16(w[r], f);
                    acc[r][b] += dot16(f, x0, x1, x2, x3);
                }
            }
        }
    } else {                                      // any k, any alignment: a byte at a time
        for (int j = warp * 32 + lane; j < k; j += 32 * SPLIT) {
            float f[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) f[r] = (float)row_ptr[r][j];
#pragma unroll
            for (int b = 0; b < BATCH; ++b) {
                const float xv = x[(long long)b * k + j];
#pragma unroll
                for (int r = 0; r < ROWS; ++r) acc[r][b] = fmaf(f[r], xv, acc[r][b]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int b = 0; b < BATCH; ++b) {
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2)
                acc[r][b] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][b], offset);
            if (lane == 0) part[warp][r * BATCH + b] = acc[r][b];
        }
    __syncthreads();
    for (int i = threadIdx.x; i < ROWS * BATCH; i += blockDim.x) {
        const int r = i / BATCH, b = i % BATCH;
        if (row0 + r < n) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < SPLIT; ++w) sum += part[w][i];
            y[(long long)b * n + row0 + r] = sum * scale[row0 + r];  // the row's scale, once
        }
    }
}
"""


@lru_cache(maxsize=None)
def int8_gemv_kernel(batch: int = 1):
    """The CUDA C reference compiled for ``batch`` vectors (a CuPy RawKernel). Needs CuPy."""
    import cupy as cp

    return cp.RawKernel(INT8_GEMV_CU, "int8_gemv", options=(f"-DBATCH={int(batch)}", f"-DROWS={rows_for(batch)}"))


def rows_for(batch: int) -> int:
    """Rows per block: CU_ROWS for one or two vectors; fewer beyond, so that each lane's
    ROWS * BATCH sums stay in registers."""
    return CU_ROWS if batch <= 2 else max(1, 2 * CU_ROWS // batch)


def reference_int8_gemv(q, scale, x, y):
    """y = scale * (q @ x) with the CUDA C reference, for CuPy arrays: q int8 (n, k), scale
    float32 (n,), x float32 (k,) and y float32 (n,); or x (b, k) and y (b, n) for b vectors."""
    n, k = q.shape
    batch = 1 if x.ndim == 1 else x.shape[0]
    rows = rows_for(batch)
    int8_gemv_kernel(batch)(((n + rows - 1) // rows,), (32 * CU_SPLIT,),
                            (q, scale, x, y, np.int32(n), np.int32(k)))


def time_cold(run, sets, repeats: int = 30) -> float:
    """Median GPU time of one ``run(*s)``, in seconds, each call on its own set of buffers.

    The sets are used in turn, so when a set comes back the L2 holds the others' data: give
    them several times the L2 in all (the caller's job) and every call reads from device memory.
    Kernels of a few microseconds take less time than Python takes to launch them, so each
    sample first queues the grader's hold kernel (it keeps every SM busy for a while), then one
    call per set; the clock starts when the hold ends, with the calls already queued behind it.
    Everything runs on the default stream (CuPy's and PyTorch's alike). Needs a GPU and CuPy.
    """
    import cupy as cp

    from ..timing import Hold

    hold = Hold()
    for s in sets:  # warm-up: compile, create handles, pick algorithms
        run(*s)
    cp.cuda.runtime.deviceSynchronize()
    t0 = time.perf_counter()
    for s in sets:
        run(*s)
    launch_s = (time.perf_counter() - t0) / len(sets)  # the host's time per call (at most)
    cp.cuda.runtime.deviceSynchronize()
    hold_s = min(max(3.0 * len(sets) * launch_s, 100e-6), 0.05)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeats):
        hold(hold_s)
        start.record()
        for s in sets:
            run(*s)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / len(sets))
    return float(np.median(times))


# --------------------------------------------------------------------------- the lab
GEMV = dict(
    args=("q", "scale", "x", "y"),
    inputs=_gemv_inputs,
    outputs={"y": Out(lambda p: (p["n"],))},
    reference=_gemv_reference,
    timing_case={"n": 8192, "k": 8192},  # 64 MiB of int8 weights: beyond the 60 MiB L2
    bytes_moved=_gemv_bytes,
    flops=lambda p: 2 * p["n"] * p["k"],
    tolerance=GEMV_TOLERANCE,
)

LAB = Lab(
    name="quantization",
    title="Lab 13: quantization",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    exercises=(
        Exercise(
            name="quantize_rows",
            title="Symmetric int8 quantization, a scale per row (Numba)",
            backend="numba",
            args=("w", "q", "scale"),
            inputs=_quantize_inputs,
            outputs={"q": Out(lambda p: (p["n"], p["k"]), "int8"), "scale": Out(lambda p: (p["n"],))},
            reference=_quantize_reference,
            cases=quantize_cases,
            points=2,  # quantizing is done once, offline: correctness only
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="dequantize",
            title="Asymmetric uint8 to float32, fused in one pass (Numba)",
            backend="numba",
            args=("q", "scale", "zero", "out"),
            inputs=_dequantize_inputs,
            outputs={"out": Out(lambda p: (p["n"], p["k"]))},
            reference=lambda q, scale, zero: {"out": scale[:, None] * (q.astype(np.float64) - zero[:, None])},
            cases=dequantize_cases,
            timing_case={"n": 8192, "k": 8192},  # 64 MiB read, 256 MiB written
            baseline=_base_dequantize,
            baseline_name="reference kernel (one pass, 4 columns per thread, loads before stores)",
            bytes_moved=lambda p: 5 * p["n"] * p["k"] + 5 * p["n"],
            points=1,
            # Writing dominates (4 bytes out per byte in), so any coalesced one-pass kernel is
            # close to the reference. Two passes over out (subtract, then scale) move 13 bytes
            # per element instead of 5: about 0.4x, no points.
            speed=Speed(1, full_at=0.8, zero_at=0.4),
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="int8_gemv",
            title="Weight-only int8 GEMV, dequantized on the fly (Numba)",
            backend="numba",
            cases=gemv_cases,
            baseline=_base_int8_gemv,
            baseline_name="reference Numba kernel (a block of 128 threads per 4 rows, 8 loads in flight)",
            points=2,
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            **GEMV,
        ),
        Exercise(
            name="int8_gemv_cupy",
            title="Weight-only int8 GEMV with 16-byte loads in CUDA C (CuPy, stretch)",
            backend="cupy",
            cases=lambda sim: gemv_cases(False),
            baseline=reference_int8_gemv,
            baseline_name="reference CUDA C kernel (a block per 8 rows, 8 warps splitting the columns, 16-byte loads)",
            points=1,
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,  # CuPy needs a GPU
            **GEMV,
        ),
    ),
)
