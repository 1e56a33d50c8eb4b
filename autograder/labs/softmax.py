"""Lab 8: softmax. A stable row softmax under a padding mask (one block per row), the online
single-pass softmax for long rows, a cross-entropy loss in CUDA C, a warp per row for short
rows, and (stretch) attention for one query per head with a running output."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import _decode_numba as decode_numba
from ..spec import Exercise, Lab, NO_HOST_MATH, Out, SCALARS, Speed

# The CuPy exercise: a raw kernel, not CuPy's (or torch's) array operations.
CUPY_KERNEL_ONLY = ("cupy.*", "!cupy.RawKernel", "!cupy.RawModule", "!cupy.float32", "!cupy.int32",
                    "!cupy.int64", "!cupy.cuda", "!cupy.cuda.*", "numpy.*", "torch.*", "*.get", "*.set",
                    "*.max", "*.sum", "*.exp", "*.log", "*.astype", "*.copy", "*.take") + SCALARS

# Softmax outputs lie in [0, 1]. A float32 kernel makes relative errors of a few 1e-6 (expf is
# accurate to 2 ulp, x - max is exact for nearby values, sums of up to 1e5 terms); 1e-4 of the
# largest probability plus 1e-4 relative leaves room for any summation order, while a missing
# max (NaN), a wrong sum or a skipped element is off by far more. Equal values on purpose: the
# bound is the same whichever of the two numbers is read as the relative one.
PROB_TOL = {"float32": (1e-4, 1e-4)}


# --------------------------------------------------------------------------- inputs
def row_shapes(simulator: bool) -> list[dict]:
    """(rows, cols): a single element, rows shorter than a warp, one longer than 1024, many
    short rows, and a long odd row. The simulator pays for every block, so it gets few rows."""
    if simulator:
        shapes = [(1, 1), (3, 33), (7, 3), (2, 1025), (4, 100)]
    else:
        shapes = [(1, 1), (31, 33), (1000, 3), (3, 1025), (32, 32), (33, 1024), (1023, 31), (7, 100_003)]
    return [{"rows": r, "cols": c} for r, c in shapes]


def logits(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random logits with a large offset per row, up to +-300: exp(x) overflows to inf (or
    every exp(x) of a row underflows to 0), so softmax without the max subtracted gives NaN."""
    scale = np.float32(10.0 ** rng.uniform(-1.0, 1.3))
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x *= scale
    offsets = rng.uniform(-300.0, 300.0, rows)
    offsets[0] = rng.choice((-1.0, 1.0)) * rng.uniform(100.0, 300.0)  # at least one row breaks exp(x)
    x += offsets.astype(np.float32)[:, None]
    return x


def _x_inputs(p, rng):
    return {"x": logits(rng, p["rows"], p["cols"])}


def _masked_inputs(p, rng):
    rows, cols = p["rows"], p["cols"]
    lengths = rng.integers(1, cols + 1, rows)
    lengths[0] = cols  # a full row
    if rows > 1:
        lengths[-1] = 1  # a row of one element
    return {"x": logits(rng, rows, cols), "lengths": lengths.astype(np.int32)}


def _ce_inputs(p, rng):
    rows, cols = p["rows"], p["cols"]
    return {"logits": logits(rng, rows, cols), "labels": rng.integers(0, cols, rows).astype(np.int32)}


def _attention_inputs(p, rng):
    """One query per head; keys and values of n tokens. Scores q.k/sqrt(d) have a standard
    deviation of 0.3 to 3; the values are offset so that no output is close to zero."""
    h, n, d = p["heads"], p["n"], p["d"]
    q = rng.standard_normal((h, d), dtype=np.float32)
    q *= np.float32(rng.uniform(0.3, 3.0))
    k = rng.standard_normal((h, n, d), dtype=np.float32)
    v = rng.standard_normal((h, n, d), dtype=np.float32)
    v += np.float32(rng.choice((-1.0, 1.0)) * rng.uniform(1.0, 4.0))
    return {"q": q, "k": k, "v": v}


# --------------------------------------------------------------------------- references (float64)
def softmax64(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def masked_softmax64(x, lengths):
    valid = np.arange(x.shape[1])[None, :] < np.asarray(lengths)[:, None]
    z = np.where(valid, x, -np.inf)
    e = np.where(valid, np.exp(z - z.max(axis=1, keepdims=True)), 0.0)
    return e / e.sum(axis=1, keepdims=True)


def cross_entropy64(logits, labels):
    m = logits.max(axis=1)
    lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=1))
    return lse - logits[np.arange(logits.shape[0]), labels]


