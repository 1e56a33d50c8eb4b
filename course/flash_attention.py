"""FlashAttention's forward pass in Triton: attention without the score matrix in memory.

Each program owns BLOCK_M rows of queries of one (batch, head). It walks the keys and values in
blocks of BLOCK_N, keeping for each row the running maximum ``m``, the running sum of
exponentials ``l`` and the unnormalised output ``acc`` (the online softmax of chapter 9), so the
N x N scores never leave the SM. Exponentials are taken in base 2 with the scale folded in
(exp(x) = 2^(x log2 e)), which the hardware computes directly. With ``causal``, a program walks
the blocks left of its diagonal without a mask, then the diagonal's own blocks with one, and skips
the blocks right of it, which would be masked whole.

The chapter *FlashAttention* builds this kernel step by step; the lab's reference is this one.
In simulator mode (no GPU) Triton's interpreter runs it on CPU tensors, slowly: small shapes only.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from autograder.triton_compat import patch_interpreter

patch_interpreter()
LOG2E = 1.4426950408889634


@triton.jit
def _attend(acc, l_i, m_i, q, K, V, base, stride_n, rows, dims, lo, hi, n_ctx, scale_log2,
            BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr):
    """Fold the keys and values of columns lo..hi into the running (acc, l_i, m_i) of one block of rows."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + base + cols[None, :] * stride_n + dims[:, None], mask=cols[None, :] < n_ctx, other=0.0)
        s = tl.dot(q, k) * scale_log2  # (BLOCK_M, BLOCK_N) scores, in base-2 units
        keep = cols[None, :] < n_ctx
        if DIAGONAL:  # a block the diagonal crosses: a row sees only the columns at or before it
            keep = keep & (rows[:, None] >= cols[None, :])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)  # how much the old running sums shrink
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + base + cols[:, None] * stride_n + dims[None, :], mask=cols[:, None] < n_ctx, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attention_forward(Q, K, V, O, stride_b, stride_h, stride_n, heads, n_ctx, scale_log2,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = (bh // heads).to(tl.int64) * stride_b + (bh % heads) * stride_h  # q, k, v and o share one layout
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + rows[:, None] * stride_n + dims[None, :], mask=rows[:, None] < n_ctx, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    if CAUSAL:
        # the blocks wholly left of the diagonal need no causal mask; then the diagonal's own
        # blocks, masked; the blocks right of it are skipped: every score there is masked
        first_row = start_m * BLOCK_M
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, K, V, base, stride_n, rows, dims, 0, first_row, n_ctx,
                                scale_log2, BLOCK_N, False)
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, K, V, base, stride_n, rows, dims, first_row,
                                first_row + BLOCK_M, n_ctx, scale_log2, BLOCK_N, True)
    else:
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, K, V, base, stride_n, rows, dims, 0, n_ctx, n_ctx,
                                scale_log2, BLOCK_N, False)
    out = acc / l_i[:, None]
    tl.store(O + base + rows[:, None] * stride_n + dims[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < n_ctx)


def attention(q, k, v, causal: bool = False, block_m: int = 128, block_n: int = 64, num_warps: int = 8,
              num_stages: int = 3, out=None):
    """softmax(q kᵀ / sqrt(d)) v for tensors of shape (batch, heads, tokens, head_dim), contiguous,
    head_dim a power of two of at least 16. Returns a new tensor like ``q``, or writes ``out`` (contiguous,
    q's shape and dtype). On a GPU whose shared memory cannot hold the tiles (a T4 has 64 KiB per
    block), it falls back to blocks of 64 x 32 and two stages."""
    import torch

    batch, heads, n, d = q.shape
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k and v must have one shape; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if d < 16 or d & (d - 1):
        raise ValueError(f"head_dim must be a power of two of at least 16 (tl.dot's smallest tile); got {d}")
    q, k, v = (t.contiguous() for t in (q, k, v))
    if out is not None and (out.shape != q.shape or not out.is_contiguous()):
        raise ValueError(f"out must be contiguous, of shape {tuple(q.shape)}; got {tuple(out.shape)}")
    o = torch.empty_like(q) if out is None else out

    def launch(bm, bn, warps, stages):
        _attention_forward[(triton.cdiv(n, bm), batch * heads)](
            q, k, v, o, q.stride(0), q.stride(1), q.stride(2), heads, n, LOG2E / math.sqrt(d), HEAD_DIM=d,
            BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages)

    try:
        launch(block_m, block_n, num_warps, num_stages)
    except triton.runtime.errors.OutOfResources:
        launch(64, 32, 4, 2)
    return o
