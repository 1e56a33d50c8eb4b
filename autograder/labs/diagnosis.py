"""Lab 10: diagnosis. Each exercise gives a slow or wrong Numba kernel and what a tool reports on
it (Nsight Compute, compute-sanitizer's racecheck or memcheck); the learner writes the fixed
version: row sums read along the rows (coalesced), a histogram whose shared counts are updated
with atomics, a 3-point blur with bounds and edges, and tiles reversed through shared memory
with the barrier between the store and the load."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import Exercise, Lab, NO_HOST_MATH, Out, Speed, uniform

WARP = 32
ROWS_PER_BLOCK = 8  # row sums: one warp per row, 8 rows per block of 32 x 8 threads
MAX_BINS = 1024     # histogram: the most bins the contract allows (4 KB of int32 in shared memory)
HIST_BLOCK = 256
TIMED_N = (1 << 26) + 3  # 256 MiB of float32 or int32, and a tail no block divides
TILE = 256          # reverse_tiles: the tile the contract reverses, one block of 256 threads each
BLOCK = 256

# Row sums in float32 against a float64 reference: one thread adding a row of 10**5 values in
# order errs by about 2e-5 of the row's scale, a tree by less (as in the reduction lab).
SUM_TOL = {"float32": (5e-5, 5e-5)}
# The blur adds three values and divides by 3: two roundings of the largest |x|, which the
# blurred output's scale bounds to within a few times.
BLUR_TOL = {"float32": (1e-5, 1e-5)}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- cases
def _row_cases(sim: bool) -> list[dict]:
    """One value, rows shorter and longer than a warp, and (largest, so that check's profile
    traces it) at least 32 rows: the slow kernel's warp then spans 32 rows."""
    if sim:  # the fixed kernel waits at barriers: the simulator switches between its threads at each, slowly
        shapes = [(1, 1), (3, 33), (7, 3), (2, 700), (32, 48)]
    else:
        shapes = [(1, 1), (31, 33), (33, 31), (1000, 3), (3, 1025), (1025, 1023), (7, 100_003),
                  (100_003, 7), (4099, 300)]
    return [{"rows": r, "cols": c} for r, c in shapes]


def _hist_cases(sim: bool) -> list[dict]:
    """Few bins (every warp's threads collide on them) and the most bins allowed."""
    if sim:
        shapes = [(1, 1), (33, 1), (1000, 3), (2000, MAX_BINS), (3001, 2)]
    else:
        shapes = [(1, 1), (31, 1), (1025, 2), (100_003, 1), (100_003, 7), (5003, 1000),
                  (1_000_003, 256), (1_000_003, MAX_BINS)]
    return [{"n": n, "nbins": b} for n, b in shapes]


def _vector_cases(sim_sizes: list[int]):
    """Lengths around the block of 256 and a large one no block divides: a kernel without a
    bounds check writes past the end of all but the multiples of 256."""
    def cases(sim: bool) -> list[dict]:
        sizes = sim_sizes if sim else [1, 2, 3, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 100_003, 10_000_019]
        return [{"n": n} for n in sizes]
    return cases


# --------------------------------------------------------------------------- inputs and references
def _row_inputs(p, rng):
    return {"a": uniform(rng, (p["rows"], p["cols"]))}


def _hist_inputs(p, rng):
    x = rng.integers(0, p["nbins"], size=p["n"], dtype=np.int32)
    x[0] = p["nbins"] - 1  # the last bin is always used, so x alone tells the reference how many there are
    return {"x": x}


def _vector_inputs(p, rng):
    return {"x": uniform(rng, p["n"])}


def _blur3_reference(x):
    x = x.astype(np.float64)
    left = np.concatenate([x[:1], x[:-1]])    # the edges are clamped: x[-1] is x[0], x[n] is x[n - 1]
    right = np.concatenate([x[1:], x[-1:]])
    return {"out": (left + x + right) / 3.0}


def _reversed_tiles(n: int) -> np.ndarray:
    """Where out[i] comes from: each tile of TILE values reversed, the last (shorter) one within its length."""
    i = np.arange(n)
    start = i // TILE * TILE
    size = np.minimum(TILE, n - start)
    return start + size - 1 - (i - start)


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _numba_baselines():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32, int32

    @cuda.jit
    def row_sums_warp(a, out):
        # A warp per row: lane k adds columns k, k + 32, ... (a warp reads 128 contiguous bytes),
        # then the warp's 32 partial sums are added in a tree in shared memory.
        part = cuda.shared.array((ROWS_PER_BLOCK, WARP), float32)
        lane, w = cuda.threadIdx.x, cuda.threadIdx.y
        row = cuda.blockIdx.x * ROWS_PER_BLOCK + w
        rows, cols = a.shape
        s = float32(0.0)
        if row < rows:
            for c in range(lane, cols, WARP):
                s += a[row, c]
        part[w, lane] = s
        cuda.syncthreads()
        step = WARP // 2
        while step > 0:
            if lane < step:
                part[w, lane] += part[w, lane + step]
            cuda.syncthreads()
            step //= 2
        if lane == 0 and row < rows:
            out[row] = part[w, 0]

    @cuda.jit
    def zero_bins(bins):
        i = cuda.grid(1)
        if i < bins.size:
            bins[i] = 0

    @cuda.jit
    def histogram_shared(x, bins):
        counts = cuda.shared.array(MAX_BINS, int32)  # this block's private bins
        t = cuda.threadIdx.x
        for k in range(t, bins.size, cuda.blockDim.x):
            counts[k] = 0
        cuda.syncthreads()
        i = cuda.grid(1)
        while i < x.size:
            cuda.atomic.add(counts, x[i], 1)
            i += cuda.gridsize(1)
        cuda.syncthreads()
        for k in range(t, bins.size, cuda.blockDim.x):
            if counts[k] != 0:
                cuda.atomic.add(bins, k, counts[k])

    @cuda.jit
    def blur3_clamped(x, out):
        i = cuda.grid(1)
        n = x.size
        if i < n:
            left = x[i - 1] if i > 0 else x[i]
            right = x[i + 1] if i + 1 < n else x[i]
            out[i] = (left + x[i] + right) / float32(3.0)

    @cuda.jit
    def reverse_tiles_shared(x, out):
        tile = cuda.shared.array(TILE, float32)
        t = cuda.threadIdx.x
        start = cuda.blockIdx.x * TILE
        size = min(TILE, x.size - start)
        if t < size:
            tile[t] = x[start + t]
        cuda.syncthreads()
        if t < size:
            out[start + t] = tile[size - 1 - t]

    def row_sums(a, out):
        row_sums_warp[_cdiv(a.shape[0], ROWS_PER_BLOCK), (WARP, ROWS_PER_BLOCK)](a, out)

    def histogram(x, bins):
        zero_bins[_cdiv(bins.size, HIST_BLOCK), HIST_BLOCK](bins)
        histogram_shared[min(_cdiv(x.size, HIST_BLOCK * 8), 1024), HIST_BLOCK](x, bins)

    def blur3(x, out):
        blur3_clamped[_cdiv(x.size, BLOCK), BLOCK](x, out)

    def reverse_tiles(x, out):
        reverse_tiles_shared[_cdiv(x.size, TILE), TILE](x, out)

    return {"row_sums": row_sums, "histogram": histogram, "blur3": blur3, "reverse_tiles": reverse_tiles}


