"""Decode attention in Numba, the fast design: split-K over the sequence, a warp per token.

The reference kernels of Lab 16's ``paged_attention`` (a paged float16 cache, groups of query
heads on each key/value head) and of the softmax lab's ``attention_decode`` (one float32 query
per head over contiguous keys and values). One design for both:

- **A block per (chunk of the sequence, key/value head, sequence).** Cutting each sequence into
  chunks of ``chunk`` tokens gives every SM work when a few long sequences decode; a second small
  kernel combines the chunks' partial outputs with their maxima and sums (the combine of the online
  softmax, exact).
- **A warp per token.** The 32 lanes split a token's row of D values (lane ``l`` holds values
  ``l, l + 32, ...``), so each load instruction of a warp reads consecutive values: coalesced,
  no shared memory and no ``syncthreads`` in the loop. The dot product is summed across the warp
  with ``shfl_xor``; every lane then holds the score and updates its own slice of the running
  output.
- **The group in registers.** Each lane keeps its slice of the group's G queries and of their
  running outputs in registers (G is a compile-time constant: one kernel per group size), so a
  key or value read once serves all G query heads.

The warps of a block each walk every WARPS-th token of the chunk and merge their running
(maximum, sum, output) through shared memory at the end.
"""
from __future__ import annotations

import math
from functools import lru_cache

WARPS = 4  # warps per block
PER_LANE = 4  # values of a row per lane: D <= 32 * PER_LANE = 128
MAX_D = 32 * PER_LANE
CHUNK = 512  # tokens per block of the split

cuda = None  # numba.cuda, bound by kernels() on first use: a module global, which the CUDA simulator swaps


