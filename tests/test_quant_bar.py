"""Part III's quantization bar: weight-only int8 against cuBLAS's float16 GEMV, at batch 1.

The reference weight-only int8 GEMV of Lab 13 (``reference_int8_gemv`` in
``autograder/labs/quantization.py``, the kernel the chapter *Quantization* measures) is at least
1.6x faster than a float16 GEMV by cuBLAS on a 4096 x 4096 layer at batch 1. The float16 GEMV is
what a float16 linear layer runs for one token in PyTorch: ``torch.mm(x16, w16.t())`` with ``x16``
of shape (1, 4096). Both are timed with ``time_cold`` from the same module, on copies of the
weights that together fill 256 MiB (over four times the 60 MiB L2), used in turn, so that every
call reads its weights from device memory.

Run with ``pytest -m gpu -s tests/test_quant_bar.py`` to see the figures.
"""
from __future__ import annotations

import math

import pytest

from autograder.labs.quantization import reference_int8_gemv, time_cold

pytestmark = pytest.mark.gpu

BAR = 1.6  # float16 time over int8 time, at least
N = K = 4096
ROTATION_BYTES = 256 << 20  # all copies of the weights together


def _copies(a, total=ROTATION_BYTES):
    return [a] + [a.copy() for _ in range(math.ceil(total / a.nbytes) - 1)]


def test_int8_weight_only_gemv_beats_float16_gemv_at_batch_1():
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    g = cp.random.default_rng(7)
    w = g.standard_normal((N, K), dtype=cp.float32) / math.sqrt(K)
    scale = (cp.abs(w).max(axis=1) / 127).astype(cp.float32)
    q = cp.clip(cp.rint(w / scale[:, None]), -127, 127).astype(cp.int8)
    w16 = (q.astype(cp.float32) * scale[:, None]).astype(cp.float16)  # the same weights, in float16
    x16 = g.standard_normal(K, dtype=cp.float32).astype(cp.float16)
    x32 = x16.astype(cp.float32)  # the same values: both products have the same inputs
    ref = (q.astype(cp.float64) @ x32.astype(cp.float64)) * scale
    big = float(cp.abs(ref).max())

    y8 = cp.empty(N, dtype=cp.float32)
    reference_int8_gemv(q, scale, x32, y8)
    err8 = float(cp.abs(y8 - ref).max()) / big
    x16_t = torch.from_dlpack(x16).view(1, K)
    y16_t = torch.empty((1, N), dtype=torch.float16, device="cuda")
    torch.mm(x16_t, torch.from_dlpack(w16).t(), out=y16_t)
    err16 = float(cp.abs(cp.from_dlpack(y16_t).ravel().astype(cp.float64) - ref).max()) / big
    print(f"\nerror / max|y|: int8 reference {err8:.1e}, float16 cuBLAS {err16:.1e}")
    assert err8 <= 5e-5  # float32 sums (the lab's tolerance)
    assert err16 <= 1e-2  # float16 output: a rounding of about 5e-4, with margin

    int8_sets = [(c, cp.empty(N, dtype=cp.float32)) for c in _copies(q)]
    fp16_sets = [(torch.from_dlpack(c), torch.empty((1, N), dtype=torch.float16, device="cuda"))
                 for c in _copies(w16)]
    t8 = time_cold(lambda qq, yy: reference_int8_gemv(qq, scale, x32, yy), int8_sets)
    t16 = time_cold(lambda ww, yy: torch.mm(x16_t, ww.t(), out=yy), fp16_sets)
    for qq, yy in int8_sets[-2:]:  # the timed calls computed the same product
        assert float(cp.abs(yy - ref).max()) / big <= 5e-5
    ratio = t16 / t8
    bytes8, bytes16 = N * K + 4 * (2 * N + K), 2 * (N * K + N + K)
    print(f"{N} x {K}, batch 1, cold: int8 {t8 * 1e6:.2f} us ({bytes8 / t8 / 1e9:,.0f} GB/s), "
          f"float16 cuBLAS {t16 * 1e6:.2f} us ({bytes16 / t16 / 1e9:,.0f} GB/s): int8 is {ratio:.2f}x faster")
    assert ratio >= BAR, f"int8 weight-only GEMV only {ratio:.2f}x faster than float16 (bar: {BAR}x)"
