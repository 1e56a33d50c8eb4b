"""The kernels that the chapter *Tools* profiles.

Chapter 6's six steps of a float32 sum, as that chapter wrote them, and one kernel that is
limited by arithmetic rather than memory (a loop of multiply-adds). ``reduction_launches``
gives, for each, a function that launches that kernel once: a profiling script launches each
once outside the profiled region (a warm-up) and once inside it.

Steps 4 to 6 use warp shuffles, which Numba's simulator does not have: they need a GPU.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32

BLOCK = 256             # threads per block, as in chapter 6
FULL_MASK = 0xFFFFFFFF  # all 32 lanes of a warp take part in a shuffle
CHAINS, FMA_STEPS = 8, 128  # fma_loop: 8 chains of 128 multiply-adds, about 2,000 FLOPs per element
SIG = "void(float32[::1], float32[::1])"


# --------------------------------------------------------------------------- step 1
@cuda.jit(SIG)
def sum_atomic(x, total):
    i = cuda.grid(1)
    if i < x.shape[0]:
        cuda.atomic.add(total, 0, x[i])   # every thread adds to one address


# --------------------------------------------------------------------------- steps 2 and 3
@cuda.jit(SIG)
def tree_interleaved(x, partials):
    buf = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + t
    buf[t] = x[i] if i < x.shape[0] else float32(0)
    cuda.syncthreads()
    s = 1
    while s < BLOCK:
        if t % (2 * s) == 0:                # interleaved: every (2s)-th thread works
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s *= 2
    if t == 0:
        partials[cuda.blockIdx.x] = buf[0]


@cuda.jit(SIG)
def tree_sequential(x, partials):
    buf = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + t
    buf[t] = x[i] if i < x.shape[0] else float32(0)
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if t < s:                           # sequential: the first s threads work
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = buf[0]


# --------------------------------------------------------------------------- step 4
@cuda.jit(device=True)
def warp_sum(v):
    delta = 16
    while delta > 0:
        v += cuda.shfl_down_sync(FULL_MASK, v, delta)
        delta //= 2
    return v


@cuda.jit(device=True)
def block_sum(v):
    """The sum of v over the block, valid in thread 0; every thread of the block must call it."""
    warp_sums = cuda.shared.array(32, float32)
    lane = cuda.threadIdx.x % 32
    warp = cuda.threadIdx.x // 32
    v = warp_sum(v)
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()
    v = float32(0)
    if warp == 0:
        if lane < cuda.blockDim.x // 32:
            v = warp_sums[lane]
        v = warp_sum(v)
    return v


@cuda.jit(SIG)
def tree_shuffle(x, partials):
    i = cuda.grid(1)
    v = x[i] if i < x.shape[0] else float32(0)
    s = block_sum(v)
    if cuda.threadIdx.x == 0:
        partials[cuda.blockIdx.x] = s


# --------------------------------------------------------------------------- steps 5 and 6
@cuda.jit(device=True)
def thread_sum(x):
    """This thread's share of x, walked with a grid-stride loop, four independent loads at a time."""
    n = x.shape[0]
    stride = cuda.gridsize(1)
    i = cuda.grid(1)
    a0 = float32(0)
    a1 = float32(0)
    a2 = float32(0)
    a3 = float32(0)
    while i + 3 * stride < n:
        a0 += x[i]
        a1 += x[i + stride]
        a2 += x[i + 2 * stride]
        a3 += x[i + 3 * stride]
        i += 4 * stride
    while i < n:
        a0 += x[i]
        i += stride
    return (a0 + a1) + (a2 + a3)


@cuda.jit(SIG)
def sum_grid_stride(x, partials):
    s = block_sum(thread_sum(x))
    if cuda.threadIdx.x == 0:
        partials[cuda.blockIdx.x] = s


@cuda.jit("void(float32[::1], float32[::1], int32[::1], float32[::1])")
def sum_one_launch(x, partials, blocks_done, total):
    s = block_sum(thread_sum(x))
    is_last = cuda.shared.array(1, int32)
    if cuda.threadIdx.x == 0:
        partials[cuda.blockIdx.x] = s
        cuda.threadfence()                  # the partial sum is visible before the count
        done_before = cuda.atomic.add(blocks_done, 0, 1)
        is_last[0] = 1 if done_before == cuda.gridDim.x - 1 else 0
    cuda.syncthreads()
    if is_last[0] == 1:                     # the last block to finish adds the partial sums
        cuda.threadfence()
        v = float32(0)
        for j in range(cuda.threadIdx.x, cuda.gridDim.x, cuda.blockDim.x):
            v += partials[j]
        s = block_sum(v)
        if cuda.threadIdx.x == 0:
            total[0] = s
            blocks_done[0] = 0


# --------------------------------------------------------------------------- arithmetic-bound
@cuda.jit(SIG)
def fma_loop(x, out):
    """Reads one float and writes one, with CHAINS x FMA_STEPS multiply-adds in between: the
    chains are independent, so a warp always has an instruction ready."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        a = x[i]
        m = float32(0.999)
        c = float32(0.001)
        v0, v1, v2, v3 = a, a + float32(1), a + float32(2), a + float32(3)
        v4, v5, v6, v7 = a + float32(4), a + float32(5), a + float32(6), a + float32(7)
        for _ in range(FMA_STEPS):
            v0 = v0 * m + c
            v1 = v1 * m + c
            v2 = v2 * m + c
            v3 = v3 * m + c
            v4 = v4 * m + c
            v5 = v5 * m + c
            v6 = v6 * m + c
            v7 = v7 * m + c
        out[i] = ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))


# --------------------------------------------------------------------------- launches
LABELS = ("1 atomic", "2 interleaved", "3 sequential", "4 shuffles", "5 grid-stride",
          "6 one launch", "fma loop")


def one_wave(kernel) -> int:
    """Blocks of BLOCK threads that fit on the whole GPU at once, for this kernel."""
    compiled = next(iter(kernel.overloads.values()))
    return compiled.max_cooperative_grid_blocks(BLOCK)


def reduction_launches(x) -> list:
    """(label, launch) for each kernel: ``launch()`` launches it once on ``x`` (float32, on the
    device). Steps 2 to 4 launch their first pass, the one that reads all of ``x``."""
    n = x.shape[0]
    blocks = (n + BLOCK - 1) // BLOCK
    partials = cuda.device_array(blocks, dtype=np.float32)
    total = cuda.to_device(np.zeros(1, dtype=np.float32))
    wave = one_wave(sum_one_launch)
    wave_partials = cuda.device_array(wave, dtype=np.float32)
    blocks_done = cuda.to_device(np.zeros(1, dtype=np.int32))
    out = cuda.device_array(n, dtype=np.float32)
    launches = [
        lambda: sum_atomic[blocks, BLOCK](x, total),
        lambda: tree_interleaved[blocks, BLOCK](x, partials),
        lambda: tree_sequential[blocks, BLOCK](x, partials),
        lambda: tree_shuffle[blocks, BLOCK](x, partials),
        lambda: sum_grid_stride[one_wave(sum_grid_stride), BLOCK](x, wave_partials),
        lambda: sum_one_launch[wave, BLOCK](x, wave_partials, blocks_done, total),
        lambda: fma_loop[blocks, BLOCK](x, out),
    ]
    return list(zip(LABELS, launches))


def fma_flops(n: int) -> int:
    """FLOPs fma_loop does on n elements: 7 adds, CHAINS x FMA_STEPS FMAs (2 FLOPs each), 7 adds."""
    return n * (7 + CHAINS * FMA_STEPS * 2 + 7)