def splits_for(longest: int) -> int:
    return max(1, -(-int(longest) // CHUNK))


@lru_cache(maxsize=None)
def kernels(group: int, paged: bool):
    """(partial, combine) for groups of ``group`` query heads per key/value head."""
    global cuda
    from numba import cuda, float32

    g_n = group  # a compile-time constant inside the kernels: the loops over it unroll

    from numba import config

    if config.ENABLE_CUDASIM:
        # The simulator has no shuffles: the warp's 32 values meet in shared memory. Every thread
        # of the block reaches both barriers, as the token loop gives all warps the same trips.
        @cuda.jit(device=True)
        def warp_sum(x, red, warp, lane):
            red[warp, lane] = x
            cuda.syncthreads()
            s = float32(0.0)
            for i in range(32):
                s += red[warp, i]
            cuda.syncthreads()
            return s
    else:
        @cuda.jit(device=True, inline=True)
        def warp_sum(x, red, warp, lane):
            for off in (16, 8, 4, 2, 1):
                x += cuda.shfl_xor_sync(0xFFFFFFFF, x, off)
            return x

    @cuda.jit(device=True, inline=True)
    def finish(m, l, acc, m_s, l_s, acc_s, o_part, ml_part, b, head0, split, d_len, lane, warp, tid):
        """Merge the block's warps through shared memory; write the chunk's output, max and sum."""
        for g in range(g_n):
            if lane == 0:
                m_s[warp, g] = m[g]
                l_s[warp, g] = l[g]
            for j in range(PER_LANE):
                acc_s[warp, g, lane + 32 * j] = acc[g, j]
        cuda.syncthreads()
        for i in range(tid, g_n * d_len, WARPS * 32):
            g = i // d_len
            d = i - g * d_len
            mx = m_s[0, g]
            for w in range(1, WARPS):
                mx = max(mx, m_s[w, g])
            tot = float32(0.0)
            out = float32(0.0)
            for w in range(WARPS):
                f = math.exp(m_s[w, g] - mx)  # 0 for a warp that saw no token (m = -inf)
                tot += l_s[w, g] * f
                out += acc_s[w, g, d] * f
            o_part[b, head0 + g, split, d] = out  # unnormalised: the combine divides once
            if d == 0:
                ml_part[b, head0 + g, split, 0] = mx
                ml_part[b, head0 + g, split, 1] = tot

    @cuda.jit(device=True, inline=True)
    def step(m, l, acc, qr, kv, vv, live, red, warp, lane):
        """Fold one token (this lane's slice of its key kv and value vv) into the running state;
        a warp past the chunk's end (live False) only takes part in the sums."""
        for g in range(g_n):
            s = float32(0.0)
            for j in range(PER_LANE):
                s += qr[g, j] * kv[j]
            s = warp_sum(s, red, warp, lane)
            if live:
                m_new = max(m[g], s)
                corr = math.exp(m[g] - m_new)  # 0 on the first token: exp(-inf)
                p = math.exp(s - m_new)
                l[g] = l[g] * corr + p
                m[g] = m_new
                for j in range(PER_LANE):
                    acc[g, j] = acc[g, j] * corr + p * vv[j]

    if paged:
        @cuda.jit
        def partial(q, k_pages, v_pages, block_table, lengths, o_part, ml_part, chunk):
            split = cuda.blockIdx.x
            kvh = cuda.blockIdx.y
            b = cuda.blockIdx.z
            n = lengths[b]
            start = split * chunk
            if start >= n:  # the whole block leaves: no syncthreads is reached
                return
            end = min(start + chunk, n)
            tid = cuda.threadIdx.x
            lane = tid % 32
            warp = tid // 32
            d_len = q.shape[2]
            page_len = k_pages.shape[1]
            head0 = kvh * g_n
            scale = float32(1.0) / math.sqrt(float32(d_len))
            qr = cuda.local.array((g_n, PER_LANE), float32)
            acc = cuda.local.array((g_n, PER_LANE), float32)
            m = cuda.local.array(g_n, float32)
            l = cuda.local.array(g_n, float32)
            kv = cuda.local.array(PER_LANE, float32)
            vv = cuda.local.array(PER_LANE, float32)
            for g in range(g_n):
                for j in range(PER_LANE):
                    d = lane + 32 * j
                    qr[g, j] = float32(q[b, head0 + g, d]) * scale if d < d_len else float32(0.0)
                    acc[g, j] = float32(0.0)
                m[g] = float32(-math.inf)
                l[g] = float32(0.0)
            red = cuda.shared.array((WARPS, 32), float32)
            for t0 in range(start, end, WARPS):  # the same trips for every warp
                t = t0 + warp
                live = t < end
                page = block_table[b, t // page_len] if live else 0
                off = t % page_len
                for j in range(PER_LANE):
                    d = lane + 32 * j
                    ok = live and d < d_len
                    kv[j] = float32(k_pages[page, off, kvh, d]) if ok else float32(0.0)
                    vv[j] = float32(v_pages[page, off, kvh, d]) if ok else float32(0.0)
                step(m, l, acc, qr, kv, vv, live, red, warp, lane)
            m_s = cuda.shared.array((WARPS, g_n), float32)
            l_s = cuda.shared.array((WARPS, g_n), float32)
            acc_s = cuda.shared.array((WARPS, g_n, MAX_D), float32)
            finish(m, l, acc, m_s, l_s, acc_s, o_part, ml_part, b, head0, split, d_len, lane, warp, tid)
    else:
        @cuda.jit
        def partial(q, k, v, o_part, ml_part, chunk):
            # contiguous float32: q (heads, D), k and v (heads, n, D); a "sequence" per head
            split = cuda.blockIdx.x
            b = cuda.blockIdx.z
            n = k.shape[1]
            start = split * chunk
            if start >= n:
                return
            end = min(start + chunk, n)
            tid = cuda.threadIdx.x
            lane = tid % 32
            warp = tid // 32
            d_len = q.shape[1]
            scale = float32(1.0) / math.sqrt(float32(d_len))
            qr = cuda.local.array((g_n, PER_LANE), float32)
            acc = cuda.local.array((g_n, PER_LANE), float32)
            m = cuda.local.array(g_n, float32)
            l = cuda.local.array(g_n, float32)
            kv = cuda.local.array(PER_LANE, float32)
            vv = cuda.local.array(PER_LANE, float32)
            for j in range(PER_LANE):
                d = lane + 32 * j
                qr[0, j] = q[b, d] * scale if d < d_len else float32(0.0)
                acc[0, j] = float32(0.0)
            m[0] = float32(-math.inf)
            l[0] = float32(0.0)
            red = cuda.shared.array((WARPS, 32), float32)
            for t0 in range(start, end, WARPS):  # the same trips for every warp
                t = t0 + warp
                live = t < end
                for j in range(PER_LANE):
                    d = lane + 32 * j
                    ok = live and d < d_len
                    kv[j] = k[b, t, d] if ok else float32(0.0)
                    vv[j] = v[b, t, d] if ok else float32(0.0)
                step(m, l, acc, qr, kv, vv, live, red, warp, lane)
            m_s = cuda.shared.array((WARPS, g_n), float32)
            l_s = cuda.shared.array((WARPS, g_n), float32)
            acc_s = cuda.shared.array((WARPS, g_n, MAX_D), float32)
            finish(m, l, acc, m_s, l_s, acc_s, o_part, ml_part, b, 0, split, d_len, lane, warp, tid)

    @cuda.jit
    def combine(o_part, ml_part, lengths, n_fixed, chunk, out):
        """out[b, h] from the chunks: sum_c exp(m_c - M) acc_c / sum_c exp(m_c - M) l_c."""
        h = cuda.blockIdx.x
        b = cuda.blockIdx.y
        n = n_fixed if n_fixed > 0 else lengths[b]
        splits = (n + chunk - 1) // chunk
        mx = float32(-math.inf)
        for c in range(splits):
            mx = max(mx, ml_part[b, h, c, 0])
        tot = float32(0.0)
        for c in range(splits):
            tot += ml_part[b, h, c, 1] * math.exp(ml_part[b, h, c, 0] - mx)
        for d in range(cuda.threadIdx.x, out.shape[2], cuda.blockDim.x):
            acc = float32(0.0)
            for c in range(splits):
                acc += o_part[b, h, c, d] * math.exp(ml_part[b, h, c, 0] - mx)
            out[b, h, d] = acc / tot

    return partial, combine


_SCRATCH: dict = {}  # the chunks' partial results, by shape: reused call after call, allocated once


def _scratch(shape):
    from numba import cuda

    if shape not in _SCRATCH:
        b, h, splits, d = shape
        _SCRATCH[shape] = (cuda.device_array(shape, dtype="float32"),
                           cuda.device_array((b, h, splits, 2), dtype="float32"),
                           cuda.device_array(1, dtype="int32"))
    return _SCRATCH[shape]


def paged_decode(q, k_pages, v_pages, block_table, lengths, out):
    """Lab 16's contract: q (B, H, D) float16, pages (blocks, BLOCK, KV, D) float16, out float32."""
    batch, heads, d_len = q.shape
    kv_heads = k_pages.shape[2]
    splits = splits_for(block_table.shape[1] * k_pages.shape[1])
    o_part, ml_part, _ = _scratch((batch, heads, splits, d_len))
    partial, combine = kernels(heads // kv_heads, True)
    partial[(splits, kv_heads, batch), WARPS * 32](q, k_pages, v_pages, block_table, lengths, o_part, ml_part, CHUNK)
    combine[(heads, batch), min(128, 32 * -(-d_len // 32))](o_part, ml_part, lengths, 0, CHUNK, out)


def contiguous_decode(q, k, v, out):
    """The softmax lab's contract: q (heads, D), k and v (heads, n, D), out (heads, D), float32."""
    heads, d_len = q.shape
    n = k.shape[1]
    splits = splits_for(n)
    o_part, ml_part, unused = _scratch((heads, 1, splits, d_len))
    partial, combine = kernels(1, False)
    partial[(splits, 1, heads), WARPS * 32](q, k, v, o_part, ml_part, CHUNK)
    combine[(1, heads), min(128, 32 * -(-d_len // 32))](o_part, ml_part, unused, n, CHUNK, out.reshape(heads, 1, d_len))