def attention64(q, k, v):
    s = np.einsum("hnd,hd->hn", k, q) / math.sqrt(q.shape[1])
    return np.einsum("hn,hnd->hd", softmax64(s), v)


# --------------------------------------------------------------------------- baselines
def threads_for(cols: int) -> int:
    """Threads per block for one row: a power of two near cols / 16, from 32 to 1024."""
    want, t = -(-cols // 16), 32
    while t < want and t < 1024:
        t *= 2
    return t


WARP_ROWS = 4  # rows per warp in the short-row reference
WARP_VALUES = 4  # values per lane it keeps in registers: rows of up to 128 values



@lru_cache(maxsize=None)
def _numba_baselines():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32

    @cuda.jit(device=True)
    def merge(m1, d1, m2, d2):
        # Two (max, sum of exp(x - max)) pairs into one; two empty pairs stay empty.
        m = max(m1, m2)
        if m == float32(-math.inf):
            return m, d1 + d2
        return m, d1 * math.exp(m1 - m) + d2 * math.exp(m2 - m)

    @cuda.jit(device=True)
    def block_max(sh, value):
        t = cuda.threadIdx.x
        sh[t] = value
        cuda.syncthreads()
        step = cuda.blockDim.x // 2
        while step > 0:
            if t < step:
                sh[t] = max(sh[t], sh[t + step])
            cuda.syncthreads()
            step //= 2
        result = sh[0]
        cuda.syncthreads()
        return result

    @cuda.jit(device=True)
    def block_sum(sh, value):
        t = cuda.threadIdx.x
        sh[t] = value
        cuda.syncthreads()
        step = cuda.blockDim.x // 2
        while step > 0:
            if t < step:
                sh[t] += sh[t + step]
            cuda.syncthreads()
            step //= 2
        result = sh[0]
        cuda.syncthreads()
        return result

    @cuda.jit
    def masked_kernel(x, lengths, out):
        # Three passes over the valid part of the row: max, sum, normalise; zeros after it.
        row = cuda.blockIdx.x
        t = cuda.threadIdx.x
        nt = cuda.blockDim.x
        n = lengths[row]
        sh = cuda.shared.array(1024, float32)
        m = float32(-math.inf)
        for c in range(t, n, nt):
            m = max(m, x[row, c])
        m = block_max(sh, m)
        d = float32(0.0)
        for c in range(t, n, nt):
            d += math.exp(x[row, c] - m)
        inv = float32(1.0) / block_sum(sh, d)
        for c in range(t, x.shape[1], nt):
            out[row, c] = math.exp(x[row, c] - m) * inv if c < n else float32(0.0)

    @cuda.jit
    def online_kernel(x, out):
        # One read pass for (max, sum), merged across the block; a second to normalise.
        row = cuda.blockIdx.x
        t = cuda.threadIdx.x
        nt = cuda.blockDim.x
        cols = x.shape[1]
        sm = cuda.shared.array(1024, float32)
        sd = cuda.shared.array(1024, float32)
        m = float32(-math.inf)
        d = float32(0.0)
        for c in range(t, cols, nt):
            v = x[row, c]
            if v > m:
                d = d * math.exp(m - v) + float32(1.0)
                m = v
            else:
                d += math.exp(v - m)
        sm[t] = m
        sd[t] = d
        cuda.syncthreads()
        step = nt // 2
        while step > 0:
            if t < step:
                sm[t], sd[t] = merge(sm[t], sd[t], sm[t + step], sd[t + step])
            cuda.syncthreads()
            step //= 2
        m = sm[0]
        inv = float32(1.0) / sd[0]
        for c in range(t, cols, nt):
            out[row, c] = math.exp(x[row, c] - m) * inv

    @cuda.jit
    def warp_kernel(x, out):
        # A warp per WARP_ROWS rows. Rows of up to 32 * WARP_VALUES values are loaded whole into
        # registers, all loads of all the warp's rows before any is used: one read and one
        # write of the row, with many loads in flight. Longer rows take the online pass over
        # the row and a second read to normalise. Butterfly shuffles leave every lane with
        # the row's max and sum.
        v = cuda.local.array((WARP_ROWS, WARP_VALUES), float32)
        first = (cuda.grid(1) // 32) * WARP_ROWS
        lane = cuda.laneid
        rows, cols = x.shape
        if first >= rows:  # the whole warp leaves together
            return
        if cols <= 32 * WARP_VALUES:
            for r in range(WARP_ROWS):
                row = min(first + r, rows - 1)  # rows past the end: the last again, not stored
                for i in range(WARP_VALUES):
                    c = lane + 32 * i
                    v[r, i] = x[row, c] if c < cols else float32(-math.inf)
            for r in range(WARP_ROWS):
                m = v[r, 0]
                for i in range(1, WARP_VALUES):
                    m = max(m, v[r, i])
                for offset in (16, 8, 4, 2, 1):
                    m = max(m, cuda.shfl_xor_sync(0xFFFFFFFF, m, offset))
                d = float32(0.0)
                for i in range(WARP_VALUES):
                    v[r, i] = math.exp(v[r, i] - m)
                    d += v[r, i]
                for offset in (16, 8, 4, 2, 1):
                    d += cuda.shfl_xor_sync(0xFFFFFFFF, d, offset)
                inv = float32(1.0) / d
                if first + r < rows:
                    for i in range(WARP_VALUES):
                        c = lane + 32 * i
                        if c < cols:
                            out[first + r, c] = v[r, i] * inv
            return
        for r in range(WARP_ROWS):
            row = first + r
            if row < rows:  # the same for all 32 lanes
                m = float32(-math.inf)
                d = float32(0.0)
                for c in range(lane, cols, 32):
                    val = x[row, c]
                    if val > m:
                        d = d * math.exp(m - val) + float32(1.0)
                        m = val
                    else:
                        d += math.exp(val - m)
                for offset in (16, 8, 4, 2, 1):
                    m2 = cuda.shfl_xor_sync(0xFFFFFFFF, m, offset)
                    d2 = cuda.shfl_xor_sync(0xFFFFFFFF, d, offset)
                    m, d = merge(m, d, m2, d2)
                inv = float32(1.0) / d
                for c in range(lane, cols, 32):
                    out[row, c] = math.exp(x[row, c] - m) * inv

    def masked(x, lengths, out):
        rows, cols = x.shape
        masked_kernel[rows, threads_for(cols)](x, lengths, out)

    def online(x, out):
        rows, cols = x.shape
        online_kernel[rows, threads_for(cols)](x, out)

    def warp(x, out):
        warps = (x.shape[0] + WARP_ROWS - 1) // WARP_ROWS
        warp_kernel[(warps * 32 + 255) // 256, 256](x, out)

    return {"masked": masked, "online": online, "warp": warp, "attention": decode_numba.contiguous_decode}


def _base(name):
    def run(*args):
        _numba_baselines()[name](*args)
    run.__name__ = f"reference_{name}"
    return run


CE_SOURCE = r"""
__device__ __forceinline__ void ce_merge(float& m, float& d, float m2, float d2) {
    // (m, d) <- (m, d) merged with (m2, d2); two empty pairs (max -inf) stay empty.
    const float mn = fmaxf(m, m2);
    if (mn == __int_as_float(0xff800000)) return;
    d = d * expf(m - mn) + d2 * expf(m2 - mn);
    m = mn;
}

template <int K>
__device__ __forceinline__ void ce_add(float& m, float& d, const float (&v)[K]) {
    // The online update for K values at once: one rescale of the sum per group, not per value.
    float mn = m;
#pragma unroll
    for (int i = 0; i < K; ++i) mn = fmaxf(mn, v[i]);
    if (mn == __int_as_float(0xff800000)) return;  // nothing but -inf yet: the pair stays empty
    float s = d * expf(m - mn);  // m = -inf on the first group: exp(-inf) = 0
#pragma unroll
    for (int i = 0; i < K; ++i) s += expf(v[i] - mn);
    d = s;
    m = mn;
}

extern "C" __global__ void __launch_bounds__(256)
cross_entropy(const float* logits, const int* labels, float* loss, int cols) {
    // One block of 256 threads per row. Each thread reads 16 values per step, as four 16-byte
    // loads issued before any is used, and folds them into its (max, sum) pair; the pairs are
    // then merged within each warp (shuffles) and across the block's 8 warps (shared memory).
    __shared__ float sm[8], sd[8];
    const float* row = logits + (long long)blockIdx.x * cols;
    const float NEG_INF = __int_as_float(0xff800000);
    float m = NEG_INF, d = 0.0f;
    int c = threadIdx.x;
    if ((cols & 3) == 0 && ((size_t)logits & 15) == 0) {  // every row starts on 16 bytes
        const float4* row4 = reinterpret_cast<const float4*>(row);
        const int n4 = cols >> 2;
        int i = threadIdx.x;
        for (; i + 3 * 256 < n4; i += 4 * 256) {
            float v[16];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const float4 q = row4[i + u * 256];
                v[4 * u] = q.x; v[4 * u + 1] = q.y; v[4 * u + 2] = q.z; v[4 * u + 3] = q.w;
            }
            ce_add<16>(m, d, v);
        }
        for (; i < n4; i += 256) {
            const float4 q = row4[i];
            const float v[4] = {q.x, q.y, q.z, q.w};
            ce_add<4>(m, d, v);
        }
        c = cols;  // nothing left for the scalar loops
    }
    for (; c + 3 * 256 < cols; c += 4 * 256) {  // any other row: 4-byte loads, four in flight
        const float v[4] = {row[c], row[c + 256], row[c + 512], row[c + 768]};
        ce_add<4>(m, d, v);
    }
    for (; c < cols; c += 256) {
        const float v[1] = {row[c]};
        ce_add<1>(m, d, v);
    }
    for (int o = 16; o > 0; o >>= 1)
        ce_merge(m, d, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, d, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { sm[warp] = m; sd[warp] = d; }
    __syncthreads();
    if (warp == 0) {
        m = lane < 8 ? sm[lane] : NEG_INF;
        d = lane < 8 ? sd[lane] : 0.0f;
        for (int o = 4; o > 0; o >>= 1)
            ce_merge(m, d, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, d, o));
        if (lane == 0) loss[blockIdx.x] = (m - row[labels[blockIdx.x]]) + logf(d);
    }
}
"""


@lru_cache(maxsize=None)
def _cupy_cross_entropy():
    import cupy as cp

    return cp.RawKernel(CE_SOURCE, "cross_entropy")


def _base_cross_entropy(logits, labels, loss):
    rows, cols = logits.shape
    _cupy_cross_entropy()((rows,), (256,), (logits, labels, loss, np.int32(cols)))


# --------------------------------------------------------------------------- the lab
def _matrix(p):
    return (p["rows"], p["cols"])


LAB = Lab(
    name="softmax",
    title="Lab 8: softmax",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    exercises=(
        Exercise(
            name="softmax_masked",
            title="Stable softmax of each row's first lengths[r] elements, one block per row (Numba)",
            backend="numba",
            args=("x", "lengths", "out"),
            inputs=_masked_inputs,
            outputs={"out": Out(_matrix)},
            reference=lambda x, lengths: {"out": masked_softmax64(x, lengths)},
            cases=row_shapes,
            timing_case={"rows": 16384, "cols": 4096},  # 256 MiB of logits: far beyond the L2
            baseline=_base("masked"),
            baseline_name="reference kernel (one block per row, three passes)",
            # Lengths are uniform in 1..cols: on average (cols + 1) / 2 elements read per row;
            # every element of out is written.
            bytes_moved=lambda p: 4 * p["rows"] * (p["cols"] + (p["cols"] + 1) // 2) + 4 * p["rows"],
            flops=lambda p: 5 * p["rows"] * (p["cols"] + 1) // 2,
            points=2,
            # The design of the reference scores about 1.0x; one thread per row, or a block far too
            # small for 4096 columns, leaves most of the GPU's bandwidth unused.
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            tolerance=PROB_TOL,
        ),
        Exercise(
            name="softmax_online",
            title="Online softmax: max and sum in one read pass (Numba)",
            backend="numba",
            args=("x", "out"),
            inputs=_x_inputs,
            outputs={"out": Out(_matrix)},
            reference=lambda x: {"out": softmax64(x)},
            cases=row_shapes,
            # 256 rows of 2**18 columns (1 MiB each): the rows in flight do not fit in the L2, so
            # every extra pass over a row is read again from device memory.
            timing_case={"rows": 256, "cols": 1 << 18},
            baseline=_base("online"),
            baseline_name="reference kernel (one block of up to 1024 threads per row, online pass)",
            bytes_moved=lambda p: 8 * p["rows"] * p["cols"],
            flops=lambda p: 5 * p["rows"] * p["cols"],
            points=2,
            # The reference reads each row twice and writes it once. A three-pass kernel reads it
            # three times: by the traffic model about 0.75x here, which earns part of the points.
            speed=Speed(2, full_at=0.85, zero_at=0.5),
            forbidden=NO_HOST_MATH,
            tolerance=PROB_TOL,
        ),
        Exercise(
            name="cross_entropy",
            title="Cross-entropy loss per row in CUDA C (CuPy)",
            backend="cupy",
            args=("logits", "labels", "loss"),
            inputs=_ce_inputs,
            outputs={"loss": Out(lambda p: (p["rows"],))},
            reference=lambda logits, labels: {"loss": cross_entropy64(logits, labels)},
            cases=row_shapes,
            timing_case={"rows": 4096, "cols": 16384},  # 256 MiB of logits, a vocabulary-sized row
            baseline=_base_cross_entropy,
            baseline_name="reference CuPy raw kernel (one block per row, 16 values per step in 16-byte loads)",
            bytes_moved=lambda p: 4 * p["rows"] * p["cols"] + 8 * p["rows"],
            flops=lambda p: 4 * p["rows"] * p["cols"],
            points=2,
            # The reference reads at about 94% of the copy on an H200. The online pass with one
            # 4-byte load per step (the design of exercise 2) is about 0.48x: a little credit.
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,
            # The loss is (max - x[label]) + log(sum): the logits reach +-300 (+-2400 when the
            # timing scales them), where one float32 ulp is 3e-5 (2.4e-4); 1e-4 of the largest
            # loss plus 1e-4 relative accepts m + log(sum) - x[label] computed in that order.
            tolerance={"float32": (1e-4, 1e-4)},
        ),
        Exercise(
            name="softmax_warp",
            title="Short rows: warps, registers and shuffles (Numba)",
            backend="numba",
            args=("x", "out"),
            inputs=_x_inputs,
            outputs={"out": Out(_matrix)},
            reference=lambda x: {"out": softmax64(x)},
            cases=row_shapes,
            timing_case={"rows": 1 << 19, "cols": 128},  # 256 MiB in rows of 128 floats
            baseline=_base("warp"),
            baseline_name="reference kernel (4 rows per warp, rows of up to 128 values in registers)",
            bytes_moved=lambda p: 8 * p["rows"] * p["cols"],
            flops=lambda p: 5 * p["rows"] * p["cols"],
            points=1,
            # The reference reads and writes at about 87% of the copy on an H200 in the chapter's
            # timing, about 75% in the grader's (cold L2, buffers of their own). One warp per
            # row with the online pass and a second read (the chapter's warp kernel) is about
            # 0.37x: a little credit; a block per row pays seven barriers per reduction.
            speed=Speed(1, full_at=0.8, zero_at=0.25),
            forbidden=NO_HOST_MATH,
            tolerance=PROB_TOL,
        ),
        Exercise(
            name="attention_decode",
            title="Attention for one query per head, with a running output (Numba, stretch)",
            backend="numba",
            args=("q", "k", "v", "out"),
            inputs=_attention_inputs,
            outputs={"out": Out(lambda p: (p["heads"], p["d"]))},
            reference=lambda q, k, v: {"out": attention64(q, k, v)},
            cases=lambda sim: [{"heads": h, "n": n, "d": d} for h, n, d in (
                [(1, 1, 1), (2, 33, 8), (3, 70, 16), (1, 130, 5), (2, 64, 33)] if sim else
                [(1, 1, 1), (2, 33, 8), (3, 1025, 64), (5, 100, 128), (31, 257, 33), (64, 4099, 64),
                 (1, 1, 128), (7, 31, 127)])],
            # 1024 heads (a batch of 32 sequences x 32 heads), 512 tokens of 64 dimensions:
            # 128 MiB of keys and 128 MiB of values.
            timing_case={"heads": 1024, "n": 512, "d": 64},
            baseline=_base("attention"),
            baseline_name=decode_numba.design("one head"),
            bytes_moved=lambda p: 4 * p["heads"] * (2 * p["n"] * p["d"] + 2 * p["d"]),
            flops=lambda p: 4 * p["heads"] * p["n"] * p["d"],
            points=2,
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            # Each output is a weighted mean of up to 4099 values accumulated in float32, with
            # rescaling: 5e-4 of the largest output plus 5e-4 relative.
            tolerance={"float32": (5e-4, 5e-4)},
        ),
    ),
)
