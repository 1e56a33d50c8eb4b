"""Lab: thread-block clusters (Hopper, compute capability 9.0). A histogram with more bins than one
block's shared memory holds, its bins split over the blocks of a cluster and added to through
distributed shared memory; and row sums with a cluster per row, whose blocks combine their partial
sums through distributed shared memory instead of global atomics. Both in CUDA C through CuPy; the
reference kernels are course/clusters.py's."""
from __future__ import annotations

import numpy as np

from ..spec import Exercise, Lab, Out, SCALARS, Speed, standard_normal

NEEDS = (9, 0)  # clusters: the grader reports both exercises as skipped on older GPUs

MAX_BINS = 65536  # 256 KiB of int32 counts: more than one block's shared memory (227 KiB on an H100)
CLUSTER = 8  # the reference's cluster size, for both exercises
HIST_TIMED = {"n": 1 << 26, "nbins": MAX_BINS, "skew": 1}  # 256 MiB of int32 values, crowded
ROWS_TIMED = {"rows": 64, "cols": 1 << 21}  # 512 MiB of float32: fewer rows than the GPU has SMs

# A raw kernel, not CuPy's library: no bincount, histogram, sum or sort, no host round trip.
# Reading the device's properties and raising a kernel's shared-memory limit (or allowing a cluster
# of 16) are allowed.
CLUSTER_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.int32", "!cupy.int64",
                       "!cupy.float32", "!cupy.cuda.Device", "!cupy.cuda.runtime.getDeviceProperties",
                       "!cupy.cuda.runtime.getDevice", "!cupy.cuda.driver.funcSetAttribute", "cupyx.*",
                       "numpy.*", "torch.*", "numba.*", "*.get", "*.set", "*.sum", "*.cumsum", "*.dot",
                       "*.bincount", "*.histogram", "*.sort", "*.argsort", "*.unique", "*.searchsorted",
                       "*.mean", "*.max", "*.min", "*.tolist", "*.item", "*.astype", "*.copy", "*.view",
                       "operator.matmul") + SCALARS

# Row sums in float32 against float64: as in the reduction lab, 1e-4 of the row's sum passes any
# sound order of additions (the inputs have a positive offset, so |sum| is close to sum |x|) and
# fails a sum that drops or samples part of a row at the timed size (timing inputs below).
SUM_TOL = {"float32": (5e-5, 5e-5)}
SPIKES_PER_ROW = 16


# --------------------------------------------------------------------------- histogram
def _hist_cases(sim: bool) -> list[dict]:
    """(n, nbins): one value; fewer values than bins; bins no cluster divides; every bin allowed;
    three bins for a million values (every add collides); and values crowded into few bins."""
    shapes = [(1, 1, 0), (31, 7, 0), (1025, 4099, 0), (33, MAX_BINS, 0), (100_003, MAX_BINS, 0),
              (1_000_003, 12_289, 0), (2_000_003, 3, 0), (1_000_003, MAX_BINS, 1), (4_000_037, 40_961, 1)]
    return [{"n": n, "nbins": b, "skew": s} for n, b, s in shapes]


def _hist_inputs(p, rng):
    n, nbins = p["n"], p["nbins"]
    if p.get("skew"):  # a normal distribution around the middle bin, a sixty-fourth of the bins wide
        z = rng.standard_normal(n) * (nbins / 64) + nbins // 2
        x = np.clip(np.rint(z), 0, nbins - 1).astype(np.int32)
    else:
        x = rng.integers(0, nbins, size=n, dtype=np.int32)
    x[0] = nbins - 1  # the last bin is always used, so x alone tells the reference how many there are
    return {"x": x}


def _hist_reference(x):
    return {"bins": np.bincount(x, minlength=int(x.max()) + 1)}


def _base_histogram(x, bins):
    from course.clusters import histogram_cluster

    histogram_cluster(x, bins, CLUSTER)


