"""Thread-block clusters and distributed shared memory (Hopper, compute capability 9.0): the CUDA C
of the chapter *Thread-block clusters*, and the launchers that compile it through CuPy.

A cluster is a group of blocks that the GPU runs at the same time on SMs next to each other, and
whose threads can read, write and add to each other's shared memory (*distributed shared memory*).
Every kernel here fixes its cluster size when it is compiled, with ``__cluster_dims__``: CuPy's
ordinary launch then starts clusters, and no launch API beyond ``RawKernel.__call__`` is needed.
The cluster size is a macro, ``CLUSTER``, so each size is its own compiled module.

The chapter, the lab ``clusters`` (its reference kernels) and the tests share this module. Only
``compile_check`` runs without a GPU (it calls nvcc); everything else needs CuPy and a GPU of
compute capability 9.0 or newer.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

NEEDS = (9, 0)  # clusters and distributed shared memory arrived with Hopper
PORTABLE_MAX = 8  # the largest cluster every GPU with clusters must run; 16 needs an opt-in
HIST_THREADS = 512  # threads per block of the histograms
ROW_THREADS = 512  # threads per block of the row sums
MAX_BINS = 65536  # the lab's histograms: up to 256 KiB of int32 counts, more than one block may hold

# cuFuncSetAttribute's attribute numbers (cuda.h, CUfunction_attribute)
_MAX_DYNAMIC_SHARED = 8
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14

# What cooperative_groups::this_cluster() offers, written with the compiler's own built-in functions
# so that NVRTC (CuPy) needs no header. The names are those of cooperative_groups' cluster_group.
CLUSTER_API = r"""
struct Cluster {
    // this block's place in its cluster: 0 .. num_blocks() - 1
    __device__ static unsigned block_rank() { return __clusterRelativeBlockRank(); }
    __device__ static unsigned num_blocks() { return __clusterSizeInBlocks(); }
    // a barrier for every thread of every block of the cluster: what was written to
    // shared memory before it is visible to the whole cluster after it
    __device__ static void sync() {
        __cluster_barrier_arrive();
        __cluster_barrier_wait();
    }
    // the address of the same shared variable in block `rank` of the cluster
    template <typename T>
    __device__ static T* map_shared_rank(T* p, unsigned rank) {
        return static_cast<T*>(__cluster_map_shared_rank(p, rank));
    }
};
"""

# Which block is in which cluster, and a first read of a neighbour's shared memory.
RANKS_SOURCE = CLUSTER_API + r"""
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
cluster_ranks(int* rank_of, int* neighbour_of) {
    __shared__ int mine;
    const unsigned rank = Cluster::block_rank();
    if (threadIdx.x == 0) mine = 100 * blockIdx.x + rank;  // a value of this block's own
    Cluster::sync();  // every block has written its value before anyone reads
    if (threadIdx.x == 0) {
        const unsigned next = (rank + 1) % Cluster::num_blocks();
        rank_of[blockIdx.x] = rank;
        neighbour_of[blockIdx.x] = *Cluster::map_shared_rank(&mine, next);
    }
    Cluster::sync();  // no block exits while a neighbour may still read its shared memory
}
"""

# Three histograms of int32 values in [0, nbins): straight into global memory; in each block's
# shared memory; and in a cluster's shared memory, the bins split over its blocks.
HISTOGRAM_SOURCE = CLUSTER_API + r"""
// One atomic per value, straight into global memory (bins zeroed before).
extern "C" __global__ void hist_global(const int* __restrict__ x, long long n, int* bins)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += stride) atomicAdd(&bins[x[i]], 1);
}

// Every bin in each block's shared memory (nbins ints of dynamic shared memory), then one
// global atomic per non-empty bin and block.
extern "C" __global__ void
hist_block(const int* __restrict__ x, long long n, int* bins, int nbins) {
    extern __shared__ int counts[];
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) counts[b] = 0;
    __syncthreads();
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {  // four loads in flight
        const int v0 = x[i], v1 = x[i + stride];
        const int v2 = x[i + 2 * stride], v3 = x[i + 3 * stride];
        atomicAdd(&counts[v0], 1); atomicAdd(&counts[v1], 1);
        atomicAdd(&counts[v2], 1); atomicAdd(&counts[v3], 1);
    }
    for (; i < n; i += stride) atomicAdd(&counts[x[i]], 1);
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x)
        if (counts[b] != 0) atomicAdd(&bins[b], counts[b]);
}

