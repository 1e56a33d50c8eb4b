"""Decode attention in Numba, split-K: the reference kernels of Lab 16's ``paged_attention`` (a
paged float16 cache, groups of query heads on each key/value head) and of the softmax lab's
``attention_decode`` (one float32 query per head over contiguous keys and values).

One design for both (chapter 21, *Decode attention at memory speed*, in Numba):

- **Split-K.** A block per (chunk of CHUNK tokens, key/value head, sequence): a few long
  sequences still give every SM work. Each block writes its chunk's unnormalised output with
  its maximum and sum; a small second kernel merges the chunks (the online softmax's merge,
  exact).
- **LANES lanes per token.** A warp has 32 / LANES token slots; lane ``s`` of a token holds
  values ``s, s + LANES, ...`` of its row, so each load instruction reads consecutive values of
  every row. The dot product is summed over a token's lanes with ``shfl_xor``; no shared memory
  and no barrier inside the token loop.
- **STEP tokens per slot at a time.** A slot issues the loads of STEP tokens before any
  arithmetic, so more bytes are in flight per warp, and folds them into the running state with
  one rescale. A slot past the chunk's end loads the chunk's last token (a valid address, no
  branch around the loads) and drops its score.
- **The page numbers in shared memory.** The block reads its chunk's slice of the block table
  once; a token's loads then wait for a shared-memory read, not for a global one.
- **The group in registers.** Each lane keeps its slice of the group's G queries and running
  outputs in local arrays of compile-time size (a kernel per group size and row slice), so a key
  or value read once serves all G query heads.

The constants come from a sweep on an H200 at Lab 16's timed size (LANES 8/16/32, STEP 1/2/4,
WARPS 2/4/8, CHUNK 256-1024); the solutions of both labs use the same ones.

At the end each warp merges its token slots with shuffles, the block's warps merge through
shared memory, and the block writes one partial result per query head.
"""
from __future__ import annotations

import math
from functools import lru_cache

LANES = 16    # lanes per token: 32 / LANES token slots per warp
STEP = 2      # tokens each slot loads before it does any arithmetic: more bytes in flight
WARPS = 4     # warps per block
CHUNK = 512   # tokens per block of the split
FULL = 0xFFFFFFFF


def design(block_of: str) -> str:
    """The references' one-line description for a lab's feedback; ``block_of``: what a block's chunk
    belongs to in that lab's contract."""
    return (f"reference kernels (split-K: a block per chunk of {CHUNK} tokens of {block_of}, {LANES} lanes "
            f"per token, {STEP} tokens' loads in flight per slot, shuffles; then a merge of the chunks)")


cuda = None  # numba.cuda, bound by kernels() on first use: a module global, which the simulator swaps


