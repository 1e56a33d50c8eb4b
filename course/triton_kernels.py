"""The reference kernels of Lab 18 (``triton_kernels``), in Triton: a fused row softmax, and a
matrix product with ``tl.dot``, grouped program order and autotuning, plain or with a bias and
GELU fused into its epilogue.

The softmax and the product are the designs the chapter *Triton* builds; the lab times answers
against these. Every function takes torch tensors and writes its output in place. In Triton's
interpreter (no GPU, tensors on the CPU) nothing can be timed, so the product runs one small
configuration there instead of autotuning.
"""
from __future__ import annotations

import triton
import triton.language as tl

from autograder.triton_compat import patch_interpreter

patch_interpreter()


# --------------------------------------------------------------------------- softmax
@triton.jit
def _softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # one program per row, the whole row in one block
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))  # every exponent <= 0; the lanes past the row give 0
    tl.store(out_ptr + row * out_row_stride + offsets, e / tl.sum(e, axis=0), mask=mask)


def softmax_warps(block: int) -> int:
    """Warps per program for a row block: more threads for longer rows, so that each thread
    keeps at most 16 values in registers up to rows of 8,192."""
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


def softmax(x, out) -> None:
    """out = the softmax of each row of the float32 matrix x: one read of x, one write of out."""
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    _softmax_kernel[(rows,)](x, out, x.stride(0), out.stride(0), cols, BLOCK=block, num_warps=softmax_warps(block))


# --------------------------------------------------------------------------- matrix product
@triton.jit
def _gelu_tanh(z):
    # GELU in its tanh form, 0.5 z (1 + tanh(u)) with u = sqrt(2 / pi) (z + 0.044715 z^3).
    # 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), written with e = exp(-2|u|) <= 1 so that nothing
    # overflows, and without the cancellation of 1 + tanh(u) for z << 0.
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    e = tl.exp(-2.0 * tl.abs(u))
    return z * tl.where(u >= 0, 1.0, e) / (1.0 + e)


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BIAS_GELU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   GROUP: tl.constexpr):
    # Which tile of C: programs go down GROUP tile rows before moving one tile column right, so
    # that programs running together share tiles of both A and B in the L2.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    first_m = (pid // (GROUP * tiles_n)) * GROUP
    group_rows = tl.minimum(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * tiles_n)) % group_rows
    pid_n = (pid % (GROUP * tiles_n)) // group_rows

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak  # BM x BK pointers
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn  # BK x BN pointers
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_tile, mask=(rm[:, None] < M) & (rk[None, :] < K - k0), other=0.0)
        b = tl.load(b_tile, mask=(rk[:, None] < K - k0) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)  # tensor cores for float16 tiles, the sum in float32
        a_tile += BK * stride_ak
        b_tile += BK * stride_bk
    if BIAS_GELU:  # the epilogue, on the tile while it is still in registers
        bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
        acc = _gelu_tanh(acc + bias[None, :])
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


# The chapter's eight configurations: (BM, BN, BK, warps, stages). The first call for new sizes
# (or with(out) the epilogue) compiles and times each, and keeps the fastest; one that needs more
# shared memory than the GPU has fails to compile and is skipped.
MATMUL_CONFIGS = [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_warps=w, num_stages=s)
                  for bm, bn, bk, w, s in [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 3),
                                           (128, 128, 64, 4, 4), (128, 128, 32, 4, 4), (64, 256, 32, 4, 4),
                                           (128, 64, 32, 4, 4), (64, 128, 32, 4, 4)]]
_matmul_tuned = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K", "BIAS_GELU"])(_matmul_kernel)
# In the interpreter: one configuration, with tiles small enough for the lab's small cases.
INTERPRETER_CONFIG = {"BM": 32, "BN": 32, "BK": 32, "GROUP": 4}


def _matmul(a, b, bias, c, bias_gelu: bool) -> None:
    (M, K), N = a.shape, b.shape[1]
    args = (a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if a.is_cuda:
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
        _matmul_tuned[grid](*args, BIAS_GELU=bias_gelu)
    else:
        cfg = INTERPRETER_CONFIG
        grid = (triton.cdiv(M, cfg["BM"]) * triton.cdiv(N, cfg["BN"]),)
        _matmul_kernel[grid](*args, BIAS_GELU=bias_gelu, **cfg)


def matmul(a, b, c) -> None:
    """c = a @ b: float16 a (M, K) and b (K, N), the sums in float32, c in float16."""
    _matmul(a, b, None, c, False)


def matmul_bias_gelu(a, b, bias, c) -> None:
    """c = gelu(a @ b + bias), GELU in its tanh form, applied to each tile before it is stored."""
    _matmul(a, b, bias, c, True)
