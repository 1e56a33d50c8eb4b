"""Lab 22: asynchronous copies. The radius-8 stencil of the chapter *Asynchronous copies and
pipelines* in CUDA C through CuPy, its tiles of x brought into shared memory by ``cp.async`` in a
pipeline of several stages, by a fixed grid of blocks that walk over the tiles. The reference kernel
is course/async_copies.py's: 3 stages, 2 blocks per SM."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import SCALARS, Exercise, Lab, Out, Speed, uniform

NEEDS = (8, 0)  # cp.async came with Ampere: the grader reports the exercise as skipped on older GPUs
RADIUS = 8
TILE = 2048  # the reference's outputs per tile (256 threads, 8 outputs each)
# 2**26 floats: 256 MiB read and 256 MiB written per call, far more than any L2 cache holds.
TIMED = {"n": 1 << 26}
REFERENCE_STAGES = 3
REFERENCE_BLOCKS_PER_SM = 2  # the chapter's fastest configuration on an H200 (86% of the copy)

# The weights, as the chapter's: w[j] = ((j - 8)^2 + 1) / 425, j = 0 .. 16 (they add up to 1).
WEIGHTS = (np.arange(-RADIUS, RADIUS + 1) ** 2 + 1.0).astype(np.float32)
WEIGHTS /= WEIGHTS.sum()

# A raw kernel, not CuPy's library: no convolve or correlate, no array maths, no host round trip.
# Reading the device's properties (to size the grid) and raising a kernel's shared-memory limit are
# allowed.
ASYNC_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.int32", "!cupy.int64",
                     "!cupy.float32", "!cupy.cuda.Device", "!cupy.cuda.runtime.getDeviceProperties",
                     "!cupy.cuda.runtime.getDevice", "!cupy.cuda.driver.funcSetAttribute", "cupyx.*",
                     "numpy.*", "torch.*", "numba.*", "scipy.*", "*.get", "*.set", "*.fill", "*.copy",
                     "*.astype", "*.view", "*.tolist", "*.item", "*.sum", "*.dot", "*.convolve",
                     "*.correlate", "*.correlate1d", "*.cumsum", "*.copy_from*", "*.copy_to*",
                     "operator.matmul") + SCALARS


def _cases(sim: bool) -> list[dict]:
    """n: one value (less than one tile, less than the halo); the radius and around it; one tile
    exactly, and one more; a tail of one float and of three (no 16-byte copy fits them); many
    tiles with tails no tile divides, more tiles than a grid of two blocks per SM covers."""
    sizes = [1, 3, 8, 9, 17, 1000, TILE, TILE + 1, TILE + 8, TILE + 9, 3 * TILE + 3, 100_003,
             1_000_001, 4_000_037]
    return [{"n": n} for n in sizes]


def _inputs(p, rng):
    return {"x": uniform(rng, (p["n"],))}


def _reference(x):
    """The stencil in float64, zeros outside x."""
    n = x.shape[0]
    xp = np.pad(np.asarray(x, dtype=np.float64), RADIUS)
    w = WEIGHTS.astype(np.float64)
    y = np.zeros(n)
    for j in range(2 * RADIUS + 1):
        y += w[j] * xp[j:j + n]
    return {"y": y}


@lru_cache(maxsize=None)
def _sms(device: int) -> int:
    """The GPU's SMs, looked up once: cudaGetDeviceProperties takes about a millisecond."""
    import cupy as cp

    return cp.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]


def _baseline(x, y):
    import cupy as cp

    from course.async_copies import StencilVariant, launch_stencil

    launch_stencil(StencilVariant(REFERENCE_STAGES, True), x, y,
                   REFERENCE_BLOCKS_PER_SM * _sms(cp.cuda.Device().id))


LAB = Lab(
    name="async_copies",
    title="Lab 22: asynchronous copies",
    setup="import math\nimport numpy as np\nimport cupy as cp\n",
    exercises=(
        Exercise(
            name="stencil_pipeline",
            title="A radius-8 stencil fed by a cp.async pipeline (CUDA C, compute capability 8.0)",
            backend="cupy",
            args=("x", "y"),
            inputs=_inputs,
            outputs={"y": Out(lambda p: (p["n"],))},
            reference=_reference,
            cases=_cases,
            timing_case=TIMED,
            baseline=_baseline,
            baseline_name=f"reference kernel (cp.async, {REFERENCE_STAGES} stages, "
                          f"{REFERENCE_BLOCKS_PER_SM} blocks per SM)",
            bytes_moved=lambda p: 8 * p["n"],
            flops=lambda p: 2 * (2 * RADIUS + 1) * p["n"],
            points=3,
            # One block per SM copying through registers ran at 0.31x the reference in the chapter's
            # table (H200), cp.async with one stage at 2 blocks per SM at 0.65x, 2 stages at 0.82x.
            speed=Speed(2, full_at=0.8, zero_at=0.4),
            forbidden=ASYNC_KERNEL_ONLY,
            gpu_only=True,
            min_cc=NEEDS,
        ),
    ),
)