def splits_for(longest: int, chunk: int) -> int:
    return max(1, -(-int(longest) // chunk))


@lru_cache(maxsize=None)
def kernels(group: int, paged: bool, lanes: int, warps: int, step: int, per: int, chunk: int):
    """(partial, combine) for ``group`` query heads per key/value head, ``per`` values of a row per
    lane (a head size of at most lanes * per) and ``chunk`` tokens per block."""
    global cuda
    import numba
    from numba import cuda, float32, int32

    G, L, W, U, PER, C = group, lanes, warps, step, per, chunk  # compile-time constants: loops unroll
    SLOTS = 32 // L  # token slots of a warp
    ROW = L * PER    # a row as the lanes of a token hold it (the head size, rounded up)
    PAGES = C + 1    # the most pages a chunk can touch (pages of one token, chunk not aligned)

    @cuda.jit(device=True, inline=True)
    def token_sum(x):
        """The sum of x over the L lanes of one token (aligned groups: xor stays inside)."""
        off = L // 2
        while off > 0:
            x += cuda.shfl_xor_sync(FULL, x, off)
            off //= 2
        return x

    @cuda.jit(device=True, inline=True)
    def fold(m, l, acc, qr, kr, vr, live):
        """Fold this slot's U tokens (this lane's slices kr[u], vr[u]) into the running state,
        with one rescale for all U. A token past the chunk's end (live[u] False) still takes part
        in the shuffles."""
        for g in range(G):
            sc = cuda.local.array(U, float32)
            top = m[g]
            for u in range(U):
                x = float32(0.0)
                for j in range(PER):
                    x += qr[g, j] * kr[u, j]
                x = token_sum(x)
                sc[u] = x if live[u] else -math.inf
                top = max(top, sc[u])
            if top > -math.inf:
                corr = math.exp(m[g] - top)  # 0 on the first tokens: exp(-inf)
                l[g] *= corr
                for j in range(PER):
                    acc[g, j] *= corr
                for u in range(U):
                    p = math.exp(sc[u] - top)  # 0 for a token past the end
                    l[g] += p
                    for j in range(PER):
                        acc[g, j] += p * vr[u, j]
                m[g] = top

    @cuda.jit(device=True, inline=True)
    def merge_slots(m, l, acc):
        """Merge the warp's token slots: afterwards lanes 0 .. L-1 hold the warp's state."""
        off = L
        while off < 32:
            for g in range(G):
                m_o = cuda.shfl_xor_sync(FULL, m[g], off)
                l_o = cuda.shfl_xor_sync(FULL, l[g], off)
                top = max(m[g], m_o)
                a = math.exp(m[g] - top) if m[g] > -math.inf else float32(0.0)  # a slot that saw no token
                b = math.exp(m_o - top) if m_o > -math.inf else float32(0.0)
                l[g] = l[g] * a + l_o * b
                m[g] = top
                for j in range(PER):
                    acc_o = cuda.shfl_xor_sync(FULL, acc[g, j], off)
                    acc[g, j] = acc[g, j] * a + acc_o * b
            off *= 2

    @cuda.jit(device=True, inline=True)
    def finish(m, l, acc, o_part, ml_part, b, head0, split, d_len):
        """Merge the block's warps through shared memory; write the chunk's output (not yet
        divided by its sum), maximum and sum for each of the G heads."""
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        m_s = cuda.shared.array((W, G), float32)
        l_s = cuda.shared.array((W, G), float32)
        acc_s = cuda.shared.array((W, G, ROW), float32)
        if lane < L:
            for g in range(G):
                if lane == 0:
                    m_s[warp, g] = m[g]
                    l_s[warp, g] = l[g]
                for j in range(PER):
                    acc_s[warp, g, lane + L * j] = acc[g, j]
        cuda.syncthreads()
        for i in range(tid, G * d_len, W * 32):
            g = i // d_len
            d = i - g * d_len
            top = m_s[0, g]
            for w in range(1, W):
                top = max(top, m_s[w, g])
            total = float32(0.0)
            o = float32(0.0)
            for w in range(W):
                f = math.exp(m_s[w, g] - top)  # 0 for a warp that saw no token (m = -inf)
                total += l_s[w, g] * f
                o += acc_s[w, g, d] * f
            o_part[b, head0 + g, split, d] = o
            if d == 0:
                ml_part[b, head0 + g, split, 0] = top
                ml_part[b, head0 + g, split, 1] = total

    if paged:
        @cuda.jit
        def partial(q, k_pages, v_pages, block_table, lengths, o_part, ml_part):
            split = cuda.blockIdx.x
            kvh = cuda.blockIdx.y
            b = cuda.blockIdx.z
            n = lengths[b]
            start = split * C
            if start >= n:  # the whole block leaves: it reaches no barrier
                return
            end = min(start + C, n)
            lane = cuda.threadIdx.x % 32
            warp = cuda.threadIdx.x // 32
            slot = lane // L
            s = lane % L
            d_len = q.shape[2]
            page_len = k_pages.shape[1]
            head0 = kvh * G
            scale = float32(1.0) / math.sqrt(float32(d_len))
            # The chunk's slice of the block table, read once: a token's page number then comes
            # from shared memory, not from a global load its own loads would have to wait for.
            pages = cuda.shared.array(PAGES, int32)
            first = start // page_len
            for i in range(cuda.threadIdx.x, (end - 1) // page_len - first + 1, W * 32):
                pages[i] = block_table[b, first + i]
            cuda.syncthreads()
            qr = cuda.local.array((G, PER), float32)
            acc = cuda.local.array((G, PER), float32)
            m = cuda.local.array(G, float32)
            l = cuda.local.array(G, float32)
            kr = cuda.local.array((U, PER), float32)
            vr = cuda.local.array((U, PER), float32)
            live = cuda.local.array(U, numba.boolean)
            for g in range(G):
                for j in range(PER):
                    d = s + L * j
                    qr[g, j] = float32(q[b, head0 + g, d]) * scale if d < d_len else float32(0.0)
                    acc[g, j] = float32(0.0)
                m[g] = -math.inf
                l[g] = float32(0.0)
            for t0 in range(start, end, W * SLOTS * U):  # the same trips for every warp
                for u in range(U):  # every load first, then the arithmetic
                    t = t0 + (u * W + warp) * SLOTS + slot
                    live[u] = t < end
                    t = min(t, end - 1)  # past the end: load a valid token (no branch); fold drops it
                    page = pages[t // page_len - first]
                    off = t % page_len
                    for j in range(PER):
                        d = min(s + L * j, d_len - 1)  # past the row: q is 0 there, the output unread
                        kr[u, j] = float32(k_pages[page, off, kvh, d])
                        vr[u, j] = float32(v_pages[page, off, kvh, d])
                fold(m, l, acc, qr, kr, vr, live)
            merge_slots(m, l, acc)
            finish(m, l, acc, o_part, ml_part, b, head0, split, d_len)
    else:
        @cuda.jit
        def partial(q, k, v, o_part, ml_part):
            # q (heads, D), k and v (heads, n, D), float32: each head is its own "sequence"
            split = cuda.blockIdx.x
            b = cuda.blockIdx.z
            n = k.shape[1]
            start = split * C
            if start >= n:
                return
            end = min(start + C, n)
            lane = cuda.threadIdx.x % 32
            warp = cuda.threadIdx.x // 32
            slot = lane // L
            s = lane % L
            d_len = q.shape[1]
            scale = float32(1.0) / math.sqrt(float32(d_len))
            qr = cuda.local.array((G, PER), float32)
            acc = cuda.local.array((G, PER), float32)
            m = cuda.local.array(G, float32)
            l = cuda.local.array(G, float32)
            kr = cuda.local.array((U, PER), float32)
            vr = cuda.local.array((U, PER), float32)
            live = cuda.local.array(U, numba.boolean)
            for j in range(PER):
                d = s + L * j
                qr[0, j] = q[b, d] * scale if d < d_len else float32(0.0)
                acc[0, j] = float32(0.0)
            m[0] = -math.inf
            l[0] = float32(0.0)
            for t0 in range(start, end, W * SLOTS * U):
                for u in range(U):
                    t = t0 + (u * W + warp) * SLOTS + slot
                    live[u] = t < end
                    t = min(t, end - 1)
                    for j in range(PER):
                        d = min(s + L * j, d_len - 1)
                        kr[u, j] = k[b, t, d]
                        vr[u, j] = v[b, t, d]
                fold(m, l, acc, qr, kr, vr, live)
            merge_slots(m, l, acc)
            finish(m, l, acc, o_part, ml_part, b, 0, split, d_len)

    @cuda.jit
    def combine(o_part, ml_part, lengths, n_fixed, chunk, out):
        """out[b, h] = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c over the chunks c."""
        h = cuda.blockIdx.x
        b = cuda.blockIdx.y
        n = n_fixed if n_fixed > 0 else lengths[b]
        splits = (n + chunk - 1) // chunk
        top = float32(-math.inf)
        for c in range(splits):
            top = max(top, ml_part[b, h, c, 0])
        total = float32(0.0)
        for c in range(splits):
            total += ml_part[b, h, c, 1] * math.exp(ml_part[b, h, c, 0] - top)
        for d in range(cuda.threadIdx.x, out.shape[2], cuda.blockDim.x):
            o = float32(0.0)
            for c in range(splits):
                o += o_part[b, h, c, d] * math.exp(ml_part[b, h, c, 0] - top)
            out[b, h, d] = o / total

    return partial, combine


_SCRATCH: dict = {}  # the chunks' partial results, by shape: allocated once, reused call after call


def _scratch(shape):
    from numba import cuda as real_cuda

    if shape not in _SCRATCH:
        b, h, splits, _ = shape
        _SCRATCH[shape] = (real_cuda.device_array(shape, dtype="float32"),
                           real_cuda.device_array((b, h, splits, 2), dtype="float32"),
                           real_cuda.device_array(1, dtype="int32"))  # lengths where every head has n
    return _SCRATCH[shape]


def paged_decode(q, k_pages, v_pages, block_table, lengths, out):
    """Lab 16's contract: q (B, H, D) float16, pages (blocks, BLOCK, KV, D) float16, out float32."""
    batch, heads, d_len = q.shape
    kv_heads = k_pages.shape[2]
    splits = splits_for(block_table.shape[1] * k_pages.shape[1], CHUNK)
    o_part, ml_part, _ = _scratch((batch, heads, splits, d_len))
    partial, combine = kernels(heads // kv_heads, True, LANES, WARPS, STEP, -(-d_len // LANES), CHUNK)
    partial[(splits, kv_heads, batch), WARPS * 32](q, k_pages, v_pages, block_table, lengths, o_part, ml_part)
    combine[(heads, batch), min(128, 32 * -(-d_len // 32))](o_part, ml_part, lengths, 0, CHUNK, out)


def contiguous_decode(q, k, v, out):
    """The softmax lab's contract: q (heads, D), k and v (heads, n, D), out (heads, D), float32."""
    heads, d_len = q.shape
    splits = splits_for(k.shape[1], CHUNK)
    o_part, ml_part, unused = _scratch((heads, 1, splits, d_len))
    partial, combine = kernels(1, False, LANES, WARPS, STEP, -(-d_len // LANES), CHUNK)
    partial[(splits, 1, heads), WARPS * 32](q, k, v, o_part, ml_part)
    combine[(1, heads), min(128, 32 * -(-d_len // 32))](o_part, ml_part, unused, k.shape[1], CHUNK,
                                                        out.reshape(heads, 1, d_len))
