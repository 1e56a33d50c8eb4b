"""Lab 7: matmul. GEMV with a block per row (coalesced, simulator-safe) and with a warp per row
(shuffles), SGEMM with shared-memory tiles, and (stretch) register-tiled SGEMM in Numba and in
CUDA C through CuPy."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..host_parallel import matmul64
from ..spec import Exercise, Lab, NO_HOST_MATH as BASE_NO_HOST_MATH, Out, SCALARS, Speed, uniform

# cuBLAS is not host maths, but it is not the learner's kernel either (cupyx, a @ b).
NO_HOST_MATH = BASE_NO_HOST_MATH + ("cupyx.*", "operator.matmul")
# The CuPy exercise: a raw kernel, not cuBLAS (cupy.matmul, cupy.dot, cupy.cublas, ...).
CUPY_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.int32", "!cupy.int64",
                    "!cupy.float32", "cupyx.*", "numpy.*", "torch.*", "*.get", "*.set", "*.dot",
                    "*.T", "*.transpose", "*.copy", "*.astype", "operator.matmul") + SCALARS

# float32 sums of k products: sequential accumulation at k = 4096 was measured at about 4e-6 of
# the largest |C| (NumPy emulation, uniform() inputs); (2e-5, 2e-5) leaves a margin of 5x, while
# inputs rounded to TF32 or float16 miss it on most cases (errors of 2e-5 to 3e-4 were measured).
# Both entries equal, so the tolerance reads the same whichever is taken as atol or rtol.
DOT_TOLERANCE = {"float32": (2e-5, 2e-5)}

GEMV_THREADS = 128  # reference block per row
GEMV_ROWS_PER_WARP = 8  # reference for short rows: a warp per 8 rows
WARP = 32
FULL_MASK = 0xFFFFFFFF
TILE = 16  # reference shared-memory tile
# Reference register tiling: a 128 x 128 tile of C per block of 256 threads, k in steps of 8,
# each thread an 8 x 8 block of C (rows ty + 16 a, columns tx + 16 b).
RT_BM = 128
RT_BN = 128
RT_BK = 8
RT_TM = 8
RT_TN = 8
RT_AS_STRIDE = 132  # RT_BM + 4: the transposed stores of A spread over all 32 banks

cuda = None  # numba.cuda, bound by _numba_kernels() on first use


# --------------------------------------------------------------------------- cases
def gemv_cases(simulator: bool) -> list[dict]:
    """(m, n): one element, rows shorter and longer than a warp or a block, tall and wide."""
    if simulator:  # a few rows only: the simulator pays for every block's synchronizations
        shapes = [(1, 1), (1, 33), (3, 31), (2, 1025), (5, 300), (4, 64)]
    else:
        shapes = [(1, 1), (1, 33), (31, 32), (33, 31), (32, 1024), (1023, 1025), (1025, 1023),
                  (5000, 3), (3, 50_000), (4099, 8191)]
    return [{"m": m, "n": n} for m, n in shapes]


def gemv_short_rows_cases(simulator: bool) -> list[dict]:
    """Many rows, most of them shorter than a block; in the simulator, whose warps meet at every
    shuffle, few rows: a last warp with fewer than 8 of them, rows shorter and longer than a warp."""
    if simulator:
        shapes = [(1, 1), (1, 31), (33, 32), (31, 33), (20, 64), (9, 100), (17, 1), (3, 500)]
    else:
        shapes = [(1, 1), (1, 31), (33, 32), (31, 33), (1000, 64), (1025, 100), (4097, 1), (3, 5000),
                  (100_003, 64), (2049, 1025)]
    return [{"m": m, "n": n} for m, n in shapes]


def gemm_cases(simulator: bool) -> list[dict]:
    """(m, n, k): nothing a multiple of a tile, a single element, a single row or column."""
    if simulator:  # small: the simulator runs about 10^4 threads per second
        shapes = [(1, 1, 1), (33, 17, 65), (17, 1, 40), (1, 33, 17), (16, 16, 16)]
    else:
        shapes = [(1, 1, 1), (33, 17, 65), (100, 1, 300), (1, 100, 300), (31, 32, 33), (64, 64, 64),
                  (17, 129, 1000), (1000, 3, 7), (513, 257, 129), (1025, 1023, 511)]
    return [{"m": m, "n": n, "k": k} for m, n, k in shapes]


def gemm_regtile_cases(simulator: bool) -> list[dict]:
    if simulator:  # a 128 x 128 tile of C is one block of 256 threads: few tiles, few k steps
        shapes = [(1, 1, 1), (33, 17, 65), (5, 130, 9), (130, 3, 20)]
        return [{"m": m, "n": n, "k": k} for m, n, k in shapes]
    return gemm_cases(False) + [{"m": 300, "n": 260, "k": 9}]


def _gemv_inputs(p, rng):
    return {"A": uniform(rng, (p["m"], p["n"])), "x": uniform(rng, p["n"])}


def _gemm_inputs(p, rng):
    return {"A": uniform(rng, (p["m"], p["k"])), "B": uniform(rng, (p["k"], p["n"]))}


def _gemv_bytes(p):
    return 4 * (p["m"] * p["n"] + p["m"] + p["n"])  # A and x read once, y written once


def _gemm_flops(p):
    return 2 * p["m"] * p["n"] * p["k"]


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _numba_kernels():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    # A module global, not a local: the simulator swaps in its own cuda module through the
    # kernels' globals only, and cuda.shared and cuda.local need it.
    global cuda
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32

    @cuda.jit
    def gemv_block_per_row(A, x, y):
        # Four partial sums per thread, four loads issued per step: enough bytes in flight
        # per SM to keep the memory busy (one load per step reaches about 60% of a copy).
        partial = cuda.shared.array(GEMV_THREADS, float32)
        row = cuda.blockIdx.x
        t = cuda.threadIdx.x
        n = A.shape[1]
        a0 = float32(0.0)
        a1 = float32(0.0)
        a2 = float32(0.0)
        a3 = float32(0.0)
        j = t
        while j + 3 * GEMV_THREADS < n:
            a0 += A[row, j] * x[j]
            a1 += A[row, j + GEMV_THREADS] * x[j + GEMV_THREADS]
            a2 += A[row, j + 2 * GEMV_THREADS] * x[j + 2 * GEMV_THREADS]
            a3 += A[row, j + 3 * GEMV_THREADS] * x[j + 3 * GEMV_THREADS]
            j += 4 * GEMV_THREADS
        while j < n:
            a0 += A[row, j] * x[j]
            j += GEMV_THREADS
        partial[t] = (a0 + a1) + (a2 + a3)
        cuda.syncthreads()
        stride = GEMV_THREADS // 2
        while stride > 0:
            if t < stride:
                partial[t] += partial[t + stride]
            cuda.syncthreads()
            stride //= 2
        if t == 0:
            y[row] = partial[0]

    @cuda.jit
    def gemv_warp_rows(A, x, y):
        # A warp per GEMV_ROWS_PER_WARP rows: each lane loads two columns of every one of them
        # before it adds, so 2 * GEMV_ROWS_PER_WARP loads are in flight per lane.
        acc = cuda.local.array(GEMV_ROWS_PER_WARP, float32)
        lane = cuda.threadIdx.x % WARP
        row0 = (cuda.grid(1) // WARP) * GEMV_ROWS_PER_WARP
        m, n = A.shape
        if row0 < m:  # the same for the whole warp: the shuffles see all 32 lanes
            for r in range(GEMV_ROWS_PER_WARP):
                acc[r] = float32(0.0)
            j = lane
            while j < n:
                j2 = j + WARP
                x0 = x[j]
                x1 = x[j2] if j2 < n else float32(0.0)
                for r in range(GEMV_ROWS_PER_WARP):
                    row = min(row0 + r, m - 1)  # rows past the end: computed, never stored
                    a1 = A[row, j2] if j2 < n else float32(0.0)
                    acc[r] += A[row, j] * x0 + a1 * x1
                j += 2 * WARP
            for r in range(GEMV_ROWS_PER_WARP):
                v = acc[r]
                for offset in (16, 8, 4, 2, 1):
                    v += cuda.shfl_xor_sync(FULL_MASK, v, offset)
                if lane == r and row0 + r < m:
                    y[row0 + r] = v

    @cuda.jit
    def sgemm_tiled(A, B, C):
        As = cuda.shared.array((TILE, TILE), float32)
        Bs = cuda.shared.array((TILE, TILE), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        m = C.shape[0]
        n = C.shape[1]
        k = A.shape[1]
        acc = float32(0.0)
        for p0 in range(0, k, TILE):
            if row < m and p0 + tx < k:
                As[ty, tx] = A[row, p0 + tx]
            else:
                As[ty, tx] = float32(0.0)
            if p0 + ty < k and col < n:
                Bs[ty, tx] = B[p0 + ty, col]
            else:
                Bs[ty, tx] = float32(0.0)
            cuda.syncthreads()
            for q in range(TILE):
                acc += As[ty, q] * Bs[q, tx]
            cuda.syncthreads()
        if row < m and col < n:
            C[row, col] = acc

    @cuda.jit
    def sgemm_regtile(A, B, C):
        As = cuda.shared.array((RT_BK, RT_AS_STRIDE), float32)
        Bs = cuda.shared.array((RT_BK, RT_BN), float32)
        acc = cuda.local.array((RT_TM, RT_TN), float32)
        ra = cuda.local.array(RT_TM, float32)
        rb = cuda.local.array(RT_TN, float32)
        m = C.shape[0]
        n = C.shape[1]
        k = A.shape[1]
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        t = ty * 16 + tx
        row0 = cuda.blockIdx.y * RT_BM
        col0 = cuda.blockIdx.x * RT_BN
        for a in range(RT_TM):
            for b in range(RT_TN):
                acc[a, b] = float32(0.0)
        for k0 in range(0, k, RT_BK):
            for r in range(4):
                ar = t // RT_BK + 32 * r
                ac = t % RT_BK
                if row0 + ar < m and k0 + ac < k:
                    As[ac, ar] = A[row0 + ar, k0 + ac]
                else:
                    As[ac, ar] = float32(0.0)
                br = t // RT_BN + 2 * r
                bc = t % RT_BN
                if k0 + br < k and col0 + bc < n:
                    Bs[br, bc] = B[k0 + br, col0 + bc]
                else:
                    Bs[br, bc] = float32(0.0)
            cuda.syncthreads()
            for p in range(RT_BK):
                for a in range(RT_TM):
                    ra[a] = As[p, ty + 16 * a]
                for b in range(RT_TN):
                    rb[b] = Bs[p, tx + 16 * b]
                for a in range(RT_TM):
                    for b in range(RT_TN):
                        acc[a, b] += ra[a] * rb[b]
            cuda.syncthreads()
        for a in range(RT_TM):
            row = row0 + ty + 16 * a
            if row < m:
                for b in range(RT_TN):
                    col = col0 + tx + 16 * b
                    if col < n:
                        C[row, col] = acc[a, b]

    return {"gemv_block_per_row": gemv_block_per_row, "gemv_warp_per_row": gemv_warp_rows,
            "sgemm_tiled": sgemm_tiled, "sgemm_regtile": sgemm_regtile}


@lru_cache(maxsize=None)
def _numba_baselines():
    """Host launchers of the reference kernels: the exercises' contract."""
    kernels = _numba_kernels()
    gemv_block_per_row, gemv_warp_per_row = kernels["gemv_block_per_row"], kernels["gemv_warp_per_row"]
    sgemm_tiled, sgemm_regtile = kernels["sgemm_tiled"], kernels["sgemm_regtile"]

    def gemv(A, x, y):
        gemv_block_per_row[y.shape[0], GEMV_THREADS](A, x, y)

    def gemv_warp(A, x, y):
        rows_per_block = (256 // WARP) * GEMV_ROWS_PER_WARP
        gemv_warp_per_row[(y.shape[0] + rows_per_block - 1) // rows_per_block, 256](A, x, y)

    def tiled(A, B, C):
        m, n = C.shape
        sgemm_tiled[((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), (TILE, TILE)](A, B, C)

    def regtile(A, B, C):
        m, n = C.shape
        sgemm_regtile[((n + RT_BN - 1) // RT_BN, (m + RT_BM - 1) // RT_BM), (16, 16)](A, B, C)

    return gemv, gemv_warp, tiled, regtile


def _base_gemv(A, x, y):
    _numba_baselines()[0](A, x, y)


def _base_gemv_warp(A, x, y):
    _numba_baselines()[1](A, x, y)


def _base_sgemm_tiled(A, B, C):
    _numba_baselines()[2](A, B, C)


def _base_sgemm_regtile(A, B, C):
    _numba_baselines()[3](A, B, C)


# The reference CUDA C kernel: the register tiling of the Numba reference, with unrolled loops.
SGEMM_CU = r"""
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8

extern "C" __global__ void __launch_bounds__(256)
sgemm_regtile(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
              int m, int n, int k) {
    __shared__ float As[BK][BM + 4];   // the A tile, transposed: As[p][r] = A[row0 + r][k0 + p]
    __shared__ float Bs[BK][BN];
    const int t = threadIdx.x;
    const int tx = t % 16, ty = t / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN];
    float ra[TM], rb[TN];
#pragma unroll
    for (int a = 0; a < TM; ++a)
#pragma unroll
        for (int b = 0; b < TN; ++b) acc[a][b] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += BK) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int ar = t / BK + 32 * r, ac = t % BK;
            const int gr = row0 + ar, gc = k0 + ac;
            As[ac][ar] = (gr < m && gc < k) ? A[(long long)gr * k + gc] : 0.0f;
            const int br = t / BN + 2 * r, bc = t % BN;
            const int hr = k0 + br, hc = col0 + bc;
            Bs[br][bc] = (hr < k && hc < n) ? B[(long long)hr * n + hc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < BK; ++p) {
#pragma unroll
            for (int a = 0; a < TM; ++a) ra[a] = As[p][ty + 16 * a];
#pragma unroll
            for (int b = 0; b < TN; ++b) rb[b] = Bs[p][tx + 16 * b];
#pragma unroll
            for (int a = 0; a < TM; ++a)
#pragma unroll
                for (int b = 0; b < TN; ++b) acc[a][b] = fmaf(ra[a], rb[b], acc[a][b]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < TM; ++a) {
        const int row = row0 + ty + 16 * a;
#pragma unroll
        for (int b = 0; b < TN; ++b) {
            const int col = col0 + tx + 16 * b;
            if (row < m && col < n) C[(long long)row * n + col] = acc[a][b];
        }
    }
}
"""


@lru_cache(maxsize=None)
def _cupy_sgemm():
    import cupy as cp

    return cp.RawKernel(SGEMM_CU, "sgemm_regtile")


def _base_sgemm_cupy(A, B, C):
    kernel = _cupy_sgemm()
    m, k = A.shape
    n = B.shape[1]
    kernel(((n + 127) // 128, (m + 127) // 128), (256,), (A, B, C, np.int32(m), np.int32(n), np.int32(k)))


# --------------------------------------------------------------------------- the lab
GEMV = dict(
    args=("A", "x", "y"),
    inputs=_gemv_inputs,
    outputs={"y": Out(lambda p: (p["m"],))},
    reference=lambda A, x: {"y": A @ x},
    bytes_moved=_gemv_bytes,
    flops=lambda p: 2 * p["m"] * p["n"],
    tolerance=DOT_TOLERANCE,
)
GEMM = dict(
    args=("A", "B", "C"),
    inputs=_gemm_inputs,
    outputs={"C": Out(lambda p: (p["m"], p["n"]))},
    reference=lambda A, B: {"C": matmul64(A, B)},
    # 4096^3: 137 GFLOP per call, 192 MiB of matrices (beyond the L2); bytes are not reported,
    # since a GEMM this size is limited by arithmetic, not by memory.
    timing_case={"m": 4096, "n": 4096, "k": 4096},
    flops=_gemm_flops,
    tolerance=DOT_TOLERANCE,
)

LAB = Lab(
    name="matmul",
    title="Lab 7: matmul",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    exercises=(
        Exercise(
            name="gemv",
            title="GEMV with coalesced loads, a block per row (Numba)",
            backend="numba",
            cases=gemv_cases,
            timing_case={"m": 8192, "n": 8192},  # 256 MiB of A: far beyond the L2
            baseline=_base_gemv,
            baseline_name="reference kernel (a block of 128 threads per row, 4 loads in flight per thread)",
            points=2,
            # The reference reads A at about 85% of the copy on an H200. One load in flight per
            # thread (the chapter's first block per row) is about 0.75x of it; a thread per row
            # reads 32 rows at once (uncoalesced) with few threads: far below 0.3x.
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            **GEMV,
        ),
        Exercise(
            name="gemv_warp",
            title="GEMV with a warp per row and shuffles, many short rows (Numba)",
            backend="numba",
            cases=gemv_short_rows_cases,
            timing_case={"m": 1 << 20, "n": 64},  # a million rows of 64: 256 MiB of A
            baseline=_base_gemv_warp,
            baseline_name="reference kernel (a warp per 8 rows, shuffles)",
            points=1,
            # The reference (8 rows per warp) reaches about 70% of the copy on an H200, cuBLAS
            # about 45%. One row per warp keeps too few loads in flight: about 0.33x, a little
            # credit; a block per row leaves most threads idle on rows of 64: below 0.2x.
            speed=Speed(1, full_at=0.8, zero_at=0.2),
            forbidden=NO_HOST_MATH,
            **GEMV,
        ),
        Exercise(
            name="sgemm_tiled",
            title="SGEMM with shared-memory tiles (Numba)",
            backend="numba",
            cases=gemm_cases,
            baseline=_base_sgemm_tiled,
            baseline_name="reference kernel (16 x 16 shared-memory tiles)",
            points=2,
            # A kernel without tiles reads every element of A and B from memory k times (through
            # the caches): the chapter measured it at about 0.17x the tiled kernel, so no speed points.
            speed=Speed(2, full_at=0.8, zero_at=0.4),
            forbidden=NO_HOST_MATH,
            **GEMM,
        ),
        Exercise(
            name="sgemm_regtile",
            title="Register-tiled SGEMM (Numba, stretch)",
            backend="numba",
            cases=gemm_regtile_cases,
            baseline=_base_sgemm_regtile,
            baseline_name="reference kernel (128 x 128 block tiles, 8 x 8 outputs per thread)",
            points=1,
            speed=Speed(2, full_at=0.8, zero_at=0.4),
            forbidden=NO_HOST_MATH,
            **GEMM,
        ),
        Exercise(
            name="sgemm_cupy",
            title="Register-tiled SGEMM in CUDA C (CuPy, stretch)",
            backend="cupy",
            cases=lambda sim: gemm_regtile_cases(False),
            baseline=_base_sgemm_cupy,
            baseline_name="reference CuPy raw kernel (128 x 128 block tiles, 8 x 8 outputs per thread)",
            points=1,
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,  # CuPy needs a GPU
            **GEMM,
        ),
    ),
)
