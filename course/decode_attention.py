"""Decode attention at memory speed, in Triton: one new query per sequence against its whole KV cache.

Decode reads every cached key and value once per generated token and does four flops per byte or
less, so it is bound by memory bandwidth. Two things decide whether it reaches that bound:

- **Enough programs.** One program per (sequence, key/value head) leaves most SMs idle when a few
  long sequences are decoded. Split-K ("flash-decoding") cuts each sequence into chunks of
  ``chunk`` tokens, one program each, and a second small kernel combines the chunks' partial
  outputs with their log-sum-exps.
- **Wide loads.** A program loads a tile of ``BLOCK_T`` tokens x head_dim values per step; Triton
  turns each row of 128 float16 values into 16-byte vector loads (``ld.global.v4``).

The query heads of one group (grouped-query attention: ``H / KV`` query heads share a key/value
head) are padded to 16 rows so that the scores and the weighted sum are ``tl.dot`` products.

The KV cache is either paged (``k_pages[page, slot, kv_head, dim]``, ``PAGE`` tokens per page,
each sequence's pages listed by its row of ``block_table``) or contiguous (``k[b, t, kv_head, dim]``):
one kernel, two ways of finding a token's row, so the cost of paging can be measured alone.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from autograder.triton_compat import patch_interpreter

patch_interpreter()
LOG2E = 1.4426950408889634
PAGE = 16  # tokens per page (vLLM's default block size; the paged-attention lab's)


@triton.jit
def _decode_partial(Q, K, V, TABLE, LENS, O_PART, LSE_PART,
                    stride_qb, stride_qh, stride_kb, stride_kt, stride_kh, stride_tb,
                    stride_ob, stride_oh, stride_os, stride_lb, stride_lh, head_dim, chunk, scale_log2,
                    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                    BLOCK_T: tl.constexpr, PAGE_SIZE: tl.constexpr, PAGED: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    n = tl.load(LENS + b)
    start = split * chunk
    if start < n:  # a chunk past the sequence's end has nothing to do
        end = tl.minimum(start + chunk, n)
        g = tl.arange(0, BLOCK_G)
        heads = kvh * GROUP + g
        d = tl.arange(0, BLOCK_D)
        qmask = (g[:, None] < GROUP) & (d[None, :] < head_dim)
        q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=qmask, other=0.0)
        m_i = tl.full((BLOCK_G,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_G,), tl.float32)
        acc = tl.zeros((BLOCK_G, BLOCK_D), tl.float32)
        for t0 in tl.range(start, end, BLOCK_T):
            t = t0 + tl.arange(0, BLOCK_T)
            live = t < end
            if PAGED:  # the token's page from the table, then its slot in the page
                page = tl.load(TABLE + b * stride_tb + t // PAGE_SIZE, mask=live, other=0)
                row = page.to(tl.int64) * stride_kb + (t % PAGE_SIZE) * stride_kt
            else:
                row = b.to(tl.int64) * stride_kb + t * stride_kt
            offs = row[:, None] + kvh * stride_kh + d[None, :]
            kvmask = live[:, None] & (d[None, :] < head_dim)
            k = tl.load(K + offs, mask=kvmask, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale_log2  # (BLOCK_G, BLOCK_T) scores in base-2 units
            s = tl.where(live[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + offs, mask=kvmask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        # this chunk's normalised output and its log2-sum-exp, for the combine
        o = O_PART + b * stride_ob + heads[:, None] * stride_oh + split * stride_os + d[None, :]
        tl.store(o, acc / l_i[:, None], mask=qmask)
        lse = LSE_PART + b * stride_lb + heads * stride_lh + split
        tl.store(lse, m_i + tl.math.log2(l_i), mask=g < GROUP)


@triton.jit
def _decode_combine(O_PART, LSE_PART, LENS, OUT, stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                    stride_outb, stride_outh, head_dim, chunk, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    splits = tl.cdiv(tl.load(LENS + b), chunk)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    used = s < splits
    lse = tl.load(LSE_PART + b * stride_lb + h * stride_lh + s, mask=used, other=float("-inf"))
    w = tl.math.exp2(lse - tl.max(lse, 0))  # each chunk's share of the softmax's denominator
    w = tl.where(used, w, 0.0)
    o = tl.load(O_PART + b * stride_ob + h * stride_oh + s[:, None] * stride_os + d[None, :], mask=used[:, None] & (d[None, :] < head_dim),
                other=0.0)
    out = tl.sum(w[:, None] * o, 0) / tl.sum(w, 0)
    tl.store(OUT + b * stride_outb + h * stride_outh + d, out.to(OUT.dtype.element_ty), mask=d < head_dim)


def default_chunk(batch: int, kv_heads: int, max_len: int, sms: int, block_t: int = 64) -> int:
    """Tokens per split: enough programs for about eight per SM, chunks of whole tiles, no more
    splits than tiles."""
    want = max(1, -(-8 * sms // max(batch * kv_heads, 1)))
    splits = min(want, max(1, -(-max_len // block_t)))
    return block_t * -(-max_len // (block_t * splits))


def _check_last_stride(**tensors) -> None:
    """The kernels step along head_dim by 1 (``+ d``, no stride), so a view such as a transpose would
    be read and written at the wrong places: refuse it rather than return wrong values."""
    for name, t in tensors.items():
        if t.stride(-1) != 1:
            raise ValueError(f"decode_attention: {name} must have stride 1 in its last dimension "
                             f"(got strides {tuple(t.stride())}); pass {name}.contiguous()")


def decode_attention(q, k, v, lengths, out, block_table=None, chunk: int | None = None, block_t: int = 64,
                     num_warps: int = 4, num_stages: int = 3, sms: int | None = None):
    """out[b, h] = softmax(q[b, h] . k[b, :n_b, h // G] / sqrt(D)) v[b, :n_b, h // G] for each sequence b.

    q: (B, H, D) float16; out: (B, H, D), any float dtype; lengths: (B,) int32, at least 1.
    Paged (``block_table`` given, (B, pages) int32): k and v are pools (pages, PAGE, KV, D).
    Contiguous (``block_table`` None): k and v are (B, T, KV, D). D at most 256; H a multiple of KV.
    """
    import torch

    _check_last_stride(q=q, k=k, v=v, out=out)
    batch, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    group = heads // kv_heads
    paged = block_table is not None
    max_len = (block_table.shape[1] * k.shape[1]) if paged else k.shape[1]
    if sms is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
    chunk = chunk or default_chunk(batch, kv_heads, max_len, sms, block_t)
    splits = -(-max_len // chunk)
    block_d = max(16, triton.next_power_of_2(head_dim))
    o_part = torch.empty((batch, heads, splits, block_d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((batch, heads, splits), dtype=torch.float32, device=q.device)
    table = block_table if paged else lengths  # any int32 tensor: never read when contiguous
    def partial(bt, warps, stages):
        _decode_partial[(batch, kv_heads, splits)](
            q, k, v, table, lengths, o_part, lse_part,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2), table.stride(0) if paged else 0,
            o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1), head_dim,
            chunk, LOG2E / math.sqrt(head_dim),
            GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_D=block_d, BLOCK_T=bt,
            PAGE_SIZE=k.shape[1] if paged else 1, PAGED=paged, num_warps=warps, num_stages=stages)

    try:
        partial(block_t, num_warps, num_stages)
    except triton.runtime.errors.OutOfResources:  # a GPU with less shared memory per block (a T4's 64 KiB)
        partial(16, 4, 1)
    _decode_combine[(batch, heads)](
        o_part, lse_part, lengths, out, o_part.stride(0), o_part.stride(1), o_part.stride(2),
        lse_part.stride(0), lse_part.stride(1), out.stride(0), out.stride(1), head_dim, chunk,
        BLOCK_S=triton.next_power_of_2(splits), BLOCK_D=block_d)
    return out