# --------------------------------------------------------------------------- row sums
def _row_cases(sim: bool) -> list[dict]:
    """(rows, cols): one element; rows shorter than a warp, a block and a cluster's threads; long
    rows no block divides; many short rows."""
    shapes = [(1, 1), (1, 33), (3, 1025), (33, 31), (7, 100_003), (1000, 257), (2, 1_000_003), (4099, 3),
              (5, 4097)]
    return [{"rows": r, "cols": c} for r, c in shapes]


def _row_inputs(p, rng):
    """scale * (1 + z / 2): mostly one sign, so |sum| ~ sum |x|; the sign and the scale are random."""
    scale = 10.0 ** rng.uniform(-1.0, 1.5) * (1.0 if rng.random() < 0.5 else -1.0)
    x = standard_normal(rng, (p["rows"], p["cols"]))
    x *= np.float32(0.5)
    x += np.float32(1.0)
    x *= np.float32(scale)
    return {"x": x}


def _row_timing_inputs(p, rng):
    """As above, plus a few large terms at random places in every row that carry half of its sum:
    a sum that drops or samples part of a row misses some of them and errs by far more than 1e-4."""
    x = _row_inputs(p, rng)["x"]
    rows, cols = x.shape
    spikes = min(SPIKES_PER_ROW, cols)
    for r in range(rows):
        where = rng.choice(cols, size=spikes, replace=False)
        share = float(np.sum(x[r], dtype=np.float64)) / spikes
        x[r, where] += (share * rng.uniform(0.5, 1.5, spikes)).astype(np.float32)
    return {"x": x}


def _base_row_sums(x, out):
    from course.clusters import row_sums_cluster

    row_sums_cluster(x, out, CLUSTER)


# --------------------------------------------------------------------------- the lab
LAB = Lab(
    name="clusters",
    title="Lab 23: thread-block clusters",
    setup="import math\nimport numpy as np\nimport cupy as cp\n",
    exercises=(
        Exercise(
            name="cluster_histogram",
            title="A histogram of up to 65,536 bins split over a cluster (CUDA C, compute capability 9.0)",
            backend="cupy",
            args=("x", "bins"),
            inputs=_hist_inputs,
            outputs={"bins": Out(lambda p: (p["nbins"],), dtype="int32")},
            reference=_hist_reference,
            cases=_hist_cases,
            timing_case=HIST_TIMED,
            baseline=_base_histogram,
            baseline_name="reference kernel (a cluster of 8 blocks, the bins split over their shared memory)",
            bytes_moved=lambda p: 4 * p["n"],
            points=3,
            # Timed on crowded values, where the adds meet on a few bins: global atomics queue in
            # the L2 cache there, and ran at 0.41x the cluster of 8 on an H200 (chapter 24), so
            # they earn no speed points. On evenly spread values they are as fast as the cluster.
            speed=Speed(2, full_at=0.8, zero_at=0.45),
            forbidden=CLUSTER_KERNEL_ONLY,
            gpu_only=True,
            # The only input is integers: each timed call gets a random 1/64 of them renewed, so a
            # cache of earlier answers kept on the device replays wrong bins.
            renew_inputs={"x": "nbins"},
            min_cc=NEEDS,
        ),
        Exercise(
            name="cluster_row_sums",
            title="Row sums with a cluster per row, combined through distributed shared memory (CUDA C)",
            backend="cupy",
            args=("x", "out"),
            inputs=_row_inputs,
            outputs={"out": Out(lambda p: (p["rows"],))},
            reference=lambda x: {"out": x.astype(np.float64).sum(axis=1)},
            cases=_row_cases,
            timing_case=ROWS_TIMED,
            timing_inputs=_row_timing_inputs,
            baseline=_base_row_sums,
            baseline_name="reference kernel (a cluster of 8 blocks per row)",
            bytes_moved=lambda p: 4 * p["rows"] * p["cols"] + 4 * p["rows"],
            flops=lambda p: p["rows"] * p["cols"],
            points=2,
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=CLUSTER_KERNEL_ONLY,
            gpu_only=True,
            tolerance=SUM_TOL,
            min_cc=NEEDS,
        ),
    ),
)
