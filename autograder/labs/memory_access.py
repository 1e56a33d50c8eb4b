"""Lab 6: memory access. A tiled transpose in shared memory with padding (Numba), an embedding
lookup whose thread mapping decides the speed (Numba), SAXPY with float4 loads and a tail (CuPy),
and, as a stretch, a batched transpose in CUDA C (CuPy)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import Exercise, Lab, NO_HOST_MATH, Out, SCALARS, Speed, uniform

# The CuPy exercises: raw kernels, not CuPy's own array operations (a.T, cupy.swapaxes, x * a, ...).
CUPY_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.float32", "!cupy.int32",
                    "!cupy.int64", "numpy.*", "torch.*", "*.get", "*.set", "*.T", "*.transpose",
                    "*.swapaxes", "*.copy", "*.ravel", "*.reshape", "*.astype", "*.fill") + SCALARS

TILE = 32        # the reference kernels' tile: TILE x TILE values, blocks of TILE x BLOCK_ROWS threads
BLOCK_ROWS = 8


# --------------------------------------------------------------------------- cases
def _matrix_cases(sim: bool) -> list[dict]:
    """(rows, cols) that no tile divides: single values, one short row or column, tall, wide."""
    if sim:  # the simulator runs ~10^4 threads per second; blocks here are 256 threads
        shapes = [(1, 1), (31, 33), (33, 31), (2, 1025), (257, 3), (45, 70)]
    else:
        shapes = [(1, 1), (31, 33), (33, 31), (32, 32), (1000, 3), (3, 1000), (1025, 1023), (1023, 1025),
                  (300, 5000), (3001, 4099)]
    return [{"rows": r, "cols": c} for r, c in shapes]


def _gather_cases(sim: bool) -> list[dict]:
    """(m rows gathered, d values per row, v rows in the table)."""
    if sim:
        shapes = [(1, 1, 1), (31, 33, 5), (33, 31, 40), (2, 1025, 3), (257, 3, 300), (45, 70, 9)]
    else:
        shapes = [(1, 1, 1), (31, 33, 5), (33, 31, 40), (2, 1025, 3), (257, 3, 300), (1000, 3, 7),
                  (3, 1000, 1000), (1025, 1023, 50), (4099, 300, 10_007), (70_001, 2, 100), (600_001, 1, 10)]
    return [{"m": m, "d": d, "v": v} for m, d, v in shapes]


def _vector_cases(sim: bool) -> list[dict]:
    """Lengths with every remainder mod 4, so that every size of tail is tested."""
    sizes = [1, 2, 3, 4, 5, 6, 7, 31, 32, 33, 1023, 1024, 1025, 5003 if sim else 10_000_019]
    return [{"n": n} for n in sizes]


def _batch_cases(sim: bool) -> list[dict]:
    """(batch, rows, cols): one value, one matrix, rows or columns of one, nothing a tile divides."""
    shapes = [(1, 1, 1), (1, 64, 64), (3, 31, 33), (2, 33, 31), (5, 1, 1000), (4, 1000, 3), (2, 1025, 1023),
              (7, 100, 257), (33, 17, 40),
              (1, 4, 4), (3, 68, 132), (2, 1024, 4), (2, 4, 1028), (5, 100, 260)]  # multiples of 4: float4
    return [{"batch": b, "rows": r, "cols": c} for b, r, c in shapes]


# --------------------------------------------------------------------------- inputs
def _matrix(p):
    return (p["rows"], p["cols"])


def _transpose_inputs(p, rng):
    return {"a": uniform(rng, _matrix(p))}


def _gather_inputs(p, rng):
    idx = rng.integers(0, p["v"], size=p["m"], dtype=np.int64)
    idx[0] = p["v"] - 1          # the last row of the table is always used
    idx[-1] = 0 if p["m"] > 1 else idx[-1]
    return {"table": uniform(rng, (p["v"], p["d"])), "idx": idx}


def _saxpy_inputs(p, rng):
    return {"alpha": float(rng.uniform(-3, 3)), "x": uniform(rng, p["n"]), "y": uniform(rng, p["n"])}


def _batch_inputs(p, rng):
    return {"a": uniform(rng, (p["batch"], p["rows"], p["cols"]))}


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _numba_baselines():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32

    tile_padded = TILE + 1

    @cuda.jit
    def transpose_padded(a, out):
        tile = cuda.shared.array((TILE, tile_padded), float32)
        rows, cols = a.shape
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        r0, c0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
        c = c0 + tx
        for k in range(0, TILE, BLOCK_ROWS):
            r = r0 + ty + k
            if r < rows and c < cols:
                tile[ty + k, tx] = a[r, c]
        cuda.syncthreads()
        r = r0 + tx
        for k in range(0, TILE, BLOCK_ROWS):
            c = c0 + ty + k
            if c < cols and r < rows:
                out[c, r] = tile[tx, ty + k]

    @cuda.jit
    def gather(table, idx, out):
        c0, r0 = cuda.grid(2)               # x along the values of a row: coalesced
        sx, sy = cuda.gridsize(2)
        m, d = out.shape
        for r in range(r0, m, sy):
            src = idx[r]
            for c in range(c0, d, sx):
                out[r, c] = table[src, c]

    def transpose(a, out):
        rows, cols = a.shape
        grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE)
        transpose_padded[grid, (TILE, BLOCK_ROWS)](a, out)

    def gather_rows(table, idx, out):
        m, d = out.shape
        grid = (min((d + 31) // 32, 64), min((m + 7) // 8, 65535))
        gather[grid, (32, 8)](table, idx, out)

    return transpose, gather_rows


def _base_transpose(a, out):
    _numba_baselines()[0](a, out)


def _base_gather(table, idx, out):
    _numba_baselines()[1](table, idx, out)


SAXPY_VEC4_SOURCE = r"""
extern "C" __global__ void saxpy_vec4(float alpha, const float* x, const float* y, float* out,
                                      long long n, long long n4) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {                                     // whole float4: one 16-byte access each
        float4 a = reinterpret_cast<const float4*>(x)[i];
        float4 b = reinterpret_cast<const float4*>(y)[i];
        float4 r;
        r.x = alpha * a.x + b.x;
        r.y = alpha * a.y + b.y;
        r.z = alpha * a.z + b.z;
        r.w = alpha * a.w + b.w;
        reinterpret_cast<float4*>(out)[i] = r;
    }
    long long t = 4 * n4 + i;                         // the rest, one element per thread
    if (t < n) out[t] = alpha * x[t] + y[t];
}
"""

TRANSPOSE_BATCHED_SOURCE = r"""
#define TILE 32
#define BLOCK_ROWS 8
extern "C" __global__ void transpose_batched(const float* a, float* out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    const long long plane = (long long)rows * cols;  // values per matrix
    const float* src = a + blockIdx.z * plane;
    float* dst = out + blockIdx.z * plane;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int k = 0; k < TILE; k += BLOCK_ROWS) {
        int r = r0 + ty + k, c = c0 + tx;
        if (r < rows && c < cols) tile[ty + k][tx] = src[(long long)r * cols + c];
    }
    __syncthreads();
    for (int k = 0; k < TILE; k += BLOCK_ROWS) {
        int c = c0 + ty + k, r = r0 + tx;
        if (c < cols && r < rows) dst[(long long)c * rows + r] = tile[tx][ty + k];
    }
}

