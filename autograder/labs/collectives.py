"""Lab 14: collectives. The ring all-reduce of the chapter *Collectives and NCCL*, on simulated
ranks: K ranks are the K rows of one float32 array ``bufs`` of shape (K, N) on one GPU. A
reduce-scatter, an all-gather, and the two composed, one kernel launch per ring step.

Every exercise takes ``steps`` and runs only the first ``steps`` steps of its schedule; the
grader compares the whole state (every chunk of every rank) after them, bit for bit. Only the
ring's schedule leaves those partial sums and half-gathered buffers: a direct sum, or a copy
straight from each chunk's owner, gives a different state.

Chunks: C = ceil(N / K); chunk c is elements [c C, min((c + 1) C, N)) of a row, empty when
c C >= N (with N < K the last chunks are empty).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import NO_HOST_MATH, Exercise, Lab, Out, Speed, uniform

THREADS = 128  # reference blocks: x along a chunk, the grid's y along the ranks

cuda = None  # numba.cuda, bound by _numba_kernels() on first use


# --------------------------------------------------------------------------- the ring, on the host
def chunk_len(n: int, k: int) -> int:
    """C = ceil(N / K): the elements of a full chunk."""
    return -(-n // k)


def chunk_slice(c: int, n: int, k: int) -> slice:
    """Elements of chunk c (taken mod k) of a row of n: [c C, min((c + 1) C, n)), maybe empty."""
    size = chunk_len(n, k)
    c %= k
    return slice(min(c * size, n), min((c + 1) * size, n))


def reduce_scatter_step(b: np.ndarray, s: int) -> None:
    """Step s of the ring reduce-scatter, in place: rank r sends chunk (r - s) mod K to rank
    r + 1, which adds it to its own copy. No element is both read and written by two different
    ranks within a step, so the ranks can go in any order."""
    k, n = b.shape
    for r in range(k):
        sl = chunk_slice(r - s, n, k)
        b[(r + 1) % k, sl] += b[r, sl]


def all_gather_step(b: np.ndarray, s: int) -> None:
    """Step s of the ring all-gather, in place: rank r sends chunk (r + 1 - s) mod K to rank
    r + 1, which overwrites its copy."""
    k, n = b.shape
    for r in range(k):
        sl = chunk_slice(r + 1 - s, n, k)
        b[(r + 1) % k, sl] = b[r, sl]


def ring_allreduce_host(b: np.ndarray, steps: int) -> np.ndarray:
    """The first ``steps`` of the 2(K - 1) steps of the ring all-reduce, on a float32 copy of b."""
    b = np.array(b, dtype=np.float32)
    k = b.shape[0]
    for s in range(steps):
        if s < k - 1:
            reduce_scatter_step(b, s)
        else:
            all_gather_step(b, s - (k - 1))
    return b


# --------------------------------------------------------------------------- cases
# (K ranks, N elements per rank, steps). Steps run from 0 to the whole schedule; N = 1 and
# N = K - 1 leave chunks empty; K = 1 has no steps at all.
def _cases(sim: bool, small, more) -> list[dict]:
    shapes = small + (more if not sim else [])
    return [{"K": k, "N": n, "steps": s} for k, n, s in shapes]


# Beyond the simulator's cases, on a GPU: more of every kind, and sizes of millions.
_MORE = [(7, 1000, 6), (8, 1025, 7), (5, 1_000_003, 4), (8, 3 * 2**20 + 5, 7), (4, 2**20 + 1, 2)]


def _rs_cases(sim: bool) -> list[dict]:
    small = [(1, 33, 0), (2, 1, 1), (3, 2, 2), (3, 31, 1), (4, 1025, 3), (5, 33, 4), (8, 7, 7), (8, 33, 5)]
    more = [(2, 33, 1), (3, 31, 2), (4, 3, 3), (5, 33, 2), (8, 1, 7), (8, 33, 7)] + _MORE
    return _cases(sim, small, more)


def _ag_cases(sim: bool) -> list[dict]:
    small = [(1, 33, 0), (2, 1, 1), (3, 2, 2), (3, 31, 1), (4, 1025, 3), (5, 33, 2), (5, 33, 4), (8, 1, 7)]
    more = [(2, 33, 1), (3, 31, 2), (4, 3, 3), (5, 33, 0), (8, 7, 7), (8, 33, 4), (8, 33, 7)] + _MORE
    return _cases(sim, small, more)


def _ar_cases(sim: bool) -> list[dict]:
    small = [(1, 1, 0), (2, 1, 2), (3, 2, 4), (3, 31, 3), (4, 1025, 6), (5, 33, 6), (5, 33, 8), (8, 33, 14)]
    more = [(1, 33, 0), (2, 33, 2), (3, 31, 4), (4, 3, 6), (5, 33, 5), (8, 1, 14), (8, 7, 14), (8, 33, 9),
            (7, 1000, 12), (8, 1025, 14), (5, 1_000_003, 8), (8, 3 * 2**20 + 5, 14), (4, 2**20 + 1, 4),
            (8, 2**20 - 3, 10)]
    return _cases(sim, small, more)


# The timed size: 8 ranks of 2^24 float32 values (64 MiB each, 512 MiB in all, far beyond the
# 60 MiB L2), the whole all-reduce (14 steps).
TIMED = {"K": 8, "N": 2**24, "steps": 14}


def ring_bytes(p) -> int:
    """Memory traffic of the simulated ring: at every step each chunk is sent exactly once, so
    a step touches N elements of every row in all. A reduce-scatter step reads the sender's and
    the receiver's copy and writes the receiver's (3 N float32); an all-gather step reads the
    sender's and writes the receiver's (2 N). The whole all-reduce: 5 (K - 1) N float32."""
    k, n, steps = p["K"], p["N"], p["steps"]
    rs = min(steps, k - 1)
    return 4 * n * (3 * rs + 2 * (steps - rs))


# --------------------------------------------------------------------------- inputs, references
def _inputs(p, rng):
    return {"bufs_in": uniform(rng, (p["K"], p["N"])), "steps": int(p["steps"])}


def _shape(p):
    return (p["K"], p["N"])


def _rs_ref(bufs_in, steps):
    b = np.array(bufs_in, dtype=np.float32)  # the inputs were float32: exact
    for s in range(steps):
        reduce_scatter_step(b, s)
    return {"bufs": b.astype(np.float64)}


def _ag_ref(bufs_in, steps):
    b = np.array(bufs_in, dtype=np.float32)
    for s in range(steps):
        all_gather_step(b, s)
    return {"bufs": b.astype(np.float64)}


def _ar_ref(bufs_in, steps):
    return {"bufs": ring_allreduce_host(bufs_in, steps).astype(np.float64)}


# The ring adds float32 values in one order only (each step: own copy + what arrives), and an
# addition of two float32 values is exactly rounded on the GPU, in the simulator and in NumPy
# alike. So the reference is exact and the grader asks for every bit: a sum in another order
# (rank 0 first, say) misses by an ulp or more, as well as leaving the wrong partial sums.
EXACT = {"float32": (0.0, 0.0)}


# --------------------------------------------------------------------------- the reference kernels
@lru_cache(maxsize=None)
def _numba_kernels():
    """One kernel per kind of step, built in the reference runner on first use (never at import time)."""
    global cuda
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda

    @cuda.jit
    def reduce_step(bufs, step, size):
        # Thread (x, y): element i of the chunk that rank r = y sends at this step.
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y
        k, n = bufs.shape
        j = ((r - step + k) % k) * size + i
        if i < size and j < n:
            bufs[(r + 1) % k, j] += bufs[r, j]

    @cuda.jit
    def gather_step(bufs, step, size):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y
        k, n = bufs.shape
        j = ((r + 1 - step + k) % k) * size + i
        if i < size and j < n:
            bufs[(r + 1) % k, j] = bufs[r, j]

    return reduce_step, gather_step


def _launch_steps(bufs, first: int, last: int) -> None:
    """Steps first .. last - 1 of the all-reduce, one launch each (a launch boundary is the
    barrier between steps)."""
    reduce_step, gather_step = _numba_kernels()
    k, n = bufs.shape
    size = chunk_len(n, k)
    grid = ((size + THREADS - 1) // THREADS, k)
    for s in range(first, last):
        if s < k - 1:
            reduce_step[grid, THREADS](bufs, s, size)
        else:
            gather_step[grid, THREADS](bufs, s - (k - 1), size)


def _base_allreduce(bufs, steps):
    _launch_steps(bufs, 0, steps)


# --------------------------------------------------------------------------- the lab
def _exercise(name, title, reference, cases, points, **extra):
    return Exercise(
        name=name,
        title=title,
        backend="numba",
        args=("bufs", "steps"),
        inputs=_inputs,
        outputs={"bufs": Out(_shape, "float32", init="bufs_in")},
        reference=reference,
        cases=cases,
        points=points,
        forbidden=NO_HOST_MATH,
        tolerance=EXACT,
        **extra,
    )


LAB = Lab(
    name="collectives",
    title="Lab 14: a ring all-reduce on simulated ranks",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    memory_limit_gb=24.0,  # the timed case: 512 MiB buffers, their float64 copies for the reference
    exercises=(
        _exercise("ring_reduce_scatter", "Ring reduce-scatter, one launch per step (Numba)",
                  _rs_ref, _rs_cases, 3),
        _exercise("ring_all_gather", "Ring all-gather, one launch per step (Numba)",
                  _ag_ref, _ag_cases, 2),
        _exercise(
            "ring_allreduce", "Ring all-reduce: reduce-scatter then all-gather (Numba)",
            _ar_ref, _ar_cases, 1,
            timing_case=TIMED,
            baseline=_base_allreduce,
            baseline_name="reference ring (one launch per step, 128 threads along a chunk, one block row per rank)",
            bytes_moved=ring_bytes,
            # The solution is the reference's design, so about 1.00x on the H200; full points
            # from 0.8x leave room for noise, none at 0.3x or less.
            speed=Speed(2, full_at=0.8, zero_at=0.3),
        ),
    ),
)
