"""Lab 2: thread indexing. A 2D grid over a row-major matrix, global ids in a 3D launch,
2D grid-stride loops, a transpose as a CuPy raw kernel, and a 3D stencil."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import Exercise, Lab, NO_HOST_MATH, Out, SCALARS, Speed, uniform

# The CuPy exercise: a raw kernel, not CuPy's own array operations (a.T, cupy.transpose, ...).
CUPY_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.float32", "!cupy.int32",
                    "!cupy.int64", "numpy.*", "torch.*", "*.get", "*.set", "*.T", "*.transpose",
                    "*.swapaxes", "*.copy", "*.ravel", "*.reshape") + SCALARS

MAX_THREADS_PER_BLOCK = 1024  # CUDA C++ Programming Guide, technical specifications (all current GPUs)
MAX_BLOCK_DIM_Z = 64


# --------------------------------------------------------------------------- cases
def awkward_2d(simulator: bool) -> list[dict]:
    """Matrix shapes (rows, cols) that no block shape divides: 1, 31/33, 1025, tall, wide.

    (2, 1025) and (257, 3) also exceed the fixed grid of the grid-stride exercise
    (32 x 32 blocks of 32 x 8 threads cover 1024 columns and 256 rows per pass)."""
    if simulator:
        shapes = [(1, 1), (31, 33), (33, 31), (2, 1025), (257, 3), (45, 70)]
    else:
        shapes = [(1, 1), (31, 33), (33, 31), (32, 32), (33, 1025), (1025, 33), (1000, 3), (3, 1000),
                  (300, 5000), (3001, 4099)]
    return [{"rows": r, "cols": c} for r, c in shapes]


def awkward_3d(simulator: bool) -> list[dict]:
    """Volume shapes (nz, ny, nx): a single point, no interior, one interior point, odd sizes."""
    if simulator:
        shapes = [(1, 1, 1), (2, 3, 4), (3, 3, 3), (4, 5, 33), (7, 9, 10), (5, 17, 6)]
    else:
        shapes = [(1, 1, 1), (2, 3, 4), (3, 3, 3), (31, 33, 35), (64, 64, 64), (3, 100, 1025),
                  (130, 70, 3), (200, 150, 257)]
    return [{"nz": z, "ny": y, "nx": x} for z, y, x in shapes]


def ids_cases(simulator: bool) -> list[dict]:
    """Extents (nz, ny, nx) of the whole grid in threads; grid and block are drawn per case."""
    if simulator:  # at most 4096 threads per case: the simulator runs ~10^4 threads/s
        shapes = [(1, 1, 1), (2, 3, 4), (4, 6, 8), (6, 10, 12), (8, 12, 30), (12, 16, 20)]
    else:
        shapes = [(1, 1, 1), (2, 3, 4), (4, 6, 8), (6, 10, 12), (8, 12, 30), (12, 16, 20),
                  (24, 60, 72), (60, 60, 60), (2, 4, 4096), (64, 96, 120)]
    return [{"nz": z, "ny": y, "nx": x} for z, y, x in shapes]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _launch(p, rng):
    """A random grid and block (x, y, z) that tile the extents exactly, within CUDA's limits.

    Axes are visited in a random order so that any of them can get the large block; a block
    size strictly between 1 and the extent is preferred, so that most axes have several
    blocks and several threads, and an id formula that mixes up the axes gives wrong ids."""
    extents = (p["nx"], p["ny"], p["nz"])
    limits = (MAX_THREADS_PER_BLOCK, MAX_THREADS_PER_BLOCK, MAX_BLOCK_DIM_Z)
    block = [1, 1, 1]
    budget = MAX_THREADS_PER_BLOCK
    for axis in rng.permutation(3):
        n = extents[axis]
        fits = [d for d in _divisors(n) if d <= min(limits[axis], budget)]
        inner = [d for d in fits if 1 < d < n]
        pool = inner if inner and rng.random() < 0.8 else fits
        block[axis] = int(pool[int(rng.integers(len(pool)))])
        budget //= block[axis]
    grid = tuple(int(n // b) for n, b in zip(extents, block))
    return {"grid": grid, "block": tuple(block)}


# --------------------------------------------------------------------------- references (float64, host)
def _ids_reference(grid, block):
    gx, gy, gz = grid
    bx, by, bz = block
    z, y, x = np.indices((gz * bz, gy * by, gx * bx), dtype=np.int64)
    block_id = x // bx + (y // by) * gx + (z // bz) * gx * gy
    thread_id = x % bx + (y % by) * bx + (z % bz) * bx * by
    return {"out": block_id * (bx * by * bz) + thread_id}


def _laplacian_reference(u):
    out = np.zeros_like(u)
    if min(u.shape) >= 3:
        out[1:-1, 1:-1, 1:-1] = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1]
                                 + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
                                 + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:]
                                 - 6 * u[1:-1, 1:-1, 1:-1])
    return {"out": out}


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _numba_baselines():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda

    @cuda.jit
    def add_2d(a, b, out):
        col, row = cuda.grid(2)
        if row < out.shape[0] and col < out.shape[1]:
            out[row, col] = a[row, col] + b[row, col]

    @cuda.jit
    def scale_rows_2d(A, s, out):
        col0, row0 = cuda.grid(2)
        stride_x, stride_y = cuda.gridsize(2)
        for row in range(row0, out.shape[0], stride_y):
            scale = s[row]
            for col in range(col0, out.shape[1], stride_x):
                out[row, col] = A[row, col] * scale

    @cuda.jit
    def laplacian(u, out):
        x, y, z = cuda.grid(3)
        nz, ny, nx = u.shape
        if x < nx and y < ny and z < nz:
            if 0 < x < nx - 1 and 0 < y < ny - 1 and 0 < z < nz - 1:
                out[z, y, x] = (u[z - 1, y, x] + u[z + 1, y, x] + u[z, y - 1, x] + u[z, y + 1, x]
                                + u[z, y, x - 1] + u[z, y, x + 1] - 6 * u[z, y, x])
            else:
                out[z, y, x] = 0

    def matrix_add(a, b, out):
        rows, cols = out.shape
        add_2d[((cols + 31) // 32, (rows + 7) // 8), (32, 8)](a, b, out)

    def scale_rows(A, s, out):
        rows, cols = out.shape
        grid = (min(32, (cols + 31) // 32), min(32, (rows + 7) // 8))
        scale_rows_2d[grid, (32, 8)](A, s, out)

    def laplacian_3d(u, out):
        nz, ny, nx = out.shape
        laplacian[((nx + 31) // 32, (ny + 7) // 8, nz), (32, 8, 1)](u, out)

    return matrix_add, scale_rows, laplacian_3d


def _base_matrix_add(a, b, out):
    _numba_baselines()[0](a, b, out)


def _base_scale_rows(A, s, out):
    _numba_baselines()[1](A, s, out)


def _base_laplacian(u, out):
    _numba_baselines()[2](u, out)


@lru_cache(maxsize=None)
def _cupy_transpose_kernel():
    import cupy as cp

    return cp.RawKernel(r"""
    extern "C" __global__ void transpose(const float* a, float* out, int rows, int cols) {
        int col = blockIdx.x * blockDim.x + threadIdx.x;   // x runs along a's columns
        int row = blockIdx.y * blockDim.y + threadIdx.y;
        if (row < rows && col < cols) {
            out[(long long)col * rows + row] = a[(long long)row * cols + col];
        }
    }""", "transpose")


def _base_transpose_cupy(a, out):
    """A CuPy raw kernel, so that both sides pay CuPy's launch cost (see first_kernel.py)."""
    rows, cols = a.shape
    _cupy_transpose_kernel()(((cols + 31) // 32, (rows + 7) // 8), (32, 8),
                             (a, out, np.int32(rows), np.int32(cols)))


# --------------------------------------------------------------------------- inputs
def _matrix(p):
    return (p["rows"], p["cols"])


def _add_inputs(p, rng):
    return {"a": uniform(rng, _matrix(p)), "b": uniform(rng, _matrix(p))}


def _scale_inputs(p, rng):
    return {"A": uniform(rng, _matrix(p)), "s": uniform(rng, p["rows"])}


def _transpose_inputs(p, rng):
    return {"a": uniform(rng, _matrix(p))}


def _volume_inputs(p, rng):
    # Whole numbers: every sum of the stencil is exact in float32, whatever the order of the adds.
    shape = (p["nz"], p["ny"], p["nx"])
    return {"u": rng.integers(-1000, 1001, size=shape).astype(np.float32)}


def _cells(p):
    return p["rows"] * p["cols"]


def _points(p):
    return p["nz"] * p["ny"] * p["nx"]


SPEED = Speed(1, full_at=0.8, zero_at=0.25)
MATRIX = dict(cases=awkward_2d, speed=SPEED, forbidden=NO_HOST_MATH)

LAB = Lab(
    name="indexing",
    title="Lab 2: thread indexing",
    setup="import math\nimport numpy as np\nfrom numba import cuda\n",
    exercises=(
        Exercise(
            name="matrix_add_2d",
            title="Matrix add on a 2D grid (Numba)",
            backend="numba",
            args=("a", "b", "out"),
            inputs=_add_inputs,
            outputs={"out": Out(_matrix)},
            reference=lambda a, b: {"out": a + b},
            baseline=_base_matrix_add,
            timing_case={"rows": 4096, "cols": 8191},  # 128 MiB per matrix, rows not 128-byte aligned
            bytes_moved=lambda p: 3 * 4 * _cells(p),
            flops=_cells,
            points=2,
            **MATRIX,
        ),
        Exercise(
            name="global_ids_3d",
            title="Global thread ids in a 3D launch (Numba)",
            backend="numba",
            args=("grid", "block", "out"),
            inputs=_launch,
            outputs={"out": Out(lambda p: (p["nz"], p["ny"], p["nx"]), dtype="int32")},
            reference=_ids_reference,
            cases=ids_cases,
            points=2,
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="scale_rows",
            title="Scale rows with a 2D grid-stride loop (Numba)",
            backend="numba",
            args=("A", "s", "out"),
            inputs=_scale_inputs,
            outputs={"out": Out(_matrix)},
            reference=lambda A, s: {"out": A * s[:, None]},
            baseline=_base_scale_rows,
            timing_case={"rows": 8191, "cols": 4099},
            bytes_moved=lambda p: 2 * 4 * _cells(p) + 4 * p["rows"],
            flops=_cells,
            points=2,
            **MATRIX,
        ),
        Exercise(
            name="transpose_cupy",
            title="Transpose as a CuPy raw kernel",
            backend="cupy",
            args=("a", "out"),
            inputs=_transpose_inputs,
            outputs={"out": Out(lambda p: (p["cols"], p["rows"]))},
            reference=lambda a: {"out": a.T},
            cases=awkward_2d,
            baseline=_base_transpose_cupy,
            baseline_name="reference CuPy raw kernel",
            timing_case={"rows": 4099, "cols": 8191},
            bytes_moved=lambda p: 2 * 4 * _cells(p),
            points=1,
            speed=SPEED,
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,
        ),
        Exercise(
            name="laplacian_3d",
            title="A 3D stencil on a 3D grid (Numba)",
            backend="numba",
            args=("u", "out"),
            inputs=_volume_inputs,
            outputs={"out": Out(lambda p: (p["nz"], p["ny"], p["nx"]))},
            reference=_laplacian_reference,
            cases=awkward_3d,
            baseline=_base_laplacian,
            timing_case={"nz": 256, "ny": 384, "nx": 509},  # 191 MiB per volume
            bytes_moved=lambda p: 2 * 4 * _points(p),  # the least: read u once, write out once
            flops=lambda p: 7 * _points(p),
            points=2,
            speed=SPEED,
            forbidden=NO_HOST_MATH,
        ),
    ),
)