// rows % 4 == 0 and cols % 4 == 0: a 64 x 64 tile, 256 threads, 16-byte loads and stores.
// Each thread issues its 4 loads before it stores any: 64 bytes in flight per thread.
extern "C" __global__ void __launch_bounds__(256)
transpose_batched_v4(const float* __restrict__ a, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[64][65];
    const long long plane = (long long)rows * cols;
    const float* src = a + blockIdx.z * plane;
    float* dst = out + blockIdx.z * plane;
    const int r0 = blockIdx.y * 64, c0 = blockIdx.x * 64;
    const int t = threadIdx.x;
    float4 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // rows t / 16 + 16 i of the tile, float4 number t % 16
        const int r = r0 + t / 16 + 16 * i, c = c0 + 4 * (t % 16);
        v[i] = (r < rows && c < cols) ? *reinterpret_cast<const float4*>(src + (long long)r * cols + c)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float* row = &tile[t / 16 + 16 * i][4 * (t % 16)];
        row[0] = v[i].x; row[1] = v[i].y; row[2] = v[i].z; row[3] = v[i].w;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // row c0 + lc of out: 4 values of column lc of the tile
        const int lc = t / 16 + 16 * i, lr = 4 * (t % 16);
        const int c = c0 + lc, r = r0 + lr;
        if (c < cols && r < rows)
            *reinterpret_cast<float4*>(dst + (long long)c * rows + r) =
                make_float4(tile[lr][lc], tile[lr + 1][lc], tile[lr + 2][lc], tile[lr + 3][lc]);
    }
}
"""


@lru_cache(maxsize=None)
def _cupy_kernels():
    import cupy as cp

    module = cp.RawModule(code=TRANSPOSE_BATCHED_SOURCE)
    return (cp.RawKernel(SAXPY_VEC4_SOURCE, "saxpy_vec4"),
            module.get_function("transpose_batched"), module.get_function("transpose_batched_v4"))


def _base_saxpy_vec4(alpha, x, y, out):
    """The float4 reference: whole vectors when all three arrays are 16-byte aligned."""
    n = out.size
    aligned = all(arr.data.ptr % 16 == 0 for arr in (x, y, out))
    n4 = n // 4 if aligned else 0
    threads = max(n4, n - 4 * n4)
    _cupy_kernels()[0](((threads + 255) // 256,), (256,),
                       (np.float32(alpha), x, y, out, np.int64(n), np.int64(n4)))


def _base_transpose_batched(a, out):
    batch, rows, cols = a.shape
    if rows % 4 == 0 and cols % 4 == 0 and a.data.ptr % 16 == 0 and out.data.ptr % 16 == 0:
        grid = ((cols + 63) // 64, (rows + 63) // 64, batch)
        _cupy_kernels()[2](grid, (256,), (a, out, np.int32(rows), np.int32(cols)))
        return
    grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE, batch)
    _cupy_kernels()[1](grid, (TILE, BLOCK_ROWS), (a, out, np.int32(rows), np.int32(cols)))


# --------------------------------------------------------------------------- the lab
def _cells(p):
    return p["rows"] * p["cols"]


LAB = Lab(
    name="memory_access",
    title="Lab 6: memory access",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    exercises=(
        Exercise(
            name="transpose_tiled",
            title="Tiled transpose in shared memory, with padding (Numba)",
            backend="numba",
            args=("a", "out"),
            inputs=_transpose_inputs,
            outputs={"out": Out(lambda p: (p["cols"], p["rows"]))},
            reference=lambda a: {"out": a.T},
            cases=_matrix_cases,
            timing_case={"rows": 8191, "cols": 8193},  # 256 MiB per matrix, no tile divides it
            baseline=_base_transpose,
            baseline_name="reference tiled kernel (32 x 33 tile, 32 x 8 threads)",
            bytes_moved=lambda p: 2 * 4 * _cells(p),
            points=2,
            # A correct tile with padding runs at about 1.0x the reference. A naive transpose
            # (strided writes) or a tile without padding (32-way bank conflicts on every read of
            # the tile) is slower; they earn part of the points or none.
            speed=Speed(2, full_at=0.8, zero_at=0.4),
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="gather_rows",
            title="Embedding lookup: gather rows of a table (Numba)",
            backend="numba",
            args=("table", "idx", "out"),
            inputs=_gather_inputs,
            outputs={"out": Out(lambda p: (p["m"], p["d"]))},
            reference=lambda table, idx: {"out": table[idx]},
            cases=_gather_cases,
            # 200 MB written, 200 MB read from a 400 MB table: far beyond the L2.
            timing_case={"m": 50_001, "d": 1000, "v": 100_003},
            baseline=_base_gather,
            baseline_name="reference kernel (x along the values of a row)",
            bytes_moved=lambda p: 2 * 4 * p["m"] * p["d"] + 8 * p["m"],
            points=2,
            # One thread per row looping over the values puts a warp's 32 threads on 32 rows:
            # every access strided by a whole row. The coalesced mapping runs at ~1.0x.
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="saxpy_vec4",
            title="SAXPY with float4 loads and a tail (CuPy)",
            backend="cupy",
            args=("alpha", "x", "y", "out"),
            inputs=_saxpy_inputs,
            outputs={"out": Out(lambda p: (p["n"],))},
            reference=lambda alpha, x, y: {"out": alpha * x + y},
            cases=_vector_cases,
            timing_case={"n": (1 << 26) + 3},  # 256 MiB per array, and a tail of 3
            baseline=_base_saxpy_vec4,
            baseline_name="reference CuPy raw kernel with float4",
            bytes_moved=lambda p: 3 * 4 * p["n"],
            flops=lambda p: 2 * p["n"],
            points=2,
            # The same design as the reference runs at ~1.0x; 0.85 leaves room for noise.
            speed=Speed(1, full_at=0.85, zero_at=0.5),
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,
        ),
        Exercise(
            name="transpose_batched",
            title="Transpose a batch of matrices in CUDA C (CuPy, stretch)",
            backend="cupy",
            args=("a", "out"),
            inputs=_batch_inputs,
            outputs={"out": Out(lambda p: (p["batch"], p["cols"], p["rows"]))},
            reference=lambda a: {"out": np.swapaxes(a, 1, 2)},
            cases=_batch_cases,
            # 256 MiB per array. Multiples of 8, as most real shapes are, that no 64 x 64 tile
            # divides: every row starts on a 32-byte sector. (At 2044 x 2052 each row starts
            # half-way into one, every 256-byte run of a row touches 9 sectors instead of 8, and
            # the reference fell from 94% of the copy to 82%.)
            timing_case={"batch": 16, "rows": 2040, "cols": 2056},
            baseline=_base_transpose_batched,
            baseline_name="reference CuPy raw kernels (64 x 65 tile and float4 when rows and cols are "
                          "multiples of 4, else 32 x 33)",
            bytes_moved=lambda p: 2 * 4 * p["batch"] * _cells(p),
            points=1,
            # The float4 reference moves data at about 94% of the copy on an H200; the 4-byte
            # 32 x 33 tile of Exercise 1 is about 0.65x: a little credit.
            speed=Speed(1, full_at=0.8, zero_at=0.5),
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,
        ),
    ),
)