def _base_row_sums(a, out):
    _numba_baselines()["row_sums"](a, out)


def _base_histogram(x, bins):
    _numba_baselines()["histogram"](x, bins)


def _base_blur3(x, out):
    _numba_baselines()["blur3"](x, out)


def _base_reverse_tiles(x, out):
    _numba_baselines()["reverse_tiles"](x, out)


# --------------------------------------------------------------------------- the lab

LAB = Lab(
    name="diagnosis",
    title="Lab 10: diagnosis",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32, int32\n",
    exercises=(
        Exercise(
            name="row_sums",
            title="Row sums, read along the rows (Numba)",
            backend="numba",
            args=("a", "out"),
            inputs=_row_inputs,
            outputs={"out": Out(lambda p: (p["rows"],))},
            reference=lambda a: {"out": a.astype(np.float64).sum(axis=1)},
            cases=_row_cases,
            timing_case={"rows": 16_385, "cols": 4_097},  # 268 MB: far beyond the L2
            baseline=_base_row_sums,
            baseline_name="reference kernel (a warp per row, a tree in shared memory)",
            bytes_moved=lambda p: 4 * p["rows"] * p["cols"] + 4 * p["rows"],
            flops=lambda p: p["rows"] * p["cols"],
            points=2,
            # One thread per row puts a warp's 32 threads on 32 rows: each load touches 32 sectors,
            # and 16,385 rows make only 16,385 threads. A warp or a block per row runs at ~1.0x.
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            tolerance=SUM_TOL,
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="histogram",
            title="A histogram with private bins in shared memory, without a race (Numba)",
            backend="numba",
            args=("x", "bins"),
            inputs=_hist_inputs,
            outputs={"bins": Out(lambda p: (p["nbins"],), dtype="int32")},
            reference=lambda x: {"bins": np.bincount(x, minlength=int(x.max()) + 1)},  # x[0]: the last bin
            cases=_hist_cases,
            timing_case={"n": TIMED_N, "nbins": 256},
            baseline=_base_histogram,
            baseline_name="reference kernels (bins zeroed, shared atomics, one global atomic per bin and block)",
            bytes_moved=lambda p: 4 * p["n"],
            points=2,
            # The same design runs at ~1.0x. Atomics straight into global memory, with every
            # thread of the GPU contending for 256 addresses, are several times slower.
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            renew_inputs={"x": "nbins"},  # its only input is integers: each timed call gets new ones
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="blur3",
            title="A 3-point blur with bounds and clamped edges (Numba)",
            backend="numba",
            args=("x", "out"),
            inputs=_vector_inputs,
            outputs={"out": Out(lambda p: (p["n"],))},
            reference=_blur3_reference,
            cases=_vector_cases([1, 2, 3, 31, 255, 256, 257, 1000, 5003]),
            timing_case={"n": TIMED_N},
            baseline=_base_blur3,
            baseline_name="reference kernel (one element per thread, edges clamped)",
            bytes_moved=lambda p: 8 * p["n"],
            points=2,
            # Memory-bound: any kernel that reads each value once from DRAM (the neighbours come
            # from the L1 and L2) runs at ~1.0x.
            speed=Speed(1, full_at=0.8, zero_at=0.4),
            tolerance=BLUR_TOL,
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="reverse_tiles",
            title="Reverse each tile of 256 values through shared memory (Numba)",
            backend="numba",
            args=("x", "out"),
            inputs=_vector_inputs,
            outputs={"out": Out(lambda p: (p["n"],))},
            reference=lambda x: {"out": x[_reversed_tiles(x.size)]},
            # With its barrier, the simulator switches between the 256 threads of a block at each
            # barrier: 8 blocks in all there.
            cases=_vector_cases([1, 3, 255, 257, 600]),
            timing_case={"n": TIMED_N},
            baseline=_base_reverse_tiles,
            baseline_name="reference kernel (a tile in shared memory, a barrier, reversed store)",
            bytes_moved=lambda p: 8 * p["n"],
            points=2,
            speed=Speed(1, full_at=0.8, zero_at=0.4),
            forbidden=NO_HOST_MATH,
        ),
    ),
)