// The bins split over the CLUSTER blocks of a cluster: bin v lives in block v % CLUSTER,
// slot v / CLUSTER, so each block holds ceil(nbins / CLUSTER) counts. Every value is
// added, wherever its bin lives, through distributed shared memory; then one global
// atomic per non-empty bin and cluster.
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
hist_cluster(const int* __restrict__ x, long long n, int* bins, int nbins) {
    extern __shared__ int counts[];
    const int rank = Cluster::block_rank();
    const int slots = (nbins + CLUSTER - 1) / CLUSTER;
    for (int s = threadIdx.x; s < slots; s += blockDim.x) counts[s] = 0;
    Cluster::sync();  // every block's counts are zero before any block adds to them
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const int v0 = x[i], v1 = x[i + stride];  // four loads in flight
        const int v2 = x[i + 2 * stride], v3 = x[i + 3 * stride];
        atomicAdd(Cluster::map_shared_rank(counts, v0 % CLUSTER) + v0 / CLUSTER, 1);
        atomicAdd(Cluster::map_shared_rank(counts, v1 % CLUSTER) + v1 / CLUSTER, 1);
        atomicAdd(Cluster::map_shared_rank(counts, v2 % CLUSTER) + v2 / CLUSTER, 1);
        atomicAdd(Cluster::map_shared_rank(counts, v3 % CLUSTER) + v3 / CLUSTER, 1);
    }
    for (; i < n; i += stride) {
        const int v = x[i];
        atomicAdd(Cluster::map_shared_rank(counts, v % CLUSTER) + v / CLUSTER, 1);
    }
    Cluster::sync();  // every add of the cluster has landed; each block now reads its own
    for (int s = threadIdx.x; s < slots; s += blockDim.x) {
        const int b = s * CLUSTER + rank;
        if (b < nbins && counts[s] != 0) atomicAdd(&bins[b], counts[s]);
    }
}
"""

# Sums of the rows of a float32 matrix with several blocks per row: the blocks' partial sums are
# combined through a cluster's shared memory (one kernel, no atomics, the same order every run), or
# with global atomics (the output zeroed first, the order of the adds left to the hardware).
ROW_SUMS_SOURCE = CLUSTER_API + r"""
// The sum of this thread's share of a row (elements first, first + step, ...), four loads
// in flight, then of the block's threads: the result is valid in thread 0.
__device__ float block_row_sum(const float* __restrict__ row, long long cols,
                               long long first, long long step, float* warp_sums) {
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    long long j = first;
    for (; j + 3 * step < cols; j += 4 * step) {
        a0 += row[j]; a1 += row[j + step];
        a2 += row[j + 2 * step]; a3 += row[j + 3 * step];
    }
    for (; j < cols; j += step) a0 += row[j];
    float s = (a0 + a1) + (a2 + a3);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
    if (lane == 0) warp_sums[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
        for (int d = 16; d > 0; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
    }
    return s;
}

// One cluster per row: block `rank` sums the columns rank * blockDim.x + t, stepping by
// the cluster's threads; block 0 then reads the other blocks' sums from their shared
// memory.
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
row_sums_cluster(const float* __restrict__ x, long long cols, float* out) {
    __shared__ float warp_sums[32];
    __shared__ float block_sum;
    const unsigned rank = Cluster::block_rank();
    const long long row = blockIdx.x / CLUSTER;
    const long long first = (long long)rank * blockDim.x + threadIdx.x;
    const long long step = (long long)CLUSTER * blockDim.x;  // the cluster's threads
    const float s = block_row_sum(x + row * cols, cols, first, step, warp_sums);
    if (threadIdx.x == 0) block_sum = s;
    Cluster::sync();  // every block's sum is in its shared memory
    if (rank == 0 && threadIdx.x == 0) {
        float total = 0.0f;
        for (int r = 0; r < CLUSTER; ++r)  // in rank order: the same sum on every run
            total += *Cluster::map_shared_rank(&block_sum, r);
        out[row] = total;
    }
    Cluster::sync();  // no block exits before block 0 has read its sum
}

// The same partial sums, `per_row` blocks per row, no cluster: each adds into out[row].
extern "C" __global__ void
row_sums_atomic(const float* __restrict__ x, long long cols, float* out, int per_row) {
    __shared__ float warp_sums[32];
    const long long row = blockIdx.x / per_row;
    const int part = blockIdx.x % per_row;
    const long long first = (long long)part * blockDim.x + threadIdx.x;
    const long long step = (long long)per_row * blockDim.x;
    const float s = block_row_sum(x + row * cols, cols, first, step, warp_sums);
    if (threadIdx.x == 0) atomicAdd(&out[row], s);
}
"""

SOURCES = {"ranks": RANKS_SOURCE, "histogram": HISTOGRAM_SOURCE, "row_sums": ROW_SUMS_SOURCE}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- without a GPU
def compile_check(source: str, cluster: int = 4, arch: str = "sm_90") -> tuple[bool, str]:
    """Compile ``source`` with nvcc for ``arch`` (no GPU needed): (compiled?, what nvcc said)."""
    from .cuda_tools import nvcc

    status, log, _ = nvcc(source, [f"-arch={arch}", f"-DCLUSTER={cluster}"])
    return status == 0, log.strip()


def nvcc_available() -> bool:
    from .cuda_tools import find

    return find("nvcc") is not None


# --------------------------------------------------------------------------- on a GPU
def supported() -> bool:
    """True on a GPU of compute capability 9.0 or newer (CuPy's view of the current device)."""
    try:
        import cupy as cp

        cc = int(cp.cuda.Device().compute_capability)  # "90" on an H100
    except Exception:  # no CuPy or no GPU
        return False
    return (cc // 10, cc % 10) >= NEEDS


@lru_cache(maxsize=None)
def properties() -> dict:
    """The few device properties the launchers need."""
    import cupy as cp

    p = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    return {"sms": p["multiProcessorCount"], "threads_per_sm": p["maxThreadsPerMultiProcessor"],
            "smem_per_sm": p["sharedMemPerMultiprocessor"], "smem_optin": p["sharedMemPerBlockOptin"],
            "name": p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])}


@lru_cache(maxsize=None)
def _module(which: str, cluster: int):
    import cupy as cp

    return cp.RawModule(code=SOURCES[which], options=("-std=c++17", f"-DCLUSTER={cluster}"))


def _set_attribute(kernel, attribute: int, value: int) -> None:
    import cupy as cp

    cp.cuda.driver.funcSetAttribute(kernel.kernel.ptr, attribute, value)


@lru_cache(maxsize=None)
def kernel(which: str, name: str, cluster: int, dynamic_shared: int = 0):
    """The compiled kernel, ready to launch with ``dynamic_shared`` bytes of dynamic shared memory;
    a cluster larger than 8 is opted in (non-portable: Hopper runs 16)."""
    k = _module(which, cluster).get_function(name)
    if dynamic_shared > 48 * 1024:
        _set_attribute(k, _MAX_DYNAMIC_SHARED, dynamic_shared)
    if cluster > PORTABLE_MAX:
        _set_attribute(k, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    return k


def cluster_ranks(blocks: int, cluster: int):
    """(rank of each block in its cluster, the value each block read from its neighbour's shared
    memory): host arrays of ``blocks`` ints. Block b publishes 100 * b + its rank."""
    import cupy as cp

    rank_of = cp.full(blocks, -1, cp.int32)
    neighbour_of = cp.full(blocks, -1, cp.int32)
    kernel("ranks", "cluster_ranks", cluster)((blocks,), (32,), (rank_of, neighbour_of))
    return cp.asnumpy(rank_of), cp.asnumpy(neighbour_of)


def blocks_per_sm(threads: int, shared_bytes: int) -> int:
    """Blocks of ``threads`` threads and ``shared_bytes`` of shared memory that one SM holds at once
    (the driver keeps 1 KiB per block for itself)."""
    p = properties()
    by_threads = p["threads_per_sm"] // threads
    by_shared = p["smem_per_sm"] // (shared_bytes + 1024) if shared_bytes else by_threads
    return max(0, min(by_threads, by_shared))


def histogram_shared_bytes(nbins: int, cluster: int) -> int:
    """Shared memory per block of the cluster histogram: its share of the bins, as int32."""
    return 4 * cdiv(nbins, cluster)


def histogram_fits(nbins: int, cluster: int) -> bool:
    """Whether one block may hold its share of ``nbins`` bins (``cluster`` = 1: the per-block histogram)."""
    return histogram_shared_bytes(nbins, cluster) <= properties()["smem_optin"]


def _hist_grid(n: int, shared_bytes: int, cluster: int) -> int:
    """One wave of blocks, a multiple of the cluster size, and no more than the data needs."""
    wave = properties()["sms"] * max(1, blocks_per_sm(HIST_THREADS, shared_bytes))
    blocks = min(wave, cdiv(max(n, 1), HIST_THREADS * 4))
    return max(cluster, blocks // cluster * cluster)


def histogram_global(x, bins) -> None:
    """bins[v] = how many values of x equal v; one atomicAdd per value in global memory."""
    bins.fill(0)
    n = x.size
    blocks = max(1, min(properties()["sms"] * 8, cdiv(n, HIST_THREADS)))
    kernel("histogram", "hist_global", 1)((blocks,), (HIST_THREADS,), (x, np.int64(n), bins))


def histogram_block(x, bins) -> None:
    """The same histogram with every bin in each block's shared memory (needs nbins * 4 bytes per block)."""
    nbins, n = bins.size, x.size
    shared = 4 * nbins
    if not histogram_fits(nbins, 1):
        raise ValueError(f"{nbins} bins need {shared // 1024} KiB of shared memory per block; "
                         f"this GPU allows {properties()['smem_optin'] // 1024} KiB")
    bins.fill(0)
    blocks = _hist_grid(n, shared, 1)
    kernel("histogram", "hist_block", 1, shared)((blocks,), (HIST_THREADS,), (x, np.int64(n), bins, np.int32(nbins)),
                                                 shared_mem=shared)


def histogram_cluster(x, bins, cluster: int = 8) -> None:
    """The same histogram with the bins split over the blocks of each cluster, added to through
    distributed shared memory."""
    nbins, n = bins.size, x.size
    shared = histogram_shared_bytes(nbins, cluster)
    if not histogram_fits(nbins, cluster):
        raise ValueError(f"{nbins} bins over {cluster} blocks need {shared // 1024} KiB per block")
    bins.fill(0)
    blocks = _hist_grid(n, shared, cluster)
    kernel("histogram", "hist_cluster", cluster, shared)(
        (blocks,), (HIST_THREADS,), (x, np.int64(n), bins, np.int32(nbins)), shared_mem=shared)


def row_sums_cluster(x, out, cluster: int = 8) -> None:
    """out[r] = the sum of row r of the 2-D float32 array x: one cluster of ``cluster`` blocks per row."""
    rows, cols = x.shape
    if rows == 0:
        return
    kernel("row_sums", "row_sums_cluster", cluster)((rows * cluster,), (ROW_THREADS,), (x, np.int64(cols), out))


def row_sums_atomic(x, out, per_row: int = 8) -> None:
    """The same sums with ``per_row`` blocks per row, each adding its sum into out[r] atomically."""
    rows, cols = x.shape
    out.fill(0)
    if rows == 0:
        return
    kernel("row_sums", "row_sums_atomic", 1)((rows * per_row,), (ROW_THREADS,),
                                             (x, np.int64(cols), out, np.int32(per_row)))


# --------------------------------------------------------------------------- measurements
def uniform_values(n: int, nbins: int, seed: int = 0) -> np.ndarray:
    """n int32 values spread evenly over [0, nbins) (on the host)."""
    return np.random.default_rng(seed).integers(0, nbins, size=n, dtype=np.int32)


def skewed_values(n: int, nbins: int, seed: int = 0) -> np.ndarray:
    """n int32 values in [0, nbins) crowded around the middle (on the host): a normal distribution
    whose standard deviation is nbins / 64, so that 1/16 of the bins hold 95% of the values."""
    z = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    return np.clip(np.rint(nbins // 2 + z * np.float32(nbins / 64)), 0, nbins - 1).astype(np.int32)


HIST_VERSIONS = ("global atomics", "shared, per block")  # then "cluster of C" for each size


def time_histograms(values: np.ndarray, nbins: int, clusters=(2, 4, 8, 16)) -> dict[str, float | None]:
    """Seconds per histogram of ``values`` (``gpu_time``, several calls per sample) for each version;
    None where its bins do not fit in shared memory, or where the GPU refused the launch. Every
    version's bins are checked against NumPy's count first."""
    import cupy as cp

    from .timing import gpu_time

    want = np.bincount(values, minlength=nbins)
    x = cp.asarray(values)
    runs = {"global atomics": lambda b: histogram_global(x, b)}
    if histogram_fits(nbins, 1):
        runs["shared, per block"] = lambda b: histogram_block(x, b)
    for c in clusters:
        if histogram_fits(nbins, c):
            runs[f"cluster of {c}"] = lambda b, c=c: histogram_cluster(x, b, c)
    times: dict[str, float | None] = dict.fromkeys([*HIST_VERSIONS, *(f"cluster of {c}" for c in clusters)])
    got = cp.empty(nbins, cp.int32)
    for name, run in runs.items():
        got.fill(-1)
        try:
            run(got)
        except cp.cuda.driver.CUDADriverError as e:  # a launch this GPU refuses (a cluster too large)
            print(f"{name}: not launched on this GPU ({e})")
            continue
        if not np.array_equal(cp.asnumpy(got), want):
            raise AssertionError(f"{name}: wrong bins at {nbins} bins")
        times[name] = gpu_time(lambda: run(got), repeats=10, calls=5)
    return times


def time_row_sums(x, clusters=(1, 2, 4, 8, 16)) -> dict[str, float]:
    """Seconds per call of the row sums: a cluster of each size per row, and global atomics with 8
    blocks per row. Each result is checked against the sums in float64."""
    import cupy as cp

    from .timing import gpu_time

    want = cp.asnumpy(x).astype(np.float64).sum(axis=1)
    out = cp.empty(x.shape[0], cp.float32)
    runs = {f"cluster of {c}": (lambda c=c: row_sums_cluster(x, out, c)) for c in clusters}
    runs["global atomics, 8 blocks per row"] = lambda: row_sums_atomic(x, out, 8)
    times = {}
    for name, run in runs.items():
        out.fill(np.nan)
        try:
            run()
        except cp.cuda.driver.CUDADriverError as e:  # a launch this GPU refuses (a cluster too large)
            print(f"{name}: not launched on this GPU ({e})")
            continue
        err = float(np.abs(cp.asnumpy(out) - want).max() / np.abs(want).max())
        if not err < 1e-4:
            raise AssertionError(f"{name}: relative error {err:.2g}")
        times[name] = gpu_time(run, repeats=10, calls=5)
    return times


def row_matrix(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """A float32 matrix of values around 1 (1 + z / 2, z standard normal), on the host."""
    x = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32)
    x *= np.float32(0.5)
    x += np.float32(1.0)
    return x


def reduction_vs_global_atomics(rows: int = 64, cols: int = 1 << 21, seed: int = 0) -> dict[str, float]:
    """The cluster row sums (8 blocks per row, combined through distributed shared memory) against
    the same partial sums combined with global atomics, timed with ``course.timing.gpu_time``:
    {"cluster": s, "global_atomics": s, "bytes": bytes read per call}. Needs compute capability 9.0."""
    import cupy as cp

    x = cp.asarray(row_matrix(rows, cols, seed))
    times = time_row_sums(x, clusters=(8,))
    return {"cluster": times["cluster of 8"], "global_atomics": times["global atomics, 8 blocks per row"],
            "bytes": int(x.nbytes)}


def histogram_vs_global_atomics(n: int = 1 << 26, nbins: int = MAX_BINS, seed: int = 0) -> dict[str, float]:
    """The lab's timed histogram (uniform values, ``nbins`` bins) with a cluster of 8 against global
    atomics: {"cluster": s, "global_atomics": s}. Needs compute capability 9.0."""
    times = time_histograms(uniform_values(n, nbins, seed), nbins, clusters=(8,))
    return {"cluster": times["cluster of 8"], "global_atomics": times["global atomics"]}


def ptx(source: str, cluster: int = 8, arch: str = "compute_90") -> str:
    """The PTX NVRTC makes of ``source`` (no GPU needed: cuda-python's NVRTC compiles on any machine)."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"clusters.cu", 0, [], [])
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17", f"-DCLUSTER={cluster}".encode()]
    (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    try:
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(log.decode(errors="replace").strip())
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        text = b" " * size
        nvrtc.nvrtcGetPTX(prog, text)
        return text.decode(errors="replace").rstrip("\x00 ")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


CLUSTER_PTX = ("explicitcluster", "reqnctapercluster", "barrier.cluster", "mapa", "shared::cluster", "%cluster")


def cluster_lines(ptx_text: str, kernel_name: str) -> list[str]:
    """The lines of one kernel's PTX that involve its cluster, each distinct instruction once."""
    body = ptx_text.split(f".entry {kernel_name}(", 1)[1].split(".entry ", 1)[0]
    seen, out = set(), []
    for line in body.splitlines():
        text = line.strip()
        if any(k in text for k in CLUSTER_PTX):
            op = text.split()[0]
            if op not in seen:
                seen.add(op)
                out.append(text)
    return out
