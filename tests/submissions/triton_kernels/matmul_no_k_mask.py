# MISTAKE (honest): the product's K-tiles are loaded with masks along M and N only: the last tile of K
# reads past the end of a's rows (dimension 1) and of b's columns (dimension 0) wherever K is not a
# multiple of BK. On a GPU these reads return other rows' values or memory outside the tensors.
import math
import numpy as np
import torch
import triton
import triton.language as tl


# %%
@triton.jit
def softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)                                  # one program per row
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))                       # every exponent <= 0; -inf lanes give 0
    tl.store(out_ptr + row * out_row_stride + offsets, e / tl.sum(e, axis=0), mask=mask)


def softmax(x, out):
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    warps = 4 if block <= 1024 else 8 if block <= 4096 else 16    # more threads for longer rows
    softmax_kernel[(rows,)](x, out, x.stride(0), out.stride(0), cols, BLOCK=block, num_warps=warps)

# %%
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    # Which tile of C: programs go down GROUP tile rows before moving one tile column right.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    first_m = (pid // (GROUP * tiles_n)) * GROUP
    group_rows = tl.minimum(tiles_m - first_m, GROUP)              # the last group may be shorter
    pid_m = first_m + (pid % (GROUP * tiles_n)) % group_rows
    pid_n = (pid % (GROUP * tiles_n)) // group_rows

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak    # BM x BK pointers
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn    # BK x BN pointers
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_tile, mask=rm[:, None] < M, other=0.0)
        b = tl.load(b_tile, mask=rn[None, :] < N, other=0.0)
        acc = tl.dot(a, b, acc)                                    # float16 tiles, float32 sums
        a_tile += BK * stride_ak
        b_tile += BK * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


# The chapter's eight configurations: (BM, BN, BK, warps, stages).
MATMUL_CONFIGS = [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_warps=w, num_stages=s)
                  for bm, bn, bk, w, s in [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 3),
                                           (128, 128, 64, 4, 4), (128, 128, 32, 4, 4), (64, 256, 32, 4, 4),
                                           (128, 64, 32, 4, 4), (64, 128, 32, 4, 4)]]
matmul_tuned = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])(matmul_kernel)


def matmul(a, b, c):
    (M, K), N = a.shape, b.shape[1]
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if a.is_cuda:
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
        matmul_tuned[grid](*args)
    else:                                                          # the interpreter: one configuration
        matmul_kernel[(triton.cdiv(M, 32) * triton.cdiv(N, 32),)](*args, BM=32, BN=32, BK=32, GROUP=4)

# %%
@triton.jit
def gelu_tanh(z):
    # 0.5 z (1 + tanh(u)) = z / (1 + exp(-2u)); with e = exp(-2|u|) <= 1 nothing overflows
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)           # sqrt(2 / pi) = 0.79788...
    e = tl.exp(-2.0 * tl.abs(u))
    return z * tl.where(u >= 0, 1.0, e) / (1.0 + e)


@triton.jit
def matmul_bias_gelu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)                                         # the grouped order of exercise 2
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    first_m = (pid // (GROUP * tiles_n)) * GROUP
    group_rows = tl.minimum(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * tiles_n)) % group_rows
    pid_n = (pid % (GROUP * tiles_n)) // group_rows

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_tile, mask=(rm[:, None] < M) & (rk[None, :] < K - k0), other=0.0)
        b = tl.load(b_tile, mask=(rk[:, None] < K - k0) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BK * stride_ak
        b_tile += BK * stride_bk
    bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)   # the epilogue, in registers
    acc = gelu_tanh(acc + bias[None, :])
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


matmul_bias_gelu_tuned = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])(matmul_bias_gelu_kernel)


def matmul_bias_gelu(a, b, bias, c):
    (M, K), N = a.shape, b.shape[1]
    args = (a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if a.is_cuda:
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
        matmul_bias_gelu_tuned[grid](*args)
    else:                                                          # the interpreter: one configuration
        matmul_bias_gelu_kernel[(triton.cdiv(M, 32) * triton.cdiv(N, 32),)](*args, BM=32, BN=32, BK=32, GROUP=4)
